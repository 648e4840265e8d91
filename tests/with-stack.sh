#!/usr/bin/env bash
# tests/with-stack.sh CMD [ARGS...] - runs CMD against a private demo stack
# (Redis + lighttpd + the responder with the demo key sk_test_demo and the
# default provider latency) in a temporary directory on a free loopback
# port, then stops it. CMD sees BASE_URL, LEDGER and FAILED_TTL_S.
#   CHARGE_BIN=build-asan/charge tests/with-stack.sh tests/examples/run.sh
# With STACK_WITH_SIM=1 the provider is charge-provider-sim over HTTP when
# build/charge-provider-sim exists (CMD then sees SIM_URL; the demo's
# /provider/keys and /provider/events reach it), wired as ./run.sh wires it:
# it posts a signed event per charge to the responder's /webhooks/provider
# through lighttpd, with a secret made for the run, delivering a refused
# event again every 500 ms. Its tok_providerTimeout answers after 10 s, the
# responder gives up after provider_deadline_ms 2500 (504 outcome-unknown),
# and the event settles the record within half a second, before the
# completer's first look (1 s after the 504). Else the in-process
# simulation as without.
set -uo pipefail
REPO=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.." && pwd)
BIN=$(readlink -f "${CHARGE_BIN:-$REPO/build/charge}")
# shellcheck source=tools/stack.sh
. "$REPO/tools/stack.sh"
stack_env_clear

bail() {
	echo "not ok 1 - stack for $1: $2"
	exit 1
}
name=$(basename "$(dirname "$1")")/$(basename "$1")
RUN=$(stack_rundir_create) || bail "$name" "cannot create a run directory"
trap 'stack_stop_all "$RUN"; stack_sim_stop; rm -rf "$RUN"' EXIT
trap 'exit 130' INT TERM
mkdir -p "$RUN/spill"
export CHARGE_REDIS_URL="unix://$RUN/redis.sock"
export CHARGE_SPILL_DIR="$RUN/spill"
export CHARGE_PROVIDER_LEDGER="$RUN/ledger.log"
export CHARGE_METRICS_FILE="$RUN/metrics.shm"
export CHARGE_FAILED_TTL_S=3
stack_redis_start "$RUN" "$RUN/redis" "$RUN" 2>"$RUN/stack.err" ||
	{ sed 's/^/# /' "$RUN/stack.err"; bail "$name" "redis-server did not start"; }
PORT=$(stack_port_pick) || bail "$name" "no free port"
if [ "${STACK_WITH_SIM:-0}" = 1 ] && [ -x "$REPO/build/charge-provider-sim" ]; then
	secret=whsec_$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')
	(umask 077 && printf '%s\n' "$secret" >"$RUN/webhook-secret") ||
		bail "$name" "cannot write the webhook secret"
	stack_sim_start "$RUN" "$RUN" "" --late-ms 10000 \
		--webhook-url "http://127.0.0.1:$PORT/webhooks/provider" \
		--webhook-secret-file "$RUN/webhook-secret" \
		--webhook-retry-ms 500 --webhook-retry-max-ms 500 --webhook-attempts 100 \
		2>"$RUN/stack.err" ||
		{ sed 's/^/# /' "$RUN/stack.err"; bail "$name" "the provider simulator did not start"; }
	export CHARGE_PROVIDER_URL=$STACK_PROVIDER_URL SIM_URL=$STACK_PROVIDER_URL
	export CHARGE_PROVIDER_WEBHOOK_SECRET=$secret
	export CHARGE_PROVIDER_TIMEOUT_MS=2000 CHARGE_PROVIDER_DEADLINE_MS=2500
fi
stack_lighttpd_start "$RUN" "$RUN" "$PORT" "$BIN" 2 2>"$RUN/stack.err" ||
	{ sed 's/^/# /' "$RUN/stack.err"; bail "$name" "lighttpd did not start"; }
export BASE_URL="http://127.0.0.1:$PORT" LEDGER="$CHARGE_PROVIDER_LEDGER"
export FAILED_TTL_S=$CHARGE_FAILED_TTL_S
echo "# $name against $BASE_URL"
"$@"
