# shellcheck shell=bash
# shellcheck disable=SC2034  # STACK_* globals are read by the callers
# tools/stack.sh - start and stop the pieces of a local charge stack.
#
# Sourced (not executed) by ./run.sh, tests/e2e/run.sh and other scripts:
#
#   . "$REPO/tools/stack.sh"
#   run=$(stack_rundir_create)                    # or a fixed directory
#   stack_redis_start "$run" "$run/redis" "$run"  # socket $run/redis.sock
#   stack_lighttpd_start "$run" "$run" 18080 "$REPO/build/charge" 2
#   ...
#   stack_stop_all
#
# Every process is started by this shell (as a child, in its own session so
# that Ctrl-C reaches only the script, which then stops things in order),
# and stopped by its PID: TERM, wait up to a few seconds, then KILL. A PID
# file is only trusted when /proc says the process is still the program we
# started. Nothing is ever killed by name. Children are disowned (bash still
# reaps them, but prints no "Killed" job notices); a caller that wants to
# block until one of them ends polls stack_pid_alive.
#
# Globals set here: STACK_ROOT, STACK_REDIS_PID, STACK_REDIS_SOCKET,
# STACK_LIGHTTPD_PID, STACK_HTTP_PORT, STACK_SIM_PID, STACK_SIM_COMM,
# STACK_PROVIDER_PORT, STACK_PROVIDER_URL. Functions return non-zero on
# failure after printing a message (and the tail of the relevant log) to
# stderr.

STACK_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STACK_REDIS_PID=
STACK_REDIS_SOCKET=
STACK_LIGHTTPD_PID=
STACK_HTTP_PORT=
STACK_SIM_PID=
STACK_SIM_COMM=charge-provider

stack_log() {
	printf '%s\n' "stack: $*" >&2
}

# stack_tap_number: a filter that numbers the "ok - ..." and "not ok - ..."
# lines of a suite's parts as it prints them, and closes with "1..N".
stack_tap_number() {
	awk '/^(not )?ok - / { n++; sub(/^ok - /, "ok " n " - "); sub(/^not ok - /, "not ok " n " - ") }
		{ print; fflush() }
		END { print "1.." n }'
}

# stack_rundir_create [dir]: creates dir (or a fresh mktemp -d directory),
# mode 0700, and prints its absolute path.
stack_rundir_create() {
	local dir=${1:-}
	if [ -z "$dir" ]; then
		dir=$(mktemp -d "${TMPDIR:-/tmp}/charge-stack.XXXXXX") || return 1
	else
		mkdir -p "$dir" || return 1
	fi
	chmod 700 "$dir" || return 1
	(cd "$dir" && pwd)
}

# stack_port_in_use PORT: true when something accepts on 127.0.0.1:PORT.
stack_port_in_use() {
	(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# stack_port_pick: prints a loopback port that nothing listens on, outside
# the kernel's ephemeral range (a port there may be the local end of some
# client connection at any moment, and then bind() fails).
stack_port_pick() {
	local port low=32768 high=60999 base span
	read -r low high </proc/sys/net/ipv4/ip_local_port_range 2>/dev/null
	if [ "$low" -gt 21024 ]; then
		base=20000 span=$((low - 20000))
	elif [ "$high" -lt 64000 ]; then
		base=$((high + 1)) span=$((65535 - high))
	else
		base=20000 span=40000
	fi
	for _ in $(seq 1 50); do
		port=$((base + RANDOM % span))
		if ! stack_port_in_use "$port"; then
			echo "$port"
			return 0
		fi
	done
	stack_log "no free port found"
	return 1
}

# stack_pid_alive PID [COMM]: true when PID runs (not a zombie) and, if COMM
# is given, its /proc/PID/comm is COMM.
stack_pid_alive() {
	local pid=$1 comm=${2:-} state rest
	[ -n "$pid" ] && [ -r "/proc/$pid/stat" ] || return 1
	# field 3 of /proc/PID/stat is the state; comm (field 2) may hold spaces
	rest=$(cat "/proc/$pid/stat" 2>/dev/null) || return 1
	rest=${rest##*) }
	state=${rest%% *}
	case $state in Z|X) return 1 ;; esac
	if [ -n "$comm" ]; then
		[ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$comm" ] || return 1
	fi
	return 0
}

# stack_stop_pid PID NAME [SECONDS] [SIGNAL]: SIGNAL (default TERM), wait up
# to SECONDS (default 5), then KILL; reaps it when it was our child. NAME is
# the expected /proc comm; a PID that runs something else is left alone.
stack_stop_pid() {
	local pid=$1 comm=$2 secs=${3:-5} sig=${4:-TERM}
	[ -n "$pid" ] || return 0
	if stack_pid_alive "$pid" "$comm"; then
		kill -"$sig" "$pid" 2>/dev/null
		for _ in $(seq 1 $((secs * 10))); do
			stack_pid_alive "$pid" || break
			sleep 0.1
		done
		if stack_pid_alive "$pid" "$comm"; then
			stack_log "$comm (pid $pid) did not stop after ${secs}s, sending KILL"
			kill -KILL "$pid" 2>/dev/null
			for _ in $(seq 1 20); do
				stack_pid_alive "$pid" || break
				sleep 0.1
			done
		fi
	fi
	stack_pid_alive "$pid" || wait "$pid" 2>/dev/null
	return 0
}

# stack_tail FILE: the last lines of a log, indented, to stderr.
stack_tail() {
	[ -s "$1" ] || return 0
	printf '%s\n' "---- last lines of $1" >&2
	tail -n 15 "$1" | sed 's/^/    /' >&2
}

# stack_redis_start RUN_DIR DATA_DIR LOG_DIR: starts redis-server with
# conf/redis.conf, socket RUN_DIR/redis.sock, PID file RUN_DIR/redis.pid,
# AOF in DATA_DIR, log LOG_DIR/redis.log; waits (10 s) until it answers PING.
# Sets STACK_REDIS_PID and STACK_REDIS_SOCKET. With STACK_REDIS_TLS_DIR
# (certificates of stack_tls_certs) it listens TLS only instead, on
# 127.0.0.1:STACK_REDIS_TLS_PORT (a free port set here, unless one is set:
# a restart keeps it), and with no unix socket unless
# STACK_REDIS_TLS_SOCKET=1 (a test's own look at it; no client of ours).
stack_redis_start() {
	local run=$1 data=$2 logs=$3
	local sock="$run/redis.sock" pidf="$run/redis.pid" log="$logs/redis.log"
	local listen=(--unixsocket "$sock") ping=(-s "$sock")
	if [ -n "${STACK_REDIS_TLS_DIR:-}" ]; then
		[ -n "${STACK_REDIS_TLS_PORT:-}" ] || STACK_REDIS_TLS_PORT=$(stack_port_pick) || return 1
		mapfile -t listen < <(printf '%s\n' --port 0 --tls-port "$STACK_REDIS_TLS_PORT" \
			--bind 127.0.0.1; stack_redis_tls_args "$STACK_REDIS_TLS_DIR")
		[ "${STACK_REDIS_TLS_SOCKET:-0}" = 1 ] && listen+=(--unixsocket "$sock")
		ping=(--tls --cacert "$STACK_REDIS_TLS_DIR/ca.crt" -h 127.0.0.1 -p "$STACK_REDIS_TLS_PORT")
	fi
	mkdir -p "$run" "$data" "$logs" || return 1
	chmod 700 "$data" || return 1
	if [ -f "$pidf" ] && stack_pid_alive "$(cat "$pidf")" redis-server; then
		stack_log "a Redis (pid $(cat "$pidf")) already runs on $sock"
		return 1
	fi
	setsid redis-server "$STACK_ROOT/conf/redis.conf" \
		--dir "$data" "${listen[@]}" --pidfile "$pidf" \
		--logfile "$log" </dev/null >>"$logs/redis.stdout.log" 2>&1 &
	STACK_REDIS_PID=$!
	disown "$STACK_REDIS_PID"
	# shellcheck disable=SC2034  # read by the scripts that source this file
	STACK_REDIS_SOCKET=$sock
	echo "$STACK_REDIS_PID" >"$pidf"
	for _ in $(seq 1 100); do
		if [ "$(redis-cli "${ping[@]}" PING 2>/dev/null)" = PONG ]; then
			return 0
		fi
		if ! stack_pid_alive "$STACK_REDIS_PID"; then
			break
		fi
		sleep 0.1
	done
	stack_log "redis-server did not start (${ping[*]})"
	stack_tail "$log"
	stack_tail "$logs/redis.stdout.log"
	stack_stop_pid "$STACK_REDIS_PID" redis-server 2
	STACK_REDIS_PID=
	return 1
}

# stack_redis_stop [RUN_DIR] [SIGNAL]: stops the Redis started by
# stack_redis_start (STACK_REDIS_PID, else RUN_DIR/redis.pid). SIGNAL KILL
# simulates a crash (no shutdown, the AOF is what survives).
# The PID file is read too because a Redis may have been restarted by
# another shell (the e2e suite restarts it through a helper command).
stack_redis_stop() {
	local run=${1:-} sig=${2:-TERM} pid pids=$STACK_REDIS_PID
	if [ -n "$run" ] && [ -f "$run/redis.pid" ]; then
		pids="$pids $(cat "$run/redis.pid")"
	fi
	for pid in $pids; do
		if [ "$sig" = KILL ]; then
			if stack_pid_alive "$pid" redis-server; then
				kill -KILL "$pid" 2>/dev/null
				for _ in $(seq 1 50); do
					stack_pid_alive "$pid" || break
					sleep 0.1
				done
			fi
		else
			stack_stop_pid "$pid" redis-server 10
		fi
	done
	STACK_REDIS_PID=
	return 0
}

# stack_max_request_kib CHARGE_BIN: lighttpd's body limit in KiB, derived
# from the responder's max_request_bytes (env, else --check-config, else the
# 1 MiB default) plus 1 MiB of room, so the responder answers 413 itself.
stack_max_request_kib() {
	local bin=$1 bytes=${CHARGE_MAX_REQUEST_BYTES:-}
	if [ -z "$bytes" ] && [ -x "$bin" ]; then
		bytes=$("$bin" --check-config 2>/dev/null |
			sed -n 's/^[[:space:]]*max_request_bytes[[:space:]]*=[[:space:]]*\([0-9][0-9]*\).*/\1/p' |
			head -n 1)
	fi
	case $bytes in ''|*[!0-9]*) bytes=1048576 ;; esac
	echo $(((bytes + 1023) / 1024 + 1024))
}

# stack_http_status URL: prints the HTTP status of GET URL (000 when there
# is no answer), waiting at most 2 s.
stack_http_status() {
	curl --noproxy '*' -s -o /dev/null -m 2 -w '%{http_code}' "$1" 2>/dev/null || true
}

# stack_lighttpd_start RUN_DIR LOG_DIR PORT CHARGE_BIN [MAX_PROCS]: starts
# lighttpd -D with conf/lighttpd.conf and the responder; waits (15 s) until
# /healthz answers at all (200, or 503 while Redis is unreachable). The
# responder's environment is this shell's CHARGE_* variables. Sets
# STACK_LIGHTTPD_PID and STACK_HTTP_PORT.
stack_lighttpd_start() {
	local run=$1 logs=$2 port=$3 bin=$4 procs=${5:-2} code
	local conf="$STACK_ROOT/conf/lighttpd.conf"
	mkdir -p "$run" "$logs" || return 1
	if [ ! -x "$bin" ]; then
		stack_log "responder binary $bin is missing or not executable"
		return 1
	fi
	if stack_port_in_use "$port"; then
		stack_log "port $port on 127.0.0.1 is already in use; choose another (e.g. PORT=18080)"
		return 1
	fi
	rm -f "$run"/charge.sock-*
	export STACK_HTTP_PORT=$port
	export STACK_WWW_DIR="$STACK_ROOT/www"
	export STACK_RUN_DIR=$run
	export STACK_LOG_DIR=$logs
	export STACK_CHARGE_BIN=$bin
	export STACK_MAX_PROCS=$procs
	# the provider simulator behind /provider/keys and /provider/events (9: none)
	export STACK_PROVIDER_PORT=${STACK_PROVIDER_PORT:-9}
	STACK_MAX_REQUEST_KIB=$(stack_max_request_kib "$bin")
	export STACK_MAX_REQUEST_KIB
	if ! lighttpd -tt -f "$conf" >"$logs/lighttpd-check.log" 2>&1; then
		stack_log "lighttpd rejects $conf"
		stack_tail "$logs/lighttpd-check.log"
		return 1
	fi
	setsid lighttpd -D -f "$conf" </dev/null >>"$logs/lighttpd.stderr.log" 2>&1 &
	STACK_LIGHTTPD_PID=$!
	disown "$STACK_LIGHTTPD_PID"
	echo "$STACK_LIGHTTPD_PID" >"$run/lighttpd.pid"
	for _ in $(seq 1 150); do
		code=$(stack_http_status "http://127.0.0.1:$port/healthz")
		case $code in 200|503) return 0 ;; esac
		if ! stack_pid_alive "$STACK_LIGHTTPD_PID"; then
			break
		fi
		sleep 0.1
	done
	stack_log "lighttpd did not serve http://127.0.0.1:$port/healthz (last status $code)"
	stack_tail "$logs/lighttpd-error.log"
	stack_tail "$logs/lighttpd.stderr.log"
	stack_stop_pid "$STACK_LIGHTTPD_PID" lighttpd 3
	STACK_LIGHTTPD_PID=
	return 1
}

# stack_lighttpd_stop [RUN_DIR]: stops lighttpd (it sends TERM to the
# responder processes it started).
stack_lighttpd_stop() {
	local run=${1:-} pid=$STACK_LIGHTTPD_PID
	if [ -z "$pid" ] && [ -n "$run" ] && [ -f "$run/lighttpd.pid" ]; then
		pid=$(cat "$run/lighttpd.pid")
	fi
	stack_stop_pid "$pid" lighttpd 10
	if [ -n "$run" ] && [ -f "$run/lighttpd.pid" ] &&
		[ "$(cat "$run/lighttpd.pid")" = "$pid" ]; then
		rm -f "$run/lighttpd.pid"
	fi
	STACK_LIGHTTPD_PID=
}

# stack_worker_pids: the responder processes of our lighttpd, one per line.
stack_worker_pids() {
	[ -n "$STACK_LIGHTTPD_PID" ] || return 0
	pgrep -P "$STACK_LIGHTTPD_PID" || true
}

# stack_env_clear: unsets every CHARGE_* variable, so that the responders a
# suite starts see only what the suite exports (read CHARGE_BIN first).
stack_env_clear() {
	local v
	for v in $(compgen -e | grep '^CHARGE_' || true); do
		unset "$v"
	done
}

# stack_env RUN NAME: exports the responder's environment for the run
# directory RUN, the block the suites share: Redis on RUN/redis.sock,
# spill_dir RUN/spill, api_keys_file RUN/api-keys, the ledger RUN/ledger.log
# and the metrics RUN/metrics.shm, a provider_secret of the run's own
# (NAME-secret-<random>), and the values a suite relies on written out
# (redis_timeout_ms 1000, key_prefix charge:, completed_ttl_s 86400,
# log_level info: conf/charge.conf's). A suite exports what differs after.
stack_env() {
	local run=$1 name=$2
	export CHARGE_REDIS_URL="unix://$run/redis.sock"
	export CHARGE_REDIS_TIMEOUT_MS=1000
	export CHARGE_KEY_PREFIX="charge:"
	export CHARGE_COMPLETED_TTL_S=86400
	export CHARGE_SPILL_DIR="$run/spill"
	export CHARGE_API_KEYS_FILE="$run/api-keys"
	export CHARGE_PROVIDER_LEDGER="$run/ledger.log"
	export CHARGE_PROVIDER_SECRET="$name-secret-$RANDOM$RANDOM"
	export CHARGE_METRICS_FILE="$run/metrics.shm"
	export CHARGE_LOG_LEVEL=info
}

# stack_api_keys_write FILE PRINCIPAL KEY [PRINCIPAL KEY ...]: writes an
# api-keys file ("<principal> <hex sha256 of key>" per line), mode 0600.
stack_api_keys_write() {
	local file=$1 principal key hash
	shift
	{
		echo "# written by tools/stack.sh for one run"
		while [ $# -ge 2 ]; do
			principal=$1 key=$2
			shift 2
			hash=$(printf '%s' "$key" | sha256sum | cut -d' ' -f1)
			echo "$principal $hash"
		done
	} >"$file" || return 1
	chmod 600 "$file"
}

# stack_sim_start DATA_DIR LOG_DIR [SIM_BIN [ARG...]]: starts the provider
# simulator (build/charge-provider-sim; an empty SIM_BIN is that one) on a
# free port of 127.0.0.1 with its store in DATA_DIR/provider-sim.data, its
# PID in DATA_DIR/provider-sim.pid, its output appended to
# LOG_DIR/provider-sim.log and the further ARGs (e.g. --webhook-url ...);
# waits (about 10 s) until GET /_sim/stats answers 200. Sets STACK_SIM_PID,
# STACK_SIM_COMM (its /proc comm, for stack_stop_pid), STACK_PROVIDER_PORT
# (for lighttpd's /provider/keys and /provider/events) and
# STACK_PROVIDER_URL. 1 when the binary is missing or it does not start
# (LOG_DIR/provider-sim.log says why).
#
# Two variables, set for the call only (VAR=... stack_sim_start ...), change
# where it listens:
#   STACK_SIM_PORT=PORT    that port instead of a free one: a suite that
#                          restarts the simulator keeps its port (and its
#                          store), so that the URLs it configured stay true;
#                          refused when something already accepts there
#   STACK_SIM_SOCKET=PATH  HTTP on the unix socket PATH instead of TCP;
#                          STACK_PROVIDER_URL is unix:PATH and
#                          STACK_PROVIDER_PORT is left as it was
# A suite that runs two simulators at once keeps each STACK_SIM_PID (the
# global holds the last) and stops each with stack_stop_pid PID
# "$STACK_SIM_COMM".
stack_sim_start() {
	local data=$1 logs=$2 bin=${3:-$STACK_ROOT/build/charge-provider-sim}
	local port=${STACK_SIM_PORT:-} sock=${STACK_SIM_SOCKET:-} listen url code
	shift 2
	[ $# -gt 0 ] && shift
	[ -x "$bin" ] || { stack_log "provider simulator $bin is not built"; return 1; }
	if [ -n "$sock" ]; then
		listen="unix:$sock" url="unix:$sock"
	else
		if [ -z "$port" ]; then
			port=$(stack_port_pick) || return 1
		elif stack_port_in_use "$port"; then
			stack_log "port $port on 127.0.0.1 is already in use (STACK_SIM_PORT)"
			return 1
		fi
		listen="127.0.0.1:$port" url="http://127.0.0.1:$port"
	fi
	mkdir -p "$data" "$logs" || return 1
	# /proc/PID/comm: the name it was executed as, 15 bytes at most
	STACK_SIM_COMM=$(basename "$bin" | cut -c1-15)
	setsid "$bin" --listen "$listen" --data "$data/provider-sim.data" "$@" \
		</dev/null >>"$logs/provider-sim.log" 2>&1 &
	STACK_SIM_PID=$!
	disown "$STACK_SIM_PID"
	echo "$STACK_SIM_PID" >"$data/provider-sim.pid"
	for _ in $(seq 1 200); do
		if [ -n "$sock" ]; then
			code=$(curl --noproxy '*' -s -o /dev/null -m 2 -w '%{http_code}' \
				--unix-socket "$sock" http://sim/_sim/stats 2>/dev/null || true)
		else
			code=$(stack_http_status "$url/_sim/stats")
		fi
		# and ours still runs (one that could not bind has exited)
		if [ "$code" = 200 ] && stack_pid_alive "$STACK_SIM_PID"; then
			[ -n "$sock" ] || export STACK_PROVIDER_PORT=$port
			STACK_PROVIDER_URL=$url
			return 0
		fi
		stack_pid_alive "$STACK_SIM_PID" || break
		sleep 0.05
	done
	stack_log "the provider simulator did not start ($listen)"
	stack_tail "$logs/provider-sim.log"
	stack_stop_pid "$STACK_SIM_PID" "$STACK_SIM_COMM" 3
	STACK_SIM_PID=
	return 1
}

# stack_sim_stop: stops the simulator stack_sim_start started last (it
# flushes its store on SIGTERM).
stack_sim_stop() {
	[ -n "${STACK_SIM_PID:-}" ] && stack_stop_pid "$STACK_SIM_PID" "$STACK_SIM_COMM" 5
	STACK_SIM_PID=
}

# stack_stop_all [RUN_DIR]: stops lighttpd (and with it the responders),
# then Redis (also one restarted by another shell with RUN_DIR/redis.pid).
# Pass RUN_DIR only when it is private to this run: its PID files are then
# trusted (after the /proc check).
stack_stop_all() {
	stack_lighttpd_stop "${1:-}"
	stack_redis_stop "${1:-}"
}

# stack_tls_certs DIR: a test CA (DIR/ca.crt, ca.key) and what it signs:
# DIR/server.crt+key for localhost, 127.0.0.1 and ::1, DIR/client.crt+key;
# keys mode 0600. Made with openssl once per DIR, for the TLS-only Redis
# of STACK_REDIS_TLS and the suites' TLS topologies (tools/ha.sh).
stack_tls_certs() {
	local d=$1 n
	[ -f "$d/client.crt" ] && return 0
	mkdir -p "$d" && chmod 700 "$d" || return 1
	(
		cd "$d" || exit 1
		umask 077
		openssl req -x509 -newkey rsa:2048 -nodes -days 30 -subj "/CN=charge test CA" \
			-keyout ca.key -out ca.crt 2>/dev/null || exit 1
		for n in server client; do
			openssl req -newkey rsa:2048 -nodes -subj "/CN=$n" \
				-keyout "$n.key" -out "$n.csr" 2>/dev/null || exit 1
			printf 'subjectAltName=DNS:localhost,IP:127.0.0.1,IP:::1\n' >"$n.ext"
			openssl x509 -req -in "$n.csr" -CA ca.crt -CAkey ca.key -CAcreateserial \
				-days 30 -extfile "$n.ext" -out "$n.crt" 2>/dev/null || exit 1
		done
		chmod 644 ca.crt server.crt client.crt
	)
}

# stack_redis_tls_args DIR: redis-server's arguments for TLS with the
# certificates of stack_tls_certs DIR (clients may show a certificate of
# the CA; replication and the cluster bus over TLS too).
stack_redis_tls_args() {
	local d=$1
	printf '%s\n' --tls-cert-file "$d/server.crt" --tls-key-file "$d/server.key" \
		--tls-ca-cert-file "$d/ca.crt" --tls-auth-clients optional \
		--tls-replication yes --tls-cluster yes
}
