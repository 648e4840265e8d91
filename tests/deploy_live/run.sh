#!/usr/bin/env bash
# tests/deploy_live/run.sh - restarts under load without a failed request
# (suite "restart"). A socket holder (tests/deploy_live/holder.py) stands
# in for systemd's socket activation: it binds the FastCGI socket once and
# passes it to each responder it starts (LISTEN_FDS, LISTEN_PID,
# NOTIFY_SOCKET); a restart starts the new responder, waits for its
# READY=1, then sends SIGTERM to the old one, which finishes what it
# accepted and hands its kept FastCGI connections back (docs/deploying.md).
# Through each web server, as shipped in conf/ (nginx: upstream keepalive
# + fastcgi_keep_conn on; Apache mod_proxy_fcgi enablereuse=on; lighttpd),
# RESTART_CLIENTS clients send fresh charges on kept-alive HTTP connections
# for RESTART_LOAD_S seconds while the responder is restarted 3 times:
#   - 3 restarts, each new responder READY before the old one stopped;
#   - 0 failed requests at the client (every answer 201; Apache over TCP
#     on loopback, as docs/deploying.md advises for it);
#   - 0 lost outcomes: one ledger line per answered key, none for others;
#   - every acknowledged charge replayed byte for byte afterwards;
#   - every old responder exited 0.
# And (part readyz) /healthz and /readyz on a kept connection to a
# responder before and while it drains (tests/deploy_live/readyz.py); (part
# reload) API keys rotated by SIGHUP under load, a bad file and a key that
# cannot change live refused (tests/deploy_live/reload.py).
# Bounded: about 60 s. Prints TAP.
#   CHARGE_BIN=/path/charge tests/deploy_live/run.sh [nginx apache-proxy lighttpd]
#   HOLDER_FD0=1 CHARGE_BIN=/path/to/main/charge tests/deploy_live/run.sh
#       the socket as descriptor 0 instead, for a responder without socket
#       activation or READY=1 (main before issue 37): nginx's 502s show
#   RESTART_KEEP=1   the run directory is kept
#   RESTART_APACHE_UNIX=1  Apache connects to a unix socket instead of
#       127.0.0.1: the race docs/deploying.md describes shows (about one
#       run in three fails 1 to 4 requests)
set -uo pipefail

REPO=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../.." && pwd)
BIN=$(readlink -f "${CHARGE_BIN:-$REPO/build/charge}")
LOAD_S=${RESTART_LOAD_S:-8}
CLIENTS=${RESTART_CLIENTS:-8}
RESTARTS=3
PARTS=(nginx apache-proxy lighttpd readyz reload)
[ $# -gt 0 ] && PARTS=("$@")

# shellcheck source=tools/stack.sh
. "$REPO/tools/stack.sh"
stack_env_clear
# shellcheck source=tools/servers.sh
. "$REPO/tools/servers.sh"

RUN=
LHOLDER=
LOAD=(timeout -k 5 60 python3 "$REPO/tests/deploy_live/load.py")

bail() {
	echo "not ok - restart: $*"
	exit 1
}

cleanup() {
	trap - EXIT INT TERM
	servers_stop_all "$RUN"
	lighttpd_stop
	stack_redis_stop "$RUN"
	[ -n "$RUN" ] && [ -z "${RESTART_KEEP:-}" ] && rm -rf "$RUN"
}

# lighttpd_start PORT: the holder on RUN/lighttpd/charge.sock, then lighttpd
# with conf/lighttpd.conf pointed at that socket (no bin-path: lighttpd
# connects to a socket it does not own, a new connection per request).
lighttpd_start() {
	local port=$1 d="$RUN/lighttpd" i
	mkdir -p "$d" || return 1
	python3 "$RUN/holder.py" --unix "$d/charge.sock" --state "$d/holder" -- "$BIN" \
		</dev/null >>"$d/responder.log" 2>&1 &
	LHOLDER=$!
	for i in $(seq 1 100); do
		[ -S "$d/charge.sock" ] && grep -q '^ready' "$d/holder/events" 2>/dev/null && break
		sleep 0.1
	done
	awk '/^[[:space:]]*"bin-copy-environment"/ { skip = 1 }
		skip && /^[[:space:]]*\),?[[:space:]]*$/ { skip = 0; next }
		skip || /^[[:space:]]*"(bin-path|max-procs)"/ { next }
		{ print }' "$STACK_ROOT/conf/lighttpd.conf" >"$d/lighttpd.conf" || return 1
	grep -v '^[[:space:]]*#' "$d/lighttpd.conf" | grep -q 'bin-path\|bin-copy' &&
		{ echo "# lighttpd.conf: bin-path left"; return 1; }
	STACK_HTTP_PORT=$port STACK_WWW_DIR="$STACK_ROOT/www" STACK_RUN_DIR=$d STACK_LOG_DIR=$d \
		STACK_MAX_REQUEST_KIB=1024 STACK_PROVIDER_PORT=9 STACK_CHARGE_BIN=$BIN STACK_MAX_PROCS=1 \
		setsid lighttpd -D -f "$d/lighttpd.conf" </dev/null >>"$d/lighttpd.stderr.log" 2>&1 &
	echo $! >"$d/lighttpd.pid"
	for i in $(seq 1 100); do
		[ "$(stack_http_status "http://127.0.0.1:$port/healthz")" = 200 ] && return 0
		sleep 0.1
	done
	tail -5 "$d/lighttpd-error.log" "$d/lighttpd.stderr.log" 2>/dev/null | sed 's/^/# /'
	return 1
}

lighttpd_stop() {
	[ -n "$RUN" ] && [ -f "$RUN/lighttpd/lighttpd.pid" ] &&
		stack_stop_pid "$(cat "$RUN/lighttpd/lighttpd.pid")" lighttpd 5
	[ -n "$LHOLDER" ] && stack_stop_pid "$LHOLDER" python3 20
	LHOLDER=
}

# part SERVER: start it behind the holder, load, restart 3 times, check.
part() {
	local scen=$1 port holder events out started=0 t0 i n line
	port=$(stack_port_pick) || { echo "not ok - [$scen] no free port"; return; }
	export CHARGE_PROVIDER_LEDGER="$RUN/ledger-$scen.log"
	: >"$CHARGE_PROVIDER_LEDGER"
	servers_is_root && chown "$SERVERS_WORKER_USER:$SERVERS_WORKER_GROUP" "$CHARGE_PROVIDER_LEDGER"
	case $scen in
	nginx)
		SERVERS_NGINX_UPSTREAM=holder start_nginx "$RUN" "$RUN/logs-$scen" "$port" "$BIN" 2 \
			2>"$RUN/start.err" && started=1
		holder=$(cat "$RUN/nginx/responder.pid.child" 2>/dev/null)
		events="$RUN/nginx/holder/events" ;;
	apache-proxy)
		# TCP on loopback, as docs/deploying.md advises for Apache
		# (RESTART_APACHE_UNIX=1: the unix socket, where the race remains)
		SERVERS_APACHE_TRANSPORT=$([ -n "${RESTART_APACHE_UNIX:-}" ] && echo unix || echo tcp) \
			start_apache_proxy "$RUN" "$RUN/logs-$scen" "$port" "$BIN" 2 2>"$RUN/start.err" && started=1
		holder=$(cat "$RUN/apache-proxy/responder.pid.child" 2>/dev/null)
		events="$RUN/apache-proxy/holder/events" ;;
	lighttpd)
		lighttpd_start "$port" >"$RUN/start.err" 2>&1 && started=1
		holder=$LHOLDER
		events="$RUN/lighttpd/holder/events" ;;
	esac
	if [ "$started" != 1 ] || [ -z "$holder" ]; then
		echo "not ok - [$scen] the server starts behind the socket holder"
		sed 's/^/#   /' "$RUN/start.err" | tail -30
		return
	fi
	out="$RUN/load-$scen.jsonl"
	t0=$SECONDS
	"${LOAD[@]}" load "http://127.0.0.1:$port" "$LOAD_S" "$CLIENTS" "$out" &
	local lpid=$!
	# restarts spread over the load, each once the previous one is done
	for i in $(seq 1 $RESTARTS); do
		sleep "$(awk -v s="$LOAD_S" -v r=$RESTARTS 'BEGIN { printf "%.2f", s / (r + 1) * 0.8 }')"
		kill -USR2 "$holder"
		for n in $(seq 1 100); do
			[ "$(grep -c '^restart' "$events")" -ge "$i" ] && break
			grep -q '^error' "$events" && break
			sleep 0.05
		done
	done
	wait "$lpid"
	echo "# [$scen] load and restarts took $((SECONDS - t0)) s"
	# the last old responder finishes within its drain
	for n in $(seq 1 100); do
		[ "$(grep -c '^exit' "$events")" -ge $RESTARTS ] && break
		sleep 0.1
	done
	n=$(grep -c '^restart' "$events")
	if [ "$n" = $RESTARTS ] && ! grep -q '^error' "$events"; then
		echo "ok - [$scen] $RESTARTS restarts, each new responder READY=1 before SIGTERM to the old ($(awk '/^restart/ { printf "%s%s ms", s, $5; s = ", " }' "$events"))"
	else
		echo "not ok - [$scen] $RESTARTS restarts, each new responder READY=1 before SIGTERM to the old"
		sed 's/^/#   /' "$events"
	fi
	line=$("${LOAD[@]}" summary "$out")
	n=$(echo "$line" | awk 'NR == 1 { print $6 }')
	if [ "$n" = 0 ] && [ "$(echo "$line" | awk 'NR == 1 { print $4 }')" -gt 0 ]; then
		echo "ok - [$scen] 0 failed requests at the client ($(echo "$line" | head -1))"
	else
		echo "not ok - [$scen] 0 failed requests at the client"
		echo "$line" | sed 's/^/#   /'
		grep -h -i 'error\|crit' "$RUN/logs-$scen"/*error*.log 2>/dev/null | tail -5 | sed 's/^/#   /'
	fi
	line=$("${LOAD[@]}" ledger "$out" "$CHARGE_PROVIDER_LEDGER")
	if echo "$line" | head -1 | grep -q ' unanswered 0 doubled 0 missing 0$'; then
		echo "ok - [$scen] 0 lost outcomes: one ledger line per answered charge ($(echo "$line" | head -1))"
	else
		echo "not ok - [$scen] 0 lost outcomes"
		echo "$line" | sed 's/^/#   /'
	fi
	line=$("${LOAD[@]}" replay "http://127.0.0.1:$port" "$out")
	if echo "$line" | head -1 | grep -q ' mismatched 0$'; then
		echo "ok - [$scen] every acknowledged charge replayed byte for byte ($(echo "$line" | head -1))"
	else
		echo "not ok - [$scen] every acknowledged charge replayed byte for byte"
		echo "$line" | sed 's/^/#   /'
	fi
	n=$(awk '/^exit/ && $3 != 0' "$events" | wc -l)
	if [ "$n" = 0 ] && [ "$(grep -c '^exit' "$events")" -ge $RESTARTS ]; then
		echo "ok - [$scen] every old responder exited 0"
	else
		echo "not ok - [$scen] every old responder exited 0"
		sed 's/^/#   /' "$events"
	fi
	case $scen in
	nginx) stop_nginx "$RUN" ;;
	apache-proxy) stop_apache_proxy "$RUN" ;;
	lighttpd) lighttpd_stop ;;
	esac
}

# readyz: charge --listen on a socket of its own, then readyz.py.
readyz() {
	local sock="$RUN/readyz.sock" pid i
	"$BIN" --listen "$sock" 2>>"$RUN/readyz.log" &
	pid=$!
	for i in $(seq 1 100); do
		[ -S "$sock" ] && break
		sleep 0.05
	done
	timeout -k 2 20 python3 "$REPO/tests/deploy_live/readyz.py" "$sock" "$pid" ||
		echo "not ok - readyz.py exited with status $?"
	for i in $(seq 1 100); do
		stack_pid_alive "$pid" || break
		sleep 0.05
	done
	stack_stop_pid "$pid" charge 3
}

# reload: the holder and one responder reading RUN/reload/charge.conf
# (api_keys_file, log_level, provider_secret set there, not in the
# environment), then reload.py.
reload() {
	local d="$RUN/reload" pid i
	mkdir -p "$d" || return
	printf 'api_keys_file = %s\nlog_level = warn\nprovider_secret = reload-one\n' "$d/api-keys" \
		>"$d/charge.conf"
	stack_api_keys_write "$d/api-keys" demo sk_test_rotate_old
	(unset CHARGE_API_KEYS_FILE CHARGE_LOG_LEVEL CHARGE_PROVIDER_SECRET
		export CHARGE_CONF="$d/charge.conf" CHARGE_PROVIDER_LEDGER="$d/ledger.log"
		exec python3 "$RUN/holder.py" --unix "$d/charge.sock" --state "$d/holder" -- "$BIN" \
			</dev/null >>"$d/responder.log" 2>&1) &
	pid=$!
	for i in $(seq 1 100); do
		grep -q '^ready' "$d/holder/events" 2>/dev/null && break
		sleep 0.05
	done
	timeout -k 2 30 python3 "$REPO/tests/deploy_live/reload.py" "$d/charge.sock" "$pid" \
		"$d/charge.conf" "$d/api-keys" "$d/holder/events" "$d/responder.log" ||
		echo "not ok - reload.py exited with status $?"
	stack_stop_pid "$pid" python3 10
}

main() {
	local p t0
	[ -x "$BIN" ] || bail "responder binary $BIN not found (build it, or set CHARGE_BIN)"
	RUN=$(stack_rundir_create) || bail "cannot create a run directory"
	trap cleanup EXIT
	trap 'exit 130' INT TERM
	mkdir -p "$RUN/spill"
	stack_api_keys_write "$RUN/api-keys" demo sk_test_demo || bail "api-keys"
	cp "$REPO/tests/deploy_live/holder.py" "$RUN/holder.py" || bail "holder.py"
	export SERVERS_HOLDER="$RUN/holder.py"
	export CHARGE_REDIS_URL="unix://$RUN/redis.sock" CHARGE_SPILL_DIR="$RUN/spill"
	export CHARGE_API_KEYS_FILE="$RUN/api-keys" CHARGE_PROVIDER_LATENCY_MS=20
	export CHARGE_METRICS_FILE=none CHARGE_LOG_LEVEL=warn CHARGE_THREADS=2
	export CHARGE_DRAIN_TIMEOUT_MS=5000
	"$BIN" --check-config >"$RUN/check-config.txt" 2>&1 ||
		{ sed 's/^/# /' "$RUN/check-config.txt"; bail "charge --check-config rejects the configuration"; }
	servers_share_rundir "$RUN" || bail "cannot share $RUN with the server's user"
	servers_stage_repo "$RUN" "$BIN" || bail "cannot stage the checkout"
	BIN=$SERVERS_BIN
	servers_redis_start "$RUN" "$RUN/redis" "$RUN" 2>"$RUN/start.err" ||
		{ sed 's/^/# /' "$RUN/start.err"; bail "redis-server did not start"; }
	echo "# restart: responder $BIN, $CLIENTS clients for $LOAD_S s, $RESTARTS restarts per server"
	for p in "${PARTS[@]}"; do
		t0=$SECONDS
		case $p in
		nginx|apache-proxy|lighttpd) part "$p" ;;
		readyz) readyz ;;
		reload) reload ;;
		*) echo "not ok - unknown part $p (want: ${PARTS[*]})" ;;
		esac
		echo "# $p: $((SECONDS - t0)) s"
	done
}

main 2>&1 | stack_tap_number | tee "${TMPDIR:-/tmp}/charge-restart.$$.tap"
tapf="${TMPDIR:-/tmp}/charge-restart.$$.tap"
rc=0
grep -q '^not ok' "$tapf" && rc=1
rm -f "$tapf"
exit $rc
