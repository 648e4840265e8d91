#!/usr/bin/env bash
# tests/cgi/run.sh - the responder as a plain CGI program, without any web
# server: every test runs the binary with `env -i` and the CGI variables of
# one request, feeds the body on stdin and checks the raw CGI output
# (Status line, header lines, blank line, body) byte by byte. A private
# Redis runs in a temporary directory. Prints TAP; exits non-zero when a
# test failed.
#
#   tests/cgi/run.sh                          uses build/charge
#   CHARGE_BIN=/tmp/build-x/charge tests/cgi/run.sh
#   CGI_ONLY='413|drain' tests/cgi/run.sh     a subset (regex on names)
set -uo pipefail

REPO=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../.." && pwd)
BIN=${CHARGE_BIN:-$REPO/build/charge}

# shellcheck source=../../tools/stack.sh
. "$REPO/tools/stack.sh"

bail() {
	echo "not ok 1 - cgi: $*"
	exit 1
}

command -v python3 >/dev/null 2>&1 || bail "python3 is not installed"
command -v redis-cli >/dev/null 2>&1 || bail "redis-cli is not installed"
[ -x "$BIN" ] || bail "responder binary $BIN not found (build it, or set CHARGE_BIN)"
BIN=$(readlink -f "$BIN")

RUN=$(stack_rundir_create) || bail "cannot create a run directory"
cleanup() {
	trap - EXIT INT TERM
	stack_redis_stop "$RUN"
	rm -rf "$RUN"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

stack_redis_start "$RUN" "$RUN/redis" "$RUN" 2>"$RUN/stack.err" ||
	{ sed 's/^/# /' "$RUN/stack.err"; bail "redis-server did not start"; }
stack_api_keys_write "$RUN/api-keys" alice sk_test_cgi_alice bob sk_test_cgi_bob ||
	bail "cannot write the api-keys file"
mkdir -p "$RUN/spill" && chmod 700 "$RUN/spill"

echo "# cgi: $BIN, run dir $RUN"
export CGI_BIN=$BIN CGI_RUN=$RUN CGI_REDIS_SOCKET="$RUN/redis.sock"
timeout --foreground -k 5 180 python3 "$REPO/tests/cgi/test_cgi.py"
rc=$?
if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
	echo "not ok - cgi: suite timed out after 180 s"
fi
exit $rc
