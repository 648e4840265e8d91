#!/usr/bin/env bash
# tests/faults/run.sh - the fault matrix: Redis killed, frozen and out of
# memory, a full spill directory, lost Redis replies, responders stopped,
# killed and out of descriptors, malformed and slow clients, and a soak that
# mixes them; then one gate over everything sent (tests/faults/faults.py).
# Real redis-server (AOF, appendfsync always) and lighttpd stacks from
# tools/stack.sh, all on 127.0.0.1 or unix sockets in a fresh run directory.
# Prints TAP; exits non-zero when a case or the gate failed.
#
#   CHARGE_BIN=build-asan/charge tests/faults/run.sh   (./test.sh faults)
#   FAULTS_ONLY='redis|spill' tests/faults/run.sh      cases matching a regex
#   FAULTS_SOAK_S=30 tests/faults/run.sh               soak length (default 75)
#   FAULTS_SEED=1234 tests/faults/run.sh               the random choices
#   FAULTS_KEEP=1 tests/faults/run.sh                  keep the run directory
#   FAULTS_SPILL_FULL=fiu tests/faults/run.sh          case 4 through fiu-run
#
# As root the spill directory is a tmpfs of its own, which case 4 fills to
# the last byte; otherwise case 4 uses fiu-run if fiu-utils is installed,
# else it is skipped.
set -uo pipefail

REPO=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../.." && pwd)
BIN=$(readlink -f "${CHARGE_BIN:-$REPO/build/charge}")

# shellcheck source=tools/stack.sh
. "$REPO/tools/stack.sh"
# Only the CHARGE_* variables set below reach the responders.
stack_env_clear

bail() {
	echo "not ok 1 - faults: $*"
	echo "1..1"
	exit 1
}

command -v python3 >/dev/null 2>&1 || bail "python3 is not installed"
command -v prlimit >/dev/null 2>&1 || bail "prlimit (util-linux) is not installed"
[ -x "$BIN" ] || bail "responder binary $BIN not found (build it, or set CHARGE_BIN)"

RUN=$(stack_rundir_create) || bail "cannot create a run directory"
MOUNTED=0

cleanup() {
	trap - EXIT INT TERM
	# lighttpd stacks the python side may have left (each has a PID file)
	for d in "$RUN"/lt-*; do
		[ -f "$d/lighttpd.pid" ] && stack_lighttpd_stop "$d"
	done
	stack_redis_stop "$RUN"
	if [ "$MOUNTED" = 1 ]; then
		umount "$RUN/spill" 2>/dev/null || umount -l "$RUN/spill"
	fi
	if [ "${FAULTS_KEEP:-0}" = 1 ]; then
		echo "# run directory kept: $RUN"
	else
		rm -rf "$RUN"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# How case 4 fills the spill directory: a tmpfs of its own (root), else
# fiu-run failing write() inside spill_write (package fiu-utils; it runs
# the plain build, build/charge, which the ASan build cannot stand in for
# under libfiu's preload). FAULTS_SPILL_FULL=fiu forces the latter.
mkdir -p "$RUN/spill" && chmod 700 "$RUN/spill"
export FAULTS_SPILL_MODE=none
export FAULTS_PLAIN_BIN=${FAULTS_PLAIN_BIN:-$REPO/build/charge}
if [ "${FAULTS_SPILL_FULL:-}" != fiu ] && [ "$(id -u)" -eq 0 ] &&
	mount -t tmpfs -o size=16m,mode=0700 faults-spill "$RUN/spill" 2>/dev/null; then
	MOUNTED=1
	FAULTS_SPILL_MODE=tmpfs
elif command -v fiu-run >/dev/null 2>&1 && command -v fiu-ctrl >/dev/null 2>&1 &&
	[ -x "$FAULTS_PLAIN_BIN" ]; then
	FAULTS_SPILL_MODE=fiu
fi

export FAULTS_PRINCIPAL_B=acme FAULTS_API_KEY_B="sk_test_acme_$RANDOM$RANDOM"
stack_api_keys_write "$RUN/api-keys" demo sk_test_demo \
	"$FAULTS_PRINCIPAL_B" "$FAULTS_API_KEY_B" || bail "cannot write the api-keys file"

# The responders' base configuration; each case's stack overrides a few keys.
#   lock_ttl_s 2: claims of killed or stopped attempts lapse within a case
#   failed_ttl_s 3600: 502/504 records still replay at the end of the run
#   request_timeout_ms is not among lighttpd's bin-copy-environment names,
#   so it comes from the file CHARGE_CONF names (the rest are defaults)
export FAULTS_REQUEST_TIMEOUT_MS=1500
printf '# written by tests/faults/run.sh\nrequest_timeout_ms = %s\n' \
	"$FAULTS_REQUEST_TIMEOUT_MS" >"$RUN/charge.conf"
export CHARGE_CONF="$RUN/charge.conf"
stack_env "$RUN" faults
export CHARGE_LOCK_TTL_S=2
export CHARGE_FAILED_TTL_S=3600
export CHARGE_MAX_REQUEST_BYTES=262144
export CHARGE_MAX_WAIT_S=10
export CHARGE_SPILL_THRESHOLD_BYTES=16384
export CHARGE_PROVIDER_LATENCY_MS=100
export CHARGE_PROVIDER_TIMEOUT_MS=500
export CHARGE_THREADS=1

if ! "$BIN" --check-config >"$RUN/check-config.txt" 2>&1; then
	sed 's/^/# /' "$RUN/check-config.txt"
	bail "charge --check-config rejects the test configuration"
fi

stack_redis_start "$RUN" "$RUN/redis" "$RUN" 2>"$RUN/stack.err" ||
	{ sed 's/^/# /' "$RUN/stack.err"; bail "redis-server did not start"; }
[ "$(redis-cli -s "$RUN/redis.sock" CONFIG GET appendfsync | tail -1)" = always ] ||
	bail "the stack's Redis does not run with appendfsync always"

export FAULTS_RUN=$RUN FAULTS_BIN=$BIN
echo "# faults: responder $BIN, run dir $RUN, spill dir: $FAULTS_SPILL_MODE"

timeout --foreground -k 10 "${FAULTS_TIMEOUT_S:-285}" python3 -B "$REPO/tests/faults/faults.py" |
	tee "$RUN/tap.txt"
rc=${PIPESTATUS[0]}
if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
	echo "not ok - faults: suite timed out after ${FAULTS_TIMEOUT_S:-285} s"
elif [ "$rc" -ne 0 ] && ! grep -q '^not ok' "$RUN/tap.txt"; then
	echo "not ok - faults: faults.py exited with status $rc"
fi
if [ "$rc" -ne 0 ]; then
	for f in "$RUN"/lt-*/lighttpd.stderr.log "$RUN"/lt-*/lighttpd-error.log "$RUN/redis.log"; do
		[ -s "$f" ] || continue
		echo "# ---- last lines of ${f#"$RUN"/}"
		tail -n 12 "$f" | sed 's/^/#   /'
	done
fi
exit "$rc"
