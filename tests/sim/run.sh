#!/usr/bin/env bash
# tests/sim/run.sh - charge-provider-sim as a black box over HTTP on
# loopback: every token, idempotency (replay, 400, 409), chains, auth,
# validation, GET and search, each fault on the wire, rate faults with a
# seed, concurrent deliveries on one key, the limits, durability across
# kill -9, and SIGTERM. Prints TAP (sim_test.py does the talking).
#   SIM_BIN=build-asan/charge-provider-sim tests/sim/run.sh
set -uo pipefail
REPO=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../.." && pwd)
BIN=$(readlink -f "${SIM_BIN:-$REPO/build/charge-provider-sim}")
[ -x "$BIN" ] || { echo "not ok 1 - simulator binary $BIN not found"; exit 1; }
TMP=$(mktemp -d "${TMPDIR:-/tmp}/charge-sim.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
timeout -k 5 300 python3 "$REPO/tests/sim/sim_test.py" "$BIN" "$TMP"
rc=$?
[ $rc -ne 0 ] && echo "not ok - sim_test.py exited with status $rc"
exit $rc
