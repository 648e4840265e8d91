#!/usr/bin/env bash
# tests/reconcile/run.sh - charge-reconcile on a seeded history through the
# real stack: a private Redis, charge-provider-sim, lighttpd + the
# responder, all in a fresh temporary directory on loopback. Prints TAP
# lines (from tests/reconcile/test_reconcile.py, then test_hostile.py: a
# scripted hostile provider, tests/reconcile/hostile_list.py); exits non-zero when a test
# failed or the stack did not start.
#
#   tests/reconcile/run.sh                  build/charge, build/charge-reconcile, build/charge-provider-sim
#   CHARGE_BIN=... RECONCILE_BIN=... CHARGE_SIM_BIN=... tests/reconcile/run.sh
#   RECONCILE_ONLY='planted' tests/reconcile/run.sh   a subset (regex on names)
#   RECONCILE_KEEP=1 tests/reconcile/run.sh           keep the run directory
set -uo pipefail

REPO=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../.." && pwd)
BIN=${CHARGE_BIN:-$REPO/build/charge}
# the reconciler of the same build as the responder (ASan under test.sh)
RECONCILE=${RECONCILE_BIN:-$(dirname "$BIN")/charge-reconcile}
SIM=${CHARGE_SIM_BIN:-$REPO/build/charge-provider-sim}

# shellcheck source=tools/stack.sh
. "$REPO/tools/stack.sh"
stack_env_clear
# shellcheck source=tools/ha.sh
. "$REPO/tools/ha.sh"

bail() {
	echo "not ok 1 - reconcile: $*"
	exit 1
}

command -v python3 >/dev/null 2>&1 || bail "python3 is not installed"
python3 -c 'import jsonschema' 2>/dev/null || bail "python3-jsonschema is not installed"
[ -x "$BIN" ] || bail "responder binary $BIN not found (build it, or set CHARGE_BIN)"
[ -x "$RECONCILE" ] || bail "$RECONCILE not found (meson builds charge-reconcile; or set RECONCILE_BIN)"
[ -x "$SIM" ] || bail "the provider simulator $SIM is not built (or set CHARGE_SIM_BIN)"
BIN=$(readlink -f "$BIN")
RECONCILE=$(readlink -f "$RECONCILE")
SIM=$(readlink -f "$SIM")

RUN=$(stack_rundir_create) || bail "cannot create a run directory"
cleanup() {
	trap - EXIT INT TERM
	stack_sim_stop
	ha_stop_all "$RUN/sentinel"
	ha_stop_all "$RUN/cluster"
	stack_stop_all "$RUN"
	if [ "${RECONCILE_KEEP:-0}" = 1 ]; then
		echo "# run directory kept: $RUN"
	else
		rm -rf "$RUN"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# the simulator: store, PID file and log in RUN (provider-sim.*)
stack_sim_start "$RUN" "$RUN" "$SIM" --secret-key sk_test_reconcile --fsync never \
	2>"$RUN/stack.err" ||
	{ sed 's/^/# /' "$RUN/stack.err"; bail "charge-provider-sim did not start"; }
SIM_PORT=$STACK_PROVIDER_PORT

export E2E_PRINCIPAL_A=alice E2E_API_KEY_A="sk_test_alice_$RANDOM$RANDOM"
stack_api_keys_write "$RUN/api-keys" "$E2E_PRINCIPAL_A" "$E2E_API_KEY_A" ||
	bail "cannot write the api-keys file"
mkdir -p "$RUN/spill" && chmod 700 "$RUN/spill"

# The responder's configuration, read by charge-reconcile too (the same
# CHARGE_* environment; the file is the project's conf/charge.conf).
stack_env "$RUN" reconcile
export CHARGE_KEY_PREFIX="rc:"
export CHARGE_LOCK_TTL_S=10
export CHARGE_FAILED_TTL_S=3600
export CHARGE_SPILL_THRESHOLD_BYTES=1024
export CHARGE_PROVIDER_URL="http://127.0.0.1:$SIM_PORT"
# the simulator executes within one attempt and sends no Date header
export CHARGE_PROVIDER_EXECUTE_MAX_MS=500 CHARGE_PROVIDER_CLOCK_SKEW_MAX_S=0
export CHARGE_PROVIDER_API_KEY=sk_test_reconcile
export CHARGE_PROVIDER_TIMEOUT_MS=2000
export CHARGE_PROVIDER_DEADLINE_MS=4000
export CHARGE_THREADS=2

stack_redis_start "$RUN" "$RUN/redis" "$RUN" 2>"$RUN/stack.err" ||
	{ sed 's/^/# /' "$RUN/stack.err"; bail "redis-server did not start"; }
PORT=$(stack_port_pick) || bail "no free port"
stack_lighttpd_start "$RUN" "$RUN" "$PORT" "$BIN" 2 2>"$RUN/stack.err" ||
	{ sed 's/^/# /' "$RUN/stack.err"; bail "lighttpd did not start"; }

# The same records behind Redis Sentinel and on a Redis Cluster of 3
# primaries (the test copies them there): the reconciler must find the same.
ha_sentinel_start "$RUN/sentinel" >"$RUN/ha.log" 2>&1 ||
	{ sed 's/^/# /' "$RUN/ha.log"; bail "the Sentinel topology did not start"; }
export RECONCILE_SENTINEL_URL=$HA_URL RECONCILE_SENTINEL_PRIMARY=$HA_PRIMARY_PORT
ha_cluster_start "$RUN/cluster" 3 >>"$RUN/ha.log" 2>&1 ||
	{ sed 's/^/# /' "$RUN/ha.log"; bail "the Redis Cluster did not start"; }
export RECONCILE_CLUSTER_URL=$HA_URL
RECONCILE_CLUSTER_PORTS=$(IFS=,; echo "${HA_NODE_PORTS[*]}")
export RECONCILE_CLUSTER_PORTS

export BASE_URL="http://127.0.0.1:$PORT"
export SIM_URL="http://127.0.0.1:$SIM_PORT"
export SIM_API_KEY=sk_test_reconcile
export E2E_REDIS_SOCKET="$RUN/redis.sock"
export RECONCILE_BIN=$RECONCILE
export RECONCILE_RUN=$RUN
export RECONCILE_SCHEMA="$REPO/docs/reconcile.schema.json"
echo "# reconcile: $BASE_URL, $RECONCILE, simulator at $SIM_URL, run dir $RUN"

rc=0
# the seeded history; then a hostile provider (hostile_list.py) and a
# planted symlink against the same Redis (test_hostile.py)
for t in test_reconcile test_hostile; do
	timeout --foreground -k 10 240 python3 "$REPO/tests/reconcile/$t.py" | tee "$RUN/tap.txt"
	trc=${PIPESTATUS[0]}
	if [ "$trc" -ne 0 ] && ! grep -q '^not ok' "$RUN/tap.txt"; then
		echo "not ok - reconcile: $t.py exited with status $trc"
	fi
	[ "$trc" -eq 0 ] || rc=$trc
done
if [ "$rc" -ne 0 ]; then
	for f in lighttpd-error.log provider-sim.log redis.log; do
		[ -s "$RUN/$f" ] || continue
		echo "# ---- last lines of $f"
		tail -n 30 "$RUN/$f" | sed 's/^/#   /'
	done
fi
exit "$rc"
