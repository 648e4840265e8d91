#!/usr/bin/env bash
# tests/fcgi_wire/run.sh - the FastCGI protocol on the responder's own
# socket (charge --listen on a unix socket, a real Redis), byte for byte:
# requests one after another and pipelined on a kept connection, a second
# request id refused (FCGI_CANT_MPX_CONN), FCGI_GET_VALUES, an unknown
# management type, roles other than the responder, NUL inside a value, and
# malformed streams that must never take the responder down. Prints TAP
# (tests/fcgi_wire/wire.py does the talking).
#   CHARGE_BIN=build-asan/charge tests/fcgi_wire/run.sh
set -uo pipefail
REPO=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../.." && pwd)
BIN=$(readlink -f "${CHARGE_BIN:-$REPO/build/charge}")
MAX_INFLIGHT=777
# shellcheck source=tools/stack.sh
. "$REPO/tools/stack.sh"
stack_env_clear

PID=
RUN=$(stack_rundir_create) || { echo "not ok 1 - run directory"; exit 1; }
cleanup() {
	[ -n "$PID" ] && stack_stop_pid "$PID" charge 5
	stack_redis_stop "$RUN"
	rm -rf "$RUN"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

[ -x "$BIN" ] || { echo "not ok 1 - responder binary $BIN not found"; exit 1; }
mkdir -p "$RUN/spill"
stack_api_keys_write "$RUN/api-keys" demo sk_test_demo
stack_env "$RUN" wire
export CHARGE_METRICS_FILE=none CHARGE_PROVIDER_LATENCY_MS=50 CHARGE_LOG_LEVEL=warn
export CHARGE_THREADS=2 CHARGE_MAX_INFLIGHT=$MAX_INFLIGHT CHARGE_REQUEST_TIMEOUT_MS=2000
export CHARGE_MAX_REQUEST_BYTES=65536   # wire.py's MAX_REQUEST_BYTES
stack_redis_start "$RUN" "$RUN/redis" "$RUN" 2>"$RUN/stack.err" ||
	{ sed 's/^/# /' "$RUN/stack.err"; echo "not ok 1 - redis-server did not start"; exit 1; }

SOCK="$RUN/charge.sock"
"$BIN" --listen "$SOCK" 2>>"$RUN/charge.log" &
PID=$!
for _ in $(seq 1 100); do
	[ -S "$SOCK" ] && break
	stack_pid_alive "$PID" || break
	sleep 0.05
done
[ -S "$SOCK" ] || { tail -5 "$RUN/charge.log" | sed 's/^/# /'; echo "not ok 1 - charge --listen $SOCK did not start"; exit 1; }

timeout -k 5 120 python3 "$REPO/tests/fcgi_wire/wire.py" "$SOCK" "$CHARGE_PROVIDER_LEDGER" \
	"$MAX_INFLIGHT" "$PID" >"$RUN/out" 2>&1
rc=$?
[ $rc -ne 0 ] && echo "not ok - wire.py exited with status $rc" >>"$RUN/out"
# the responder exits 0 on SIGTERM after all this
kill -TERM "$PID"
for _ in $(seq 1 100); do
	stack_pid_alive "$PID" || break
	sleep 0.05
done
if stack_pid_alive "$PID"; then
	echo "not ok - SIGTERM afterwards: still running 5 s later" >>"$RUN/out"
else
	wait "$PID"
	rc=$?
	[ $rc -eq 0 ] && echo "ok - SIGTERM afterwards: exits 0" >>"$RUN/out" ||
		echo "not ok - SIGTERM afterwards: exit status $rc" >>"$RUN/out"
fi
PID=
if grep -q '^not ok' "$RUN/out"; then
	echo "# last lines of the responder's log:" >>"$RUN/out"
	tail -15 "$RUN/charge.log" | sed 's/^/#   /' >>"$RUN/out"
fi
stack_tap_number <"$RUN/out"
! grep -q '^not ok' "$RUN/out"
