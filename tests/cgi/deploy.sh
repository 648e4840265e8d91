#!/usr/bin/env bash
# tests/cgi/deploy.sh - every deployment path of conf/ with real requests:
# each scenario starts a private Redis and one web server configuration
# through tools/servers.sh on a free loopback port in a temporary
# directory, then checks with curl: 201, replay, 422, 409, 413 (the
# responder's and the web server's), 401, 404, 405, static pages, a
# 32-client burst on one key (exactly one ledger line), requests served in
# parallel (several processes or threads), and a clean stop. Prints TAP.
#
#   tests/cgi/deploy.sh                      every scenario
#   tests/cgi/deploy.sh apache nginx         some of them
#   CHARGE_BIN=/tmp/build-x/charge tests/cgi/deploy.sh
#
# Scenarios: apache (mod_fcgid, 4 processes), apache-cgi (mod_cgid, one
# process per request), nginx (--listen on a unix socket, 4 threads),
# nginx-tcp (--listen 127.0.0.1:PORT), nginx-spawn-fcgi (spawn-fcgi hands
# the socket over as fd 0), apache-proxy (mod_proxy_fcgi, --listen on a
# unix socket, 4 threads), apache-unprivileged (when run as root: the
# whole stack, Redis and Apache included, started as nobody).
set -uo pipefail

REPO=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../.." && pwd)
BIN=${CHARGE_BIN:-$REPO/build/charge}
LATENCY_MS=300
MAX_BODY=65536
PROCS=4
N_BURST=32

# shellcheck source=../../tools/stack.sh
. "$REPO/tools/stack.sh"
stack_env_clear
# shellcheck source=../../tools/servers.sh
. "$REPO/tools/servers.sh"

N=0
FAILED=0
ok() {
	N=$((N + 1))
	echo "ok $N - $*"
}
notok() {
	N=$((N + 1))
	FAILED=$((FAILED + 1))
	echo "not ok $N - $1"
	shift
	local l
	for l in "$@"; do
		printf '%s\n' "$l" | sed 's/^/#   /'
	done
}
# t NAME CMD...: one test; CMD prints why it failed on stdout.
t() {
	local name=$1 out
	shift
	if out=$("$@"); then
		ok "$SCEN: $name"
	else
		notok "$SCEN: $name" "$out"
	fi
}

[ -x "$BIN" ] || { echo "not ok 1 - deploy: responder binary $BIN not found"; exit 1; }
BIN=$(readlink -f "$BIN")
for c in curl redis-cli apache2 nginx spawn-fcgi python3; do
	command -v "$c" >/dev/null 2>&1 ||
		{ echo "not ok 1 - deploy: $c is not installed"; exit 1; }
done

# --- requests ---------------------------------------------------------------

H_AUTH="Authorization: Bearer sk_test_deploy"
H_JSON="Content-Type: application/json"
BODY='{"amount":1999,"currency":"usd","source":"tok_visa"}'

# req OUT_PREFIX CURL_ARGS...: one request; OUT.h headers, OUT.b body,
# prints the status.
req() {
	local out=$1
	shift
	curl -s -m 30 -D "$out.h" -o "$out.b" -w '%{http_code}' "$@"
}
# hdr FILE NAME: the value of a header (last one), CR stripped.
hdr() {
	grep -i "^$2:" "$1" | tail -n 1 | cut -d: -f2- | sed 's/^ *//; s/\r$//'
}
ledger_count() {
	[ -f "$RUN/ledger.log" ] || { echo 0; return; }
	awk -F'\t' -v k="$1" '$2 == "deploy" && $3 == k' "$RUN/ledger.log" | wc -l
}
is_problem() {   # FILE_PREFIX STATUS SLUG GOT
	local p=$1 status=$2 slug=$3 got=$4
	[ "$got" = "$status" ] || { echo "status $got, want $status: $(head -c 300 "$p.b")"; return 1; }
	case $(hdr "$p.h" Content-Type) in
	application/problem+json*) ;;
	*) echo "Content-Type $(hdr "$p.h" Content-Type)"; return 1 ;;
	esac
	grep -q "\"type\":\"/problems/$slug\"" "$p.b" ||
		{ echo "body $(head -c 300 "$p.b"), want type /problems/$slug"; return 1; }
	[ "$(hdr "$p.h" Cache-Control)" = no-store ] || { echo "Cache-Control $(hdr "$p.h" Cache-Control)"; return 1; }
	[ -n "$(hdr "$p.h" X-Request-Id)" ] || { echo "no X-Request-Id"; return 1; }
}

c_fresh_replay() {
	local k="dep-$SCEN-fresh-$RANDOM$RANDOM" s
	s=$(req "$W/f1" -H "$H_AUTH" -H "$H_JSON" -H "Idempotency-Key: $k" -d "$BODY" "$B/charge")
	[ "$s" = 201 ] || { echo "fresh: status $s: $(head -c 300 "$W/f1.b")"; return 1; }
	[ "$(hdr "$W/f1.h" Idempotent-Replayed)" = false ] || { echo "fresh: Idempotent-Replayed $(hdr "$W/f1.h" Idempotent-Replayed)"; return 1; }
	[ "$(hdr "$W/f1.h" Cache-Control)" = no-store ] && [ -n "$(hdr "$W/f1.h" X-Request-Id)" ] ||
		{ echo "fresh: headers $(cat "$W/f1.h")"; return 1; }
	s=$(req "$W/f2" -H "$H_AUTH" -H "$H_JSON" -H "Idempotency-Key: \"$k\"" -d "$BODY" "$B/charge")
	[ "$s" = 201 ] && [ "$(hdr "$W/f2.h" Idempotent-Replayed)" = true ] ||
		{ echo "replay: status $s, Idempotent-Replayed $(hdr "$W/f2.h" Idempotent-Replayed)"; return 1; }
	cmp -s "$W/f1.b" "$W/f2.b" || { echo "replayed body differs"; return 1; }
	[ "$(ledger_count "$k")" = 1 ] || { echo "ledger lines: $(ledger_count "$k")"; return 1; }
}

c_422() {
	local k="dep-$SCEN-422-$RANDOM$RANDOM" s
	s=$(req "$W/a" -H "$H_AUTH" -H "$H_JSON" -H "Idempotency-Key: $k" -d "$BODY" "$B/charge")
	[ "$s" = 201 ] || { echo "first: $s"; return 1; }
	s=$(req "$W/a" -H "$H_AUTH" -H "$H_JSON" -H "Idempotency-Key: $k" \
		-d '{"amount":2000,"currency":"usd","source":"tok_visa"}' "$B/charge")
	is_problem "$W/a" 422 idempotency-key-reused "$s" || return 1
	grep -q '"mismatched_params":\["amount"\]' "$W/a.b" ||
		{ echo "422 without mismatched_params [amount]: $(head -c 300 "$W/a.b")"; return 1; }
}

# GET /charge/keys/<key> reaches the responder through this configuration,
# a key holding "/" (sent as %2F) included.
c_keys() {
	local k="dep/$SCEN/keys-$RANDOM$RANDOM" s
	s=$(req "$W/k1" -H "$H_AUTH" -H "$H_JSON" -H "Idempotency-Key: $k" -d "$BODY" "$B/charge")
	[ "$s" = 201 ] || { echo "charge: $s"; return 1; }
	[ -n "$(hdr "$W/k1.h" Idempotency-Key-Expires)" ] || { echo "201 without Idempotency-Key-Expires"; return 1; }
	s=$(req "$W/k2" -H "$H_AUTH" "$B/charge/keys/${k//\//%2F}")
	[ "$s" = 200 ] && grep -q '"state":"completed"' "$W/k2.b" && grep -q '"status":201' "$W/k2.b" ||
		{ echo "GET /charge/keys/<key>: $s $(head -c 300 "$W/k2.b")"; return 1; }
	s=$(req "$W/k3" -H "$H_AUTH" "$B/charge/keys/dep-$SCEN-never-used")
	is_problem "$W/k3" 404 key-not-found "$s"
}

c_409() {
	local k="dep-$SCEN-409-$RANDOM$RANDOM" s i bg
	curl -s -m 30 -o "$W/bg.b" -H "$H_AUTH" -H "$H_JSON" -H "Idempotency-Key: $k" -d "$BODY" "$B/charge" &
	bg=$!
	for i in $(seq 1 200); do
		[ "$(redis-cli -s "$RUN/redis.sock" HGET "charge:idem:deploy:$k" state)" = in_progress ] && break
		sleep 0.01
	done
	s=$(req "$W/c" -H "$H_AUTH" -H "$H_JSON" -H "Idempotency-Key: $k" -d "$BODY" "$B/charge")
	wait "$bg"
	is_problem "$W/c" 409 request-in-progress "$s" || return 1
	[ "$(hdr "$W/c.h" Retry-After)" = 1 ] || { echo "Retry-After $(hdr "$W/c.h" Retry-After)"; return 1; }
	[ "$(ledger_count "$k")" = 1 ] || { echo "ledger lines: $(ledger_count "$k")"; return 1; }
}

c_413_app() {
	local k="dep-$SCEN-413-$RANDOM$RANDOM" s
	head -c $((MAX_BODY + 1)) /dev/zero | tr '\0' ' ' >"$W/big"
	s=$(req "$W/d" -H "$H_AUTH" -H "$H_JSON" -H "Idempotency-Key: $k" --data-binary @"$W/big" "$B/charge")
	is_problem "$W/d" 413 content-too-large "$s" || return 1
	[ "$(ledger_count "$k")" = 0 ] || { echo "provider called"; return 1; }
}

c_413_server() {
	local s
	# 8 MiB announced: the web server refuses it (or the responder does)
	s=$(python3 - "$PORT" <<'EOF'
import re, socket, sys
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=10)
s.sendall(b"POST /charge HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer sk_test_deploy\r\n"
          b"Idempotency-Key: dep-huge\r\nContent-Type: application/json\r\n"
          b"Content-Length: 8388608\r\nConnection: close\r\n\r\n")
got = b""
try:
    while b"\r\n" not in got:
        b = s.recv(4096)
        if not b:
            break
        got += b
except OSError:
    pass
m = re.match(rb"HTTP/1\.[01] (\d{3})", got)
print(m.group(1).decode() if m else "none")
EOF
)
	[ "$s" = 413 ] || { echo "8 MiB Content-Length: status $s"; return 1; }
}

c_401() {
	local s
	s=$(req "$W/e" -H "Authorization: Bearer sk_test_wrong" -H "$H_JSON" -H "Idempotency-Key: dep-401" -d "$BODY" "$B/charge")
	is_problem "$W/e" 401 unauthorized "$s" || return 1
	[ "$(hdr "$W/e.h" WWW-Authenticate)" = Bearer ] || { echo "WWW-Authenticate $(hdr "$W/e.h" WWW-Authenticate)"; return 1; }
	s=$(req "$W/e" -H "$H_JSON" -H "Idempotency-Key: dep-401" -d "$BODY" "$B/charge")
	is_problem "$W/e" 401 unauthorized "$s"
}

c_404() {
	local p s
	for p in /nope /charge/extra /chargeX; do
		s=$(req "$W/g" "$B$p")
		is_problem "$W/g" 404 not-found "$s" || { echo "(GET $p)"; return 1; }
		s=$(req "$W/g" -H "$H_AUTH" -H "$H_JSON" -H "Idempotency-Key: dep-404" -d "$BODY" "$B$p")
		is_problem "$W/g" 404 not-found "$s" || { echo "(POST $p)"; return 1; }
	done
}

c_405() {
	local s
	s=$(req "$W/h" -H "$H_AUTH" "$B/charge")
	is_problem "$W/h" 405 method-not-allowed "$s" || return 1
	[ "$(hdr "$W/h.h" Allow)" = POST ] || { echo "Allow $(hdr "$W/h.h" Allow)"; return 1; }
	s=$(req "$W/h" -H "$H_JSON" -d '{}' "$B/healthz")
	is_problem "$W/h" 405 method-not-allowed "$s" || return 1
	[ "$(hdr "$W/h.h" Allow)" = "GET, HEAD" ] || { echo "Allow $(hdr "$W/h.h" Allow)"; return 1; }
}

c_static() {
	local s ct
	s=$(req "$W/s" "$B/problems/not-found")
	ct=$(hdr "$W/s.h" Content-Type)
	[ "$s" = 200 ] && [ "$ct" = "text/html; charset=utf-8" ] ||
		{ echo "/problems/not-found: $s, Content-Type '$ct'"; return 1; }
	cmp -s "$W/s.b" "$REPO/www/problems/not-found" || { echo "/problems/not-found is not www/problems/not-found"; return 1; }
	s=$(req "$W/s" "$B/")
	ct=$(hdr "$W/s.h" Content-Type)
	[ "$s" = 200 ] && [[ $ct == text/html* ]] || { echo "/: $s, Content-Type '$ct'"; return 1; }
}

c_burst() {
	local k="dep-$SCEN-burst-$RANDOM$RANDOM" i fresh other bad
	set --
	for i in $(seq 1 "$N_BURST"); do
		set -- "$@" -o /dev/null "$B/charge?n=$i"
	done
	curl -s --no-progress-meter -m 60 --parallel --parallel-immediate --parallel-max "$N_BURST" \
		-H "$H_AUTH" -H "$H_JSON" -H "Idempotency-Key: $k" -d "$BODY" \
		-w '%{http_code} %header{idempotent-replayed}\n' "$@" >"$W/burst" 2>/dev/null
	fresh=$(grep -c '^201 false$' "$W/burst")
	other=$(grep -cE '^(409 |201 true$)' "$W/burst")
	bad=$(grep -vE '^(409 |201 true$|201 false$)' "$W/burst" | sort | uniq -c | tr '\n' ';')
	[ "$fresh" = 1 ] && [ "$other" = $((N_BURST - 1)) ] ||
		{ echo "$fresh fresh 201, $other 409/replays, other: $bad"; return 1; }
	[ "$(ledger_count "$k")" = 1 ] || { echo "ledger lines: $(ledger_count "$k")"; return 1; }
	echo "# $SCEN: burst: $fresh fresh 201, $(grep -c '^409' "$W/burst") x 409, $(grep -c '^201 true' "$W/burst") replays" >&2
}

# c_parallel N: N charges with distinct keys at once take less than 3 x the
# provider latency (one at a time they would take N x). The faster of two
# bursts counts: mod_fcgid starts its processes on demand, and on a loaded
# machine the first burst can meet fewer than N (one whole-suite run in
# five); served one at a time, both bursts take N x.
c_parallel() {
	local n=$1 i t0 t1 ms best= try limit=$((3 * LATENCY_MS))
	for try in 1 2; do
		set --
		for i in $(seq 1 "$n"); do
			[ "$i" -gt 1 ] && set -- "$@" --next
			set -- "$@" -H "$H_AUTH" -H "$H_JSON" -d "$BODY" -o /dev/null -w '%{http_code}\n' \
				-H "Idempotency-Key: dep-$SCEN-par-$RANDOM$RANDOM-$try-$i" "$B/charge"
		done
		t0=$(date +%s%N)
		curl -s --no-progress-meter -m 30 --parallel --parallel-immediate \
			--parallel-max "$n" "$@" >"$W/par" 2>/dev/null
		t1=$(date +%s%N)
		ms=$(((t1 - t0) / 1000000))
		[ "$(grep -c '^201$' "$W/par")" = "$n" ] || { echo "statuses: $(tr '\n' ' ' <"$W/par")"; return 1; }
		{ [ -z "$best" ] || [ "$ms" -lt "$best" ]; } && best=$ms
		[ "$best" -lt "$limit" ] && break
	done
	[ "$best" -lt "$limit" ] ||
		{ echo "$n charges at once took ${best} ms at best of 2 (provider latency ${LATENCY_MS} ms): served one at a time?"; return 1; }
	echo "# $SCEN: $n charges at once took ${best} ms (provider latency ${LATENCY_MS} ms)" >&2
}

# c_redis_clients N: the responders hold N Redis connections (one per
# process or per thread).
c_redis_clients() {
	local want=$1 n
	n=$(redis-cli -s "$RUN/redis.sock" CLIENT LIST | grep -vc 'cmd=client')
	[ "$n" = "$want" ] || { echo "$n Redis connections, want $want"; redis-cli -s "$RUN/redis.sock" CLIENT LIST; return 1; }
}

c_procs() {
	local want=$1 n
	n=$(servers_descendants "$SERVERS_TOP_PID" charge | wc -l)
	[ "$n" = "$want" ] || { echo "$n responder processes, want $want"; return 1; }
}

c_stopped() {
	local top=$1 i
	for i in $(seq 1 50); do
		stack_pid_alive "$top" || break
		sleep 0.1
	done
	stack_pid_alive "$top" && { echo "server $top still runs"; return 1; }
	[ -z "$(servers_descendants "$top" charge)" ] || { echo "responders left"; return 1; }
	if [ -n "$(ps -e -o pid=,args= | grep -F "$RUN" | grep -v grep | grep -v redis-server)" ]; then
		echo "processes left:"; ps -e -o pid=,args= | grep -F "$RUN" | grep -v grep
		return 1
	fi
}

# --- scenarios -------------------------------------------------------------

scenario() {
	SCEN=$1
	local top kind=$1 started=0
	RUN=$(stack_rundir_create) || { notok "$SCEN: run directory"; return; }
	W="$RUN/w"
	mkdir -p "$W" "$RUN/spill"
	stack_api_keys_write "$RUN/api-keys" deploy sk_test_deploy
	export CHARGE_REDIS_URL="unix://$RUN/redis.sock" CHARGE_SPILL_DIR="$RUN/spill"
	export CHARGE_API_KEYS_FILE="$RUN/api-keys" CHARGE_PROVIDER_LEDGER="$RUN/ledger.log"
	export CHARGE_METRICS_FILE="$RUN/metrics.shm" CHARGE_PROVIDER_LATENCY_MS=$LATENCY_MS
	export CHARGE_PROVIDER_TIMEOUT_MS=1000 CHARGE_LOCK_TTL_S=5 CHARGE_MAX_REQUEST_BYTES=$MAX_BODY
	export CHARGE_LOG_LEVEL=warn CHARGE_THREADS=1
	PORT=$(stack_port_pick) && B="http://127.0.0.1:$PORT"
	local BIN=$BIN
	servers_share_rundir "$RUN" && servers_stage_repo "$RUN" "$BIN" && BIN=$SERVERS_BIN &&
		servers_redis_start "$RUN" "$RUN/redis" "$RUN" 2>"$RUN/start.err"
	case $kind in
	apache)
		start_apache "$RUN" "$RUN" "$PORT" "$BIN" "$PROCS" 2>>"$RUN/start.err" && started=1 ;;
	apache-cgi)
		start_apache_cgi "$RUN" "$RUN" "$PORT" "$BIN" 2>>"$RUN/start.err" && started=1 ;;
	nginx)
		SERVERS_NGINX_UPSTREAM=unix start_nginx "$RUN" "$RUN" "$PORT" "$BIN" "$PROCS" 2>>"$RUN/start.err" && started=1 ;;
	nginx-tcp)
		SERVERS_NGINX_UPSTREAM=tcp start_nginx "$RUN" "$RUN" "$PORT" "$BIN" "$PROCS" 2>>"$RUN/start.err" && started=1 ;;
	nginx-spawn-fcgi)
		SERVERS_NGINX_UPSTREAM=spawn-fcgi start_nginx "$RUN" "$RUN" "$PORT" "$BIN" "$PROCS" 2>>"$RUN/start.err" && started=1 ;;
	apache-proxy)
		start_apache_proxy "$RUN" "$RUN" "$PORT" "$BIN" "$PROCS" 2>>"$RUN/start.err" && started=1 ;;
	apache-unprivileged)
		# everything as nobody: nothing of Apache needs root
		servers_as_worker bash -c '. "$1/tools/servers.sh" && start_apache "$2" "$2" "$3" "$4" "$5"' \
			_ "$SERVERS_ROOT" "$RUN" "$PORT" "$BIN" "$PROCS" 2>>"$RUN/start.err" && started=1
		SERVERS_APACHE_PID=$(cat "$RUN/apache/apache2.pid" 2>/dev/null)
		SERVERS_TOP_PID=$SERVERS_APACHE_PID
		if [ "$started" = 1 ] && [ "$(stat -c %U "/proc/$SERVERS_APACHE_PID")" != nobody ]; then
			started=0
			echo "apache2 runs as $(stat -c %U "/proc/$SERVERS_APACHE_PID")" >>"$RUN/start.err"
		fi ;;
	esac
	if [ "$started" = 1 ] && [ "$(servers_http_status "$B/healthz")" = 200 ]; then
		ok "$SCEN: starts on 127.0.0.1:$PORT and GET /healthz answers 200"
	else
		notok "$SCEN: starts on 127.0.0.1:$PORT and GET /healthz answers 200" "$(cat "$RUN/start.err")"
		servers_stop_all "$RUN"
		stack_redis_stop "$RUN"
		rm -rf "$RUN"
		return
	fi
	top=$SERVERS_TOP_PID
	t "201 fresh, then the replay (quoted key) byte for byte, one ledger line" c_fresh_replay
	t "422 for the same key with another amount, naming it" c_422
	t "GET /charge/keys/<key>: 200 for a used key (with %2F), 404 key-not-found otherwise" c_keys
	t "409 with Retry-After: 1 for a duplicate in progress" c_409
	t "413 problem+json from the responder at max_request_bytes+1" c_413_app
	t "413 for an 8 MiB Content-Length" c_413_server
	t "401 with WWW-Authenticate: Bearer (wrong key, no Authorization)" c_401
	t "404 problem+json for /nope, /charge/extra, /chargeX (GET and POST)" c_404
	t "405 with Allow on /charge and /healthz" c_405
	t "/problems/not-found as text/html; charset=utf-8, / as text/html" c_static
	t "$N_BURST clients, one key: one fresh 201, the rest 409 or replays, one ledger line" c_burst
	t "4 charges at once are served in parallel" c_parallel 4
	case $kind in
	apache|apache-unprivileged)
		t "mod_fcgid runs $PROCS responder processes" c_procs "$PROCS"
		t "$PROCS Redis connections, one per process" c_redis_clients "$PROCS" ;;
	nginx*|apache-proxy)
		t "one responder process" c_procs 1
		t "$PROCS Redis connections, one per worker thread" c_redis_clients "$PROCS" ;;
	apache-cgi)
		t "no responder process outlives its request" c_procs 0 ;;
	esac
	servers_stop_all "$RUN"
	t "stops: the server and every responder are gone" c_stopped "$top"
	stack_redis_stop "$RUN"
	rm -rf "$RUN"
}

SCENARIOS=(apache apache-cgi nginx nginx-tcp nginx-spawn-fcgi apache-proxy)
servers_is_root && SCENARIOS+=(apache-unprivileged)
[ $# -gt 0 ] && SCENARIOS=("$@")

for s in "${SCENARIOS[@]}"; do
	scenario "$s"
done
echo "# deploy: $N tests, $FAILED failed"
[ "$FAILED" -eq 0 ]
