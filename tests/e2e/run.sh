#!/usr/bin/env bash
# tests/e2e/run.sh - end-to-end tests through a web server (lighttpd by
# default) + the responder + a private Redis, all in a fresh temporary
# directory on a random loopback port. Prints TAP lines (from
# tests/e2e/test_charge.py); exits non-zero when a test failed or the stack
# did not start.
#
#   tests/e2e/run.sh                          lighttpd, uses build/charge
#   E2E_SERVER=apache tests/e2e/run.sh        Apache + mod_fcgid (tools/servers.sh)
#   E2E_SERVER=apache-cgi tests/e2e/run.sh    Apache + mod_cgid, plain CGI
#   E2E_SERVER=nginx tests/e2e/run.sh         nginx + charge --listen (4 threads)
#   E2E_SERVER=apache-proxy tests/e2e/run.sh  Apache + mod_proxy_fcgi + charge --listen
#   CHARGE_BIN=/tmp/build-x/charge tests/e2e/run.sh
#   E2E_ONLY='spill|crash' tests/e2e/run.sh   a subset (regex on names)
#   E2E_KEEP=1 tests/e2e/run.sh               keep the run directory
#   E2E_REDIS=cluster tests/e2e/run.sh        a Redis Cluster of 3 primaries
#                                             (tools/ha.sh) instead of one Redis
#   E2E_REDIS=tls tests/e2e/run.sh            the one Redis TLS only to the
#                                             responders (rediss://, a test CA;
#                                             lighttpd only; the suite inspects
#                                             it on its unix socket)
#
# The python suite is server-agnostic: everything specific to the web
# server is here, and it gets the stack's details through E2E_* variables.
set -uo pipefail

REPO=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../.." && pwd)
BIN=${CHARGE_BIN:-$REPO/build/charge}
MAX_PROCS=${E2E_MAX_PROCS:-3}
# lighttpd (default), apache (mod_fcgid), apache-cgi (mod_cgid, plain CGI),
# nginx and apache-proxy (mod_proxy_fcgi) (the responder's own --listen
# socket, E2E_THREADS threads)
SERVER=${E2E_SERVER:-lighttpd}
case $SERVER in lighttpd|apache|apache-cgi|nginx|apache-proxy) ;; *)
	echo "not ok 1 - e2e: E2E_SERVER=$SERVER: want lighttpd, apache, apache-cgi, nginx or apache-proxy"
	exit 1 ;;
esac
# single (default): a private Redis on a unix socket; cluster: 3 primaries
REDIS_KIND=${E2E_REDIS:-single}
case $REDIS_KIND in single|cluster) ;; tls) [ "$SERVER" = lighttpd ] || {
	echo "not ok 1 - e2e: E2E_REDIS=tls runs with lighttpd only"
	exit 1; } ;; *)
	echo "not ok 1 - e2e: E2E_REDIS=$REDIS_KIND: want single, cluster or tls"
	exit 1 ;;
esac

# shellcheck source=tools/stack.sh
. "$REPO/tools/stack.sh"
# A clean configuration: only the CHARGE_* variables set below reach the
# responder (CHARGE_BIN is ours, not a configuration key).
stack_env_clear
# shellcheck source=tools/servers.sh
. "$REPO/tools/servers.sh"
# shellcheck source=tools/ha.sh
. "$REPO/tools/ha.sh"

bail() {
	echo "not ok 1 - e2e ($SERVER): $*"
	exit 1
}

command -v python3 >/dev/null 2>&1 || bail "python3 is not installed"
[ -x "$BIN" ] || bail "responder binary $BIN not found (build it, or set CHARGE_BIN)"
BIN=$(readlink -f "$BIN")

RUN=$(stack_rundir_create) || bail "cannot create a run directory"

cleanup() {
	trap - EXIT INT TERM
	servers_stop_all "$RUN"
	stack_stop_all "$RUN"
	ha_stop_all "$RUN/cluster"
	if [ "${E2E_KEEP:-0}" = 1 ]; then
		echo "# run directory kept: $RUN"
	else
		rm -rf "$RUN"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Two principals with their own API keys.
# the test of the completer needs a long-lived responder (not plain CGI)
export E2E_SERVER=$SERVER
export E2E_PRINCIPAL_A=alice E2E_API_KEY_A="sk_test_alice_$RANDOM$RANDOM"
export E2E_PRINCIPAL_B=bob E2E_API_KEY_B="sk_test_bob_$RANDOM$RANDOM"
stack_api_keys_write "$RUN/api-keys" "$E2E_PRINCIPAL_A" "$E2E_API_KEY_A" \
	"$E2E_PRINCIPAL_B" "$E2E_API_KEY_B" || bail "cannot write the api-keys file"
mkdir -p "$RUN/spill" && chmod 700 "$RUN/spill"

# The responder's configuration for this run (CHARGE_CONF stays the
# project's conf/charge.conf; every key that matters is overridden here).
#   provider_latency_ms 300: slow enough to observe in_progress / 409
#   lock_ttl_s 2 > (provider_timeout_ms + provider_latency_ms) / 1000
#   failed_ttl_s 2: FAILED records expire within the run
#   max_request_bytes 64 KiB: fits a 1000-line-item order (about 49 KB)
stack_env "$RUN" e2e
export CHARGE_LOCK_TTL_S=2
export CHARGE_FAILED_TTL_S=2
export CHARGE_MAX_REQUEST_BYTES=65536
export CHARGE_MAX_WAIT_S=10
export CHARGE_SPILL_THRESHOLD_BYTES=16384
export CHARGE_PROVIDER_LATENCY_MS=300
export CHARGE_PROVIDER_TIMEOUT_MS=600
# the webhook route on (tests/webhook covers it; here: every web server
# routes it and passes Stripe-Signature through)
export CHARGE_PROVIDER_WEBHOOK_SECRET="whsec_e2e_$RANDOM$RANDOM"
export CHARGE_THREADS=1
# mod_fcgid notices dead responders only on its next scan (1 s) and a
# waiting request sleeps 1 s before it asks for a new one: after the crash
# test kills every responder, /healthz answers again 2-3 s later, so the
# retry inside lock_ttl_s needs a longer lock there.
if [ "$SERVER" = apache ]; then
	export CHARGE_LOCK_TTL_S=5
fi

if ! "$BIN" --check-config >"$RUN/check-config.txt" 2>&1; then
	sed 's/^/# /' "$RUN/check-config.txt"
	bail "charge --check-config rejects the test configuration"
fi

# Apache and nginx serve as nobody when started as root: hand them the run
# dir, and run Redis as nobody too (its socket is 0700). lighttpd keeps
# its responders as root.
REDIS_START=stack_redis_start
if [ "$SERVER" != lighttpd ]; then
	servers_share_rundir "$RUN" || bail "cannot share $RUN with the server's user"
	servers_stage_repo "$RUN" "$BIN" || bail "cannot stage the checkout for the server's user"
	BIN=$SERVERS_BIN
	REDIS_START=servers_redis_start
fi
if [ "$REDIS_KIND" = cluster ]; then
	# loopback TCP: nothing to share with the server's user
	ha_cluster_start "$RUN/cluster" 3 2>"$RUN/stack.err" ||
		{ sed 's/^/# /' "$RUN/stack.err"; bail "the Redis Cluster did not start"; }
	export CHARGE_REDIS_URL=$HA_URL
else
	if [ "$REDIS_KIND" = tls ]; then
		# its restarts (E2E_REDIS_START) keep the port and the certificates
		stack_tls_certs "$RUN/tls" || bail "cannot make the test certificates"
		STACK_REDIS_TLS_PORT=$(stack_port_pick) || bail "no free port"
		export STACK_REDIS_TLS_DIR="$RUN/tls" STACK_REDIS_TLS_SOCKET=1 STACK_REDIS_TLS_PORT
		export CHARGE_REDIS_URL="rediss://localhost:$STACK_REDIS_TLS_PORT"
		export CHARGE_REDIS_TLS_CA_FILE="$RUN/tls/ca.crt"
	fi
	$REDIS_START "$RUN" "$RUN/redis" "$RUN" 2>"$RUN/stack.err" ||
		{ sed 's/^/# /' "$RUN/stack.err"; bail "redis-server did not start"; }
fi

PORT=$(stack_port_pick) || bail "no free port"
started=0
case $SERVER in
lighttpd)
	stack_lighttpd_start "$RUN" "$RUN" "$PORT" "$BIN" "$MAX_PROCS" 2>"$RUN/stack.err" && started=1
	TOP_PID=$STACK_LIGHTTPD_PID ;;
apache)
	start_apache "$RUN" "$RUN" "$PORT" "$BIN" "$MAX_PROCS" 2>"$RUN/stack.err" && started=1
	TOP_PID=$SERVERS_TOP_PID ;;
apache-cgi)
	start_apache_cgi "$RUN" "$RUN" "$PORT" "$BIN" 2>"$RUN/stack.err" && started=1
	TOP_PID=$SERVERS_TOP_PID ;;
nginx)
	start_nginx "$RUN" "$RUN" "$PORT" "$BIN" "${E2E_THREADS:-4}" 2>"$RUN/stack.err" && started=1
	TOP_PID=$SERVERS_TOP_PID ;;
apache-proxy)
	start_apache_proxy "$RUN" "$RUN" "$PORT" "$BIN" "${E2E_THREADS:-4}" 2>"$RUN/stack.err" && started=1
	TOP_PID=$SERVERS_TOP_PID ;;
esac
[ "$started" = 1 ] && [ -n "$TOP_PID" ] ||
	{ sed 's/^/# /' "$RUN/stack.err"; bail "$SERVER did not start"; }

# How the suite reaches and manipulates this stack.
STACK="$REPO/tools/stack.sh"
export BASE_URL="http://127.0.0.1:$PORT"
export E2E_LEDGER="$CHARGE_PROVIDER_LEDGER"
export E2E_SPILL_DIR="$CHARGE_SPILL_DIR"
export E2E_METRICS_FILE="$CHARGE_METRICS_FILE"
export E2E_REDIS_SOCKET="$RUN/redis.sock"
export E2E_WWW_DIR="$REPO/www"
export E2E_REDIS_KILL=". '$STACK' && stack_redis_stop '$RUN' KILL"
# (SERVERS_ROOT: the checkout, or the staged copy when nobody cannot read it)
export E2E_REDIS_START=". '$STACK' && . '$REPO/tools/servers.sh' && SERVERS_ROOT='$SERVERS_ROOT' STACK_ROOT='$SERVERS_ROOT' && $REDIS_START '$RUN' '$RUN/redis' '$RUN'"
if [ "$REDIS_KIND" = cluster ]; then
	# every node crashes and comes back (AOF, nodes.conf) together
	export E2E_REDIS_NODES="${HA_URL#redis-cluster://}"
	E2E_REDIS_NODES=${E2E_REDIS_NODES//,/ }
	export E2E_REDIS_KILL=". '$REPO/tools/ha.sh' && for p in ${HA_NODE_PORTS[*]}; do ha_node_kill '$RUN/cluster' \$p KILL || exit 1; done"
	export E2E_REDIS_START=". '$REPO/tools/ha.sh' && for p in ${HA_NODE_PORTS[*]}; do ha_node_start '$RUN/cluster' \$p || exit 1; done && ha_cluster_wait_ok '$RUN/cluster' 20"
	unset E2E_REDIS_SOCKET
fi
# the responders below the server: lighttpd's children, mod_fcgid's
# processes, the CGI processes running right now, the process behind nginx
export E2E_WORKER_PIDS=". '$REPO/tools/servers.sh' && servers_descendants $TOP_PID charge"

echo "# e2e ($SERVER, Redis $REDIS_KIND): $BASE_URL, responder $BIN, run dir $RUN"

# each result line names the server: "ok 3 - [nginx] ..."
LABEL=$SERVER
[ "$REDIS_KIND" = cluster ] && LABEL="$SERVER, cluster"
[ "$REDIS_KIND" = tls ] && LABEL="$SERVER, rediss"
# Debian's python3: the answers are validated with its python3-jsonschema
# (tests/lib/openapi_check.py pins the version)
timeout --foreground -k 10 300 "${E2E_PYTHON:-/usr/bin/python3}" "$REPO/tests/e2e/test_charge.py" |
	sed -u -E "s/^((not )?ok [0-9]+ - )/\1[$LABEL] /" | tee "$RUN/tap.txt"
rc=${PIPESTATUS[0]}
if [ $rc -eq 124 ] || [ $rc -eq 137 ]; then
	echo "not ok - e2e ($SERVER): suite timed out after 300 s"
elif [ $rc -ne 0 ] && ! grep -q '^not ok' "$RUN/tap.txt"; then
	echo "not ok - e2e ($SERVER): test_charge.py exited with status $rc"
fi

if [ $rc -ne 0 ]; then
	for f in lighttpd-error.log lighttpd.stderr.log apache-error.log \
		apache-cgi-error.log apache-proxy-error.log nginx-error.log \
		responder.log redis.log; do
		[ -s "$RUN/$f" ] || continue
		echo "# ---- last lines of $f"
		tail -n 25 "$RUN/$f" | sed 's/^/#   /'
	done
fi
exit $rc
