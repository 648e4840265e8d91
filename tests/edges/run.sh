#!/usr/bin/env bash
# tests/edges/run.sh - the edges of a FastCGI connection's and a process's
# life, driven by misbehaving peers on the responder's own socket (charge
# --listen, a real Redis): charges whose connection went away still count
# against max_inflight; a peer that never reads holds bounded memory and is
# closed when nothing moves; a pipelined request that can never be answered
# is never executed; a half-closed peer gets its answer; idle kept
# connections time out; the drain answers a body still arriving with 503;
# body memory follows the bytes that arrived and is bounded per process; a
# connection's buffers shrink after a large answer; and a churn-and-stop
# soak. Each part starts its own responder (tests/edges/edges.py). Prints TAP.
#   CHARGE_BIN=build-asan/charge tests/edges/run.sh
set -uo pipefail
REPO=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../.." && pwd)
BIN=$(readlink -f "${CHARGE_BIN:-$REPO/build/charge}")
# shellcheck source=tools/stack.sh
. "$REPO/tools/stack.sh"
stack_env_clear

RUN=$(stack_rundir_create) || { echo "not ok 1 - run directory"; exit 1; }
cleanup() {
	stack_redis_stop "$RUN"
	rm -rf "$RUN"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

[ -x "$BIN" ] || { echo "not ok 1 - responder binary $BIN not found"; exit 1; }
stack_api_keys_write "$RUN/api-keys" demo sk_test_demo
stack_redis_start "$RUN" "$RUN/redis" "$RUN" 2>"$RUN/stack.err" ||
	{ sed 's/^/# /' "$RUN/stack.err"; echo "not ok 1 - redis-server did not start"; exit 1; }

timeout -k 5 400 python3 "$REPO/tests/edges/edges.py" "$BIN" "$RUN" \
	"unix://$RUN/redis.sock" "${EDGES_ONLY:-}" >"$RUN/out" 2>&1
rc=$?
[ $rc -ne 0 ] && echo "not ok - edges.py exited with status $rc" >>"$RUN/out"
stack_tap_number <"$RUN/out"
! grep -q '^not ok' "$RUN/out"
