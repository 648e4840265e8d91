#!/usr/bin/env bash
# tests/redis_async/run.sh - the Redis client (src/store/redis/: redis_client.c and its
# redis_*.c files: hiredis async + libuv) against real redis-server,
# redis-sentinel and cluster nodes on loopback ports, through
# tests/redis_async/driver.c; a few fake nodes
# (tests/redis_async/fake_redis.py) stand for a hung node, a sentinel that
# names a stale primary, a cluster node with an old map and a proxy that
# loses a reply and resets the connection. Prints TAP.
#
#   REDIS_ASYNC_DRIVER  the driver binary (default: next to CHARGE_BIN,
#                       else build/redis_async_driver)
set -uo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# shellcheck source=tools/ha.sh
. "$REPO/tools/ha.sh"

if [ -n "${REDIS_ASYNC_DRIVER:-}" ]; then
	DRV=$REDIS_ASYNC_DRIVER
elif [ -n "${CHARGE_BIN:-}" ]; then
	DRV=$(dirname "$CHARGE_BIN")/redis_async_driver
else
	DRV=$REPO/build/redis_async_driver
fi
FAKE="$REPO/tests/redis_async/fake_redis.py"
RUN=$(mktemp -d /tmp/redis-async.XXXXXX)
FAKE_PIDS=()
N=0
FAILED=0

cleanup() {
	local p
	trap - EXIT INT TERM
	for p in "${FAKE_PIDS[@]}"; do
		kill "$p" 2>/dev/null
		wait "$p" 2>/dev/null
	done
	for d in "$RUN"/*/; do
		# a frozen node must be able to take its TERM
		for pf in "$d"/node-*/pid; do
			[ -f "$pf" ] && kill -CONT "$(cat "$pf")" 2>/dev/null
		done
		ha_stop_all "${d%/}"
	done
	if [ "${KEEP:-0}" = 1 ]; then echo "# kept $RUN"; else rm -rf "$RUN"; fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ok() {
	N=$((N + 1))
	echo "ok $N - $*"
}
nok() {
	N=$((N + 1))
	FAILED=$((FAILED + 1))
	echo "not ok $N - $*"
}
# check COND DESC [FILE]: ok when COND (a shell expression) holds; else the
# file's lines as comments.
check() {
	local cond=$1 desc=$2 file=${3:-}
	if eval "$cond"; then
		ok "$desc"
	else
		nok "$desc"
		[ -n "$file" ] && [ -f "$file" ] && sed 's/^/#   /' "$file" | tail -15
	fi
}
# drive OUT ARGS...: runs the driver, its output in OUT (stderr: OUT.err)
drive() {
	local out=$1
	shift
	timeout 30 "$DRV" "$@" >"$out" 2>"$out.err"
}
# field FILE LINE-PATTERN KEY: the value of KEY=... on the first matching line
field() {
	grep -E "$2" "$1" | head -n 1 | tr ' ' '\n' | sed -n "s/^$3=//p"
}
count_ok() { grep -cE '^[0-9]+ [0-9]+ ok ' "$1"; }
count_err() { grep -cE '^[0-9]+ [0-9]+ err ' "$1"; }
stat() { ha_cli "$1" INFO "$2" | tr -d '\r' | sed -n "s/^$3://p"; }
# cmdstat PORT COMMAND FIELD: e.g. cmdstat P eval calls
cmdstat() {
	ha_cli "$1" INFO commandstats | tr -d '\r' | grep "^cmdstat_$2:" |
		sed 's/^[^:]*://' | tr ',' '\n' | sed -n "s/^$3=//p"
}
node_pid() { cat "$1/node-$2/pid"; }
fake_start() {
	local port=$1
	shift
	(cd "$RUN" && exec python3 "$FAKE" "$port" "$@") &
	FAKE_PIDS+=($!)
	for _ in $(seq 1 50); do
		stack_port_in_use "$port" && return 0
		sleep 0.05
	done
	return 1
}

[ -x "$DRV" ] || { echo "not ok 1 - driver $DRV not built"; exit 1; }
command -v redis-sentinel >/dev/null || { echo "not ok 1 - redis-sentinel missing"; exit 1; }
HA_PICKED=

# --- single Redis -----------------------------------------------------------
S="$RUN/single"
mkdir -p "$S"
ha_port_pick && P=$HA_PORT && ha_redis_create "$S" "$P" >/dev/null || { echo "not ok 1 - redis-server did not start"; exit 1; }
URL="redis://127.0.0.1:$P"

# 1. a fresh server has no script: EVALSHA fails with NOSCRIPT, EVAL runs it;
# the next run finds it cached (EVALSHA only)
drive "$RUN/fresh.out" -n 5 "$URL"
ev1=$(cmdstat "$P" eval calls)
drive "$RUN/fresh2.out" -n 5 "$URL"
ev2=$(cmdstat "$P" eval calls)
check '[ "$(count_ok "$RUN/fresh.out")" = 5 ] && [ "${ev1:-0}" -ge 1 ] && [ "$(cmdstat "$P" evalsha failed_calls)" -ge 1 ] && [ "$ev2" = "$ev1" ] && [ "$(count_ok "$RUN/fresh2.out")" = 5 ]' \
	"fresh server: NOSCRIPT -> EVAL, then EVALSHA from the cache (eval calls ${ev1:-none} then ${ev2:-none})" "$RUN/fresh.out"

# 2. 1000 commands queued in one loop turn leave in few writes: Redis's
# read count barely moves; the same 300 sent one at a time (control) move
# it by about 300
r0=$(stat "$P" stats total_reads_processed)
drive "$RUN/pipe.out" -n 1000 "$URL"
r1=$(stat "$P" stats total_reads_processed)
drive "$RUN/serial.out" -S -n 300 "$URL"
r2=$(stat "$P" stats total_reads_processed)
check '[ "$(count_ok "$RUN/pipe.out")" = 1000 ] && [ $((r1 - r0)) -lt 60 ] && [ "$(count_ok "$RUN/serial.out")" = 300 ] && [ $((r2 - r1)) -ge 250 ]' \
	"pipelining: 1000 commands in $((r1 - r0)) reads by Redis (one at a time: 300 in $((r2 - r1)))" "$RUN/pipe.out"

# 3. Redis frozen (SIGSTOP) with commands sent: each callback within
# timeout_ms (300) + slack, outcome unknown, "timeout"; the connection is
# dropped (the next round's commands, sent on it, fail too)
pid=$(node_pid "$S" "$P")
drive "$RUN/frozen.out" -t 300 -n 3 -c 2 -i 400 "$URL" &
dpid=$!
sleep 0.2
kill -STOP "$pid"
wait "$dpid"
kill -CONT "$pid"
ms=$(field "$RUN/frozen.out" '^1 0 err' ms)
check '[ "$(grep -c "^0 .* ok " "$RUN/frozen.out")" = 3 ] && [ "$(grep -c "^1 .* err .*unknown=1" "$RUN/frozen.out")" = 3 ] && grep -q "^1 0 err .*err=incr: timeout" "$RUN/frozen.out" && [ "${ms:-0}" -ge 290 ] && [ "${ms:-9999}" -le 450 ]' \
	"frozen Redis: sent commands fail at the timeout (${ms:-?} ms of 300) with outcome_unknown" "$RUN/frozen.out"

# 4. a new connection to a frozen Redis: the set-up never answers; the
# command was never sent (outcome known) and fails at its timeout
kill -STOP "$pid"
drive "$RUN/frozen2.out" -t 300 -n 2 "$URL"
kill -CONT "$pid"
ms=$(field "$RUN/frozen2.out" '^0 0 err' ms)
check '[ "$(grep -c "err .*unknown=0" "$RUN/frozen2.out")" = 2 ] && [ "${ms:-0}" -ge 290 ] && [ "${ms:-9999}" -le 450 ]' \
	"connect timeout: frozen at connect, never sent (unknown=0) after ${ms:-?} ms" "$RUN/frozen2.out"

# 4b. redis_client_free() with commands sent to a frozen Redis: every
# callback comes before it returns ("shutting down", outcome unknown)
drive "$RUN/quit.out" -t 1000 -n 3 -c 2 -i 300 -q 450 "$URL" &
dpid=$!
sleep 0.15
kill -STOP "$pid"
wait "$dpid"
kill -CONT "$pid"
check 'grep -q "^freed outstanding=0" "$RUN/quit.out" && [ "$(grep -c "^1 .* err .*unknown=1 .*err=incr: shutting down" "$RUN/quit.out")" = 3 ] && grep -q "pending=0 after-free=0" "$RUN/quit.out"' \
	"redis_client_free: pending callbacks called before it returns" "$RUN/quit.out"

# 4c. redis_client_free() from inside the client's own callback (a loop
# whose last request ends in a reply's callback stops there): it must not
# free a connection hiredis is still calling back (ASan: use after free)
# nor spin on a command still in flight on it; the driver exits 0 and the
# other command gets its callback after the free returned
rc=0
timeout 10 "$DRV" -t 1000 -F "$URL" >"$RUN/freecb.out" 2>"$RUN/freecb.out.err" || rc=$?
check '[ $rc = 0 ] && grep -q "^freed-in-callback outstanding=0" "$RUN/freecb.out" && grep -q "pending=0 after-free=0" "$RUN/freecb.out"' \
	"redis_client_free inside a reply's callback: safe (exit $rc)" "$RUN/freecb.out.err"
rc=0
timeout 10 "$DRV" -t 1000 -F -n 2 "$URL" >"$RUN/freecb2.out" 2>"$RUN/freecb2.out.err" || rc=$?
check '[ $rc = 0 ] && grep -q "^freed-in-callback outstanding=1" "$RUN/freecb2.out" && grep -q "^0 1 " "$RUN/freecb2.out" && grep -q "pending=0 after-free=1" "$RUN/freecb2.out"' \
	"redis_client_free inside a callback, another command in flight on that connection: no spin, its callback follows (exit $rc)" "$RUN/freecb2.out.err"

# 4d. the responder stopped (SIGTERM) while a charge whose FastCGI
# connection is gone waits on Redis for its record: the record's reply ends
# the loop's last work; the process exits 0 and the outcome is recorded.
# The connection is gone because the client closed it (close), or because
# drain_timeout_ms ran out and the responder closed it (drain).
# charge_stop_test LABEL URL PAUSE GET [close|drain]: PAUSE is a command
# that pauses every Redis node for 700 ms; GET a redis-cli (-c: cluster)
charge_stop_test() {
	local label=$1 url=$2 pause=$3 get=$4 how=${5:-close} key addr cpid fpid rc=0 state
	key="stopcb-$how-$RANDOM$RANDOM"
	ha_port_pick && addr="127.0.0.1:$HA_PORT"
	mkdir -p "$RUN/stop-spill"
	# every CHARGE_ variable is configuration for the responder
	env -u CHARGE_BIN CHARGE_REDIS_URL=$url CHARGE_SPILL_DIR="$RUN/stop-spill" CHARGE_PROVIDER_LEDGER="$RUN/stop-ledger.log" \
		CHARGE_METRICS_FILE=none CHARGE_PROVIDER_LATENCY_MS=400 CHARGE_THREADS=1 CHARGE_LOG_LEVEL=warn \
		CHARGE_DRAIN_TIMEOUT_MS=$([ "$how" = drain ] && echo 100 || echo 15000) \
		"$CHARGE_BIN" --listen "$addr" 2>>"$RUN/stop-charge.log" &
	cpid=$!
	# an ASan build on a busy machine may take seconds to listen
	for _ in $(seq 1 200); do stack_port_in_use "${addr#*:}" && break; sleep 0.05; done
	# the whole request; then the connection closed at once, or kept
	# until the responder closes it
	rm -f "$RUN/stop-sent"
	python3 - "$addr" "$key" "$how" "$RUN/stop-sent" <<'PY' &
import os, sys
sys.path.insert(0, os.path.join(os.environ["REPO"], "tests", "lib"))
import fcgi
body = b'{"amount":1999,"currency":"usd","source":"tok_visa"}'
s = fcgi.connect(sys.argv[1])
fcgi.send_request(s, fcgi.charge_params(sys.argv[2], body), body)
open(sys.argv[4], "w").close()
if sys.argv[3] == "drain":
    s.settimeout(5)
    try:
        fcgi.read_response(s)
    except OSError:
        pass
s.close()
PY
	fpid=$!
	# the charge runs from the request's arrival (python may start slowly)
	for _ in $(seq 1 200); do [ -e "$RUN/stop-sent" ] && break; sleep 0.05; done
	sleep 0.25
	# Redis holds the record (sent ~0.4 s after the claim) past SIGTERM
	eval "$pause"
	sleep 0.05
	kill -TERM "$cpid"
	for _ in $(seq 1 200); do stack_pid_alive "$cpid" || break; sleep 0.05; done
	wait "$fpid" 2>/dev/null
	if stack_pid_alive "$cpid"; then
		kill -KILL "$cpid"; wait "$cpid" 2>/dev/null
		nok "$label, $how: SIGTERM with a detached charge's record pending: still running 10 s later"
		return
	fi
	wait "$cpid" || rc=$?
	state=$($get HGET "charge:idem:demo:$key" state)
	check '[ $rc = 0 ] && [ "$state" = completed ]' \
		"$label, connection gone ($how): SIGTERM with the charge's record pending: exit $rc, recorded ${state:-nothing}" "$RUN/stop-charge.log"
}
if [ -n "${CHARGE_BIN:-}" ]; then
	export REPO
	charge_stop_test "single Redis" "$URL" "ha_cli $P CLIENT PAUSE 700 ALL >/dev/null" "ha_cli $P" close
	charge_stop_test "single Redis" "$URL" "ha_cli $P CLIENT PAUSE 700 ALL >/dev/null" "ha_cli $P" drain
fi

# 5. Redis restarts while the client runs: it reconnects (no command hangs)
drive "$RUN/restart.out" -t 500 -n 2 -c 14 -i 150 "$URL" &
dpid=$!
sleep 0.4
ha_node_kill "$S" "$P" TERM
sleep 0.3
ha_node_start "$S" "$P"
wait "$dpid"
maxms=$(field "$RUN/restart.out" '^summary' maxms)
check 'grep -q "^0 0 ok" "$RUN/restart.out" && grep -q " err " "$RUN/restart.out" && grep -q "^13 0 ok" "$RUN/restart.out" && grep -q "^13 1 ok" "$RUN/restart.out" && [ "${maxms:-9999}" -le 650 ]' \
	"Redis restarted: commands fail while it is down, then the client reconnects (max ${maxms:-?} ms per command)" "$RUN/restart.out"

# 6. a Redis that may evict records is refused on every new connection
ha_cli "$P" CONFIG SET maxmemory-policy allkeys-lru >/dev/null
drive "$RUN/evict.out" -n 2 "$URL"
drive "$RUN/evict-check.out" -x "$URL"
ha_cli "$P" CONFIG SET maxmemory-policy noeviction >/dev/null
check '[ "$(grep -c "err=Redis maxmemory-policy is allkeys-lru; records could be evicted: refusing (set noeviction)" "$RUN/evict.out")" = 2 ] && grep -q "^startup_check -1 Redis maxmemory-policy is allkeys-lru" "$RUN/evict-check.out" && [ "$(ha_cli "$P" EXISTS drv:0:0)" = 1 ]' \
	"maxmemory-policy allkeys-lru: commands refused, start-up check -1" "$RUN/evict.out"
drive "$RUN/check.out" -x "$URL"
check 'grep -q "^startup_check 0" "$RUN/check.out"' "start-up check 0 on a noeviction Redis" "$RUN/check.out"

# 7. WAIT with min_replicas 1 and no replica: the reply, durable 0
drive "$RUN/wait0.out" -w -m 1 -r 100 -n 2 "$URL"
check '[ "$(grep -c " ok .*durable=0 .*err=WAIT: 0 of 1 replica" "$RUN/wait0.out")" = 2 ]' \
	"WAIT 1 without a replica: reply given, durable 0" "$RUN/wait0.out"
# 50 commands with WAIT in one turn share one WAIT: Redis blocks a
# connection for each WAIT that falls short, so a WAIT each would take
# 50 x 100 ms and most would time out
w0=$(cmdstat "$P" wait calls)
drive "$RUN/wait50.out" -w -m 1 -r 100 -t 1000 -n 50 "$URL"
w1=$(cmdstat "$P" wait calls)
check '[ "$(grep -c " ok .*durable=0 " "$RUN/wait50.out")" = 50 ] && [ $((w1 - w0)) -le 3 ]' \
	"50 commands with WAIT in one turn: $((w1 - w0)) WAIT(s), all answered" "$RUN/wait50.out"
# ... and with one replica: durable 1
ha_port_pick && RP=$HA_PORT && ha_redis_create "$S" "$RP" --replicaof 127.0.0.1 "$P"
# the replica online as the primary sees it (its first sync can take
# seconds on a busy machine)
for _ in $(seq 1 150); do
	ha_cli "$RP" INFO replication | grep -q '^master_link_status:up' &&
		ha_cli "$P" INFO replication | grep -q '^slave0:.*state=online' && break
	sleep 0.1
done
drive "$RUN/wait1.out" -w -m 1 -r 2000 -n 3 "$URL"
check '[ "$(grep -c " ok .*durable=1 " "$RUN/wait1.out")" = 3 ]' \
	"WAIT 1 with a replica: durable 1" "$RUN/wait1.out"

# 7b. a reply lost to the peer closing the connection (a proxy that drops
# Redis's reply and resets or closes the client's connection after the
# script ran): the command goes once more on a new connection when its
# connection had been used before, so an INCR runs twice and answers the
# second value; lost twice, or lost on a connection opened for it: not sent
# again, outcome unknown at once (not at the timeout)
ha_port_pick && X1=$HA_PORT && fake_start "$X1" proxy "$P" 2 rst
drive "$RUN/reset1.out" -t 1000 -S -n 2 -k reset1= "redis://127.0.0.1:$X1"
ha_port_pick && X2=$HA_PORT && fake_start "$X2" proxy "$P" 2 fin
drive "$RUN/reset2.out" -t 1000 -S -n 2 -k reset2= "redis://127.0.0.1:$X2"
check 'grep -q "^0 0 ok .*reply=i:1 " "$RUN/reset1.out" && grep -q "^0 1 ok .*reply=i:3 " "$RUN/reset1.out" && [ "$(ha_cli "$P" GET reset1)" = 3 ] && grep -q "^0 1 ok .*reply=i:3 " "$RUN/reset2.out" && [ "$(ha_cli "$P" GET reset2)" = 3 ]' \
	"reply lost to a reset (and to a close) of a used connection: re-sent once on a new one, answered" "$RUN/reset1.out"
ha_port_pick && X3=$HA_PORT && fake_start "$X3" proxy "$P" 2,3 rst
drive "$RUN/reset3.out" -t 1000 -S -n 2 -k reset3= "redis://127.0.0.1:$X3"
ms=$(field "$RUN/reset3.out" '^0 1 err' ms)
check 'grep -q "^0 1 err .*unknown=1 .*err=incr: Connection reset by peer" "$RUN/reset3.out" && [ "${ms:-9999}" -lt 500 ] && [ "$(ha_cli "$P" GET reset3)" = 3 ]' \
	"reply lost twice to resets: not sent a third time, outcome unknown after ${ms:-?} ms (timeout 1000)" "$RUN/reset3.out"
ha_port_pick && X4=$HA_PORT && fake_start "$X4" proxy "$P" 1 rst
drive "$RUN/reset4.out" -t 1000 -n 1 -k reset4= "redis://127.0.0.1:$X4"
check 'grep -q "^0 0 err .*unknown=1 .*err=incr: Connection reset by peer" "$RUN/reset4.out" && [ "$(ha_cli "$P" GET reset4)" = 1 ]' \
	"reply lost on the connection opened for the command: not sent again, outcome unknown" "$RUN/reset4.out"

# 8. AUTH and unix socket
ha_port_pick && AP=$HA_PORT
ha_redis_create "$S" "$AP" --requirepass s3cret --unixsocket "$S/auth.sock" --unixsocketperm 700 >/dev/null 2>&1
drive "$RUN/auth.out" -n 2 "redis://:s3cret@127.0.0.1:$AP"
drive "$RUN/authbad.out" -n 1 "redis://:wrong@127.0.0.1:$AP"
check '[ "$(count_ok "$RUN/auth.out")" = 2 ] && grep -q "err .*unknown=0 .*err=AUTH: WRONGPASS" "$RUN/authbad.out"' \
	"AUTH: the right password works, a wrong one fails with AUTH's error" "$RUN/authbad.out"
# ACL user and password, SELECT
ha_cli "$AP" -a s3cret --no-auth-warning ACL SETUSER app on '>pw' '~*' '+@all' >/dev/null
drive "$RUN/acl.out" -n 2 -k acl= "redis://app:pw@127.0.0.1:$AP/3"
in3=$(ha_cli "$AP" -a s3cret --no-auth-warning -n 3 GET acl)
in0=$(ha_cli "$AP" -a s3cret --no-auth-warning -n 0 EXISTS acl)
check '[ "$(count_ok "$RUN/acl.out")" = 2 ] && [ "$in3" = 2 ] && [ "$in0" = 0 ]' \
	"AUTH user password and SELECT 3: the key is in database 3" "$RUN/acl.out"

# a Redis that forbids CONFIG: the eviction check cannot be made, a
# warning says so, commands run
ha_port_pick && NP=$HA_PORT
ha_redis_create "$S" "$NP" --rename-command CONFIG "" >/dev/null 2>&1
drive "$RUN/noconfig.out" -n 2 "redis://127.0.0.1:$NP"
check '[ "$(count_ok "$RUN/noconfig.out")" = 2 ] && grep -q "warn .*cannot read Redis maxmemory-policy" "$RUN/noconfig.out.err"' \
	"CONFIG forbidden: a warning, commands run" "$RUN/noconfig.out.err"

ha_port_pick && UP=$HA_PORT
ha_redis_create "$S" "$UP" --unixsocket "$S/plain.sock" --unixsocketperm 700 >/dev/null 2>&1
drive "$RUN/unix.out" -n 3 "unix://$S/plain.sock"
check '[ "$(count_ok "$RUN/unix.out")" = 3 ]' "unix socket" "$RUN/unix.out"

# --- sentinels --------------------------------------------------------------
T="$RUN/sentinel"
mkdir -p "$T"
# the primary, a replica of it, and one real sentinel watching it
ha_port_pick && PP=$HA_PORT && ha_redis_create "$T" "$PP" >/dev/null
ha_port_pick && PR=$HA_PORT && ha_redis_create "$T" "$PR" --replicaof 127.0.0.1 "$PP" >/dev/null
ha_port_pick && SP=$HA_PORT
mkdir -p "$T/node-$SP"
cat >"$T/node-$SP/sentinel.conf" <<EOF
port $SP
bind 127.0.0.1
daemonize no
dir $T/node-$SP
logfile $T/node-$SP/node.log
sentinel monitor charge 127.0.0.1 $PP 1
sentinel down-after-milliseconds charge 60000
EOF
ha_node_create "$T" "$SP" redis-sentinel "$T/node-$SP/sentinel.conf" >/dev/null
ha_port_pick && DEAD=$HA_PORT # nothing listens there

# 9. the first sentinel names a primary that refuses connections: the next
# sentinel is asked in the same round; after a reconnect the stale one is
# not asked first again
ha_port_pick && F1=$HA_PORT && fake_start "$F1" sentinel 127.0.0.1 "$DEAD"
drive "$RUN/stale.out" -t 1000 -n 3 -c 3 -i 300 "redis-sentinel://127.0.0.1:$F1,127.0.0.1:$SP/charge" &
dpid=$!
sleep 0.45
ha_cli "$PP" CLIENT KILL TYPE normal >/dev/null
wait "$dpid"
asked=$(grep -c '^SENTINEL' "$RUN/$F1.count" 2>/dev/null)
check '[ "$(count_ok "$RUN/stale.out")" -ge 8 ] && grep -q "^2 2 ok" "$RUN/stale.out" && [ "${asked:-0}" = 1 ]' \
	"sentinel naming a dead primary first: served by the next one's answer; the stale sentinel asked ${asked:-0} time(s)" "$RUN/stale.out"

# 10. the first sentinel names a replica (ROLE slave)
ha_port_pick && F2=$HA_PORT && fake_start "$F2" sentinel 127.0.0.1 "$PR"
drive "$RUN/stale2.out" -t 1000 -n 3 "redis-sentinel://127.0.0.1:$F2,127.0.0.1:$SP/charge"
check '[ "$(count_ok "$RUN/stale2.out")" = 3 ] && grep -q "Redis primary of .charge. is 127.0.0.1:$PP" "$RUN/stale2.out.err"' \
	"sentinel naming a replica first: ROLE refuses it, the next answer serves" "$RUN/stale2.out.err"

# 11. three silent sentinels before the good one: one deadline for all
ha_port_pick && Q1=$HA_PORT && fake_start "$Q1" silent
ha_port_pick && Q2=$HA_PORT && fake_start "$Q2" silent
ha_port_pick && Q3=$HA_PORT && fake_start "$Q3" silent
drive "$RUN/silent.out" -t 1000 -n 2 "redis-sentinel://127.0.0.1:$Q1,127.0.0.1:$Q2,127.0.0.1:$Q3,127.0.0.1:$SP/charge"
ms=$(field "$RUN/silent.out" '^0 0 ' ms)
check '[ "$(count_ok "$RUN/silent.out")" = 2 ] && [ "${ms:-9999}" -lt 1000 ]' \
	"three silent sentinels, then a good one: served in ${ms:-?} ms (timeout 1000)" "$RUN/silent.out"

# 12. split brain: the primary the first sentinel names answers NOREPLICAS
# (min-replicas-to-write, no replica): the client asks the other sentinel,
# moves to its primary and resends there within the timeout
ha_port_pick && M1=$HA_PORT && ha_redis_create "$T" "$M1" --min-replicas-to-write 1 >/dev/null
ha_port_pick && M2=$HA_PORT && ha_redis_create "$T" "$M2" >/dev/null
ha_port_pick && G1=$HA_PORT && fake_start "$G1" sentinel 127.0.0.1 "$M1"
ha_port_pick && G2=$HA_PORT && fake_start "$G2" sentinel 127.0.0.1 "$M2"
drive "$RUN/norepl.out" -t 1000 -n 2 -k split= "redis-sentinel://127.0.0.1:$G1,127.0.0.1:$G2/charge"
check '[ "$(count_ok "$RUN/norepl.out")" = 2 ] && [ "$(ha_cli "$M2" GET split)" = 2 ] && [ "$(ha_cli "$M1" EXISTS split)" = 0 ]' \
	"NOREPLICAS: sentinels asked again, the commands resent to the other primary" "$RUN/norepl.out"

# 13. split brain seen by WAIT: with min_replicas 1 a shortfall on the
# primary the first sentinel names makes the client ask the others; the
# next commands go to the primary another sentinel names
ha_port_pick && M3=$HA_PORT && ha_redis_create "$T" "$M3" >/dev/null
# the majority's primary M2 has a replica (WAIT 1 holds there)
ha_port_pick && R2=$HA_PORT && ha_redis_create "$T" "$R2" --replicaof 127.0.0.1 "$M2" >/dev/null
for _ in $(seq 1 50); do
	ha_cli "$R2" INFO replication | grep -q '^master_link_status:up' && break
	sleep 0.1
done
ha_port_pick && G3=$HA_PORT && fake_start "$G3" sentinel 127.0.0.1 "$M3"
drive "$RUN/short.out" -t 1000 -w -m 1 -r 50 -n 1 -c 4 -i 300 -k short= "redis-sentinel://127.0.0.1:$G3,127.0.0.1:$G2/charge"
on3=$(ha_cli "$M3" GET short)
on2=$(ha_cli "$M2" GET short)
check 'grep -q "^0 0 ok .*durable=0 .*err=WAIT: 0 of 1" "$RUN/short.out" && [ "$(count_ok "$RUN/short.out")" = 4 ] && grep -q "^3 0 ok .*durable=1" "$RUN/short.out" && [ "${on2:-0}" -ge 2 ] && [ $((${on3:-0} + ${on2:-0})) = 4 ]' \
	"WAIT shortfall: durable 0, then the next commands go to the other sentinel's primary, durable there (${on3:-0} then ${on2:-0} writes)" "$RUN/short.out.err"

# 14. a real failover: three sentinels, the primary killed; the client
# follows the sentinels to the promoted replica
H="$RUN/failover"
if ha_sentinel_start "$H" >/dev/null 2>"$RUN/failover.err"; then
	old=$HA_PRIMARY_PORT
	drive "$RUN/failover.out" -t 1000 -n 1 -c 50 -i 100 -k fo: "$HA_URL" &
	dpid=$!
	sleep 0.5
	ha_node_kill "$H" "$old" KILL
	wait "$dpid"
	# On a loaded machine a promotion may not finish within the failover
	# timeout and another sentinel promotes the other replica: the client
	# must end on a primary the sentinels switched to, not necessarily the
	# last one (it learns of a second switch only from an error).
	# (a sentinel names the promoted replica from +promoted-slave on, before
	# its +switch-master)
	promoted=$(cat "$H"/node-*/node.log 2>/dev/null | sed -n -e "s/.*+switch-master $HA_MASTER 127.0.0.1 [0-9]* 127.0.0.1 \([0-9]*\).*/\1/p" -e "s/.*+promoted-slave slave 127.0.0.1:\([0-9]*\) .*/\1/p" | sort -u | xargs)
	new=$(sed -n "s/.*Redis primary of .charge. is 127.0.0.1:\([0-9]*\).*/\1/p" "$RUN/failover.out.err" | tail -1)
	check '[ -n "$new" ] && [ "$new" != "$old" ] && case " $promoted " in *" $new "*) true ;; *) false ;; esac && grep -q "^49 0 ok" "$RUN/failover.out" && [ "$(field "$RUN/failover.out" "^summary" maxms)" -le 1100 ]' \
		"sentinel failover: primary $old killed, the client moves to $new (the sentinels switched to: ${promoted:-none})" "$RUN/failover.out.err"
else
	nok "sentinel topology did not start"
	sed 's/^/#   /' "$RUN/failover.err" | tail -5
fi

# --- cluster ------------------------------------------------------------------
C="$RUN/cluster"
if ha_cluster_start "$C" 3 >/dev/null 2>"$RUN/cluster.err"; then
	CURL=$HA_URL
	A=${HA_NODE_PORTS[0]}
	# 14. routing: every key to the node of its slot
	drive "$RUN/route.out" -n 60 -k route: "$CURL"
	total=0
	for p in "${HA_NODE_PORTS[@]}"; do
		total=$((total + $(ha_cli "$p" DBSIZE)))
	done
	check '[ "$(count_ok "$RUN/route.out")" = 60 ] && [ "$total" = 60 ]' \
		"cluster: 60 keys routed, $total stored" "$RUN/route.out"
	# ASK: slot S of A migrating to B, its key not on A yet: A answers
	# ASK, the client sends ASKING and the command to B in one write
	B=${HA_NODE_PORTS[1]}
	aid=$(ha_cli "$A" CLUSTER MYID)
	bid=$(ha_cli "$B" CLUSTER MYID)
	for i in $(seq 1 200); do
		s=$(ha_cli "$A" CLUSTER KEYSLOT "ask$i")
		if [ "$s" -le 5460 ]; then akey="ask$i"; break; fi
	done
	ha_cli "$B" CLUSTER SETSLOT "$s" IMPORTING "$aid" >/dev/null
	ha_cli "$A" CLUSTER SETSLOT "$s" MIGRATING "$bid" >/dev/null
	drive "$RUN/ask.out" -S -n 2 -k "$akey=" "$CURL"
	onb=$(ha_cli "$B" DBSIZE)
	ha_cli "$B" CLUSTER SETSLOT "$s" NODE "$bid" >/dev/null
	ha_cli "$A" CLUSTER SETSLOT "$s" NODE "$bid" >/dev/null
	val=$(timeout 5 redis-cli -c -h 127.0.0.1 -p "$A" GET "$akey" 2>/dev/null)
	check '[ "$(count_ok "$RUN/ask.out")" = 2 ] && [ "$val" = 2 ] && grep -q "^0 1 ok .*reply=i:2" "$RUN/ask.out"' \
		"cluster: ASK followed with ASKING (slot $s migrating, key on B: ${val:-none})" "$RUN/ask.out"
	drive "$RUN/cping.out" -p "$CURL"
	check '[ "$(count_ok "$RUN/cping.out")" = 1 ]' "cluster: PING of every primary" "$RUN/cping.out"

	# 14b. redis_client_free() inside a callback in a cluster (connections
	# held by the slot map's nodes): safe, no spin
	rc=0
	timeout 10 "$DRV" -t 1000 -F -n 6 -k freecl: "$CURL" >"$RUN/freecl.out" 2>"$RUN/freecl.out.err" || rc=$?
	check '[ $rc = 0 ] && grep -q "^freed-in-callback" "$RUN/freecl.out" && grep -q "pending=0" "$RUN/freecl.out"' \
		"cluster: redis_client_free inside a reply's callback: safe (exit $rc)" "$RUN/freecl.out.err"
	if [ -n "${CHARGE_BIN:-}" ]; then
		pause_all() {
			local p pids=()
			for p in "${HA_NODE_PORTS[@]}"; do
				ha_cli "$p" CLIENT PAUSE 700 ALL >/dev/null &
				pids+=($!)
			done
			wait "${pids[@]}"
		}
		charge_stop_test "cluster" "$CURL" pause_all "timeout 5 redis-cli -c -h 127.0.0.1 -p $A" close
	fi

	# 15. a seed node with an old map (slots 0-99 itself, the rest on A):
	# a key of another node gets MOVED by A; the client goes to the node
	# named instead of reloading from the lagging seed, which would send
	# it back to A until five redirections answer an error
	key=
	for i in $(seq 1 200); do
		# A owns slots 0-5460 (redis-cli --cluster create, 3 nodes)
		s=$(ha_cli "$A" CLUSTER KEYSLOT "lag$i")
		if [ "$s" -ge 5461 ]; then key="lag$i"; break; fi
	done
	ha_port_pick && L=$HA_PORT && fake_start "$L" lagging 100 127.0.0.1 "$A"
	drive "$RUN/lag.out" -t 1000 -n 3 -k "$key=" "redis-cluster://127.0.0.1:$L,$(echo "$CURL" | sed 's|redis-cluster://||')"
	val=$(timeout 5 redis-cli -c -h 127.0.0.1 -p "$A" GET "$key" 2>/dev/null)
	check '[ "$(count_ok "$RUN/lag.out")" = 3 ] && [ "$val" = 3 ] && grep -q "^CLUSTER" "$RUN/$L.count"' \
		"cluster: a MOVED that a lagging map contradicts is trusted (key $key = ${val:-none})" "$RUN/lag.out"
else
	nok "cluster did not start"
	sed 's/^/#   /' "$RUN/cluster.err" | tail -5
fi

# 16. a cluster whose map keeps naming new nodes (a fake seed): the table
# of nodes fills and gives nodes up; each is freed once no command names
# it, not kept until the client's end
if ha_port_pick && CH=$HA_PORT && fake_start "$CH" churn 127.0.0.2; then
	DRIVER_LOG_DEBUG=1 drive "$RUN/churn.out" -t 3000 -n 16 -k churn: "redis-cluster://127.0.0.1:$CH"
	given=$(grep -c ' given up$' "$RUN/churn.out.err")
	released=$(grep -c ' released (' "$RUN/churn.out.err")
	check '[ "$given" -ge 64 ] && [ $((given - released)) -le 20 ]' \
		"cluster: nodes given up are freed while serving ($given given up, $released freed before the end)" "$RUN/churn.out.err"
else
	nok "fake churning cluster node did not start"
fi

echo "1..$N"
[ "$FAILED" -eq 0 ]
