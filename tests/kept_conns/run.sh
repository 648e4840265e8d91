#!/usr/bin/env bash
# tests/kept_conns/run.sh - thousands of kept FastCGI connections on the
# responder's own socket (charge --listen, a real Redis): 4 096 connections
# at once, each with one replay and FCGI_KEEP_CONN, then idle, as a web
# server's connection pool leaves them after a burst. Checks the
# descriptors (one per connection) and the memory per idle connection
# against the bounds docs/deploying-concurrency.md states, and that
# keepalive_idle_timeout_ms reaps them all (tests/kept_conns/kept.py).
# Bounded: about 30 s. Prints TAP.
#   CHARGE_BIN=/tmp/other/charge tests/kept_conns/run.sh
#   KEPT_N=1024 tests/kept_conns/run.sh
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

timeout -k 5 120 python3 "$REPO/tests/kept_conns/kept.py" "$BIN" "$RUN" \
	"unix://$RUN/redis.sock" >"$RUN/out" 2>&1
rc=$?
[ $rc -ne 0 ] && echo "not ok - kept.py exited with status $rc" >>"$RUN/out"
stack_tap_number <"$RUN/out"
! grep -q '^not ok' "$RUN/out"
