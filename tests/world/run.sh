#!/usr/bin/env bash
# tests/world/run.sh - the world test (tests/world/world.py): many retrying
# clients against several real responders (lighttpd + charge) and the
# provider simulator with a random subset of its faults and liberties per
# seed, a nemesis adding ours (kill -9, lapsed claims, lost records, Redis
# paused), and a checker over every answer, the records and the provider's
# ledger (tests/world/checker.py; first checker_test.py: each rule fires on
# its planted defect). Prints TAP, one line a seed.
#
#   CHARGE_BIN=build/charge tests/world/run.sh                (./test.sh world)
#   WORLD_SEEDS=1-50 WORLD_REQUESTS=200 WORLD_WORKERS=4       the bounded run (defaults)
#   WORLD_SEED=17 tests/world/run.sh                          one seed again, its schedule shown
#   WORLD_LONG=1                                              the long run: seeds 1001-1100 x 200
#   WORLD_EXPECT=rule,rule                                    violations of those rules are reported,
#                                                             not failed (a branch before its fixes)
#   WORLD_RESPONDER_CONF='key=value,...'                      more responder configuration
#   WORLD_KEEP=1                                              keep the run directory
#   WORLD_TIMEOUT_S=600                                       the whole suite's bound
set -uo pipefail

REPO=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../.." && pwd)
BIN=$(readlink -f "${CHARGE_BIN:-$REPO/build/charge}")
SIM=${WORLD_SIM_BIN:-$(dirname "$BIN")/charge-provider-sim}

# shellcheck source=tools/stack.sh
. "$REPO/tools/stack.sh"
stack_env_clear

bail() {
	echo "not ok 1 - world: $*"
	exit 1
}
[ -x "$BIN" ] || bail "responder binary $BIN not found (build it, or set CHARGE_BIN)"
[ -x "$SIM" ] || bail "simulator $SIM not found (build it, or set WORLD_SIM_BIN)"
command -v lighttpd >/dev/null || bail "lighttpd is not installed"
command -v redis-server >/dev/null || bail "redis-server is not installed"

RUN=$(stack_rundir_create) || bail "cannot create a run directory"
cleanup() {
	trap - EXIT INT TERM
	local d f pid comm
	# whatever a worker left (it stops its own): lighttpd, the simulator, Redis, by PID
	for d in "$RUN"/w*; do
		[ -d "$d" ] || continue
		[ -f "$d/lt/lighttpd.pid" ] && stack_lighttpd_stop "$d/lt"
		[ -f "$d/redis.pid" ] && { kill -CONT "$(cat "$d/redis.pid")" 2>/dev/null; stack_redis_stop "$d"; }
	done
	for f in "$RUN"/w*/sim/sim.pid; do
		[ -f "$f" ] || continue
		read -r pid comm <"$f" && [ -n "$comm" ] && stack_stop_pid "$pid" "$comm" 5
	done
	if [ "${WORLD_KEEP:-0}" = 1 ]; then
		echo "# run directory kept: $RUN"
	else
		rm -rf "$RUN"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ -n "${WORLD_SEED:-}" ]; then
	args=(--seed "$WORLD_SEED" -v)
elif [ "${WORLD_LONG:-0}" = 1 ]; then
	args=(--seeds "${WORLD_SEEDS:-1001-1100}")
else
	args=(--seeds "${WORLD_SEEDS:-1-50}")
fi
echo "# world: responder $BIN, simulator $SIM, run dir $RUN"
# the checker first, against planted histories: each rule can fail
/usr/bin/python3 -B "$REPO/tests/world/checker_test.py" | grep -vE '^1\.\.'
crc=${PIPESTATUS[0]}
export CHARGE_BIN=$BIN WORLD_SIM_BIN=$SIM WORLD_RUN=$RUN
timeout --foreground -k 10 "${WORLD_TIMEOUT_S:-600}" /usr/bin/python3 -B "$REPO/tests/world/world.py" run \
	"${args[@]}" --requests "${WORLD_REQUESTS:-200}" --workers "${WORLD_WORKERS:-4}" --run "$RUN" 2>&1 |
	tee "$RUN/tap.txt"
rc=${PIPESTATUS[0]}
if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
	echo "not ok - world: suite timed out after ${WORLD_TIMEOUT_S:-600} s"
elif [ "$rc" -ne 0 ] && ! grep -q '^not ok' "$RUN/tap.txt"; then
	echo "not ok - world: world.py exited with status $rc"
fi
if [ "$rc" -ne 0 ]; then
	for f in "$RUN"/w*/worker.err "$RUN"/w*/sim/sim.log "$RUN"/w*/lt/lighttpd.stderr.log; do
		[ -s "$f" ] || continue
		echo "# ---- last lines of ${f#"$RUN"/}"
		tail -n 10 "$f" | sed 's/^/#   /'
	done
fi
[ "$rc" -eq 0 ] && rc=$crc
exit "$rc"
