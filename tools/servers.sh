# tools/servers.sh - start and stop the charge responder behind Apache +
# mod_fcgid, Apache + mod_cgid (plain CGI) or nginx (+ the responder's own
# --listen socket), from the configurations in conf/.
#
# Sourced (not executed) by test harnesses, after the responder's CHARGE_*
# configuration has been exported:
#
#   . "$REPO/tools/servers.sh"
#   start_apache     RUN_DIR LOG_DIR PORT CHARGE_BIN [MAX_PROCS]   # mod_fcgid
#   start_apache_cgi RUN_DIR LOG_DIR PORT CHARGE_BIN               # mod_cgid
#   start_nginx      RUN_DIR LOG_DIR PORT CHARGE_BIN [THREADS]     # + --listen
#   start_apache_proxy RUN_DIR LOG_DIR PORT CHARGE_BIN [THREADS]   # mod_proxy_fcgi
#                                                                  # + --listen
#   servers_worker_pids          # the responder processes, one PID a line
#   stop_apache / stop_apache_cgi / stop_nginx / stop_apache_proxy /
#   servers_stop_all
#
# Each start function creates its own directory under RUN_DIR (apache/,
# apache-cgi/, nginx/, apache-proxy/), writes its logs to LOG_DIR, starts
# the server on
# 127.0.0.1:PORT and waits (15 s) until GET /healthz answers (200, or 503
# while Redis is unreachable; start_nginx and start_apache_proxy first wait
# until the responder answers FastCGI on its own socket, so that a 503 is
# the responder's and not the web server's); it returns non-zero after
# printing the tail of the logs to stderr. Every process is started by this shell in its own
# session, remembered by PID, and stopped by that PID (TERM, then KILL);
# nothing is ever killed by name.
#
# Running as root: Apache refuses to serve as root, so its workers and the
# responders run as nobody:nogroup (User/Group in conf/apache-*.conf);
# nginx's workers and the responder started by start_nginx too. Everything
# the responder uses - the Redis socket, api_keys_file, spill_dir,
# provider_ledger, metrics_file - must then be usable by nobody:
# servers_share_rundir gives a run directory to that user, and
# servers_redis_start runs tools/stack.sh's Redis as that user. Run as
# another user, everything runs as that user and needs neither.
# (SERVERS_WORKER_USER/GROUP must match User/Group in conf/apache-*.conf
# and "user" in conf/nginx.conf.)
#
# Globals: SERVERS_ROOT, SERVERS_APACHE_PID, SERVERS_APACHE_CGI_PID,
# SERVERS_NGINX_PID, SERVERS_RESPONDER_SUPERVISOR_PID,
# SERVERS_APACHE_PROXY_PID, SERVERS_PROXY_SUPERVISOR_PID, SERVERS_HTTP_PORT,
# and SERVERS_TOP_PID: the process the last start function started whose
# descendants are the responders (apache2, or the responder's supervisor
# for nginx and apache-proxy); another shell lists them with
# ". tools/servers.sh && servers_descendants $SERVERS_TOP_PID charge".
# SERVERS_NGINX_UPSTREAM selects how start_nginx runs the responder:
# "unix" (default: --listen RUN/nginx/charge.sock), "tcp" (--listen
# 127.0.0.1:<free port>), "spawn-fcgi" (spawn-fcgi -n -s <socket>: the
# socket is the responder's fd 0) or "holder": SERVERS_HOLDER (a script
# like tests/deploy_live/holder.py, standing in for systemd's socket
# activation) binds <socket> and passes it to the responders it starts
# (LISTEN_FDS), its state in RUN_DIR/<server>/holder. start_apache_proxy
# runs the responder through SERVERS_HOLDER when that is set, on TCP
# (127.0.0.1:<free port>) when SERVERS_APACHE_TRANSPORT is "tcp" (default
# "unix"); both pick the listener with servers_listener.

# shellcheck disable=SC2034  # globals for the scripts that source this file
SERVERS_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shared process and port helpers (stack_pid_alive, stack_port_pick, ...)
declare -F stack_pid_alive >/dev/null || . "$SERVERS_ROOT/tools/stack.sh"
SERVERS_CHECKOUT=$SERVERS_ROOT   # SERVERS_ROOT may move to a staged copy
SERVERS_BIN=
SERVERS_STAGED_CONF=
SERVERS_APACHE_PID=
SERVERS_APACHE_CGI_PID=
SERVERS_NGINX_PID=
SERVERS_RESPONDER_SUPERVISOR_PID=
SERVERS_APACHE_PROXY_PID=
SERVERS_PROXY_SUPERVISOR_PID=
SERVERS_HTTP_PORT=
SERVERS_TOP_PID=
SERVERS_WORKER_USER=nobody
SERVERS_WORKER_GROUP=nogroup

servers_log() {
	printf '%s\n' "servers: $*" >&2
}

# --- processes -------------------------------------------------------------

# servers_descendants PID COMM: PIDs of the processes below PID (children,
# grandchildren, ...) whose comm is COMM, one a line.
servers_descendants() {
	local top=$1 comm=$2
	[ -n "$top" ] || return 0
	ps -e -o pid=,ppid=,comm= | awk -v top="$top" -v comm="$comm" '
		{ parent[$1] = $2; name[$1] = $3 }
		END {
			for (p in parent) {
				if (name[p] != comm)
					continue
				for (q = parent[p]; q > 1; q = parent[q])
					if (q == top) { print p; break }
			}
		}' | sort -n
}

# servers_is_root: true when this shell runs as root.
servers_is_root() {
	[ "$(id -u)" -eq 0 ]
}

# servers_as_worker CMD [ARGS...]: runs CMD as the user the web servers'
# workers run as (nobody:nogroup when root; unchanged otherwise).
servers_as_worker() {
	if servers_is_root; then
		setpriv --reuid="$SERVERS_WORKER_USER" --regid="$SERVERS_WORKER_GROUP" \
			--clear-groups -- "$@"
	else
		"$@"
	fi
}

# servers_worker_dir DIR...: creates DIRs (mode 0700) owned by the worker
# user when root.
servers_worker_dir() {
	local d
	for d in "$@"; do
		mkdir -p "$d" || return 1
		chmod 700 "$d" || return 1
		if servers_is_root; then
			chown "$SERVERS_WORKER_USER:$SERVERS_WORKER_GROUP" "$d" || return 1
		fi
	done
}

# servers_share_rundir DIR: when root, hands DIR and everything in it to
# the worker user (root keeps full access anyway) and makes every parent
# directory traversable by it; a no-op otherwise. For harnesses whose run
# directory holds the Redis socket, api-keys, spill dir and ledger.
servers_share_rundir() {
	local dir=$1 d
	servers_is_root || return 0
	chown -R "$SERVERS_WORKER_USER:$SERVERS_WORKER_GROUP" "$dir" || return 1
	d=$(dirname "$dir")
	while [ "$d" != / ]; do
		if ! servers_as_worker test -x "$d"; then
			servers_log "$d is not traversable by $SERVERS_WORKER_USER"
			return 1
		fi
		d=$(dirname "$d")
	done
}

# servers_stage_repo RUN_DIR BIN: when root, the web server's workers and
# the responders run as nobody, which cannot read a checkout under a
# private directory (a clone in a mktemp -d, say). Then this copies what
# they read (conf/, www/, tools/ and the binary) into RUN_DIR/repo, points
# SERVERS_ROOT and STACK_ROOT there and exports CHARGE_CONF. Sets
# SERVERS_BIN to the binary to use. Call it after servers_share_rundir.
servers_stage_repo() {
	local run=$1 bin=$2 root=$SERVERS_CHECKOUT
	SERVERS_ROOT=$root
	STACK_ROOT=$root
	SERVERS_BIN=$bin
	if [ -n "$SERVERS_STAGED_CONF" ] && [ "${CHARGE_CONF:-}" = "$SERVERS_STAGED_CONF" ]; then
		unset CHARGE_CONF
	fi
	SERVERS_STAGED_CONF=
	servers_is_root || return 0
	if servers_as_worker test -r "$root/conf/charge.conf" &&
		servers_as_worker test -r "$root/www/index.html" &&
		servers_as_worker test -r "$root/tools/stack.sh" &&
		servers_as_worker test -x "$bin"; then
		return 0
	fi
	mkdir -p "$run/repo" &&
		cp -a "$root/conf" "$root/www" "$root/tools" "$run/repo/" &&
		cp "$bin" "$run/repo/charge" &&
		chmod -R a+rX "$run/repo" || return 1
	SERVERS_ROOT="$run/repo"
	STACK_ROOT="$run/repo"
	SERVERS_BIN="$run/repo/charge"
	SERVERS_STAGED_CONF="$run/repo/conf/charge.conf"
	export CHARGE_CONF=$SERVERS_STAGED_CONF
}

# servers_redis_start RUN_DIR DATA_DIR LOG_DIR: tools/stack.sh's
# stack_redis_start, run as the worker user (so that responders running as
# nobody can use its 0700 socket). Sets STACK_REDIS_PID/STACK_REDIS_SOCKET.
servers_redis_start() {
	local run=$1 data=$2 logs=$3
	if ! servers_is_root; then
		stack_redis_start "$run" "$data" "$logs"
		return
	fi
	mkdir -p "$run" "$data" "$logs" || return 1
	chown "$SERVERS_WORKER_USER:$SERVERS_WORKER_GROUP" "$run" "$data" "$logs" || return 1
	# shellcheck disable=SC2016  # expanded by the inner bash
	servers_as_worker bash -c '. "$1/tools/stack.sh" && stack_redis_start "$2" "$3" "$4"' \
		_ "$SERVERS_ROOT" "$run" "$data" "$logs" || return 1
	STACK_REDIS_PID=$(cat "$run/redis.pid" 2>/dev/null)
	STACK_REDIS_SOCKET="$run/redis.sock"
	stack_pid_alive "$STACK_REDIS_PID" redis-server
}

# --- helpers ---------------------------------------------------------------

# servers_tail FILE: the last lines of a log, indented, to stderr.
servers_tail() {
	[ -s "$1" ] || return 0
	printf '%s\n' "---- last lines of $1" >&2
	tail -n 20 "$1" | sed 's/^/    /' >&2
}

# servers_http_status URL: the HTTP status of GET URL (000: no answer).
servers_http_status() {
	curl -s -o /dev/null -m 2 -w '%{http_code}' "$1" 2>/dev/null || true
}

# servers_wait_healthz PORT PID COMM: waits up to 15 s until /healthz on
# PORT answers 200 or 503 while PID (COMM) runs.
servers_wait_healthz() {
	local port=$1 pid=$2 comm=$3 i code=000
	for i in $(seq 1 150); do
		code=$(servers_http_status "http://127.0.0.1:$port/healthz")
		case $code in 200|503) return 0 ;; esac
		stack_pid_alive "$pid" "$comm" || break
		sleep 0.1
	done
	servers_log "$comm did not serve http://127.0.0.1:$port/healthz (last status $code)"
	return 1
}

# servers_apache_warm PORT PID N: as soon as apache2 (PID) accepts on
# PORT, sends N requests at once, so that mod_fcgid spawns N responder
# processes. mod_fcgid spawns only on demand, and a request that finds every
# process busy sleeps 1 s before it asks for another one: without this,
# requests that overlap a running one (a duplicate that should get 409)
# would wait for it and get its replay instead. While no process exists
# yet, every request asks for a spawn at once. (FcgidMinProcessesPerClass
# keeps them alive once spawned.)
servers_apache_warm() {
	local port=$1 pid=$2 n=$3 i
	for i in $(seq 1 150); do
		stack_port_in_use "$port" && break
		stack_pid_alive "$pid" apache2 || return 1
		sleep 0.1
	done
	# one curl, 4n connections opened and sent at the same moment
	set --
	for i in $(seq 1 $((4 * n))); do
		set -- "$@" -o /dev/null "http://127.0.0.1:$port/healthz?warm=$i"
	done
	curl -s --no-progress-meter -m 15 --parallel --parallel-immediate \
		--parallel-max $((4 * n)) "$@" 2>/dev/null
	return 0
}

# servers_conf_value CHARGE_BIN KEY DEFAULT: the effective value of a
# configuration key (charge --check-config with this shell's CHARGE_*).
servers_conf_value() {
	local bin=$1 key=$2 def=$3 v
	v=$("$bin" --check-config 2>/dev/null |
		sed -n "s/^[[:space:]]*${key}[[:space:]]*=[[:space:]]*//p" | head -n 1)
	case $v in ''|*[!0-9]*) v=$def ;; esac
	echo "$v"
}

# servers_limits CHARGE_BIN: sets SERVERS_MAX_BODY_BYTES (the web server's
# own body limit: twice max_request_bytes, so that every body up to it gets
# the responder's own 413, and a plain-CGI responder, which drains up to 4
# times max_request_bytes, reads all of it) and SERVERS_IO_TIMEOUT_S (how
# long the web server waits for an answer: the provider's latency and
# timeout plus max_wait_s, plus 10 s; at least 30 s).
servers_limits() {
	local bin=$1 max lat tmo wait t
	max=$(servers_conf_value "$bin" max_request_bytes 1048576)
	lat=$(servers_conf_value "$bin" provider_latency_ms 200)
	tmo=$(servers_conf_value "$bin" provider_timeout_ms 5000)
	wait=$(servers_conf_value "$bin" max_wait_s 10)
	SERVERS_MAX_BODY_BYTES=$((2 * max))
	t=$(((lat + tmo + 999) / 1000 + wait + 10))
	[ "$t" -lt 30 ] && t=30
	SERVERS_IO_TIMEOUT_S=$t
}

# servers_check_worker_access CHARGE_BIN LOG: when root, fails unless the
# responder, run as the worker user, accepts its configuration (which reads
# api_keys_file); warns when spill_dir or the ledger's directory is not
# writable by that user.
servers_check_worker_access() {
	local bin=$1 log=$2 d
	servers_is_root || return 0
	if ! servers_as_worker "$bin" --check-config >"$log" 2>&1; then
		servers_log "as $SERVERS_WORKER_USER, $bin rejects the configuration:"
		servers_tail "$log"
		return 1
	fi
	for d in "$(servers_conf_path "$bin" spill_dir)" \
		"$(dirname "$(servers_conf_path "$bin" provider_ledger)")"; do
		[ -n "$d" ] || continue
		if [ -d "$d" ] && ! servers_as_worker test -w "$d"; then
			servers_log "warning: $d is not writable by $SERVERS_WORKER_USER (servers_share_rundir?)"
		fi
	done
	return 0
}

# servers_conf_path CHARGE_BIN KEY: a path-valued configuration key.
servers_conf_path() {
	"$1" --check-config 2>/dev/null |
		sed -n "s/^[[:space:]]*${2}[[:space:]]*=[[:space:]]*//p" | head -n 1
}

# servers_env_names: the environment variables the responder must get:
# every CHARGE_* (except CHARGE_BIN, a harness variable) and the sanitizer
# options, one a line.
servers_env_names() {
	compgen -e | grep -E '^(CHARGE_[A-Z0-9_]+|[ALTU]SAN_OPTIONS)$' |
		grep -vx CHARGE_BIN
}

# servers_apache_env_file FILE DIRECTIVE: writes one Apache line
# "DIRECTIVE NAME "value"" per variable of servers_env_names (DIRECTIVE is
# FcgidInitialEnv or SetEnv). Fails on values Apache cannot carry.
servers_apache_env_file() {
	local file=$1 directive=$2 name value
	{
		echo "# written by tools/servers.sh: the responder's environment"
		for name in $(servers_env_names); do
			value=${!name}
			# shellcheck disable=SC1003,SC2016  # literal backslash, literal ${
			case $value in
			*$'\n'*|*'\'|*'${'*)
				servers_log "$name: value cannot be passed through an Apache configuration"
				return 1 ;;
			esac
			value=${value//\"/\\\"}
			printf '%s %s "%s"\n' "$directive" "$name" "$value"
		done
	} >"$file"
}

# --- Apache ----------------------------------------------------------------

# servers_apache_run KIND CONF RUN_DIR LOG_DIR PORT CHARGE_BIN MAX_PROCS
# ENV_DIRECTIVE: the common part of start_apache and start_apache_cgi.
# Sets SERVERS_LAST_PID to the PID of apache2 -DFOREGROUND.
servers_apache_run() {
	local kind=$1 conf=$2 run=$3 logs=$4 port=$5 bin=$6 procs=$7 envdir=$8
	local srv="$run/$kind" pid
	SERVERS_LAST_PID=
	if [ ! -x "$bin" ]; then
		servers_log "responder binary $bin is missing or not executable"
		return 1
	fi
	if stack_port_in_use "$port"; then
		servers_log "port $port on 127.0.0.1 is already in use"
		return 1
	fi
	mkdir -p "$run" "$logs" || return 1
	if servers_is_root; then
		# the worker user must reach the run dir (fcgid/cgid sockets)
		chmod a+x "$run" || return 1
	fi
	rm -rf "$srv/fcgidsock" "$srv/cgisock" "$srv/httpd.pid"
	servers_worker_dir "$srv" "$srv/tmp" || return 1
	servers_limits "$bin"
	servers_apache_env_file "$srv/charge-env.conf" "$envdir" || return 1
	servers_check_worker_access "$bin" "$logs/$kind-check-config.log" || return 1
	export STACK_HTTP_PORT=$port STACK_WWW_DIR="$SERVERS_ROOT/www" \
		STACK_RUN_DIR=$srv STACK_LOG_DIR=$logs STACK_CHARGE_BIN=$bin \
		STACK_MAX_PROCS=$procs STACK_MAX_BODY_BYTES=$SERVERS_MAX_BODY_BYTES \
		STACK_IO_TIMEOUT_S=$SERVERS_IO_TIMEOUT_S
	if ! apache2 -f "$conf" -t >"$logs/$kind-check.log" 2>&1; then
		servers_log "apache2 rejects $conf"
		servers_tail "$logs/$kind-check.log"
		return 1
	fi
	# TMPDIR: where mod_fcgid buffers request bodies above FcgidMaxRequestInMem
	TMPDIR="$srv/tmp" setsid apache2 -f "$conf" -DFOREGROUND \
		</dev/null >>"$logs/$kind.stderr.log" 2>&1 &
	pid=$!
	echo "$pid" >"$srv/apache2.pid"
	if ! servers_apache_warm "$port" "$pid" "$procs" ||
		! servers_wait_healthz "$port" "$pid" apache2; then
		servers_tail "$logs/$kind-error.log"
		servers_tail "$logs/$kind.stderr.log"
		stack_stop_pid "$pid" apache2 5
		return 1
	fi
	SERVERS_LAST_PID=$pid
}

# start_apache RUN_DIR LOG_DIR PORT CHARGE_BIN [MAX_PROCS]: Apache with
# conf/apache-fcgid.conf; mod_fcgid starts up to MAX_PROCS (default 4)
# single-threaded responder processes (CHARGE_THREADS is forced to 1:
# mod_fcgid sends one request at a time to each process). Logs:
# LOG_DIR/apache-error.log (with the responder's stderr), apache-access.log.
start_apache() {
	local run=$1 logs=$2 port=$3 bin=$4 procs=${5:-4} n
	CHARGE_THREADS=1 servers_apache_run apache \
		"$SERVERS_ROOT/conf/apache-fcgid.conf" "$run" "$logs" "$port" \
		"$bin" "$procs" FcgidInitialEnv || return 1
	SERVERS_APACHE_PID=$SERVERS_LAST_PID
	SERVERS_TOP_PID=$SERVERS_LAST_PID
	SERVERS_HTTP_PORT=$port
	n=$(servers_descendants "$SERVERS_APACHE_PID" charge | wc -l)
	if [ "$n" -lt "$procs" ]; then
		servers_log "note: mod_fcgid spawned $n of $procs responder processes at start-up (more follow on demand, 1 s late)"
	fi
}

# servers_apache_stop NAME PID [RUN_DIR]: stops the Apache started as NAME
# (apache, apache-cgi): PID, else the PID file under RUN_DIR/NAME.
servers_apache_stop() {
	local name=$1 pid=$2 run=${3:-}
	if [ -z "$pid" ] && [ -n "$run" ] && [ -f "$run/$name/apache2.pid" ]; then
		pid=$(cat "$run/$name/apache2.pid")
	fi
	stack_stop_pid "$pid" apache2 10
}

# stop_apache [RUN_DIR]: stops that Apache (mod_fcgid stops the responders:
# TERM, 1 s, KILL).
stop_apache() {
	servers_apache_stop apache "$SERVERS_APACHE_PID" "${1:-}"
	SERVERS_APACHE_PID=
}

# start_apache_cgi RUN_DIR LOG_DIR PORT CHARGE_BIN: Apache with
# conf/apache-cgi.conf; mod_cgid runs the responder as a plain CGI program,
# one process per request. Logs: LOG_DIR/apache-cgi-error.log (with the
# responder's stderr), apache-cgi-access.log.
start_apache_cgi() {
	local run=$1 logs=$2 port=$3 bin=$4
	servers_apache_run apache-cgi "$SERVERS_ROOT/conf/apache-cgi.conf" \
		"$run" "$logs" "$port" "$bin" 1 SetEnv || return 1
	SERVERS_APACHE_CGI_PID=$SERVERS_LAST_PID
	SERVERS_TOP_PID=$SERVERS_LAST_PID
	SERVERS_HTTP_PORT=$port
}

# start_cgi_server: another name of start_apache_cgi.
start_cgi_server() {
	start_apache_cgi "$@"
}

# stop_apache_cgi [RUN_DIR]: stops that Apache.
stop_apache_cgi() {
	servers_apache_stop apache-cgi "$SERVERS_APACHE_CGI_PID" "${1:-}"
	SERVERS_APACHE_CGI_PID=
}

stop_cgi_server() {
	stop_apache_cgi "$@"
}

# --- nginx + the responder's own listener ----------------------------------

# servers_supervise PIDFILE LOG CMD [ARGS...]: runs CMD (as the worker user
# when root, through setpriv) and starts it again whenever it exits, like systemd's
# Restart=always, until the supervisor gets TERM (it then TERMs CMD and
# waits for it). The supervisor writes its own PID to PIDFILE and the
# current CMD's PID to PIDFILE.child. Sets SERVERS_LAST_PID to the
# supervisor's PID.
servers_supervise() {
	local pidfile=$1 log=$2 i
	local -a as=()
	shift 2
	SERVERS_LAST_PID=
	if servers_is_root; then
		as=(setpriv --reuid="$SERVERS_WORKER_USER" \
			--regid="$SERVERS_WORKER_GROUP" --clear-groups --)
	fi
	rm -f "$pidfile" "$pidfile.child"
	# shellcheck disable=SC2016
	setsid bash -c '
		pidfile=$1 log=$2
		shift 2
		echo $$ >"$pidfile"
		stop=0 child=
		trap '\''stop=1; [ -n "$child" ] && kill -TERM "$child" 2>/dev/null'\'' TERM INT
		while [ "$stop" = 0 ]; do
			started=$SECONDS
			"$@" </dev/null >>"$log" 2>&1 &
			child=$!
			echo "$child" >"$pidfile.child"
			while kill -0 "$child" 2>/dev/null; do
				wait "$child"
			done
			child=
			[ "$stop" = 0 ] || break
			echo "supervisor: responder exited, starting it again" >>"$log"
			# a responder that dies at once is restarted once a second
			if [ $((SECONDS - started)) -lt 1 ]; then sleep 1; else sleep 0.1; fi
		done
	' _ "$pidfile" "$log" "${as[@]}" "$@" </dev/null >/dev/null 2>&1 &
	for i in $(seq 1 50); do
		[ -s "$pidfile" ] && [ -s "$pidfile.child" ] && break
		sleep 0.1
	done
	SERVERS_LAST_PID=$(cat "$pidfile" 2>/dev/null)
	[ -n "$SERVERS_LAST_PID" ]
}

# servers_sed_escape TEXT: TEXT for the replacement of s|...|...|.
servers_sed_escape() {
	printf '%s' "$1" | sed -e 's/[\\|&]/\\&/g'
}

# servers_wait_fcgi ADDRESS SUPERVISOR_PID: waits up to 15 s until the
# responder answers a FastCGI request on ADDRESS (a unix socket path or
# host:port), while its supervisor runs. A web server started before that
# answers for it: nginx 502, which servers_wait_healthz waits past, but
# mod_proxy_fcgi 503, which it cannot tell from the responder's own 503.
servers_wait_fcgi() {
	local addr=$1 sup=$2 i
	for i in $(seq 1 150); do
		REQUEST_METHOD=GET REQUEST_URI=/healthz SCRIPT_NAME=/healthz \
			cgi-fcgi -bind -connect "$addr" </dev/null >/dev/null 2>&1 && return 0
		stack_pid_alive "$sup" || break
		sleep 0.1
	done
	servers_log "the responder did not answer FastCGI on $addr"
	return 1
}

# servers_listener SRV_DIR CHARGE_BIN unix|tcp HOLDER: the responder's
# FastCGI listener. Sets SERVERS_LISTEN, the address as charge --listen and
# servers_wait_fcgi take it (SRV_DIR/sock/charge.sock, or 127.0.0.1:<a
# free port>), and SERVERS_LISTEN_CMD, the command that serves it: charge
# --listen, or with HOLDER 1 SERVERS_HOLDER binding it and passing it on
# (its state in SRV_DIR/holder).
servers_listener() {
	local srv=$1 bin=$2 transport=$3 holder=$4 port
	case $transport in
	unix)
		SERVERS_LISTEN="$srv/sock/charge.sock"
		set -- --unix "$SERVERS_LISTEN" ;;
	tcp)
		port=$(stack_port_pick) || return 1
		SERVERS_LISTEN="127.0.0.1:$port"
		set -- --tcp "$port" ;;
	*)
		servers_log "FastCGI transport $transport: want unix or tcp"
		return 1 ;;
	esac
	if [ "$holder" = 1 ]; then
		servers_worker_dir "$srv/holder" || return 1
		SERVERS_LISTEN_CMD=(/usr/bin/python3 "$SERVERS_HOLDER" "$@" --state "$srv/holder" -- "$bin")
	else
		SERVERS_LISTEN_CMD=("$bin" --listen "$SERVERS_LISTEN")
	fi
}

# start_nginx RUN_DIR LOG_DIR PORT CHARGE_BIN [THREADS]: the responder with
# THREADS (default 4) worker threads on its own FastCGI socket (see
# SERVERS_NGINX_UPSTREAM), supervised (restarted when it dies), then nginx
# with conf/nginx.conf (placeholders substituted into RUN_DIR/nginx/).
# Logs: LOG_DIR/nginx-error.log, nginx-access.log, responder.log (the
# responder's stderr).
start_nginx() {
	local run=$1 logs=$2 port=$3 bin=$4 threads=${5:-4}
	local srv="$run/nginx" mode=${SERVERS_NGINX_UPSTREAM:-unix}
	local upstream sock conf pid d holder=0
	local rlog="$logs/responder.log"
	if [ ! -x "$bin" ]; then
		servers_log "responder binary $bin is missing or not executable"
		return 1
	fi
	if stack_port_in_use "$port"; then
		servers_log "port $port on 127.0.0.1 is already in use"
		return 1
	fi
	mkdir -p "$run" "$logs" || return 1
	servers_is_root && { chmod a+x "$run" || return 1; }
	rm -rf "$srv"
	servers_worker_dir "$srv" "$srv/sock" || return 1
	mkdir -p "$srv/tmp" || return 1
	for d in body fastcgi proxy uwsgi scgi; do
		servers_worker_dir "$srv/tmp/$d" || return 1
	done
	servers_limits "$bin"
	servers_check_worker_access "$bin" "$logs/nginx-check-config.log" || return 1
	case $mode in
	unix | holder)
		[ "$mode" = holder ] && holder=1
		servers_listener "$srv" "$bin" unix "$holder" || return 1
		upstream="unix:$SERVERS_LISTEN"
		set -- "${SERVERS_LISTEN_CMD[@]}" ;;
	tcp)
		servers_listener "$srv" "$bin" tcp 0 || return 1
		upstream=$SERVERS_LISTEN
		set -- "${SERVERS_LISTEN_CMD[@]}" ;;
	spawn-fcgi)
		# spawn-fcgi binds the socket, puts it on fd 0 and execs the
		# responder (-n: no fork, so the PID stays the responder's)
		sock="$srv/sock/charge.sock"
		upstream="unix:$sock"
		set -- spawn-fcgi -n -s "$sock" -- "$bin" ;;
	*)
		servers_log "SERVERS_NGINX_UPSTREAM=$mode: want unix, tcp, spawn-fcgi or holder"
		return 1 ;;
	esac
	if ! CHARGE_THREADS=$threads servers_supervise "$srv/responder.pid" \
		"$rlog" "$@"; then
		servers_log "the responder supervisor did not start"
		servers_tail "$rlog"
		return 1
	fi
	SERVERS_RESPONDER_SUPERVISOR_PID=$SERVERS_LAST_PID
	SERVERS_TOP_PID=$SERVERS_LAST_PID
	servers_wait_fcgi "${upstream#unix:}" "$SERVERS_LAST_PID" ||
		{ servers_tail "$rlog"; stop_nginx "$run"; return 1; }
	conf="$srv/nginx.conf"
	sed -e "s|@PORT@|$port|g" \
		-e "s|@WWW@|$(servers_sed_escape "$SERVERS_ROOT/www")|g" \
		-e "s|@RUN@|$(servers_sed_escape "$srv")|g" \
		-e "s|@LOGS@|$(servers_sed_escape "$logs")|g" \
		-e "s|@UPSTREAM@|$(servers_sed_escape "$upstream")|g" \
		-e "s|@MAX_BODY@|$SERVERS_MAX_BODY_BYTES|g" \
		-e "s|@TIMEOUT@|$SERVERS_IO_TIMEOUT_S|g" \
		"$SERVERS_ROOT/conf/nginx.conf" >"$conf" || { stop_nginx "$run"; return 1; }
	if grep -v '^[[:space:]]*#' "$conf" | grep -q '@[A-Z_]*@'; then
		servers_log "unsubstituted placeholder in $conf"
		stop_nginx "$run"
		return 1
	fi
	if ! nginx -t -q -p "$srv" -c "$conf" -e "$logs/nginx-error.log" \
		>"$logs/nginx-check.log" 2>&1; then
		servers_log "nginx rejects $conf"
		servers_tail "$logs/nginx-check.log"
		stop_nginx "$run"
		return 1
	fi
	setsid nginx -p "$srv" -c "$conf" -e "$logs/nginx-error.log" \
		</dev/null >>"$logs/nginx.stderr.log" 2>&1 &
	pid=$!
	echo "$pid" >"$srv/nginx.master.pid"
	SERVERS_NGINX_PID=$pid
	SERVERS_HTTP_PORT=$port
	if ! servers_wait_healthz "$port" "$pid" nginx; then
		servers_tail "$logs/nginx-error.log"
		servers_tail "$logs/nginx.stderr.log"
		servers_tail "$rlog"
		stop_nginx "$run"
		return 1
	fi
}

# --- Apache + mod_proxy_fcgi + the responder's own listener ----------------

# start_apache_proxy RUN_DIR LOG_DIR PORT CHARGE_BIN [THREADS]: the
# responder on its own unix socket (RUN_DIR/apache-proxy/sock/charge.sock,
# or TCP: SERVERS_APACHE_TRANSPORT, servers_listener;
# charge --listen, CHARGE_THREADS=THREADS when given, else the
# configuration's), supervised like start_nginx's, then Apache with
# conf/apache-proxy-fcgi.conf: mod_proxy_fcgi sends every request it holds
# to that one process at once, on kept-alive FastCGI connections. Logs:
# LOG_DIR/apache-proxy-error.log, apache-proxy-access.log, responder.log
# (the responder's stderr).
start_apache_proxy() {
	local run=$1 logs=$2 port=$3 bin=$4 threads=${5:-}
	local srv="$run/apache-proxy" rlog="$logs/responder.log" backend
	local transport=${SERVERS_APACHE_TRANSPORT:-unix} holder=0
	local -a env=()
	if [ ! -x "$bin" ]; then
		servers_log "responder binary $bin is missing or not executable"
		return 1
	fi
	mkdir -p "$run" "$logs" || return 1
	servers_is_root && { chmod a+x "$run" || return 1; }
	rm -rf "$srv"
	servers_worker_dir "$srv" "$srv/sock" || return 1
	[ -n "${SERVERS_HOLDER:-}" ] && holder=1
	servers_listener "$srv" "$bin" "$transport" "$holder" || return 1
	# the same address as mod_proxy_fcgi writes it
	if [ "$transport" = tcp ]; then
		backend="fcgi://$SERVERS_LISTEN"
	else
		backend="unix:$SERVERS_LISTEN|fcgi://localhost"
	fi
	[ -n "$threads" ] && env=(env "CHARGE_THREADS=$threads")
	if ! servers_supervise "$srv/responder.pid" "$rlog" \
		"${env[@]}" "${SERVERS_LISTEN_CMD[@]}"; then
		servers_log "the responder supervisor did not start"
		servers_tail "$rlog"
		return 1
	fi
	SERVERS_PROXY_SUPERVISOR_PID=$SERVERS_LAST_PID
	servers_wait_fcgi "$SERVERS_LISTEN" "$SERVERS_LAST_PID" ||
		{ servers_tail "$rlog"; stop_apache_proxy "$run"; return 1; }
	if ! STACK_FCGI_BACKEND=$backend servers_apache_run apache-proxy \
		"$SERVERS_ROOT/conf/apache-proxy-fcgi.conf" "$run" "$logs" "$port" \
		"$bin" 1 SetEnv; then
		servers_tail "$rlog"
		stop_apache_proxy "$run"
		return 1
	fi
	SERVERS_APACHE_PROXY_PID=$SERVERS_LAST_PID
	SERVERS_TOP_PID=$SERVERS_PROXY_SUPERVISOR_PID
	SERVERS_HTTP_PORT=$port
}

# stop_apache_proxy [RUN_DIR]: stops Apache (its kept FastCGI connections
# close), then the responder's supervisor (which TERMs the responder: it
# finishes the requests in flight).
stop_apache_proxy() {
	local run=${1:-} sup=$SERVERS_PROXY_SUPERVISOR_PID
	servers_apache_stop apache-proxy "$SERVERS_APACHE_PROXY_PID" "$run"
	[ -z "$sup" ] && [ -n "$run" ] && [ -f "$run/apache-proxy/responder.pid" ] &&
		sup=$(cat "$run/apache-proxy/responder.pid")
	stack_stop_pid "$sup" bash 10
	SERVERS_APACHE_PROXY_PID=
	SERVERS_PROXY_SUPERVISOR_PID=
}

# stop_nginx [RUN_DIR]: stops nginx (QUIT: graceful), then the responder's
# supervisor (which TERMs the responder: it finishes requests in hand).
stop_nginx() {
	local run=${1:-} pid=$SERVERS_NGINX_PID sup=$SERVERS_RESPONDER_SUPERVISOR_PID
	if [ -n "$run" ]; then
		[ -z "$pid" ] && [ -f "$run/nginx/nginx.master.pid" ] &&
			pid=$(cat "$run/nginx/nginx.master.pid")
		[ -z "$sup" ] && [ -f "$run/nginx/responder.pid" ] &&
			sup=$(cat "$run/nginx/responder.pid")
	fi
	stack_stop_pid "$pid" nginx 10 QUIT
	stack_stop_pid "$sup" bash 10
	SERVERS_NGINX_PID=
	SERVERS_RESPONDER_SUPERVISOR_PID=
}

# servers_worker_pids: the responder processes of the servers started here
# (mod_fcgid's processes, the CGI processes running right now, or the
# process behind nginx), one PID a line.
servers_worker_pids() {
	{
		servers_descendants "$SERVERS_APACHE_PID" charge
		servers_descendants "$SERVERS_APACHE_CGI_PID" charge
		servers_descendants "$SERVERS_RESPONDER_SUPERVISOR_PID" charge
		servers_descendants "$SERVERS_PROXY_SUPERVISOR_PID" charge
	} | sort -n
}

# servers_stop_all [RUN_DIR]: stops every server started here.
servers_stop_all() {
	stop_nginx "${1:-}"
	stop_apache_proxy "${1:-}"
	stop_apache "${1:-}"
	stop_apache_cgi "${1:-}"
}
