#!/usr/bin/env bash
# tests/partitions/run.sh - network partitions in Jepsen's manner. Three
# Redis nodes (redis-server + redis-sentinel each), each in its own network
# namespace made here, joined by veth pairs to a bridge in the root
# namespace; addresses from 198.18.0.0/15 only (198.18.S.1-3 the nodes,
# 198.18.S.254 the bridge, S picked per run), no default route anywhere.
# Three lighttpd stacks in the root namespace (redis_min_replicas 2, 1, 0)
# reach the nodes through the bridge with a redis-sentinel:// URL listing
# the three sentinels. tests/partitions/test_partitions.py then runs the
# nemeses (nftables DROP rules inside the namespaces; tc for the slow link)
# under concurrent fresh charges and checks every history. Prints TAP.
#
#   CHARGE_BIN=build-asan/charge tests/partitions/run.sh
#   PARTITIONS_ONLY='split' tests/partitions/run.sh   some nemeses (regex)
#   PARTITIONS_GATE_AVAILABILITY=0|all   the 2 s gate from failover to the
#                                        first charge on the new primary: by
#                                        default for redis_min_replicas 1
#                                        after split brain and isolation;
#                                        0 none; all everywhere
#   PARTITIONS_GATE_MIN_REPLICAS=N       no acknowledged outcome lost from
#                                        redis_min_replicas N on (default 2:
#                                        every replica)
#   PARTITIONS_REDIS_MIN_REPLICAS_TO_WRITE=0 ...   the nodes without
#                                        min-replicas-to-write; by default
#                                        1, with min-replicas-max-lag 2, as
#                                        tools/ha.sh sets them
#   PARTITIONS_MIN_REPLICAS_RUNS="1 0"   the stacks' redis_min_replicas
#                                        (default "2 1 0")
#   PARTITIONS_PROVIDER=sim|inproc       sim (the default when the binary
#                                        charge-provider-sim is built next
#                                        to CHARGE_BIN): every stack calls
#                                        one simulator in the root namespace
#                                        over HTTP, and no acknowledged
#                                        outcome may be lost at any
#                                        redis_min_replicas (a record Redis
#                                        lost is asked again with the same
#                                        downstream key: the same bytes);
#                                        inproc: the in-process provider, the
#                                        loss below PARTITIONS_GATE_MIN_REPLICAS
#                                        reported only
#
# Without root or CAP_NET_ADMIN it prints "# skipped: ..." and no TAP line.
# Everything made here (namespaces, veths, bridge, processes by PID) is
# removed at the end, on failure too.
set -uo pipefail
REPO=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../.." && pwd)

skip() {
	echo "# skipped: partitions: $*"
	exit 0
}

[ "$(id -u)" -eq 0 ] || skip "needs root for network namespaces"
for p in ip nft tc redis-server redis-sentinel redis-cli lighttpd; do
	command -v "$p" >/dev/null 2>&1 || skip "$p is not installed"
done
PROBE="chgprobe$$"
ip netns add "$PROBE" 2>/dev/null || skip "cannot create a network namespace (no CAP_NET_ADMIN?)"
ip netns del "$PROBE"

# shellcheck source=tests/ha/common.sh
. "$REPO/tests/ha/common.sh"

PROCS=${PARTITIONS_PROCS:-4}
MRTW=${PARTITIONS_REDIS_MIN_REPLICAS_TO_WRITE:-1}
MRML=2 # seconds: min-replicas-max-lag with the recipe
PART_NS=()
PART_PIDS=() # "pid comm"
PART_BR=
PART_VETHS=()
PART_PY= # the test's PID while it runs

# part_net_down: processes by PID (the simulator too), namespaces, veths,
# the bridge.
part_net_down() {
	local e ns
	for e in "${PART_PIDS[@]}"; do
		# shellcheck disable=SC2086
		stack_stop_pid $e 5
	done
	stack_sim_stop
	for ns in "${PART_NS[@]}"; do
		ip netns del "$ns" 2>/dev/null
	done
	for e in "${PART_VETHS[@]}"; do
		ip link del "$e" 2>/dev/null
	done
	[ -n "$PART_BR" ] && ip link del "$PART_BR" 2>/dev/null
	PART_PIDS=() PART_NS=() PART_VETHS=() PART_BR=
	return 0
}

part_cleanup() {
	# a signal to this script: the test first (timeout passes it on)
	[ -n "$PART_PY" ] && kill -TERM "$PART_PY" 2>/dev/null && wait "$PART_PY" 2>/dev/null
	PART_PY=
	part_net_down
	ha_suite_cleanup # stops the stacks, removes the run directory
}

ha_suite_init partitions
trap part_cleanup EXIT

# A /24 of 198.18.0.0/15 nobody on this machine uses.
S=
for _ in $(seq 1 50); do
	c=$((1 + RANDOM % 250))
	ip -4 addr show | grep -q "inet 198\.18\.$c\." && continue
	ip -4 route show | grep -q "^198\.18\.$c\." && continue
	S=$c
	break
done
[ -n "$S" ] || ha_suite_bail "no free /24 in 198.18.0.0/15"
NET="198.18.$S"
CLIENT_IP="$NET.254"
PART_BR="chgp${S}br"
ip link add "$PART_BR" type bridge || ha_suite_bail "cannot make bridge $PART_BR"
ip addr add "$CLIENT_IP/24" dev "$PART_BR" && ip link set "$PART_BR" up ||
	ha_suite_bail "cannot set up bridge $PART_BR"

IPS=()
for i in 1 2 3; do
	ns="chgp${S}n$i" vh="chgp${S}v$i" vp="chgp${S}e$i"
	PART_NS+=("$ns")
	PART_VETHS+=("$vh")
	{
		ip netns add "$ns" &&
			ip -n "$ns" link set lo up &&
			ip link add "$vh" type veth peer name "$vp" &&
			ip link set "$vp" netns "$ns" &&
			ip -n "$ns" link set "$vp" name eth0 &&
			ip -n "$ns" addr add "$NET.$i/24" dev eth0 &&
			ip -n "$ns" link set eth0 up &&
			ip link set "$vh" master "$PART_BR" &&
			ip link set "$vh" up
	} || ha_suite_bail "cannot make namespace $ns"
	[ -z "$(ip -n "$ns" route show default)" ] || ha_suite_bail "$ns has a default route"
	IPS+=("$NET.$i")
done

# part_start NS COMM DIR ARGS...: PROGRAM in namespace NS, in its own
# session, from DIR; its PID (ip netns exec execs it) is remembered.
part_start() {
	local ns=$1 comm=$2 dir=$3 pid
	shift 3
	(cd "$dir" && exec setsid ip netns exec "$ns" "$@" </dev/null >>"$dir/$comm.stdout" 2>&1) &
	pid=$!
	disown "$pid"
	PART_PIDS+=("$pid $comm")
}

# part_cli NS PORT ARGS...: redis-cli inside NS on its loopback.
part_cli() {
	local ns=$1 port=$2
	shift 2
	timeout 5 ip netns exec "$ns" redis-cli --raw -h 127.0.0.1 -p "$port" "$@" 2>/dev/null
}

for i in 1 2 3; do
	ns=${PART_NS[$((i - 1))]} ip=${IPS[$((i - 1))]} nd="$HA_SUITE_RUN/node$i"
	mkdir -p "$nd" && chmod 700 "$nd" && cp "$REPO/conf/redis.conf" "$nd/redis.conf" ||
		ha_suite_bail "no node directory"
	args=(redis-server "$nd/redis.conf" --port 6379 --bind "$ip 127.0.0.1"
		--protected-mode no --dir "$nd" --logfile "$nd/redis.log"
		--appendfsync everysec)
	[ "$MRTW" -gt 0 ] && args+=(--min-replicas-to-write "$MRTW" --min-replicas-max-lag "$MRML")
	[ "$i" -gt 1 ] && args+=(--replicaof "${IPS[0]}" 6379)
	part_start "$ns" redis-server "$nd" "${args[@]}"
	cat >"$nd/sentinel.conf" <<EOF
port 26379
bind $ip 127.0.0.1
protected-mode no
daemonize no
dir $nd
logfile $nd/sentinel.log
sentinel monitor $HA_MASTER ${IPS[0]} 6379 2
sentinel down-after-milliseconds $HA_MASTER 1000
sentinel failover-timeout $HA_MASTER 3000
sentinel parallel-syncs $HA_MASTER 2
EOF
done
for i in 1 2 3; do
	for _ in $(seq 1 100); do
		[ "$(part_cli "${PART_NS[$((i - 1))]}" 6379 PING)" = PONG ] && break
		sleep 0.1
	done
done
for i in 1 2 3; do
	nd="$HA_SUITE_RUN/node$i"
	part_start "${PART_NS[$((i - 1))]}" redis-sentinel "$nd" redis-sentinel "$nd/sentinel.conf"
done

# Ready: both replicas linked, every sentinel knows the replicas and the
# other two sentinels.
ready=0
for _ in $(seq 1 200); do
	ok=1
	for i in 2 3; do
		part_cli "${PART_NS[$((i - 1))]}" 6379 INFO replication | grep -q '^master_link_status:up' || ok=0
	done
	for ns in "${PART_NS[@]}"; do
		[ "$(part_cli "$ns" 26379 SENTINEL replicas "$HA_MASTER" | grep -c '^name$')" -eq 2 ] || ok=0
		[ "$(part_cli "$ns" 26379 SENTINEL sentinels "$HA_MASTER" | grep -c '^name$')" -eq 2 ] || ok=0
	done
	[ "$ok" = 1 ] && { ready=1; break; }
	sleep 0.1
done
if [ "$ready" != 1 ]; then
	for i in 1 2 3; do
		tail -n 5 "$HA_SUITE_RUN/node$i/redis.log" "$HA_SUITE_RUN/node$i/sentinel.log" 2>/dev/null | sed 's/^/# /'
	done
	ha_suite_bail "the three nodes and sentinels did not come up within 20 s"
fi

# The provider: one simulator in the root namespace, where the responders are.
PROVIDER=${PARTITIONS_PROVIDER:-}
SIM_BIN=${PROV_SIM_BIN:-$(dirname "$BIN")/charge-provider-sim}
if [ -z "$PROVIDER" ]; then
	PROVIDER=inproc
	[ -x "$SIM_BIN" ] && PROVIDER=sim
fi
SIM_URL=
if [ "$PROVIDER" = sim ]; then
	[ -x "$SIM_BIN" ] || ha_suite_bail "simulator $SIM_BIN not found"
	# tools/stack.sh: store, PID file and log in HA_SUITE_RUN/sim
	# (provider-sim.*); part_net_down stops it by PID
	sd="$HA_SUITE_RUN/sim"
	mkdir -p "$sd" || ha_suite_bail "cannot make $sd"
	stack_sim_start "$sd" "$sd" "$SIM_BIN" --secret-key sk_test_partitions 2>"$sd/stack.err" || {
		sed 's/^/# /' "$sd/stack.err"
		ha_suite_bail "the simulator did not start"
	}
	SIM_URL=$STACK_PROVIDER_URL
fi

URL="redis-sentinel://${IPS[0]}:26379,${IPS[1]}:26379,${IPS[2]}:26379/$HA_MASTER"
echo "# provider: $PROVIDER${SIM_URL:+ ($SIM_URL)}"
echo "# nodes ${IPS[*]} in ${PART_NS[*]}, bridge $PART_BR ($CLIENT_IP); $URL; min-replicas-to-write $MRTW on the nodes"
STACKS=()
for mr in ${PARTITIONS_MIN_REPLICAS_RUNS:-2 1 0}; do
	dir="$HA_SUITE_RUN/stack-$mr"
	ha_suite_env "$dir"
	export CHARGE_REDIS_URL=$URL CHARGE_REDIS_MIN_REPLICAS=$mr
	export CHARGE_REDIS_REPLICA_TIMEOUT_MS=100
	if [ "$PROVIDER" = sim ]; then
		# lighttpd passes CHARGE_CONF; the CHARGE_* variables above still
		# override the file. provider_deadline_ms + redis_timeout_ms must
		# stay below lock_ttl_s: 1.5 s + 1 s < 4 s.
		export CHARGE_LOCK_TTL_S=4
		cat >"$dir/charge.conf" <<EOF
# written by tests/partitions/run.sh: the provider is the simulator
provider_url = $SIM_URL
provider_api_key = sk_test_partitions
provider_connect_timeout_ms = 300
provider_deadline_ms = 1500
completer_schedule_s = 1,2,3
provider_execute_window_s = 4
# the simulator executes within one attempt and sends no Date header
provider_execute_max_ms = 1000
provider_clock_skew_max_s = 0
EOF
		export CHARGE_CONF="$dir/charge.conf"
	fi
	ha_suite_stack "partitions-$mr" "$dir" "$PROCS"
	STACKS+=("$mr=$HA_STACK_URL=$dir/ledger.log=$dir/lighttpd.stderr.log")
done

PART_STACKS="${STACKS[*]}" PART_NS="${PART_NS[*]}" PART_IPS="${IPS[*]}" \
	PART_VETHS="${PART_VETHS[*]}" PART_CLIENT_IP=$CLIENT_IP PART_MASTER=$HA_MASTER \
	PART_MRTW=$MRTW PART_RUN=$HA_SUITE_RUN PART_PROVIDER=$PROVIDER PART_SIM_URL=$SIM_URL \
	timeout --foreground -k 10 420 python3 "$REPO/tests/partitions/test_partitions.py" &
PART_PY=$!
# in the background, so that a signal to this script runs the trap now, not
# when the test ends
wait "$PART_PY"
rc=$?
PART_PY=
[ $rc -eq 0 ] || echo "# logs: $HA_SUITE_RUN/stack-*/lighttpd.stderr.log (HA_KEEP=1 keeps them)"
exit $rc
