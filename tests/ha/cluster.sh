#!/usr/bin/env bash
# tests/ha/cluster.sh - the responders on a Redis Cluster of 3 primaries
# (tools/ha.sh --cluster): a lighttpd stack with
# CHARGE_REDIS_URL=redis-cluster://..., then tests/ha/test_cluster.py.
# The whole end-to-end suite against a cluster is E2E_REDIS=cluster
# tests/e2e/run.sh. Prints TAP.
#   CHARGE_BIN=build-asan/charge tests/ha/cluster.sh
set -uo pipefail
REPO=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../.." && pwd)
# shellcheck source=tests/ha/common.sh
. "$REPO/tests/ha/common.sh"

KEYSLOT=${HA_KEYSLOT_BIN:-$(dirname "$BIN")/keyslot}
[ -x "$KEYSLOT" ] || KEYSLOT=$REPO/build/keyslot
PROCS=3

ha_suite_init cluster
[ -x "$KEYSLOT" ] || ha_suite_bail "$KEYSLOT not built"
topo="$HA_SUITE_RUN/cluster" dir="$HA_SUITE_RUN/stack"
ha_suite_topology "$topo"
ha_cluster_start "$topo" 3 2>"$HA_SUITE_RUN/cluster.err" || {
	sed 's/^/# /' "$HA_SUITE_RUN/cluster.err"
	ha_suite_bail "the cluster did not start"
}
echo "# cluster: $HA_URL"
ha_suite_env "$dir"
export CHARGE_REDIS_URL=$HA_URL
ha_suite_stack cluster "$dir" $PROCS
rc=0
HA_BASE_URL=$HA_STACK_URL HA_DIR=$topo HA_NODES="${HA_NODE_PORTS[*]}" \
	HA_KEYSLOT_BIN=$KEYSLOT HA_BIN=$BIN HA_PROCS=$PROCS \
	timeout --foreground -k 10 240 python3 "$REPO/tests/ha/test_cluster.py" || {
	rc=1
	ha_suite_logs "$dir"
}
exit $rc
