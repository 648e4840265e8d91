#!/usr/bin/env bash
# run.sh - install what is missing, build, and serve the charge responder on
# http://127.0.0.1:${PORT:-8080} behind lighttpd, with a private Redis, until
# Ctrl-C or SIGTERM; then stop everything this script started.
#
#   ./run.sh                      private Redis on var/run/redis.sock
#   PORT=18080 ./run.sh           another port
#   CHARGE_REDIS_URL=redis://127.0.0.1:6379 ./run.sh    use that Redis instead
#   STACK_REDIS_TLS=1 ./run.sh    the private Redis TLS only (a test CA in
#                                 var/tls/; rediss://localhost:PORT)
#   CHARGE_PROVIDER_URL= ./run.sh   the in-process provider instead of the simulator
#   CHARGE_LOCK_TTL_S=60 ./run.sh   any CHARGE_<KEY> override
#
# The payment provider is charge-provider-sim (built from sim/), started on a
# free port of 127.0.0.1 with its store in var/provider-sim.data, and the
# responder's provider_url points at it; the demo page shows its side of a
# charge under /provider/keys. A CHARGE_PROVIDER_URL set by the caller
# (empty: the in-process simulation) wins, and no simulator is started.
#
# State lives under var/ of the repository: var/run (sockets, PID files),
# var/redis (the AOF), var/spill, var/provider-ledger.log, var/metrics.shm,
# var/log (lighttpd, responder, Redis and simulator logs), var/provider-sim.data.
# Works from any directory.
set -euo pipefail

REPO=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)
PORT=${PORT:-8080}
VAR="$REPO/var"

PACKAGES="libfcgi-dev libfcgi-bin libhiredis-dev libuv1-dev libcurl4-openssl-dev node-llhttp libcjson-dev libssl-dev
libcmocka-dev meson ninja-build pkg-config gcc lighttpd redis-server
redis-tools curl"

say() {
	printf '%s\n' "run.sh: $*" >&2
}

die() {
	say "error: $*"
	exit 1
}

# Installs the Debian packages that are missing (apt-get update only then).
install_missing() {
	local p missing=() sudo=
	for p in $PACKAGES; do
		if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null |
			grep -q 'install ok installed'; then
			missing+=("$p")
		fi
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	if [ "$(id -u)" -ne 0 ]; then
		command -v sudo >/dev/null 2>&1 ||
			die "missing packages (${missing[*]}); run as root or install sudo"
		sudo=sudo
	fi
	say "installing ${missing[*]}"
	$sudo apt-get update -q
	$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
		"${missing[@]}"
}

# Builds build/charge with meson and ninja.
build() {
	if [ ! -f "$REPO/build/build.ninja" ]; then
		say "configuring build/"
		meson setup "$REPO/build" "$REPO" >/dev/null
	fi
	say "building build/charge"
	ninja -C "$REPO/build" >/dev/null ||
		ninja -C "$REPO/build"
	[ -x "$REPO/build/charge" ] || die "build/charge was not built"
}

# Starts the provider simulator unless the caller chose a provider.
provider_start() {
	if [ -n "${CHARGE_PROVIDER_URL+set}" ]; then
		if [ -n "$CHARGE_PROVIDER_URL" ]; then
			provider_note="Provider: $CHARGE_PROVIDER_URL (CHARGE_PROVIDER_URL, not started here)"
		else
			provider_note="Provider: simulated inside the responder (CHARGE_PROVIDER_URL is empty)"
		fi
		return 0
	fi
	if [ ! -x "$REPO/build/charge-provider-sim" ]; then
		say "build/charge-provider-sim is missing (this checkout has no sim/): the provider is simulated inside the responder"
		provider_note="Provider: simulated inside the responder (no build/charge-provider-sim)"
		export CHARGE_PROVIDER_URL=
		return 0
	fi
	# The simulator's webhooks go to the responder's route through
	# lighttpd, signed with a secret made for this run: in a file (var/run
	# is 0700), not on the command line, which every local user can read.
	# An event that comes while its request still waits is refused (503)
	# and delivered again: every half second here (Stripe backs off far
	# longer), for 100 attempts, so that an unknown outcome
	# (tok_providerTimeout: 504 after provider_deadline_ms) is settled by
	# its event within half a second of the 504, before the completer's
	# first look (Retry-After, 1 s, after the 504).
	local webhook_secret
	webhook_secret=whsec_$(od -An -N24 -tx1 /dev/urandom | tr -d ' \n')
	(umask 077 && printf '%s\n' "$webhook_secret" >"$VAR/run/webhook-secret")
	stack_sim_start "$VAR" "$VAR/log" "$REPO/build/charge-provider-sim" \
		--webhook-url "http://127.0.0.1:$PORT/webhooks/provider" \
		--webhook-secret-file "$VAR/run/webhook-secret" \
		--webhook-retry-ms 500 --webhook-retry-max-ms 500 --webhook-attempts 100 ||
		die "could not start the provider simulator (see $VAR/log/provider-sim.log)"
	export CHARGE_PROVIDER_URL=$STACK_PROVIDER_URL
	provider_note="Provider: charge-provider-sim on $STACK_PROVIDER_URL (store $VAR/provider-sim.data, log $VAR/log/provider-sim.log); provider_url points at it"
	# the responder verifies the events with the same secret (when this
	# build has the webhook route: an unknown CHARGE_ variable is an error)
	local effective
	effective=$("$REPO/build/charge" --check-config 2>/dev/null || true)
	if printf '%s\n' "$effective" | grep -q '^provider_webhook_secret '; then
		export CHARGE_PROVIDER_WEBHOOK_SECRET=$webhook_secret
		provider_note="$provider_note
  Webhooks: the simulator signs an event per charge and posts it to http://127.0.0.1:$PORT/webhooks/provider (secret in $VAR/run/webhook-secret, CHARGE_PROVIDER_WEBHOOK_SECRET); GET $STACK_PROVIDER_URL/_sim/events shows the deliveries"
	else
		provider_note="$provider_note
  Webhooks: the simulator posts its events to http://127.0.0.1:$PORT/webhooks/provider, which this build of charge does not serve yet (404, retried); GET $STACK_PROVIDER_URL/_sim/events shows them"
	fi
}

case $PORT in
''|*[!0-9]*) die "PORT must be a number, got '$PORT'" ;;
esac

install_missing
build

# shellcheck source=tools/stack.sh
. "$REPO/tools/stack.sh"

if stack_port_in_use "$PORT"; then
	die "port $PORT on 127.0.0.1 is already in use (another ./run.sh?); try PORT=18080 ./run.sh"
fi

mkdir -p "$VAR/run" "$VAR/log" "$VAR/spill" "$VAR/redis"
chmod 700 "$VAR/run" "$VAR/spill" "$VAR/redis"

STARTED=0
cleanup() {
	trap - INT TERM HUP EXIT
	if [ "$STARTED" = 1 ]; then
		say "stopping"
	fi
	# no RUN_DIR argument: never act on PID files of an earlier run
	stack_stop_all
	stack_sim_stop
	rm -f "$VAR/run"/charge.sock-* "$VAR/run/lighttpd.pid"
}
on_signal() {
	cleanup
	exit 0
}
trap on_signal INT TERM HUP
trap cleanup EXIT

provider_note=
provider_start
say "$provider_note"

redis_note=
if [ -n "${CHARGE_REDIS_URL:-}" ]; then
	redis_note="Redis:   $CHARGE_REDIS_URL (external, not started here)"
elif [ "${STACK_REDIS_TLS:-0}" = 1 ]; then
	stack_tls_certs "$VAR/tls" || die "could not make the test certificates in $VAR/tls"
	STACK_REDIS_TLS_DIR="$VAR/tls" stack_redis_start "$VAR/run" "$VAR/redis" "$VAR/log" ||
		die "could not start the private Redis (see $VAR/log/redis.log)"
	export CHARGE_REDIS_URL="rediss://localhost:$STACK_REDIS_TLS_PORT"
	export CHARGE_REDIS_TLS_CA_FILE="$VAR/tls/ca.crt"
	redis_note="Redis:   private, TLS only, $CHARGE_REDIS_URL (CA $VAR/tls/ca.crt, AOF in $VAR/redis)"
else
	stack_redis_start "$VAR/run" "$VAR/redis" "$VAR/log" ||
		die "could not start the private Redis (see $VAR/log/redis.log)"
	redis_note="Redis:   private, unix socket $VAR/run/redis.sock (AOF in $VAR/redis)"
fi

"$REPO/build/charge" --check-config >"$VAR/log/effective-config.txt" 2>&1 ||
	{ cat "$VAR/log/effective-config.txt" >&2; die "invalid configuration"; }

# One event loop per core across the responder processes: more loops than
# cores only switch between each other (bench/run --sweep: 2 processes x 1
# loop did 1.3 x the charges of 2 x 2 on 2 cores). An explicit
# CHARGE_THREADS wins.
MAX_PROCS=${MAX_PROCS:-2}
if [ -z "${CHARGE_THREADS:-}" ]; then
	loops=$(($(nproc) / MAX_PROCS))
	export CHARGE_THREADS=$((loops > 0 ? loops : 1))
fi
stack_lighttpd_start "$VAR/run" "$VAR/log" "$PORT" "$REPO/build/charge" \
	"$MAX_PROCS" || die "could not start lighttpd"
STARTED=1

health=$(stack_http_status "http://127.0.0.1:$PORT/healthz")
ledger=$(sed -n 's/^[[:space:]]*provider_ledger[[:space:]]*[=:][[:space:]]*//p' \
	"$VAR/log/effective-config.txt" | head -n 1)

cat <<EOF

  charge is running on http://127.0.0.1:$PORT   (/healthz: $health)

  $redis_note
  $provider_note
  Logs:    $VAR/log/ (lighttpd-error.log, lighttpd.stderr.log = responder, redis.log)
  Ledger:  ${ledger:-$VAR/provider-ledger.log} (one line per in-process provider call)
  Config:  $VAR/log/effective-config.txt (charge --check-config)

  Try it (run it twice: the second answer is the replay):

    curl -i http://127.0.0.1:$PORT/charge \\
      -H 'Authorization: Bearer sk_test_demo' \\
      -H 'Idempotency-Key: order-1001' \\
      -H 'Content-Type: application/json' \\
      -d '{"amount": 1999, "currency": "usd", "source": "tok_visa"}'

  Press Ctrl-C to stop.

EOF

# Stay in the foreground until a signal arrives (the traps above stop
# everything and exit 0) or a server dies. "sleep & wait" lets a signal
# interrupt the wait at once.
while stack_pid_alive "$STACK_LIGHTTPD_PID" lighttpd &&
	{ [ -z "$STACK_REDIS_PID" ] || stack_pid_alive "$STACK_REDIS_PID" redis-server; } &&
	{ [ -z "${STACK_SIM_PID:-}" ] || stack_pid_alive "$STACK_SIM_PID" charge-provider; }; do
	sleep 1 &
	wait $! || true
done
say "a server exited unexpectedly; see $VAR/log/"
cleanup
exit 1
