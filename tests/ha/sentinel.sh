#!/usr/bin/env bash
# tests/ha/sentinel.sh - the responders behind Redis Sentinel: a primary,
# two replicas and three sentinels from tools/ha.sh, a lighttpd stack with
# CHARGE_REDIS_URL=redis-sentinel://..., and tests/ha/test_sentinel.py,
# once with redis_min_replicas=1 and once with 0 (a fresh topology each
# time). Prints TAP.
#   CHARGE_BIN=build-asan/charge tests/ha/sentinel.sh
#   HA_MIN_REPLICAS_RUNS="1" tests/ha/sentinel.sh    only one of the runs
# Then the responders against a scripted sentinel: tests/ha/test_sentinel_logic.py.
set -uo pipefail
REPO=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../.." && pwd)
# shellcheck source=tests/ha/common.sh
. "$REPO/tests/ha/common.sh"

ha_suite_init sentinel
rc=0
for mr in ${HA_MIN_REPLICAS_RUNS:-1 0}; do
	topo="$HA_SUITE_RUN/ha-$mr" dir="$HA_SUITE_RUN/stack-$mr"
	ha_suite_topology "$topo"
	ha_sentinel_start "$topo" 2>"$HA_SUITE_RUN/ha-$mr.err" || {
		sed 's/^/# /' "$HA_SUITE_RUN/ha-$mr.err"
		ha_suite_bail "the sentinel topology did not start"
	}
	echo "# min_replicas=$mr: primary $HA_PRIMARY_PORT, replicas ${HA_REPLICA_PORTS[*]}, $HA_URL"
	ha_suite_env "$dir"
	export CHARGE_REDIS_URL=$HA_URL CHARGE_REDIS_MIN_REPLICAS=$mr
	export CHARGE_REDIS_REPLICA_TIMEOUT_MS=100
	ha_suite_stack "sentinel-$mr" "$dir" 8
	HA_BASE_URL=$HA_STACK_URL HA_MIN_REPLICAS=$mr HA_DIR=$topo \
		HA_SENTINELS="${HA_SENTINEL_PORTS[*]}" HA_REPLICAS="${HA_REPLICA_PORTS[*]}" \
		HA_MASTER=$HA_MASTER HA_BIN=$BIN HA_STACK_LOG="$dir/lighttpd.stderr.log" \
		timeout --foreground -k 10 240 python3 "$REPO/tests/ha/test_sentinel.py" || {
		rc=1
		ha_suite_logs "$dir"
	}
	ha_suite_stop_stack "$dir"
	ha_stop_all "$topo"
done

# A scripted sentinel (in the test) in front of two plain Redis servers, the
# first sentinel of the URL dead.
topo="$HA_SUITE_RUN/scripted" dir="$HA_SUITE_RUN/stack-scripted"
ha_suite_topology "$topo"
ha_port_pick || ha_suite_bail "no free port"
p=$HA_PORT
ha_port_pick || ha_suite_bail "no free port"
r=$HA_PORT
ha_port_pick || ha_suite_bail "no free port"
fake=$HA_PORT
ha_port_pick || ha_suite_bail "no free port"
dead=$HA_PORT
{ ha_redis_create "$topo" "$p" && ha_redis_create "$topo" "$r"; } 2>"$topo.err" || {
	sed 's/^/# /' "$topo.err"
	ha_suite_bail "redis-server did not start"
}
ha_suite_env "$dir"
export CHARGE_REDIS_URL="redis-sentinel://127.0.0.1:$dead,127.0.0.1:$fake/charge"
export CHARGE_REDIS_MIN_REPLICAS=0
ha_suite_stack scripted "$dir" 2
HA_BASE_URL=$HA_STACK_URL HA_FAKE_SENTINEL_PORT=$fake HA_P=$p HA_R=$r HA_DIR=$topo \
	HA_STACK_LOG="$dir/lighttpd.stderr.log" \
	timeout --foreground -k 10 120 python3 "$REPO/tests/ha/test_sentinel_logic.py" || {
	rc=1
	ha_suite_logs "$dir"
}
exit $rc
