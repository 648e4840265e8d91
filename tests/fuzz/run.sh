#!/usr/bin/env bash
# Builds tests/fuzz/fuzz_parsers.c (the responder's parsers) and
# tests/fuzz/fuzz_sim.c (charge-provider-sim's) with clang-14 (libFuzzer,
# ASan, UBSan) and runs each deterministically from the committed seeds: a
# smoke run that keeps the harnesses alive. Longer campaigns: FUZZ_RUNS=10000000 or
# FUZZ_TIME=600 (seconds). Prints TAP.
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd) || exit 2
OUT=$(mktemp -d /tmp/charge-fuzz.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
RUNS=${FUZZ_RUNS:-200000}
CC=${FUZZ_CC:-clang-14}

if ! command -v "$CC" >/dev/null; then
	echo "not ok 1 - $CC not installed"
	exit 1
fi
# every script of lua/, as meson embeds them (name=path)
scripts=()
for f in "$ROOT"/lua/*.lua; do
	scripts+=("$(basename "$f" .lua)=$f")
done
python3 "$ROOT/tools/embed.py" "$OUT/lua_scripts.c" "$OUT/lua_scripts.h" "${scripts[@]}" || exit 1
# shellcheck disable=SC2046
if ! "$CC" -std=c11 -D_GNU_SOURCE -g -O1 -Wall -Wextra -Werror \
	-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
	-I"$ROOT/src" -I"$ROOT/src/redis" -I"$OUT" $(pkg-config --cflags hiredis libcjson libuv) \
	"$ROOT/tests/fuzz/fuzz_parsers.c" "$ROOT"/src/{json,json_lex,json_path,utf8,schema,canon,validate,headers,idem,clock,config,config_load,log,digest,util,fcgi_codec,tls}.c \
	"$ROOT"/src/redis/{redis_client,redis_cmd,redis_node,redis_uv,redis_sentinel,redis_cluster,redis_url,cluster}.c \
	"$OUT/lua_scripts.c" $(pkg-config --libs hiredis libcjson libssl libcrypto libuv) -lm \
	-o "$OUT/fuzz" 2>"$OUT/build.log"; then
	echo "not ok 1 - build fuzz_parsers"
	sed 's/^/# /' "$OUT/build.log"
	exit 1
fi
echo "ok 1 - build fuzz_parsers (clang-14, libFuzzer + ASan + UBSan)"
mkdir -p "$OUT/corpus"
args=(-seed=1 -max_len=4096 -dict="$ROOT/tests/fuzz/json.dict")
if [ -n "${FUZZ_TIME:-}" ]; then
	args+=(-max_total_time="$FUZZ_TIME")
else
	args+=(-runs="$RUNS")
fi
if "$OUT/fuzz" "${args[@]}" "$OUT/corpus" "$ROOT/tests/fuzz/seeds" \
	>"$OUT/fuzz.log" 2>&1; then
	echo "ok 2 - fuzz_parsers: $(grep -Eo 'Done [0-9]+ runs in [0-9]+ second' "$OUT/fuzz.log" | head -1), no crash"
else
	echo "not ok 2 - fuzz_parsers found a crash"
	grep -E 'ERROR|SUMMARY|runtime error|Test unit written' "$OUT/fuzz.log" | sed 's/^/# /' | head -20
	exit 1
fi
# charge-provider-sim's parsers (sim/): the form, chains, the data file
if ! "$CC" -std=c11 -D_GNU_SOURCE -g -O1 -Wall -Wextra -Werror \
	-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=all \
	-I"$ROOT/sim" "$ROOT/tests/fuzz/fuzz_sim.c" \
	"$ROOT"/sim/{buf,form,table,store}.c $(pkg-config --libs libcrypto) \
	-o "$OUT/fuzz_sim" 2>"$OUT/build-sim.log"; then
	echo "not ok 3 - build fuzz_sim"
	sed 's/^/# /' "$OUT/build-sim.log"
	exit 1
fi
echo "ok 3 - build fuzz_sim (clang-14, libFuzzer + ASan + UBSan)"
mkdir -p "$OUT/corpus-sim"
sargs=(-seed=1 -max_len=2048)
if [ -n "${FUZZ_TIME:-}" ]; then
	sargs+=(-max_total_time="$FUZZ_TIME")
else
	sargs+=(-runs="${FUZZ_SIM_RUNS:-50000}")
fi
if "$OUT/fuzz_sim" "${sargs[@]}" "$OUT/corpus-sim" "$ROOT/tests/fuzz/seeds" \
	>"$OUT/fuzz-sim.log" 2>&1; then
	echo "ok 4 - fuzz_sim: $(grep -Eo 'Done [0-9]+ runs in [0-9]+ second' "$OUT/fuzz-sim.log" | head -1), no crash"
else
	echo "not ok 4 - fuzz_sim found a crash"
	grep -E 'ERROR|SUMMARY|runtime error|Test unit written' "$OUT/fuzz-sim.log" | sed 's/^/# /' | head -20
	exit 1
fi
echo "1..4"
