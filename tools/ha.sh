#!/usr/bin/env bash
# shellcheck disable=SC2034  # HA_* globals are read by the callers
# tools/ha.sh - a local Redis topology for charge's scale-out modes, on
# loopback, from Debian's redis-server and redis-sentinel.
#
#   tools/ha.sh              1 primary, 2 replicas, 3 sentinels (master name
#                            "charge"); prints the CHARGE_REDIS_URL to use
#   tools/ha.sh --cluster    a Redis Cluster of 3 primaries
#   tools/ha.sh --dir DIR    keep the state under DIR (default: a new
#                            temporary directory, removed at the end)
#   tools/ha.sh --min-replicas-to-write N   every Redis node of the sentinel
#                            topology gets min-replicas-to-write N and
#                            min-replicas-max-lag 2 (default here: 1; 0 turns
#                            it off). A primary cut off from its replicas
#                            then refuses writes after 2 s instead of taking
#                            them for as long as the partition lasts, only
#                            to lose them when it rejoins (docs/partitions.md)
#
# It runs in the foreground until Ctrl-C or SIGTERM, then stops what it
# started, by PID. In another terminal:
#
#   CHARGE_REDIS_URL=redis-sentinel://127.0.0.1:P1,127.0.0.1:P2,127.0.0.1:P3/charge ./run.sh
#
# Sourced (not executed) by the tests, it only defines functions:
#
#   . tools/ha.sh
#   ha_sentinel_start DIR      # sets HA_PRIMARY_PORT, HA_REPLICA_PORTS,
#                              # HA_SENTINEL_PORTS, HA_URL
#   ha_cluster_start DIR [N]   # sets HA_NODE_PORTS, HA_URL
#   ha_node_kill DIR PORT [SIGNAL]   ha_node_start DIR PORT
#   ha_primary_port            # the primary the sentinels name now
#   ha_stop_all DIR
#
# HA_TLS_DIR=DIR (certificates of stack_tls_certs DIR): every node, sentinel
# and cluster bus speaks TLS only (port 0, tls-port PORT), the URLs are
# rediss-sentinel:// and rediss-cluster://, and ha_cli talks TLS.
#
# Every node keeps its state in DIR/node-PORT/: its start arguments
# (start.args, one a line), PID file, log, AOF or cluster configuration,
# so another shell can kill and restart a node with these functions. Ports
# come from outside the kernel's ephemeral range; a cluster node's bus port
# (PORT + 10000) too.

HA_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
declare -F stack_pid_alive >/dev/null || . "$HA_ROOT/tools/stack.sh"

HA_MASTER=charge
HA_DOWN_AFTER_MS=${HA_DOWN_AFTER_MS:-1000}
HA_FAILOVER_TIMEOUT_MS=${HA_FAILOVER_TIMEOUT_MS:-3000}
# min-replicas-to-write of every node of ha_sentinel_start (0: not set; the
# program's default is 1, see ha_main) and its min-replicas-max-lag, seconds
HA_MIN_REPLICAS_TO_WRITE=${HA_MIN_REPLICAS_TO_WRITE:-0}
HA_MIN_REPLICAS_MAX_LAG=${HA_MIN_REPLICAS_MAX_LAG:-2}
HA_CLUSTER_BUS_OFFSET=10000       # Redis: the cluster bus is port + 10000
HA_PRIMARY_PORT=
HA_REPLICA_PORTS=()
HA_SENTINEL_PORTS=()
HA_NODE_PORTS=()
HA_URL=

ha_log() {
	printf '%s\n' "ha: $*" >&2
}

# ha_port_pick [BUS]: sets HA_PORT to a free loopback port below the
# ephemeral range, not picked before for this topology; with BUS, PORT +
# 10000 must be free and below that range as well. (A global, not printed:
# the ports picked so far must outlive a subshell.)
ha_port_pick() {
	local bus=${1:-} low=32768 high=60999 port top
	read -r low high </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null
	top=$low
	[ -n "$bus" ] && top=$((low - HA_CLUSTER_BUS_OFFSET))
	for _ in $(seq 1 100); do
		port=$(stack_port_pick) || return 1
		[ "$port" -lt "$top" ] || continue
		if [ -n "$bus" ] && stack_port_in_use $((port + HA_CLUSTER_BUS_OFFSET)); then
			continue
		fi
		# not picked already in this topology
		case " ${HA_PICKED:-} " in *" $port "*) continue ;; esac
		HA_PICKED="${HA_PICKED:-} $port"
		HA_PORT=$port
		return 0
	done
	ha_log "no free port found"
	return 1
}

ha_cli() {
	local port=$1
	shift
	# shellcheck disable=SC2046  # ha_cli_tls: words
	timeout 5 redis-cli $(ha_cli_tls) -h 127.0.0.1 -p "$port" "$@" 2>/dev/null
}

# ha_cli_tls: redis-cli's TLS arguments under HA_TLS_DIR (none without).
ha_cli_tls() {
	[ -n "${HA_TLS_DIR:-}" ] || return 0
	echo --tls --cacert "$HA_TLS_DIR/ca.crt" --cert "$HA_TLS_DIR/client.crt" \
		--key "$HA_TLS_DIR/client.key"
}

# ha_port_args PORT: redis-server's listening arguments (TLS only under
# HA_TLS_DIR), one a line.
ha_port_args() {
	if [ -n "${HA_TLS_DIR:-}" ]; then
		printf '%s\n' --port 0 --tls-port "$1"
		stack_redis_tls_args "$HA_TLS_DIR"
	else
		printf '%s\n' --port "$1"
	fi
}

# ha_node_start DIR PORT: (re)starts the node whose arguments are in
# DIR/node-PORT/start.args; waits (10 s) until it answers PING (a cluster
# node or a loading one may answer -LOADING first: any answer counts).
ha_node_start() {
	local dir=$1 port=$2 nd prog pid args=()
	nd="$dir/node-$port"
	mapfile -t args <"$nd/start.args" || return 1
	prog=${args[0]}
	if [ -f "$nd/pid" ] && stack_pid_alive "$(cat "$nd/pid")" "$prog"; then
		ha_log "$prog on port $port already runs (pid $(cat "$nd/pid"))"
		return 1
	fi
	(cd "$nd" && exec setsid "${args[@]}" </dev/null >>"$nd/stdout.log" 2>&1) &
	pid=$!
	disown "$pid"
	echo "$pid" >"$nd/pid"
	for _ in $(seq 1 100); do
		if [ -n "$(ha_cli "$port" PING)" ]; then
			return 0
		fi
		stack_pid_alive "$pid" || break
		sleep 0.1
	done
	ha_log "$prog on port $port did not start"
	stack_tail "$nd/node.log"
	stack_tail "$nd/stdout.log"
	return 1
}

# ha_node_kill DIR PORT [SIGNAL]: stops the node by its PID (KILL: a crash,
# no shutdown). Waits until it is gone.
ha_node_kill() {
	local dir=$1 port=$2 sig=${3:-TERM} nd pid prog
	nd="$dir/node-$port"
	[ -f "$nd/pid" ] || return 0
	pid=$(cat "$nd/pid")
	prog=$(head -n 1 "$nd/start.args")
	if [ "$sig" = KILL ]; then
		stack_pid_alive "$pid" "$prog" && kill -KILL "$pid" 2>/dev/null
		for _ in $(seq 1 50); do
			stack_pid_alive "$pid" || break
			sleep 0.1
		done
	else
		stack_stop_pid "$pid" "$prog" 10
	fi
	stack_pid_alive "$pid" && return 1
	return 0
}

# ha_node_create DIR PORT PROGRAM ARGS...: records the start arguments of a
# new node in DIR/node-PORT/ and starts it.
ha_node_create() {
	local dir=$1 port=$2 nd
	shift 2
	nd="$dir/node-$port"
	mkdir -p "$nd" && chmod 700 "$nd" || return 1
	printf '%s\n' "$@" >"$nd/start.args"
	ha_node_start "$dir" "$port"
}

# ha_redis_create DIR PORT [redis-server options]: a node from
# conf/redis.conf (AOF, noeviction) on 127.0.0.1:PORT. Each node starts
# from its own copy: sentinels make their nodes rewrite it (CONFIG REWRITE).
ha_redis_create() {
	local dir=$1 port=$2 nd pa=()
	shift 2
	nd="$dir/node-$port"
	mkdir -p "$nd" && chmod 700 "$nd" || return 1
	cp "$HA_ROOT/conf/redis.conf" "$nd/redis.conf" || return 1
	mapfile -t pa < <(ha_port_args "$port")
	ha_node_create "$dir" "$port" redis-server "$nd/redis.conf" \
		"${pa[@]}" --bind 127.0.0.1 --dir "$nd" \
		--pidfile "$nd/redis.pid" --logfile "$nd/node.log" \
		--appendfsync everysec "$@"
}

# ha_sentinel_start DIR: primary, two replicas and three sentinels
# (quorum 2); returns once every sentinel knows both replicas and the other
# sentinels, so a failover can start at once.
ha_sentinel_start() {
	local dir=$1 p s nd i ok mrw=()
	mkdir -p "$dir" || return 1
	# on every node: any of them may be promoted
	[ "$HA_MIN_REPLICAS_TO_WRITE" -gt 0 ] &&
		mrw=(--min-replicas-to-write "$HA_MIN_REPLICAS_TO_WRITE"
			--min-replicas-max-lag "$HA_MIN_REPLICAS_MAX_LAG")
	HA_PICKED=
	ha_port_pick || return 1
	HA_PRIMARY_PORT=$HA_PORT
	ha_redis_create "$dir" "$HA_PRIMARY_PORT" "${mrw[@]}" || return 1
	HA_REPLICA_PORTS=()
	for i in 1 2; do
		ha_port_pick || return 1
		p=$HA_PORT
		ha_redis_create "$dir" "$p" --replicaof 127.0.0.1 "$HA_PRIMARY_PORT" "${mrw[@]}" || return 1
		HA_REPLICA_PORTS+=("$p")
	done
	HA_SENTINEL_PORTS=()
	for i in 1 2 3; do
		ha_port_pick || return 1
		s=$HA_PORT
		nd="$dir/node-$s"
		mkdir -p "$nd" && chmod 700 "$nd" || return 1
		# a sentinel rewrites its file: each has its own copy
		cat >"$nd/sentinel.conf" <<EOF
port $s
bind 127.0.0.1
daemonize no
dir $nd
logfile $nd/node.log
pidfile $nd/sentinel.pid
sentinel monitor $HA_MASTER 127.0.0.1 $HA_PRIMARY_PORT 2
sentinel down-after-milliseconds $HA_MASTER $HA_DOWN_AFTER_MS
sentinel failover-timeout $HA_MASTER $HA_FAILOVER_TIMEOUT_MS
sentinel parallel-syncs $HA_MASTER 2
EOF
		[ -n "${HA_TLS_DIR:-}" ] && cat >>"$nd/sentinel.conf" <<EOF
port 0
tls-port $s
tls-cert-file $HA_TLS_DIR/server.crt
tls-key-file $HA_TLS_DIR/server.key
tls-ca-cert-file $HA_TLS_DIR/ca.crt
tls-auth-clients optional
tls-replication yes
EOF
		ha_node_create "$dir" "$s" redis-sentinel "$nd/sentinel.conf" || return 1
		HA_SENTINEL_PORTS+=("$s")
	done
	HA_URL="redis${HA_TLS_DIR:+s}-sentinel://"
	for s in "${HA_SENTINEL_PORTS[@]}"; do
		HA_URL="${HA_URL}127.0.0.1:$s,"
	done
	HA_URL="${HA_URL%,}/$HA_MASTER"
	printf '%s\n' "$HA_URL" >"$dir/url"
	for _ in $(seq 1 150); do
		ok=1
		for s in "${HA_SENTINEL_PORTS[@]}"; do
			[ "$(ha_cli "$s" SENTINEL replicas "$HA_MASTER" | grep -c '^name$')" -eq 2 ] || ok=0
			[ "$(ha_cli "$s" SENTINEL sentinels "$HA_MASTER" | grep -c '^name$')" -eq 2 ] || ok=0
		done
		for p in "${HA_REPLICA_PORTS[@]}"; do
			ha_cli "$p" INFO replication | grep -q '^master_link_status:up' || ok=0
		done
		[ "$ok" = 1 ] && return 0
		sleep 0.1
	done
	ha_log "the sentinels did not discover the replicas and each other in 15 s"
	return 1
}

# ha_primary_port: the port of the primary the first answering sentinel
# names (empty when none answers).
ha_primary_port() {
	local s out
	for s in "${HA_SENTINEL_PORTS[@]}"; do
		out=$(ha_cli "$s" SENTINEL get-master-addr-by-name "$HA_MASTER" | sed -n 2p)
		if [ -n "$out" ]; then
			echo "$out"
			return 0
		fi
	done
	return 1
}

# ha_cluster_start DIR [N]: N (default 3) primaries without replicas, all
# 16384 slots assigned; returns once every node reports cluster_state:ok.
ha_cluster_start() {
	local dir=$1 n=${2:-3} p i addrs=() ok
	mkdir -p "$dir" || return 1
	HA_PICKED=
	HA_NODE_PORTS=()
	for i in $(seq 1 "$n"); do
		ha_port_pick bus || return 1
		p=$HA_PORT
		ha_redis_create "$dir" "$p" --cluster-enabled yes \
			--cluster-config-file "$dir/node-$p/nodes.conf" \
			--cluster-node-timeout 2000 || return 1
		HA_NODE_PORTS+=("$p")
		addrs+=("127.0.0.1:$p")
	done
	# shellcheck disable=SC2046  # ha_cli_tls: words
	if ! echo yes | timeout 60 redis-cli $(ha_cli_tls) --cluster create "${addrs[@]}" \
		--cluster-replicas 0 >"$dir/cluster-create.log" 2>&1; then
		ha_log "redis-cli --cluster create failed"
		stack_tail "$dir/cluster-create.log"
		return 1
	fi
	HA_URL="redis${HA_TLS_DIR:+s}-cluster://$(IFS=,; echo "${addrs[*]}")"
	printf '%s\n' "$HA_URL" >"$dir/url"
	ha_cluster_wait_ok "$dir" 30
}

# ha_cluster_wait_ok DIR SECONDS: until every node of DIR says
# cluster_state:ok.
ha_cluster_wait_ok() {
	local dir=$1 secs=$2 nd p ok
	for _ in $(seq 1 $((secs * 10))); do
		ok=1
		for nd in "$dir"/node-*; do
			p=${nd##*-}
			ha_cli "$p" CLUSTER INFO | grep -q '^cluster_state:ok' || ok=0
		done
		[ "$ok" = 1 ] && return 0
		sleep 0.1
	done
	ha_log "the cluster is not ok after ${secs}s"
	return 1
}

# ha_stop_all DIR: every node of DIR, sentinels first (no failover while
# the servers stop).
ha_stop_all() {
	local dir=$1 nd
	[ -d "$dir" ] || return 0
	for nd in "$dir"/node-*; do
		[ -f "$nd/start.args" ] || continue
		[ "$(head -n 1 "$nd/start.args")" = redis-sentinel ] &&
			ha_node_kill "$dir" "${nd##*-}" TERM
	done
	for nd in "$dir"/node-*; do
		[ -f "$nd/start.args" ] || continue
		ha_node_kill "$dir" "${nd##*-}" TERM
	done
	return 0
}

# --- tools/ha.sh run as a program ----------------------------------------

ha_main() {
	local mode=sentinel dir= own=0 nd alive
	HA_MIN_REPLICAS_TO_WRITE=1
	while [ $# -gt 0 ]; do
		case $1 in
		--min-replicas-to-write)
			HA_MIN_REPLICAS_TO_WRITE=${2:?--min-replicas-to-write needs a number}
			case $HA_MIN_REPLICAS_TO_WRITE in *[!0-9]*)
				ha_log "--min-replicas-to-write: not a number"; return 2 ;;
			esac
			shift ;;
		--cluster) mode=cluster ;;
		--sentinel) mode=sentinel ;;
		--dir) dir=${2:?--dir needs a directory}; shift ;;
		-h|--help)
			sed -n '3,/^[^#]/{/^#/s/^# \{0,1\}//p}' "${BASH_SOURCE[0]}"
			return 0 ;;
		*) ha_log "unknown argument $1 (try --help)"; return 2 ;;
		esac
		shift
	done
	for p in redis-server redis-sentinel redis-cli; do
		command -v "$p" >/dev/null 2>&1 ||
			{ ha_log "$p is missing: apt-get install redis-server redis-sentinel redis-tools"; return 1; }
	done
	if [ -z "$dir" ]; then
		dir=$(mktemp -d "${TMPDIR:-/tmp}/charge-ha.XXXXXX") || return 1
		own=1
	fi
	mkdir -p "$dir" && dir=$(cd "$dir" && pwd) || return 1
	if compgen -G "$dir/node-*/pid" >/dev/null; then
		for nd in "$dir"/node-*; do
			if stack_pid_alive "$(cat "$nd/pid" 2>/dev/null)"; then
				ha_log "$dir is in use by a running topology"
				return 1
			fi
		done
		ha_log "$dir holds an old topology: use a new --dir"
		return 1
	fi
	HA_DIR=$dir
	HA_OWN=$own
	trap 'ha_main_stop; exit 0' INT TERM HUP
	trap ha_main_stop EXIT
	if [ "$mode" = cluster ]; then
		ha_cluster_start "$dir" 3 || return 1
	else
		ha_sentinel_start "$dir" || return 1
	fi
	if [ "$mode" = cluster ]; then
		cat <<EOF

  Redis Cluster: 3 primaries on 127.0.0.1:${HA_NODE_PORTS[*]}
  State in $dir

    CHARGE_REDIS_URL=$HA_URL ./run.sh

  Watch it:   redis-cli -c -p ${HA_NODE_PORTS[0]} CLUSTER SLOTS
  Move slots: redis-cli --cluster reshard 127.0.0.1:${HA_NODE_PORTS[0]}

  Press Ctrl-C to stop.

EOF
	else
		cat <<EOF

  Sentinel: primary 127.0.0.1:$HA_PRIMARY_PORT (pid $(cat "$dir/node-$HA_PRIMARY_PORT/pid")), replicas ${HA_REPLICA_PORTS[*]}, sentinels ${HA_SENTINEL_PORTS[*]}
  State in $dir

    CHARGE_REDIS_URL=$HA_URL ./run.sh
    CHARGE_REDIS_URL=$HA_URL CHARGE_REDIS_MIN_REPLICAS=1 ./run.sh   # records acknowledged by a replica

  Nodes: min-replicas-to-write $HA_MIN_REPLICAS_TO_WRITE, min-replicas-max-lag $HA_MIN_REPLICAS_MAX_LAG (--min-replicas-to-write 0: off)
  Fail over: kill -9 $(cat "$dir/node-$HA_PRIMARY_PORT/pid")    (or: redis-cli -p ${HA_SENTINEL_PORTS[0]} SENTINEL failover $HA_MASTER)
  Primary:   redis-cli -p ${HA_SENTINEL_PORTS[0]} SENTINEL get-master-addr-by-name $HA_MASTER

  Press Ctrl-C to stop.

EOF
	fi
	# Stays until a signal; tells when a node dies (a failover is expected).
	while :; do
		alive=0
		for nd in "$dir"/node-*; do
			stack_pid_alive "$(cat "$nd/pid" 2>/dev/null)" && alive=$((alive + 1))
		done
		[ "$alive" -gt 0 ] || { ha_log "every node has exited"; return 1; }
		sleep 1 &
		wait $! || true
	done
}

ha_main_stop() {
	trap - INT TERM HUP EXIT
	[ -n "${HA_DIR:-}" ] || return 0
	ha_log "stopping"
	ha_stop_all "$HA_DIR"
	[ "${HA_OWN:-0}" = 1 ] && rm -rf "$HA_DIR"
	HA_DIR=
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
	set -uo pipefail
	ha_main "$@"
fi
