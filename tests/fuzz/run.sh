#!/usr/bin/env bash
# Builds one libFuzzer binary (tests/fuzz/fuzz.c with every target of
# fuzz.h: the responder's parsers, charge-provider-sim's, the provider
# client's HTTP/1.1 answer and CONNECT answer, the provider's JSON, the
# webhook signature, charge-reconcile's pages) with clang-14, ASan and
# UBSan, each file through ccache when it is there, then runs every target
# deterministically (-seed=1, a fixed number of inputs) from its committed
# seeds under tests/fuzz/seeds/. Prints TAP.
#
#   FUZZ_SECONDS=600 tests/fuzz/run.sh    each target for 600 s instead (the
#                                          figures in docs/testing.md)
#   FUZZ_TARGETS="wire sig"               only these targets
#   FUZZ_KEEP=DIR                         keep the grown corpora in DIR
#   FUZZ_ARTIFACTS=DIR                    write crashing inputs to DIR
#   FUZZ_OBJ=DIR                          objects and the binary (build-fuzz)
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd) || exit 2
cd "$ROOT" || exit 2
OUT=$(mktemp -d /tmp/charge-fuzz.XXXXXX)
trap 'rm -rf "$OUT"' EXIT
CC=${FUZZ_CC:-clang-14}
# objects persist here between runs (ignored by git: /build*/)
OBJ=${FUZZ_OBJ:-build-fuzz}
LLHTTP_DIR=${LLHTTP_DIR:-/usr/share/llhttp}
LLHTTP_INC=${LLHTTP_INC:-/usr/share/include/llhttp}

# target, inputs in the bounded run, -max_len, seed directories, dictionary
TARGETS=(
	"parsers 200000 4096 parsers,sim json.dict"
	"sim 50000 2048 sim,parsers -"
	"http1 100000 8192 http1 http.dict"
	"wire 100000 8192 wire wire.dict"
	"sig 100000 2048 sig sig.dict"
	"rc 100000 8192 wire,rc wire.dict"
)
n=0
failed=0
ok() { n=$((n + 1)); echo "ok $n - $*"; }
notok() { n=$((n + 1)) failed=$((failed + 1)); echo "not ok $n - $*"; }

if ! command -v "$CC" >/dev/null; then
	notok "$CC not installed"
	echo "1..$n"
	exit 1
fi
CCACHE=
if command -v ccache >/dev/null; then
	CCACHE=ccache
	# the same object from every checkout of the tree (relative paths, no cwd)
	export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$ROOT} CCACHE_NOHASHDIR=1
fi
mkdir -p "$OBJ/gen" || exit 1

# every script of lua/, as meson embeds them (name=path)
scripts=()
for f in lua/*.lua; do
	scripts+=("$(basename "$f" .lua)=$f")
done
python3 tools/embed.py "$OUT/lua_scripts.c" "$OUT/lua_scripts.h" "${scripts[@]}" || exit 1
# rewritten only when changed, so that ccache and make-like reuse see the same
for f in lua_scripts.c lua_scripts.h; do
	cmp -s "$OUT/$f" "$OBJ/gen/$f" || cp "$OUT/$f" "$OBJ/gen/$f"
done

SAN="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize-recover=all"
# shellcheck disable=SC2207
DEPS=($(pkg-config --cflags hiredis libcjson libuv))
SRC_INC=(-Isrc -Isrc/base -Isrc/codec -Isrc/codec/redis -Isrc/config -Isrc/domain -Isrc/store -Isrc/store/redis -Isrc/provider -Isrc/usecase -Isrc/transport -Isrc/reconcile -I"$OBJ/gen"
	-I"$LLHTTP_INC" "${DEPS[@]}")
WARN="-std=c11 -D_GNU_SOURCE -g -O1 -Wall -Wextra -Werror $SAN"

# one line per object: source, then its flags (sim/ has headers named as
# src/'s: each side sees only its own)
{
	# the modules by name, wherever their tier's folder holds them
	for f in $(for m in json json_lex json_path utf8 schema canon validate headers idem clock \
		config config_load log digest util tls timefmt fcgi_codec webhook_sig metrics response \
		redis_client redis_cmd redis_node redis_uv redis_sentinel redis_cluster redis_url cluster \
		http1_read http1_proxy provider provider_wire wire_url settle rc_wire; do
		find src -name "$m.c"
	done) "$OBJ/gen/lua_scripts.c" tests/fuzz/fuzz_{parsers,http1,wire,sig,rc}.c; do
		echo "$f $WARN ${SRC_INC[*]}"
	done
	for f in sim/{buf,form,table,store}.c tests/fuzz/fuzz_sim.c; do
		echo "$f $WARN -Isim"
	done
	echo "tests/fuzz/fuzz.c $WARN"
	for f in llhttp api http; do
		echo "$LLHTTP_DIR/$f.c -std=c11 -g -O1 -w $SAN -I$LLHTTP_INC"
	done
} >"$OUT/objects"

# compiles one line of $OUT/objects into $OBJ (object named for its path)
compile() {
	local src=$1
	shift
	local o
	o="$OBJ/$(echo "$src" | tr '/' '_' | sed 's/^_*//').o"
	# shellcheck disable=SC2086
	$CCACHE "$CC" "$@" -c "$src" -o "$o" 2>"$o.log" || {
		echo "$src" >>"$OUT/failed"
		return 1
	}
	echo "$o" >>"$OUT/built"
}
export -f compile
export CC CCACHE OBJ OUT
start=$(date +%s)
xargs -P "$(nproc)" -L 1 bash -c 'compile "$@"' _ <"$OUT/objects"
if [ -s "$OUT/failed" ]; then
	notok "build the fuzz binary"
	while read -r f; do
		sed 's/^/# /' "$OBJ/$(echo "$f" | tr '/' '_' | sed 's/^_*//').o.log" | head -20
	done <"$OUT/failed"
	echo "1..$n"
	exit 1
fi
# shellcheck disable=SC2046
if ! "$CC" -fsanitize=fuzzer,address,undefined $(sort "$OUT/built") \
	$(pkg-config --libs hiredis libcjson libssl libcrypto libuv) -lm \
	-o "$OBJ/fuzz" 2>"$OUT/link.log"; then
	notok "link the fuzz binary"
	sed 's/^/# /' "$OUT/link.log" | head -30
	echo "1..$n"
	exit 1
fi
ok "build one fuzz binary, every target ($CC, libFuzzer + ASan + UBSan${CCACHE:+, ccache}): $(($(date +%s) - start)) s"

only=" ${FUZZ_TARGETS:-} "
for row in "${TARGETS[@]}"; do
	read -r name runs maxlen dirs dict <<<"$row"
	[ "$only" = "  " ] || [[ "$only" == *" $name "* ]] || continue
	args=(-seed=1 -max_len="$maxlen" -print_final_stats=1)
	[ "$dict" = - ] || args+=(-dict="tests/fuzz/$dict")
	if [ -n "${FUZZ_SECONDS:-}" ]; then
		args+=(-max_total_time="$FUZZ_SECONDS")
	else
		args+=(-runs="$runs")
	fi
	corpus="$OUT/corpus-$name"
	[ -n "${FUZZ_KEEP:-}" ] && corpus="$FUZZ_KEEP/$name"
	mkdir -p "$corpus"
	seeds=()
	for d in ${dirs//,/ }; do
		seeds+=("tests/fuzz/seeds/$d")
	done
	t0=$(date +%s)
	if FUZZ_TARGET=$name "$OBJ/fuzz" "${args[@]}" -artifact_prefix="${FUZZ_ARTIFACTS:-$OUT}/$name-" \
		"$corpus" "${seeds[@]}" >"$OUT/$name.log" 2>&1; then
		cov=$(grep -Eo 'cov: [0-9]+ ft: [0-9]+' "$OUT/$name.log" | tail -1)
		done_=$(grep -Eo 'Done [0-9]+ runs in [0-9]+ second' "$OUT/$name.log" | head -1)
		ok "fuzz $name: $done_ ($cov), no crash ($(($(date +%s) - t0)) s wall)"
	else
		notok "fuzz $name found a crash"
		grep -E 'ERROR|SUMMARY|runtime error|Test unit written|#[0-9]+ in ' \
			"$OUT/$name.log" | sed 's/^/# /' | head -30
		for a in "${FUZZ_ARTIFACTS:-$OUT}/$name-"*; do
			[ -f "$a" ] || continue
			echo "# input (base64; add it to tests/fuzz/seeds/ once fixed):"
			base64 -w 76 "$a" | head -40 | sed 's/^/#   /'
		done
	fi
done
echo "1..$n"
[ "$failed" -eq 0 ]
