#!/usr/bin/env bash
# tests/signals/run.sh - the standalone listener (charge --listen) and its
# signals, with a real Redis: SIGTERM while idle exits at once; SIGTERM (and
# SIGUSR1) during a charge lets the charge finish, answers it, records it,
# then exits; threads serve at once. Requests go straight to the FastCGI
# socket with cgi-fcgi (libfcgi-bin). Prints TAP.
#   CHARGE_BIN=build-asan/charge tests/signals/run.sh
set -uo pipefail
REPO=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../.." && pwd)
BIN=$(readlink -f "${CHARGE_BIN:-$REPO/build/charge}")
# shellcheck source=tools/stack.sh
. "$REPO/tools/stack.sh"
stack_env_clear

N=0 FAILED=0 PID=
ok() { N=$((N + 1)); echo "ok $N - $1"; }
notok() { N=$((N + 1)); FAILED=$((FAILED + 1)); echo "not ok $N - $1"; [ -n "${2:-}" ] && printf '%s\n' "$2" | sed 's/^/#   /'; }

RUN=$(stack_rundir_create) || { echo "not ok 1 - run directory"; exit 1; }
cleanup() {
	[ -n "$PID" ] && stack_stop_pid "$PID" charge 3
	stack_redis_stop "$RUN"
	rm -rf "$RUN"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

LATENCY_MS=600
export CHARGE_REDIS_URL="unix://$RUN/redis.sock" CHARGE_SPILL_DIR="$RUN/spill"
export CHARGE_PROVIDER_LEDGER="$RUN/ledger.log" CHARGE_METRICS_FILE=none
export CHARGE_PROVIDER_LATENCY_MS=$LATENCY_MS CHARGE_THREADS=2 CHARGE_LOG_LEVEL=warn
mkdir -p "$RUN/spill"
stack_redis_start "$RUN" "$RUN/redis" "$RUN" 2>"$RUN/stack.err" ||
	{ sed 's/^/# /' "$RUN/stack.err"; echo "not ok 1 - redis-server did not start"; exit 1; }

now_ms() { date +%s%3N; }

# start_listener: charge --listen on a free port; sets PID and ADDR.
start_listener() {
	ADDR="127.0.0.1:$(stack_port_pick)"
	"$BIN" --listen "$ADDR" 2>>"$RUN/charge.log" &
	PID=$!
	for _ in $(seq 1 50); do
		stack_port_in_use "${ADDR#*:}" && return 0
		sleep 0.05
	done
	return 1
}

# charge KEY OUTFILE: one POST /charge straight to the FastCGI socket.
charge() {
	local body='{"amount":1999,"currency":"usd","source":"tok_visa"}'
	printf '%s' "$body" | env -i REQUEST_METHOD=POST REQUEST_URI=/charge \
		CONTENT_TYPE=application/json CONTENT_LENGTH=${#body} \
		HTTP_AUTHORIZATION="Bearer sk_test_demo" HTTP_IDEMPOTENCY_KEY="$1" \
		cgi-fcgi -bind -connect "$ADDR" >"$2" 2>&1
}

# exited_within PID MS: true when PID is gone within MS milliseconds.
exited_within() {
	local end=$(( $(now_ms) + $2 ))
	while [ "$(now_ms)" -lt "$end" ]; do
		stack_pid_alive "$1" || return 0
		sleep 0.02
	done
	return 1
}

# 1. SIGTERM while idle
start_listener || notok "listener starts on a free port" "$(tail -5 "$RUN/charge.log")"
t0=$(now_ms)
kill -TERM "$PID"
if exited_within "$PID" 1000; then
	wait "$PID"; rc=$?
	[ $rc -eq 0 ] && ok "SIGTERM while idle: exits 0 within $(( $(now_ms) - t0 )) ms" ||
		notok "SIGTERM while idle: exit status $rc"
else
	notok "SIGTERM while idle: still running after 1 s"
fi
PID=

# 2. SIGTERM and SIGUSR1 during a charge: the charge finishes, then exit
for sig in TERM USR1; do
	start_listener || { notok "listener starts"; continue; }
	key="sig-$sig-$RANDOM$RANDOM"
	charge "$key" "$RUN/out-$sig" &
	cpid=$!
	sleep 0.2                         # the provider call is under way
	t0=$(now_ms)
	kill -"$sig" "$PID"
	wait "$cpid"
	if grep -q '^Status: 201' "$RUN/out-$sig" && grep -q 'Idempotent-Replayed: false' "$RUN/out-$sig"; then
		ok "SIG$sig during a charge: the charge is answered 201"
	else
		notok "SIG$sig during a charge: the charge is answered 201" "$(head -c 600 "$RUN/out-$sig")"
	fi
	state=$(redis-cli -s "$RUN/redis.sock" HGET "charge:idem:demo:$key" state)
	lines=$(grep -c "	$key	" "$RUN/ledger.log")
	[ "$state" = completed ] && [ "$lines" = 1 ] &&
		ok "SIG$sig during a charge: recorded completed, one ledger line" ||
		notok "SIG$sig during a charge: recorded completed, one ledger line" "state=$state ledger lines=$lines"
	if exited_within "$PID" 3000; then
		wait "$PID"; rc=$?
		[ $rc -eq 0 ] && ok "SIG$sig during a charge: exits 0 after answering" ||
			notok "SIG$sig during a charge: exit status $rc"
	else
		notok "SIG$sig during a charge: still running 3 s later"
	fi
	PID=
done

CLIENT="python3 $REPO/tests/signals/client.py"
# wait_ready FILE: until the client made its first connection (it creates
# FILE), at most 5 s: an interpreter slow to start (a python3 shim, a
# loaded machine) must not make the signal come before the request
wait_ready() {
	local i
	for i in $(seq 1 100); do
		[ -e "$1" ] && return 0
		sleep 0.05
	done
	return 1
}
stop_listener() {
	[ -n "$PID" ] && stack_stop_pid "$PID" charge 3
	PID=
}

# 3. threads = 2: two charges at once take one provider latency, not two
start_listener || notok "listener starts"
t0=$(now_ms)
charge "par-a-$RANDOM$RANDOM" "$RUN/out-a" & a=$!
charge "par-b-$RANDOM$RANDOM" "$RUN/out-b" & b=$!
wait "$a" "$b"
ms=$(( $(now_ms) - t0 ))
if grep -q '^Status: 201' "$RUN/out-a" && grep -q '^Status: 201' "$RUN/out-b" &&
	[ "$ms" -lt $((2 * LATENCY_MS - 100)) ]; then
	ok "threads = 2: two charges served at once ($ms ms for two ${LATENCY_MS}-ms provider calls)"
else
	notok "threads = 2: two charges served at once" "took $ms ms; $(head -1 "$RUN/out-a") / $(head -1 "$RUN/out-b")"
fi
stop_listener


# 4. request_timeout_ms: a client that never finishes its body gets 408 and
#    frees the worker (threads = 1, so the next request needs that worker)
CHARGE_THREADS=1 CHARGE_REQUEST_TIMEOUT_MS=1000 start_listener || notok "listener starts"
read -r st secs < <($CLIENT stall-body "$ADDR" "stall-$RANDOM$RANDOM")
if [ "$st" = 408 ] && awk -v s="$secs" 'BEGIN { exit !(s >= 0.9 && s < 3) }'; then
	ok "a body that never completes: 408 after request_timeout_ms (${secs} s)"
else
	notok "a body that never completes: 408 after request_timeout_ms" "got '$st' after ${secs} s"
fi
st=$($CLIENT one "$ADDR" "after-stall-$RANDOM$RANDOM")
[ "$st" = 201 ] && ok "after the 408 the worker serves the next request" ||
	notok "after the 408 the worker serves the next request" "got '$st'"
# a stop and continue while the body is awaited interrupts the read
# (EINTR on a socket with a receive timeout): still 408, never a 400
$CLIENT stall-body "$ADDR" "stop-$RANDOM$RANDOM" >"$RUN/stop.out" & cpid=$!
sleep 0.3
kill -STOP "$PID"
sleep 0.2
kill -CONT "$PID"
wait "$cpid"
read -r st secs <"$RUN/stop.out"
[ "$st" = 408 ] && ok "SIGSTOP and SIGCONT while a body is awaited: 408 (${secs} s)" ||
	notok "SIGSTOP and SIGCONT while a body is awaited: 408" "got '$st' after ${secs} s"
stop_listener

# 5. SIGTERM while a connection is accepted and its params are still being
#    read: that request is answered (no signal interrupts libfcgi's read)
CHARGE_PROVIDER_LATENCY_MS=0 CHARGE_THREADS=4 start_listener || notok "listener starts"
SIGNALS_READY="$RUN/slow.ready" $CLIENT slow-params "$ADDR" "slow-$RANDOM$RANDOM" 0.6 >"$RUN/slow.out" & cpid=$!
wait_ready "$RUN/slow.ready"
sleep 0.1
kill -TERM "$PID"
wait "$cpid"
st=$(cat "$RUN/slow.out")
[ "$st" = 201 ] && ok "SIGTERM while params are being read: the request is answered 201" ||
	notok "SIGTERM while params are being read: the request is answered 201" "got '$st'"
if exited_within "$PID" 3000; then
	wait "$PID"; rc=$?
	[ $rc -eq 0 ] && ok "... and the listener then exits 0" || notok "... and the listener then exits 0" "status $rc"
else
	notok "... and the listener then exits 0" "still running 3 s later"
fi
PID=

# 6. SIGTERM during a burst: every request is answered or was never
#    accepted (refused or reset); none is dropped after being accepted
CHARGE_PROVIDER_LATENCY_MS=50 CHARGE_THREADS=4 start_listener || notok "listener starts"
SIGNALS_READY="$RUN/burst.ready" $CLIENT burst "$ADDR" 40 "burst-$RANDOM$RANDOM" >"$RUN/burst.out" & cpid=$!
wait_ready "$RUN/burst.ready"
sleep 0.1
kill -TERM "$PID"
wait "$cpid"
answered=$(grep -c '^[0-9]' "$RUN/burst.out")
dropped=$(grep -vc -e '^[0-9]' -e '^RESET$' "$RUN/burst.out")
bad=$(grep '^[0-9]' "$RUN/burst.out" | grep -vc '^201$')
if [ "$dropped" = 0 ] && [ "$bad" = 0 ] && [ "$answered" -gt 0 ]; then
	ok "SIGTERM during a burst of 40: $answered answered 201, $((40 - answered)) never accepted, none dropped"
else
	notok "SIGTERM during a burst: none dropped after accept" "$(sort "$RUN/burst.out" | uniq -c)"
fi
exited_within "$PID" 5000 && ok "... and the listener exits" || notok "... and the listener exits"
PID=

# 7. fd exhaustion: with no descriptor left accept() fails with EMFILE; the
#    listener logs it, keeps retrying, and serves once descriptors are back
CHARGE_PROVIDER_LATENCY_MS=0 CHARGE_THREADS=4 start_listener || notok "listener starts"
st=$($CLIENT one "$ADDR" "warm-$RANDOM$RANDOM")   # Redis connections opened
# RLIMIT_NOFILE bounds the descriptor's number: a limit at the lowest free
# number leaves accept() nothing to allocate
free=0
while [ -e /proc/"$PID"/fd/$free ]; do free=$((free + 1)); done
hard=$(prlimit --pid "$PID" --nofile --output HARD --noheadings | tr -d ' ')
prlimit --pid "$PID" --nofile=$free:"$hard"
$CLIENT burst "$ADDR" 8 "emfile-$RANDOM$RANDOM" >"$RUN/emfile.out" & cpid=$!
sleep 1
alive_during=0
stack_pid_alive "$PID" && alive_during=1
prlimit --pid "$PID" --nofile=1024:"$hard"
wait "$cpid"
served=$(grep -c '^201$' "$RUN/emfile.out")
if [ "$alive_during" = 1 ] && [ "$served" = 8 ] && stack_pid_alive "$PID"; then
	ok "fd exhaustion: the listener stays up and serves all 8 requests once descriptors are back"
else
	notok "fd exhaustion: the listener stays up and serves all 8 requests" \
		"alive during: $alive_during; answers: $(sort "$RUN/emfile.out" | uniq -c | tr '\n' ' ')"
fi
grep -q 'accept: Too many open files' "$RUN/charge.log" &&
	ok "fd exhaustion is logged" || notok "fd exhaustion is logged" "$(tail -3 "$RUN/charge.log")"
stop_listener

# 8. an evicting Redis is refused at start-up, before any request
EVICT="$RUN/evict"
mkdir -p "$EVICT"
redis-server --port 0 --unixsocket "$EVICT/redis.sock" --dir "$EVICT" --save '' \
	--appendonly no --maxmemory-policy allkeys-lru --daemonize no >"$EVICT/log" 2>&1 & epid=$!
for _ in $(seq 1 50); do [ -S "$EVICT/redis.sock" ] && break; sleep 0.05; done
CHARGE_REDIS_URL="unix://$EVICT/redis.sock" start_listener
if exited_within "$PID" 3000; then
	wait "$PID"; rc=$?
	if [ $rc -ne 0 ] && tail -5 "$RUN/charge.log" | grep -q 'allkeys-lru'; then
		ok "an evicting Redis stops the start (exit $rc, policy named in the log)"
	else
		notok "an evicting Redis stops the start" "exit $rc; $(tail -3 "$RUN/charge.log")"
	fi
else
	notok "an evicting Redis stops the start" "still running 3 s after start"
	stop_listener
fi
PID=
kill "$epid" 2>/dev/null; wait "$epid" 2>/dev/null

# 8b. spill garbage collection runs in every process, idle or not: an
#     orphaned spill file (a valid name, written two hours ago) put into
#     spill_dir after the start-up pass is removed within
#     spill_gc_interval_s, while no request is served
CHARGE_SPILL_GC_INTERVAL_S=1 CHARGE_COMPLETED_TTL_S=1 CHARGE_FAILED_TTL_S=1 \
	start_listener || notok "listener starts"
sleep 0.3
orphan="$RUN/spill/$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n').body"
printf 'orphan' >"$orphan" && touch -d '2 hours ago' "$orphan"
for _ in $(seq 1 40); do [ -e "$orphan" ] || break; sleep 0.1; done
if [ ! -e "$orphan" ]; then
	ok "spill GC in an idle process: an orphaned file is removed within spill_gc_interval_s"
else
	notok "spill GC in an idle process: an orphaned file is removed within spill_gc_interval_s" \
		"$(ls -l "$RUN/spill")"
	rm -f "$orphan"
fi
stop_listener

# 8c. the params of a request are bounded by request_timeout_ms on a unix
#     socket too: params that stall close the connection, and the listener
#     serves the next request
UADDR="$RUN/charge-params.sock"
CHARGE_REQUEST_TIMEOUT_MS=1000 "$BIN" --listen "$UADDR" 2>>"$RUN/charge.log" & PID=$!
for _ in $(seq 1 50); do [ -S "$UADDR" ] && break; sleep 0.05; done
read -r st secs < <($CLIENT stall-params "$UADDR" "stallp-$RANDOM$RANDOM")
if [ "$st" = closed ] && awk -v s="$secs" 'BEGIN { exit !(s >= 0.9 && s < 3) }'; then
	ok "params that stall on a unix socket: the connection is closed after request_timeout_ms (${secs} s)"
else
	notok "params that stall on a unix socket: closed after request_timeout_ms" "got '$st' after ${secs} s"
fi
ADDR=$UADDR
st=$(charge "after-stallp-$RANDOM$RANDOM" "$RUN/out-sp"; head -1 "$RUN/out-sp")
case $st in
*201*) ok "after stalled params the listener serves the next request" ;;
*) notok "after stalled params the listener serves the next request" "$(head -3 "$RUN/out-sp")" ;;
esac
stop_listener

# 8d. FCGI_WEB_SERVER_ADDRS (as libfcgi honours it): on TCP only the listed
#     addresses may connect; any other connection is closed unanswered
FCGI_WEB_SERVER_ADDRS=192.0.2.7 start_listener || notok "listener starts"
st=$($CLIENT one "$ADDR" "wsa-no-$RANDOM$RANDOM")
[ "$st" != 201 ] && grep -q 'not in FCGI_WEB_SERVER_ADDRS' "$RUN/charge.log" &&
	ok "FCGI_WEB_SERVER_ADDRS without 127.0.0.1: a local connection is closed unanswered ($st)" ||
	notok "FCGI_WEB_SERVER_ADDRS without 127.0.0.1: a local connection is closed unanswered" "got '$st'"
stop_listener
FCGI_WEB_SERVER_ADDRS="192.0.2.7, 127.0.0.1" start_listener || notok "listener starts"
st=$($CLIENT one "$ADDR" "wsa-yes-$RANDOM$RANDOM")
[ "$st" = 201 ] && ok "FCGI_WEB_SERVER_ADDRS listing 127.0.0.1: served 201" ||
	notok "FCGI_WEB_SERVER_ADDRS listing 127.0.0.1: served 201" "got '$st'"
stop_listener

# 9. how a connection ends. On a unix socket, once the whole input has been
#    read (the end of stdin included, even when it comes late), the
#    responder closes at once: a later send finds the socket closed. A body
#    refused while the web server is still sending it (413), and every
#    request on TCP, keep libfcgi's lingering close: the responder reads on
#    until the other end closes, so the sender never meets a reset.
# ends ADDR LABEL MODE|WANT...: one "after" request per MODE, its answer
# and how the connection ended compared with WANT
ends() {
	local addr=$1 label=$2 c mode want got
	shift 2
	for c in "$@"; do
		mode=${c%%|*} want=${c#*|}
		got=$($CLIENT after "$addr" "end-$mode-$RANDOM$RANDOM" "$mode")
		[ "$got" = "$want" ] && ok "$label, $mode request: $got" ||
			notok "$label, $mode request: $want" "got: $got"
	done
}
UADDR="$RUN/charge.sock"
"$BIN" --listen "$UADDR" 2>>"$RUN/charge.log" & PID=$!
for _ in $(seq 1 50); do [ -S "$UADDR" ] && break; sleep 0.05; done
ends "$UADDR" "unix socket" "whole|201 ended closed" "late-eof|201 ended closed" \
	"refused|413 ended open"
stop_listener
start_listener || notok "listener starts"
ends "$ADDR" "TCP (lingering close)" "whole|201 ended open" "refused|413 ended open"
stop_listener

echo "1..$N"
[ "$FAILED" -eq 0 ]
