#!/usr/bin/env bash
# tests/provider_faults/run.sh - the responder against the provider
# simulator (charge-provider-sim) over HTTP, through lighttpd, under every
# fault the simulator makes: first a lost Redis record (Redis flushed and
# restarted; deleted), then its fault tokens and token chains, fault rates
# with a seed, the simulator killed and restarted mid-flight, the simulator
# down; last charge-reconcile over the run (0 orphans, phantoms, duplicates).
# A checker reads the simulator's own counts after each case
# (tests/provider_faults/test_provider_faults.py). Prints TAP.
#
#   CHARGE_BIN=build-asan/charge tests/provider_faults/run.sh  (./test.sh provider_faults)
#   PROV_SIM_BIN=...                 the simulator (default: next to CHARGE_BIN)
#   PROV_RECONCILE_BIN=...           charge-reconcile, run last (default: next to CHARGE_BIN)
#   PROV_ONLY='token|lost'           cases matching a regex
#   PROV_KEEP=1                      keep the run directory
#   PROV_TIMEOUT_S=200               the whole suite's bound
#
# The suites stripe_mock and provider_tls run through this script too
# (PROV_SUITE names the suite, PROV_SCRIPT its python file, PROV_NEED_SIM=0
# when it needs no simulator).
set -uo pipefail

REPO=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../.." && pwd)
BIN=$(readlink -f "${CHARGE_BIN:-$REPO/build/charge}")
SUITE=${PROV_SUITE:-provider_faults}
SCRIPT=${PROV_SCRIPT:-$REPO/tests/provider_faults/test_provider_faults.py}

# shellcheck source=tools/stack.sh
. "$REPO/tools/stack.sh"
# Only the configuration file each stack writes reaches the responders.
stack_env_clear

bail() {
	echo "not ok 1 - $SUITE: $*"
	exit 1
}

[ -x "$BIN" ] || bail "responder binary $BIN not found (build it, or set CHARGE_BIN)"
SIM=${PROV_SIM_BIN:-$(dirname "$BIN")/charge-provider-sim}
if [ "${PROV_NEED_SIM:-1}" = 1 ]; then
	[ -x "$SIM" ] || bail "simulator $SIM not found (build it, or set PROV_SIM_BIN)"
fi
[ -x /usr/bin/python3 ] || bail "/usr/bin/python3 is not installed"

RUN=$(stack_rundir_create) || bail "cannot create a run directory"

cleanup() {
	trap - EXIT INT TERM
	# stacks and simulators the python side may have left (PID files, by PID)
	for d in "$RUN"/lt-*; do
		[ -f "$d/lighttpd.pid" ] && stack_lighttpd_stop "$d"
	done
	for f in "$RUN"/*/sim.pid "$RUN"/*/mock.pid "$RUN"/*/nginx.master.pid; do
		[ -f "$f" ] || continue
		read -r pid comm <"$f" && [ -n "$comm" ] && stack_stop_pid "$pid" "$comm" 5
	done
	stack_redis_stop "$RUN"
	if [ "${PROV_KEEP:-0}" = 1 ]; then
		echo "# run directory kept: $RUN"
	else
		rm -rf "$RUN"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

stack_redis_start "$RUN" "$RUN/redis" "$RUN" 2>"$RUN/stack.err" ||
	{ sed 's/^/# /' "$RUN/stack.err"; bail "redis-server did not start"; }

export PROV_RUN=$RUN PROV_REDIS_SOCK="$RUN/redis.sock" PROV_SIM_BIN=$SIM CHARGE_BIN=$BIN
export PROV_PRINCIPAL=demo PROV_API_KEY="sk_test_demo_$RANDOM$RANDOM"
echo "# $SUITE: responder $BIN, simulator $SIM, run dir $RUN"

timeout --foreground -k 10 "${PROV_TIMEOUT_S:-200}" /usr/bin/python3 -B "$SCRIPT" 2>&1 | tee "$RUN/tap.txt"
rc=${PIPESTATUS[0]}
if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
	echo "not ok - $SUITE: suite timed out after ${PROV_TIMEOUT_S:-200} s"
elif [ "$rc" -ne 0 ] && ! grep -q '^not ok' "$RUN/tap.txt"; then
	echo "not ok - $SUITE: $(basename "$SCRIPT") exited with status $rc"
fi
if [ "$rc" -ne 0 ]; then
	for f in "$RUN"/lt-*/lighttpd.stderr.log "$RUN"/sim-*/sim.log "$RUN"/*/nginx-error.log "$RUN/redis.log"; do
		[ -s "$f" ] || continue
		echo "# ---- last lines of ${f#"$RUN"/}"
		tail -n 15 "$f" | sed 's/^/#   /'
	done
fi
exit "$rc"
