#!/usr/bin/env bash
# tests/logs/run.sh - the responder's logs and what it sends on (issue 37):
# a private Redis, charge-provider-sim with its request log
# (--request-log), and `charge --listen` on a unix socket with log_format
# json and log_level debug, its stderr in a file of its own; the python
# side (tests/logs/test_logs.py) speaks FastCGI to it directly. Prints TAP;
# about 10 s; bounded at 120 s.
#
#   tests/logs/run.sh                     build/charge, build/charge-provider-sim
#   CHARGE_BIN=... CHARGE_SIM_BIN=... tests/logs/run.sh
#   LOGS_ONLY='secret' tests/logs/run.sh  a subset (regex on names)
#   LOGS_KEEP=1 tests/logs/run.sh         keep the run directory
set -uo pipefail

REPO=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../.." && pwd)
BIN=${CHARGE_BIN:-$REPO/build/charge}
SIM=${CHARGE_SIM_BIN:-$(dirname "$BIN")/charge-provider-sim}
[ -x "$SIM" ] || SIM=$REPO/build/charge-provider-sim

# shellcheck source=tools/stack.sh
. "$REPO/tools/stack.sh"
stack_env_clear

bail() {
	echo "not ok 1 - logs: $*"
	exit 1
}
[ -x "$BIN" ] || bail "responder binary $BIN not found (build it, or set CHARGE_BIN)"
[ -x "$SIM" ] || bail "the provider simulator $SIM is not built (or set CHARGE_SIM_BIN)"
BIN=$(readlink -f "$BIN")
SIM=$(readlink -f "$SIM")

RUN=$(stack_rundir_create) || bail "cannot create a run directory"
CHARGE_PID=
cleanup() {
	trap - EXIT INT TERM
	[ -n "$CHARGE_PID" ] && stack_stop_pid "$CHARGE_PID" charge 5
	stack_sim_stop
	stack_stop_all "$RUN"
	if [ "${LOGS_KEEP:-0}" = 1 ]; then
		echo "# run directory kept: $RUN"
	else
		rm -rf "$RUN"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

export LOGS_SIM_KEY="sk_test_logs_$RANDOM$RANDOM"
stack_sim_start "$RUN" "$RUN" "$SIM" --secret-key "$LOGS_SIM_KEY" --fsync never \
	--request-log "$RUN/sim-requests.log" 2>"$RUN/stack.err" ||
	{ sed 's/^/# /' "$RUN/stack.err"; bail "charge-provider-sim did not start"; }
stack_redis_start "$RUN" "$RUN/redis" "$RUN" 2>"$RUN/stack.err" ||
	{ sed 's/^/# /' "$RUN/stack.err"; bail "redis-server did not start"; }

export LOGS_API_KEY="sk_test_logs_client_$RANDOM$RANDOM"
stack_api_keys_write "$RUN/api-keys" alice "$LOGS_API_KEY" || bail "cannot write the api-keys file"
mkdir -p "$RUN/spill" && chmod 700 "$RUN/spill"
stack_env "$RUN" logs
export CHARGE_PROVIDER_URL=$STACK_PROVIDER_URL
export CHARGE_PROVIDER_API_KEY=$LOGS_SIM_KEY
export CHARGE_PROVIDER_WEBHOOK_SECRET="whsec_logs_$RANDOM$RANDOM"
export CHARGE_LOG_FORMAT=json
export CHARGE_LOG_LEVEL=debug
export CHARGE_THREADS=2
"$BIN" --listen "$RUN/charge.sock" </dev/null 2>"$RUN/charge.log" &
CHARGE_PID=$!
for _ in $(seq 1 100); do
	[ -S "$RUN/charge.sock" ] && break
	kill -0 "$CHARGE_PID" 2>/dev/null || break
	sleep 0.05
done
[ -S "$RUN/charge.sock" ] || { sed 's/^/# /' "$RUN/charge.log"; bail "charge --listen did not start"; }

export LOGS_SOCKET="$RUN/charge.sock" LOGS_CHARGE_LOG="$RUN/charge.log"
export LOGS_SIM_LOG="$RUN/sim-requests.log" LOGS_SIM_URL=$STACK_PROVIDER_URL
export LOGS_DOC="$REPO/docs/API.md"
timeout --foreground -k 5 120 python3 "$REPO/tests/logs/test_logs.py" | tee "$RUN/tap.txt"
rc=${PIPESTATUS[0]}
if [ "$rc" -ne 0 ] && ! grep -q '^not ok' "$RUN/tap.txt"; then
	echo "not ok - logs: test_logs.py exited with status $rc"
fi
if [ "$rc" -ne 0 ]; then
	echo "# ---- last lines of charge.log"
	tail -n 20 "$RUN/charge.log" | sed 's/^/#   /'
fi
exit "$rc"
