#!/usr/bin/env bash
# tests/webhook/run.sh - the provider's webhook route (docs/API.md §17.5)
# through lighttpd, with a private Redis and the provider simulator
# (charge-provider-sim) on loopback, in a fresh temporary directory: every
# signature case over HTTP with nothing changed in Redis, an unknown
# outcome settled by a signed event built from the simulator's own charge,
# duplicates, out-of-order events, a mismatching charge, the metrics,
# Redis down. Prints TAP lines (from tests/webhook/test_webhook.py); exits
# non-zero when a test failed or the stack did not start.
#
#   tests/webhook/run.sh                       build/charge, build/charge-provider-sim
#   CHARGE_BIN=... CHARGE_SIM_BIN=... tests/webhook/run.sh
#   WEBHOOK_ONLY='settle' tests/webhook/run.sh  a subset (regex on names)
#   WEBHOOK_KEEP=1 tests/webhook/run.sh         keep the run directory
set -uo pipefail

REPO=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../.." && pwd)
BIN=${CHARGE_BIN:-$REPO/build/charge}
SIM=${CHARGE_SIM_BIN:-$REPO/build/charge-provider-sim}
SIM_LATE_MS=3000

# shellcheck source=tools/stack.sh
. "$REPO/tools/stack.sh"
stack_env_clear

bail() {
	echo "not ok 1 - webhook: $*"
	exit 1
}

command -v python3 >/dev/null 2>&1 || bail "python3 is not installed"
[ -x "$BIN" ] || bail "responder binary $BIN not found (build it, or set CHARGE_BIN)"
[ -x "$SIM" ] || bail "the provider simulator $SIM is not built (or set CHARGE_SIM_BIN)"
BIN=$(readlink -f "$BIN")
SIM=$(readlink -f "$SIM")

RUN=$(stack_rundir_create) || bail "cannot create a run directory"
SIM_PID=
cleanup() {
	trap - EXIT INT TERM
	[ -n "$SIM_PID" ] && stack_stop_pid "$SIM_PID" charge-provider 5
	stack_stop_all "$RUN"
	if [ "${WEBHOOK_KEEP:-0}" = 1 ]; then
		echo "# run directory kept: $RUN"
	else
		rm -rf "$RUN"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# the simulator: tok_providerTimeout charges at once and answers after
# SIM_LATE_MS, longer than the responder's deadline below
SIM_PORT=$(stack_port_pick) || bail "no free port"
setsid "$SIM" --listen "127.0.0.1:$SIM_PORT" --data "$RUN/sim.data" \
	--secret-key sk_test_provider --fsync never --late-ms "$SIM_LATE_MS" \
	</dev/null >"$RUN/sim.log" 2>&1 &
SIM_PID=$!
for _ in $(seq 1 100); do
	grep -q "listening on" "$RUN/sim.log" 2>/dev/null && break
	stack_pid_alive "$SIM_PID" || break
	sleep 0.05
done
grep -q "listening on" "$RUN/sim.log" ||
	{ sed 's/^/# /' "$RUN/sim.log"; bail "charge-provider-sim did not start"; }

export E2E_PRINCIPAL_A=alice E2E_API_KEY_A="sk_test_alice_$RANDOM$RANDOM"
stack_api_keys_write "$RUN/api-keys" "$E2E_PRINCIPAL_A" "$E2E_API_KEY_A" ||
	bail "cannot write the api-keys file"
mkdir -p "$RUN/spill" && chmod 700 "$RUN/spill"

# provider_timeout_ms 500 per attempt, provider_deadline_ms 1500 for all of
# them: a tok_providerTimeout (answered after 3 s) ends unknown. The
# completer's schedule is pushed an hour out: only a retry or the webhook
# settles a record here. max_request_bytes 16384: the body limit's edge.
stack_env "$RUN" provider
export CHARGE_LOCK_TTL_S=5
export CHARGE_FAILED_TTL_S=600
export CHARGE_MAX_REQUEST_BYTES=16384
export CHARGE_PROVIDER_URL="http://127.0.0.1:$SIM_PORT"
export CHARGE_PROVIDER_API_KEY=sk_test_provider
export CHARGE_PROVIDER_CONNECT_TIMEOUT_MS=500
export CHARGE_PROVIDER_TIMEOUT_MS=500
export CHARGE_PROVIDER_DEADLINE_MS=1500
export CHARGE_COMPLETER_SCHEDULE_S=3600,7200
export CHARGE_PROVIDER_WEBHOOK_SECRET="whsec_new_$RANDOM$RANDOM"
export CHARGE_PROVIDER_WEBHOOK_SECRET_PREVIOUS="whsec_old_$RANDOM$RANDOM"
export CHARGE_PROVIDER_WEBHOOK_TOLERANCE_S=300
export CHARGE_THREADS=2

if ! "$BIN" --check-config >"$RUN/check-config.txt" 2>&1; then
	sed 's/^/# /' "$RUN/check-config.txt"
	bail "charge --check-config rejects the test configuration"
fi
export CHECK_CONFIG_FILE="$RUN/check-config.txt"
stack_redis_start "$RUN" "$RUN/redis" "$RUN" 2>"$RUN/stack.err" ||
	{ sed 's/^/# /' "$RUN/stack.err"; bail "redis-server did not start"; }
PORT=$(stack_port_pick) || bail "no free port"
stack_lighttpd_start "$RUN" "$RUN" "$PORT" "$BIN" 2 2>"$RUN/stack.err" ||
	{ sed 's/^/# /' "$RUN/stack.err"; bail "lighttpd did not start"; }

export BASE_URL="http://127.0.0.1:$PORT"
export SIM_URL="http://127.0.0.1:$SIM_PORT"
export SIM_API_KEY=sk_test_provider
export SIM_LATE_MS
export E2E_REDIS_SOCKET="$RUN/redis.sock"
export REDIS_PID_FILE="$RUN/redis.pid"
export RESPONDER_LOG="$RUN/lighttpd.stderr.log"
export CHARGE_BIN_PATH="$BIN"
echo "# webhook: $BASE_URL, responder $BIN, simulator $SIM at $SIM_URL, run dir $RUN"

timeout --foreground -k 10 240 python3 "$REPO/tests/webhook/test_webhook.py" | tee "$RUN/tap.txt"
rc=${PIPESTATUS[0]}
if [ $rc -ne 0 ] && ! grep -q '^not ok' "$RUN/tap.txt"; then
	echo "not ok - webhook: test_webhook.py exited with status $rc"
fi
if [ $rc -ne 0 ]; then
	for f in lighttpd-error.log lighttpd.stderr.log sim.log redis.log; do
		[ -s "$RUN/$f" ] || continue
		echo "# ---- last lines of $f"
		tail -n 30 "$RUN/$f" | sed 's/^/#   /'
	done
fi
exit $rc
