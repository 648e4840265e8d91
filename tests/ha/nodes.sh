#!/usr/bin/env bash
# tests/ha/nodes.sh - two complete web stacks (each its own lighttpd,
# responders and run directory) sharing one Redis, one spill_dir and one
# provider ledger, then tests/ha/test_nodes.py: a spilled response replays
# through the other node, duplicates split across both nodes make one
# provider call, and both nodes' spill collectors race on the shared
# directory at start-up. Prints TAP.
#   CHARGE_BIN=build-asan/charge tests/ha/nodes.sh
#   tests/ha/nodes.sh --restart RUN    (used by the test) stops both stacks
#                                      of RUN and starts them at once
set -uo pipefail
REPO=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../.." && pwd)
# shellcheck source=tests/ha/common.sh
. "$REPO/tests/ha/common.sh"
PROCS=3

# nodes_start_both RUN: both stacks at the same moment, on the ports of
# RUN/ports (their collectors then run together).
nodes_start_both() {
	local run=$1 pa pb port_a port_b
	read -r port_a port_b <"$run/ports"
	(CHARGE_METRICS_FILE="$run/a/metrics.shm" \
		stack_lighttpd_start "$run/a" "$run/a" "$port_a" "$BIN" $PROCS) 2>"$run/a/stack.err" &
	pa=$!
	(CHARGE_METRICS_FILE="$run/b/metrics.shm" \
		stack_lighttpd_start "$run/b" "$run/b" "$port_b" "$BIN" $PROCS) 2>"$run/b/stack.err" &
	pb=$!
	wait $pa || { sed 's/^/# /' "$run/a/stack.err"; return 1; }
	wait $pb || { sed 's/^/# /' "$run/b/stack.err"; return 1; }
}

if [ "${1:-}" = --restart ]; then
	run=$2
	STACK_LIGHTTPD_PID= stack_lighttpd_stop "$run/a"
	STACK_LIGHTTPD_PID= stack_lighttpd_stop "$run/b"
	nodes_start_both "$run"
	exit $?
fi

ha_suite_init nodes
run=$HA_SUITE_RUN
topo="$run/redis"
ha_suite_topology "$topo"
ha_port_pick || ha_suite_bail "no free port"
ha_redis_create "$topo" "$HA_PORT" 2>"$run/redis.err" || {
	sed 's/^/# /' "$run/redis.err"
	ha_suite_bail "redis-server did not start"
}
ha_suite_env "$run/shared"
export CHARGE_REDIS_URL="redis://127.0.0.1:$HA_PORT"
# spill GC: files older than completed_ttl_s + lock_ttl_s = 35 s go, and
# temporary ones older than lock_ttl_s = 5 s
export CHARGE_COMPLETED_TTL_S=30 CHARGE_FAILED_TTL_S=30 CHARGE_LOCK_TTL_S=5
mkdir -p "$run/a" "$run/b"
HA_SUITE_STACKS+=("$run/a" "$run/b")
echo "$(stack_port_pick) $(stack_port_pick)" >"$run/ports"
"$BIN" --check-config >"$run/check-config.txt" 2>&1 || {
	sed 's/^/# /' "$run/check-config.txt"
	ha_suite_bail "charge --check-config rejects the configuration"
}
nodes_start_both "$run" || ha_suite_bail "the stacks did not start"
read -r port_a port_b <"$run/ports"
echo "# node A http://127.0.0.1:$port_a, node B http://127.0.0.1:$port_b, Redis $CHARGE_REDIS_URL, shared $run/shared"
rc=0
HA_BASE_A="http://127.0.0.1:$port_a" HA_BASE_B="http://127.0.0.1:$port_b" \
	HA_REDIS_PORT=$HA_PORT HA_RUN=$run \
	HA_RESTART="'$REPO/tests/ha/nodes.sh' --restart '$run'" \
	timeout --foreground -k 10 180 python3 "$REPO/tests/ha/test_nodes.py" || {
	rc=1
	ha_suite_logs "$run/a" "$run/b"
}
exit $rc
