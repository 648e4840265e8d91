#!/usr/bin/env bash
# tests/redis_tls/run.sh - Redis over TLS (rediss schemes, docs/API.md's
# redis_tls_* keys): the responder, run as a CGI program per request (env -i,
# the request's variables, its log on stderr), against Redis servers that
# speak TLS only (port 0, tls-port N) with a test CA made here by openssl:
# a single node (charges, replays, 422), each refusal (an unknown CA, a
# wrong name, an expired certificate, plain text on the TLS port, a client
# certificate the server refuses: 503 and the cause in one log line), a
# 3-node cluster with tls-cluster yes and a Sentinel topology whose
# sentinels and nodes speak TLS (tools/ha.sh under HA_TLS_DIR), and
# charge-reconcile against the cluster; then the asynchronous client
# (tests/redis_async/driver.c) through a TLS front that changes keys under
# it (rekey_proxy.c) and across a restart of the TLS node, and
# tests/ha/test_sentinel.py's failover under load over TLS, and the
# contract suite (tests/e2e/run.sh, E2E_REDIS=tls). Prints TAP.
#
#   CHARGE_BIN=build-asan/charge tests/redis_tls/run.sh
#   TLS_ONLY='cluster' tests/redis_tls/run.sh      a subset (regex on names;
#                        "rekey", "restart", "e2e", "failover" name the
#                        parts after)
set -uo pipefail
REPO=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../.." && pwd)
# shellcheck source=tests/ha/common.sh
. "$REPO/tests/ha/common.sh"

ha_suite_init redis_tls
RUN=$HA_SUITE_RUN
command -v openssl >/dev/null 2>&1 || ha_suite_bail "openssl is not installed"

# the CA the responder trusts, and another one it does not
if ! stack_tls_certs "$RUN/tls" || ! stack_tls_certs "$RUN/other"; then
	ha_suite_bail "cannot make the test certificates"
fi
(
	cd "$RUN/tls" && umask 077 &&
		openssl req -newkey rsa:2048 -nodes -subj "/CN=expired" \
			-keyout expired.key -out expired.csr 2>/dev/null &&
		openssl x509 -req -in expired.csr -CA ca.crt -CAkey ca.key \
			-CAcreateserial -days -1 -extfile server.ext -out expired.crt 2>/dev/null
) || ha_suite_bail "cannot make the expired certificate"
mkdir -p "$RUN/spill" && chmod 700 "$RUN/spill"

# the provider simulator, for the charges charge-reconcile reads back
# shellcheck disable=SC2317  # the EXIT trap's
sim_cleanup() {
	[ -n "${STACK_SIM_PID:-}" ] && stack_stop_pid "$STACK_SIM_PID" "$STACK_SIM_COMM" 5
	ha_suite_cleanup
}
trap sim_cleanup EXIT
stack_sim_start "$RUN" "$RUN" "${CHARGE_SIM_BIN:-}" --secret-key sk_test_tls --fsync never \
	2>"$RUN/sim.err" || { sed 's/^/# /' "$RUN/sim.err"; ha_suite_bail "charge-provider-sim did not start"; }

# the single nodes: TLS only; one that asks every client for a certificate;
# one with an expired certificate; one in plain text
topo="$RUN/single"
ha_suite_topology "$topo"
HA_PICKED=
ports=()
for _ in 1 2 3 4; do
	ha_port_pick || ha_suite_bail "no free port"
	ports+=("$HA_PORT")
done
# expired_start PORT: a TLS-only node with the expired certificate (no
# PING can reach it: waits until it listens)
expired_start() {
	local nd="$topo/node-$1" pid
	mkdir -p "$nd" && chmod 700 "$nd" || return 1
	# shellcheck disable=SC2046  # ha_port_args: one argument a line
	printf '%s\n' redis-server --save "" --appendonly no --bind 127.0.0.1 \
		--dir "$nd" --logfile "$nd/node.log" \
		$(HA_TLS_DIR="$RUN/tls" ha_port_args "$1") \
		--tls-cert-file "$RUN/tls/expired.crt" --tls-key-file "$RUN/tls/expired.key" \
		>"$nd/start.args"
	mapfile -t a <"$nd/start.args"
	(cd "$nd" && exec setsid "${a[@]}" </dev/null >>"$nd/stdout.log" 2>&1) &
	pid=$!
	disown "$pid"
	echo "$pid" >"$nd/pid"
	for _ in $(seq 1 100); do
		stack_port_in_use "$1" && return 0
		sleep 0.1
	done
	return 1
}
{
	HA_TLS_DIR="$RUN/tls" ha_redis_create "$topo" "${ports[0]}" &&
		HA_TLS_DIR="$RUN/tls" ha_redis_create "$topo" "${ports[1]}" --tls-auth-clients yes &&
		ha_redis_create "$topo" "${ports[3]}" &&
		expired_start "${ports[2]}"
} 2>"$RUN/single.err" || {
	sed 's/^/# /' "$RUN/single.err"
	ha_suite_bail "redis-server did not start"
}

# the cluster and the sentinels, TLS everywhere
export HA_TLS_DIR="$RUN/tls"
ha_suite_topology "$RUN/cluster"
ha_cluster_start "$RUN/cluster" 3 2>"$RUN/cluster.err" || {
	sed 's/^/# /' "$RUN/cluster.err"
	ha_suite_bail "the TLS cluster did not start"
}
cluster_url=$HA_URL cluster_ports="${HA_NODE_PORTS[*]}"
ha_suite_topology "$RUN/sentinel"
ha_sentinel_start "$RUN/sentinel" 2>"$RUN/sentinel.err" || {
	sed 's/^/# /' "$RUN/sentinel.err"
	ha_suite_bail "the TLS sentinel topology did not start"
}
echo "# single ${ports[*]}; $cluster_url; $HA_URL"

export TLS_BIN=$BIN TLS_RUN=$RUN TLS_DIR="$RUN/tls" TLS_OTHER="$RUN/other"
export TLS_PORT=${ports[0]} TLS_PORT_MTLS=${ports[1]} TLS_PORT_EXPIRED=${ports[2]}
export TLS_PORT_PLAIN=${ports[3]} TLS_CLUSTER_URL=$cluster_url
export TLS_CLUSTER_PORTS=$cluster_ports TLS_SENTINEL_URL=$HA_URL
export TLS_SENTINEL_PORTS="${HA_SENTINEL_PORTS[*]}" TLS_MASTER=$HA_MASTER
export TLS_SIM_URL=$STACK_PROVIDER_URL
export TLS_RECONCILE_BIN=${CHARGE_RECONCILE_BIN:-$(dirname "$BIN")/charge-reconcile}
timeout --foreground -k 5 240 python3 "$REPO/tests/redis_tls/test_tls.py"
rc=$?
[ $rc -eq 124 ] || [ $rc -eq 137 ] && echo "not ok - redis_tls: timed out after 240 s"

# Keys changed under the client: a TLS front before the plain node asks for
# a TLS 1.3 key update, or starts a TLS 1.2 renegotiation and holds every
# reply until the client completed it, after each chunk of replies
# (tests/redis_tls/rekey_proxy.c); the client on its loop
# (tests/redis_async/driver.c) must get every reply, pipelined in one round
# (nothing more to write: the handshake's answer must leave by itself) and
# over rounds.
rekey() {
	local mode=$1 dargs=$2 what=$3 port pid out stats bindir
	stats="$RUN/rekey-$mode.stats"
	bindir=$(dirname "$BIN")
	port=$(stack_port_pick) || { echo "not ok - TLS $mode: no free port"; rc=1; return; }
	rm -f "$stats"
	"$bindir/rekey_proxy" "$port" "$TLS_PORT_PLAIN" "$RUN/tls/server.crt" "$RUN/tls/server.key" \
		"$mode" 1 "$stats" >"$RUN/rekey-$mode.log" 2>&1 &
	pid=$!
	for _ in $(seq 1 50); do stack_port_in_use "$port" && break; sleep 0.1; done
	# shellcheck disable=SC2086  # dargs: the driver's options
	out=$(REDIS_TLS_CA="$RUN/tls/ca.crt" timeout 60 "$bindir/redis_async_driver" -t 2000 $dargs \
		"rediss://localhost:$port" 2>"$RUN/rekey-$mode.err" | grep '^summary')
	kill "$pid" 2>/dev/null
	wait "$pid" 2>/dev/null
	sleep 0.2 # the connection's process writes its line
	local n=${dargs#*-n } c=${dargs#*-c }
	n=${n%% *} c=${c%% *}
	if [[ "$out" == "summary ok=$((n * c)) err=0 "* ]] &&
		[ "$(awk -F'[= ]' '{u += $2; d += $4} END {print (u > 0 && d > 0)}' "$stats" 2>/dev/null)" = 1 ]; then
		echo "ok - TLS $mode under the client: $what ($(paste -sd' ' "$stats"))"
	else
		echo "not ok - TLS $mode under the client: $what"
		echo "#   driver: $out; proxy: $(paste -sd' ' "$stats" 2>/dev/null)"
		tail -n 5 "$RUN/rekey-$mode.err" "$RUN/rekey-$mode.log" | sed 's/^/#   /'
		rc=1
	fi
}
if [ -z "${TLS_ONLY:-}" ] || [[ "rekey" =~ ${TLS_ONLY} ]]; then
	rekey renegotiate "-n 200 -c 1" "200 commands in one round, every reply"
	rekey renegotiate "-n 50 -c 20 -i 5" "20 rounds of 50, every reply"
	rekey keyupdate "-n 200 -c 1" "200 commands in one round, every reply"
	rekey keyupdate "-n 50 -c 20 -i 5" "20 rounds of 50, every reply"
fi

# A restart of the TLS node under the client: the connection fails, the
# next commands connect and shake hands again (rounds of 10 every 100 ms for
# 3 s, the node restarted after 1 s): the last third of the rounds all ok.
if [ -z "${TLS_ONLY:-}" ] || [[ "restart" =~ ${TLS_ONLY} ]]; then
	out="$RUN/restart.out"
	REDIS_TLS_CA="$RUN/tls/ca.crt" timeout 60 "$(dirname "$BIN")/redis_async_driver" -t 1000 \
		-n 10 -c 30 -i 100 "rediss://localhost:$TLS_PORT" >"$out" 2>"$out.err" &
	dpid=$!
	sleep 1
	{ ha_node_kill "$topo" "$TLS_PORT" TERM && ha_node_start "$topo" "$TLS_PORT"; } 2>>"$out.err"
	wait "$dpid"
	late=$(awk '$1 ~ /^[0-9]+$/ && $1 >= 20 && $3 != "ok"' "$out" | wc -l)
	lateok=$(awk '$1 ~ /^[0-9]+$/ && $1 >= 20 && $3 == "ok"' "$out" | wc -l)
	if [ "$late" -eq 0 ] && [ "$lateok" -eq 100 ]; then
		echo "ok - TLS node restarted under the client: reconnected ($(grep '^summary' "$out"))"
	else
		echo "not ok - TLS node restarted under the client: $late late failures, $lateok late ok"
		grep '^summary' "$out" | sed 's/^/#   /'
		tail -n 5 "$out.err" | sed 's/^/#   /'
		rc=1
	fi
fi

# The contract suite (tests/e2e) through lighttpd against a Redis that is
# TLS only to the responders (E2E_REDIS=tls), its crash and restart included.
if [ -z "${TLS_ONLY:-}" ] || [[ "e2e" =~ ${TLS_ONLY} ]]; then
	env -u HA_TLS_DIR E2E_SERVER=lighttpd E2E_REDIS=tls CHARGE_BIN="$BIN" \
		"$REPO/tests/e2e/run.sh" || rc=1
fi

# The cluster over TLS through a lighttpd stack: tests/ha/test_cluster.py's
# routing, a slot in migration (ASK, then MOVED), redis-cli --cluster
# reshard under load and a primary down, every node reached over TLS.
if [ -z "${TLS_ONLY:-}" ] || [[ "cluster-ha" =~ ${TLS_ONLY} ]]; then
	dir="$RUN/stack-cluster"
	ha_suite_env "$dir"
	export CHARGE_REDIS_URL=$cluster_url CHARGE_REDIS_MIN_REPLICAS=0
	export CHARGE_REDIS_TLS_CA_FILE="$RUN/tls/ca.crt"
	ha_suite_stack "cluster-tls" "$dir" 3
	HA_BASE_URL=$HA_STACK_URL HA_DIR="$RUN/cluster" HA_NODES="$cluster_ports" \
		HA_KEYSLOT_BIN="$(dirname "$BIN")/keyslot" HA_BIN=$BIN HA_PROCS=3 \
		HA_ONLY='each record|slot in migration|reshard|primary down' \
		timeout --foreground -k 10 240 python3 "$REPO/tests/ha/test_cluster.py" |
		sed 's/^\(not \)\?ok [0-9]* - /&TLS cluster: /'
	[ "${PIPESTATUS[0]}" -eq 0 ] || { rc=1; ha_suite_logs "$dir"; }
	ha_suite_stop_stack "$dir"
fi

# The Sentinel failover over TLS: tests/ha/test_sentinel.py's charge and
# replay, kill -9 of the primary under load with redis_min_replicas = 1 (no
# acknowledged outcome lost) and the new primary, through a lighttpd stack.
if [ -z "${TLS_ONLY:-}" ] || [[ "failover" =~ ${TLS_ONLY} ]]; then
	dir="$RUN/stack-sentinel"
	ha_suite_env "$dir"
	export CHARGE_REDIS_URL=$HA_URL CHARGE_REDIS_MIN_REPLICAS=1
	export CHARGE_REDIS_REPLICA_TIMEOUT_MS=100
	export CHARGE_REDIS_TLS_CA_FILE="$RUN/tls/ca.crt"
	ha_suite_stack "sentinel-tls" "$dir" 4
	HA_BASE_URL=$HA_STACK_URL HA_MIN_REPLICAS=1 HA_DIR="$RUN/sentinel" \
		HA_SENTINELS="${HA_SENTINEL_PORTS[*]}" HA_REPLICAS="${HA_REPLICA_PORTS[*]}" \
		HA_MASTER=$HA_MASTER HA_BIN=$BIN HA_STACK_LOG="$dir/lighttpd.stderr.log" \
		HA_ONLY='fresh charge|kill -9|after the failover' HA_LOAD_KEYS=128 \
		timeout --foreground -k 10 180 python3 "$REPO/tests/ha/test_sentinel.py" |
		sed 's/^\(not \)\?ok [0-9]* - /&TLS failover: /' || {
		rc=1
		ha_suite_logs "$dir"
	}
	[ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
fi
exit $rc
