#!/usr/bin/env bash
# tests/concurrency/run.sh - many requests at once against the event-driven
# responder, with a real Redis, through each web server and straight to its
# own socket. Prints TAP (tests/concurrency/client.py does the requests).
#
#   1. CONC_N (1 000) fresh charges at once, provider latency 500 ms, through
#      lighttpd (bin-path, 2 processes), nginx (kept-alive FastCGI
#      connections) and Apache + mod_proxy_fcgi: every answer 201 within
#      2 s of the first request's start, one ledger line per key, and no
#      responder process ever runs more than 1 + threads + io_threads
#      threads (threads = io_threads = 2; /proc/<pid>/task sampled).
#   2. max_inflight = 10, 40 charges at once straight to `charge --listen`:
#      30 answered 503 service-unavailable with Retry-After, nothing
#      claimed or charged for them, charge_overloaded_total +30; 10 x 201.
#   3. SIGTERM while 500 charges (latency 1 000 ms) wait on the provider:
#      all answered 201, one ledger line each, exit status 0.
#
#   CHARGE_BIN=/path/charge tests/concurrency/run.sh   (default build/charge:
#                                                      no sanitizers, for speed)
#   tests/concurrency/run.sh lighttpd overload         some parts only
#                                 (lighttpd nginx apache-proxy overload drain)
#   CONC_THREAD_LIMIT=1           the thread check must then fail
#   CONC_MAX_INFLIGHT=            (empty) max_inflight left at its default:
#                                 the 503 checks must then fail
#   CONC_DRAIN_TIMEOUT_MS=100     the drain checks must then fail
set -uo pipefail

REPO=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../.." && pwd)
BIN=$(readlink -f "${CHARGE_BIN:-$REPO/build/charge}")
N=${CONC_N:-1000}
LATENCY_MS=500
THREADS=2
IO_THREADS=2
THREAD_LIMIT=${CONC_THREAD_LIMIT:-$((1 + THREADS + IO_THREADS))}
MAX_INFLIGHT=${CONC_MAX_INFLIGHT-10}
N_OVER=40
N_DRAIN=500
DRAIN_LATENCY_MS=1000
PARTS=(lighttpd nginx apache-proxy overload drain)
[ $# -gt 0 ] && PARTS=("$@")

# shellcheck source=tools/stack.sh
. "$REPO/tools/stack.sh"
stack_env_clear
# shellcheck source=tools/servers.sh
. "$REPO/tools/servers.sh"

CLIENT=(timeout -k 5 60 python3 "$REPO/tests/concurrency/client.py")
RUN=
PID=

bail() {
	echo "not ok - concurrency: $*"
	exit 1
}

cleanup() {
	trap - EXIT INT TERM
	[ -n "$PID" ] && stack_stop_pid "$PID" charge 5
	stack_lighttpd_stop "$RUN"
	servers_stop_all "$RUN"
	stack_redis_stop "$RUN"
	[ -n "$RUN" ] && rm -rf "$RUN"
}

# listen SOCKET: charge --listen SOCKET in the background (this shell's
# CHARGE_*); sets PID, waits (5 s) for the socket.
listen() {
	rm -f "$1"
	"$BIN" --listen "$1" 2>>"$RUN/listener.log" &
	PID=$!
	for _ in $(seq 1 100); do
		[ -S "$1" ] && return 0
		stack_pid_alive "$PID" || break
		sleep 0.05
	done
	return 1
}

# burst SERVER: N fresh charges at once through SERVER.
burst() {
	local scen=$1 port top started=0 t0
	port=$(stack_port_pick) || { echo "not ok - [$scen] no free port"; return; }
	export CHARGE_PROVIDER_LEDGER="$RUN/ledger-$scen.log"
	export CHARGE_METRICS_FILE="$RUN/metrics-$scen.shm"
	t0=$SECONDS
	case $scen in
	lighttpd)
		stack_lighttpd_start "$RUN" "$RUN" "$port" "$BIN" 2 2>"$RUN/start.err" && started=1
		top=$STACK_LIGHTTPD_PID ;;
	nginx)
		start_nginx "$RUN" "$RUN" "$port" "$BIN" "$THREADS" 2>"$RUN/start.err" && started=1
		top=$SERVERS_TOP_PID ;;
	apache-proxy)
		start_apache_proxy "$RUN" "$RUN" "$port" "$BIN" "$THREADS" 2>"$RUN/start.err" && started=1
		top=$SERVERS_TOP_PID ;;
	esac
	if [ "$started" != 1 ]; then
		echo "not ok - [$scen] the server starts"
		sed 's/^/#   /' "$RUN/start.err" | tail -30
		return
	fi
	echo "# [$scen] started on 127.0.0.1:$port in $((SECONDS - t0)) s"
	"${CLIENT[@]}" burst "http://127.0.0.1:$port" "$N" "conc-$scen-$RANDOM$RANDOM" "$scen" \
		--ledger "$CHARGE_PROVIDER_LEDGER" --top "$top" --thread-limit "$THREAD_LIMIT" \
		--within 2 || echo "not ok - [$scen] client.py exited with status $?"
	case $scen in
	nginx) kept "$scen" "$RUN/nginx/sock/charge.sock" ;;
	apache-proxy) kept "$scen" "$RUN/apache-proxy/sock/charge.sock" ;;
	esac
	case $scen in
	lighttpd) stack_lighttpd_stop "$RUN" ;;
	nginx) stop_nginx "$RUN" ;;
	apache-proxy) stop_apache_proxy "$RUN" ;;
	esac
}

# kept SERVER SOCKET: the server keeps FastCGI connections to the
# responder's socket open after the burst (nginx: keepalive; Apache:
# enablereuse): the responder's ends of them, connected sockets bound to
# SOCKET in /proc/net/unix (state 03).
kept() {
	local n
	sleep 0.5
	n=$(awk -v p="$2" '$NF == p && $6 == "03"' /proc/net/unix | wc -l)
	if [ "$n" -gt 0 ]; then
		echo "ok - [$1] FastCGI connections are kept open after the burst ($n)"
	else
		echo "not ok - [$1] FastCGI connections are kept open after the burst (none: keep-alive off?)"
	fi
}

overload() {
	export CHARGE_PROVIDER_LEDGER="$RUN/ledger-overload.log"
	export CHARGE_METRICS_FILE="$RUN/metrics-overload.shm"
	if [ -n "$MAX_INFLIGHT" ]; then
		export CHARGE_MAX_INFLIGHT=$MAX_INFLIGHT
	else
		unset CHARGE_MAX_INFLIGHT
	fi
	listen "$RUN/overload.sock" ||
		{ echo "not ok - max_inflight: the listener starts"; tail -5 "$RUN/listener.log" | sed 's/^/#   /'; return; }
	"${CLIENT[@]}" overload "$RUN/overload.sock" "$N_OVER" "over-$RANDOM$RANDOM" \
		"${MAX_INFLIGHT:-10}" --ledger "$CHARGE_PROVIDER_LEDGER" ||
		echo "not ok - max_inflight: client.py exited with status $?"
	unset CHARGE_MAX_INFLIGHT
	stack_stop_pid "$PID" charge 5
	PID=
}

drain() {
	local rc i
	export CHARGE_PROVIDER_LEDGER="$RUN/ledger-drain.log"
	export CHARGE_METRICS_FILE="$RUN/metrics-drain.shm"
	[ -n "${CONC_DRAIN_TIMEOUT_MS:-}" ] && export CHARGE_DRAIN_TIMEOUT_MS=$CONC_DRAIN_TIMEOUT_MS
	CHARGE_PROVIDER_LATENCY_MS=$DRAIN_LATENCY_MS listen "$RUN/drain.sock" ||
		{ echo "not ok - drain: the listener starts"; tail -5 "$RUN/listener.log" | sed 's/^/#   /'; return; }
	"${CLIENT[@]}" drain "$RUN/drain.sock" "$N_DRAIN" "drain-$RANDOM$RANDOM" "$PID" \
		--ledger "$CHARGE_PROVIDER_LEDGER" --redis "$RUN/redis.sock" ||
		echo "not ok - drain: client.py exited with status $?"
	unset CHARGE_DRAIN_TIMEOUT_MS
	# drain_timeout_ms (default 15 s) bounds it; 20 s here
	for i in $(seq 1 200); do
		stack_pid_alive "$PID" || break
		sleep 0.1
	done
	if stack_pid_alive "$PID"; then
		echo "not ok - ... and the listener exits 0 (still running 20 s after SIGTERM)"
		stack_stop_pid "$PID" charge 1
	else
		wait "$PID"
		rc=$?
		if [ "$rc" = 0 ]; then
			echo "ok - ... and the listener exits 0"
		else
			echo "not ok - ... and the listener exits 0 (status $rc)"
			tail -5 "$RUN/listener.log" | sed 's/^/#   /'
		fi
	fi
	PID=
}

main() {
	local part
	[ -x "$BIN" ] || bail "responder binary $BIN not found (build it, or set CHARGE_BIN)"
	# 1 000 client sockets here, two descriptors per request in each server
	ulimit -n "$(ulimit -Hn)" 2>/dev/null
	[ "$(ulimit -n)" = unlimited ] || [ "$(ulimit -n)" -ge $((4 * N + 256)) ] ||
		bail "ulimit -n is $(ulimit -n); $((4 * N + 256)) descriptors needed"
	RUN=$(stack_rundir_create) || bail "cannot create a run directory"
	trap cleanup EXIT
	trap 'exit 130' INT TERM
	mkdir -p "$RUN/spill"
	stack_api_keys_write "$RUN/api-keys" demo sk_test_demo || bail "api-keys"
	export CHARGE_REDIS_URL="unix://$RUN/redis.sock" CHARGE_SPILL_DIR="$RUN/spill"
	export CHARGE_API_KEYS_FILE="$RUN/api-keys" CHARGE_PROVIDER_LATENCY_MS=$LATENCY_MS
	export CHARGE_PROVIDER_TIMEOUT_MS=5000 CHARGE_LOG_LEVEL=warn
	export CHARGE_THREADS=$THREADS CHARGE_IO_THREADS=$IO_THREADS
	"$BIN" --check-config >"$RUN/check-config.txt" 2>&1 ||
		{ sed 's/^/# /' "$RUN/check-config.txt"; bail "charge --check-config rejects the configuration"; }
	# Apache and nginx serve as nobody when root: the run dir and Redis too
	servers_share_rundir "$RUN" || bail "cannot share $RUN with the server's user"
	servers_stage_repo "$RUN" "$BIN" || bail "cannot stage the checkout"
	BIN=$SERVERS_BIN
	servers_redis_start "$RUN" "$RUN/redis" "$RUN" 2>"$RUN/start.err" ||
		{ sed 's/^/# /' "$RUN/start.err"; bail "redis-server did not start"; }
	echo "# concurrency: responder $BIN, threads $THREADS, io_threads $IO_THREADS, thread limit $THREAD_LIMIT"
	for part in "${PARTS[@]}"; do
		local t0=$SECONDS
		case $part in
		lighttpd|nginx|apache-proxy) burst "$part" ;;
		overload) overload ;;
		drain) drain ;;
		*) echo "not ok - unknown part $part (want: ${PARTS[*]})" ;;
		esac
		echo "# $part: $((SECONDS - t0)) s"
	done
}

main 2>&1 | stack_tap_number | tee "${TMPDIR:-/tmp}/charge-concurrency.$$.tap"
tapf="${TMPDIR:-/tmp}/charge-concurrency.$$.tap"
rc=0
grep -q '^not ok' "$tapf" && rc=1
rm -f "$tapf"
exit $rc
