#!/usr/bin/env bash
# tests/webhook/run.sh - the provider's webhook route (docs/API.md §17.5)
# through lighttpd, with a private Redis and the provider simulator
# (charge-provider-sim) on loopback, in a fresh temporary directory, in
# four phases (one Redis, a responder configuration and a simulator each):
#
#   route      every signature case over HTTP with nothing changed in
#              Redis, an unknown outcome settled by a signed event built
#              from the simulator's own charge, duplicates, out-of-order
#              events, a mismatching charge, the metrics, Redis down
#              (tests/webhook/test_webhook.py; the simulator sends nothing)
#   deliver    the simulator itself delivers its signed events through
#              lighttpd: N charges left unknown, the completer an hour out,
#              settled by the webhook; the median time from the charge to
#              the record completed (< 1 s)
#   faults     the same simulator restarted with every delivery duplicated
#              and half of them delayed (reordered): nothing changes twice
#   completer  no webhooks, the completer's schedule 1,2,3 s and
#              provider_execute_window_s 2: the completer-only time beside it
#              (test_webhook_sim.py for the last three)
#
# Prints TAP lines; exits non-zero when a test failed or a stack did not
# start.
#
#   tests/webhook/run.sh                       build/charge, build/charge-provider-sim
#   CHARGE_BIN=... CHARGE_SIM_BIN=... tests/webhook/run.sh
#   WEBHOOK_ONLY='settle' tests/webhook/run.sh  a subset (regex on names)
#   WEBHOOK_PHASES='deliver completer' tests/webhook/run.sh   some phases
#   WEBHOOK_SETTLE_N=50 tests/webhook/run.sh   charges per measurement (12)
#   WEBHOOK_RESULT_FILE=F tests/webhook/run.sh the measurements as JSON lines
#   WEBHOOK_KEEP=1 tests/webhook/run.sh         keep the run directory
set -uo pipefail

REPO=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../.." && pwd)
BIN=${CHARGE_BIN:-$REPO/build/charge}
SIM=${CHARGE_SIM_BIN:-$REPO/build/charge-provider-sim}
SIM_LATE_MS=3000

# shellcheck source=tools/stack.sh
. "$REPO/tools/stack.sh"
stack_env_clear

bail() {
	echo "not ok 1 - webhook: $*"
	exit 1
}

command -v python3 >/dev/null 2>&1 || bail "python3 is not installed"
[ -x "$BIN" ] || bail "responder binary $BIN not found (build it, or set CHARGE_BIN)"
[ -x "$SIM" ] || bail "the provider simulator $SIM is not built (or set CHARGE_SIM_BIN)"
BIN=$(readlink -f "$BIN")
SIM=$(readlink -f "$SIM")

PHASES=${WEBHOOK_PHASES:-route deliver faults completer}
for ph in $PHASES; do
	case $ph in
	route | deliver | faults | completer) ;;
	*) bail "WEBHOOK_PHASES: unknown phase '$ph' (route deliver faults completer)" ;;
	esac
done
has_phase() {
	case " $PHASES " in *" $1 "*) return 0 ;; esac
	return 1
}

RUN=$(stack_rundir_create) || bail "cannot create a run directory"
cleanup() {
	trap - EXIT INT TERM
	stack_sim_stop
	stack_stop_all "$RUN"
	if [ "${WEBHOOK_KEEP:-0}" = 1 ]; then
		echo "# run directory kept: $RUN"
	else
		rm -rf "$RUN"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# sim_start LOG_DIR ARG...: the simulator (tools/stack.sh) on SIM_PORT,
# picked once: a restart keeps the URLs configured below; its store
# RUN/provider-sim.data is kept across restarts, its output appended to
# LOG_DIR/provider-sim.log; the further ARGs. stack_sim_stop stops it
# (SIGTERM: it flushes its store), by PID.
SIM_PORT=$(stack_port_pick) || bail "no free port"
sim_start() {
	local logs=$1
	shift
	STACK_SIM_PORT=$SIM_PORT stack_sim_start "$RUN" "$logs" "$SIM" \
		--secret-key sk_test_provider --fsync never "$@" 2>"$RUN/stack.err" && return 0
	sed 's/^/# /' "$RUN/stack.err"
	return 1
}

export E2E_PRINCIPAL_A=alice E2E_API_KEY_A="sk_test_alice_$RANDOM$RANDOM"
stack_api_keys_write "$RUN/api-keys" "$E2E_PRINCIPAL_A" "$E2E_API_KEY_A" ||
	bail "cannot write the api-keys file"
mkdir -p "$RUN/spill" && chmod 700 "$RUN/spill"

# provider_timeout_ms 500 per attempt, provider_deadline_ms 1500 for all of
# them: a tok_providerTimeout (answered after 3 s) ends unknown. The
# completer's schedule is pushed an hour out: only a retry or the webhook
# settles a record here. max_request_bytes 16384: the body limit's edge.
stack_env "$RUN" provider
export CHARGE_LOCK_TTL_S=5
export CHARGE_FAILED_TTL_S=600
export CHARGE_MAX_REQUEST_BYTES=16384
export CHARGE_PROVIDER_URL="http://127.0.0.1:$SIM_PORT"
# the simulator executes within one attempt and sends no Date header
export CHARGE_PROVIDER_EXECUTE_MAX_MS=500 CHARGE_PROVIDER_CLOCK_SKEW_MAX_S=0
export CHARGE_PROVIDER_API_KEY=sk_test_provider
export CHARGE_PROVIDER_CONNECT_TIMEOUT_MS=500
export CHARGE_PROVIDER_TIMEOUT_MS=500
export CHARGE_PROVIDER_DEADLINE_MS=1500
export CHARGE_COMPLETER_SCHEDULE_S=3600,7200
export CHARGE_PROVIDER_WEBHOOK_SECRET="whsec_new_$RANDOM$RANDOM"
export CHARGE_PROVIDER_WEBHOOK_SECRET_PREVIOUS="whsec_old_$RANDOM$RANDOM"
export CHARGE_PROVIDER_WEBHOOK_TOLERANCE_S=300
export CHARGE_THREADS=2

# the simulator signs its events with the responder's current secret,
# read from a file (a secret on a command line is visible to every user)
(umask 077 && printf '%s\n' "$CHARGE_PROVIDER_WEBHOOK_SECRET" >"$RUN/webhook-secret") ||
	bail "cannot write the webhook secret file"

stack_redis_start "$RUN" "$RUN/redis" "$RUN" 2>"$RUN/stack.err" ||
	{ sed 's/^/# /' "$RUN/stack.err"; bail "redis-server did not start"; }

export SIM_URL="http://127.0.0.1:$SIM_PORT"
export SIM_API_KEY=sk_test_provider
export SIM_LATE_MS
export E2E_REDIS_SOCKET="$RUN/redis.sock"
export REDIS_PID_FILE="$RUN/redis.pid"
export RESPONDER_BIN="$BIN"
RC=0

# responder_start DIR: lighttpd + the responder with this shell's CHARGE_*
# on a fresh port (PORT, picked before: the simulator's webhooks need it),
# sockets, logs and metrics in DIR; sets BASE_URL, RESPONDER_LOG.
responder_start() {
	local dir=$1
	mkdir -p "$dir" || return 1
	export CHARGE_METRICS_FILE="$dir/metrics.shm"
	if ! "$BIN" --check-config >"$dir/check-config.txt" 2>&1; then
		sed 's/^/# /' "$dir/check-config.txt"
		echo "# charge --check-config rejects the configuration of $dir"
		return 1
	fi
	export CHECK_CONFIG_FILE="$dir/check-config.txt"
	stack_lighttpd_start "$dir" "$dir" "$PORT" "$BIN" 2 2>"$dir/stack.err" ||
		{ sed 's/^/# /' "$dir/stack.err"; return 1; }
	export BASE_URL="http://127.0.0.1:$PORT"
	export RESPONDER_LOG="$dir/lighttpd.stderr.log"
}

# run_tests DIR SECONDS SCRIPT: the python tests, bounded in time; their
# TAP in DIR/tap.txt; on a failure the logs' last lines.
run_tests() {
	local dir=$1 secs=$2 script=$3 rc
	timeout --foreground -k 10 "$secs" python3 "$REPO/tests/webhook/$script" | tee "$dir/tap.txt"
	rc=${PIPESTATUS[0]}
	if [ $rc -ne 0 ] && ! grep -q '^not ok' "$dir/tap.txt"; then
		echo "not ok - webhook: $script ($WEBHOOK_PHASE) exited with status $rc"
	fi
	if [ $rc -ne 0 ]; then
		for f in "$dir/lighttpd-error.log" "$dir/lighttpd.stderr.log" "$dir/provider-sim.log" "$RUN/redis.log"; do
			[ -s "$f" ] || continue
			echo "# ---- last lines of $f"
			tail -n 30 "$f" | sed 's/^/#   /'
		done
		RC=1
	fi
}

# ---- route: the route itself; the test posts the events. The simulator:
# tok_providerTimeout charges at once and answers after SIM_LATE_MS, longer
# than the responder's deadline; it sends no webhook.
if has_phase route; then
	dir="$RUN/route"
	mkdir -p "$dir"
	sim_start "$dir" --late-ms "$SIM_LATE_MS" || bail "charge-provider-sim did not start"
	PORT=$(stack_port_pick) || bail "no free port"
	responder_start "$dir" || bail "the responder for the route phase did not start"
	echo "# webhook (route): $BASE_URL, responder $BIN, simulator $SIM at $SIM_URL, run dir $RUN"
	WEBHOOK_PHASE=route run_tests "$dir" 240 test_webhook.py
	stack_lighttpd_stop "$dir"
	stack_sim_stop
fi

# ---- deliver and faults: the simulator delivers its own events to the
# route through lighttpd. provider_timeout_ms 400, provider_deadline_ms 500:
# a tok_providerTimeout is unknown after half a second; the event that came
# first was refused (503, the request still waited) and the simulator
# delivers it again every WEBHOOK_RETRY_MS. The completer waits an hour.
export WEBHOOK_RETRY_MS=100
WEBHOOK_ARGS=(--late-ms "$SIM_LATE_MS" --webhook-secret-file "$RUN/webhook-secret"
	--webhook-retry-ms "$WEBHOOK_RETRY_MS" --webhook-retry-max-ms "$WEBHOOK_RETRY_MS"
	--webhook-attempts 100 --webhook-timeout-ms 5000)
export CHARGE_KEY_PREFIX="hook:"
export CHARGE_PROVIDER_TIMEOUT_MS=400
export CHARGE_PROVIDER_DEADLINE_MS=500
export CHARGE_PROVIDER_CONNECT_TIMEOUT_MS=400
unset CHARGE_PROVIDER_WEBHOOK_SECRET_PREVIOUS
if has_phase deliver || has_phase faults; then
	dir="$RUN/hook"
	mkdir -p "$dir"
	PORT=$(stack_port_pick) || bail "no free port"
	hook_url="http://127.0.0.1:$PORT/webhooks/provider"
	sim_start "$dir" "${WEBHOOK_ARGS[@]}" --webhook-url "$hook_url" ||
		bail "charge-provider-sim (webhooks to $hook_url) did not start"
	responder_start "$dir" || bail "the responder for the deliver phase did not start"
	echo "# webhook (deliver): the simulator at $SIM_URL posts its events to $hook_url"
	if has_phase deliver; then
		WEBHOOK_PHASE=deliver run_tests "$dir" 120 test_webhook_sim.py
	fi
	if has_phase faults; then
		# the same store and port, every delivery duplicated, half of them
		# held back up to 400 ms (later events overtake them)
		stack_sim_stop
		sim_start "$dir" "${WEBHOOK_ARGS[@]}" --webhook-url "$hook_url" \
			--webhook-dup-rate 1 --webhook-shuffle-rate 0.5 --webhook-shuffle-ms 400 --seed 29 ||
			bail "charge-provider-sim (duplicates, shuffled) did not start"
		echo "# webhook (faults): the simulator duplicates every delivery and holds half of them back"
		WEBHOOK_PHASE=faults run_tests "$dir" 120 test_webhook_sim.py
	fi
	stack_lighttpd_stop "$dir"
	stack_sim_stop
fi

# ---- completer: the same scenario without webhooks; the completer asks
# again at the ages 1, 2 and 3 s (then every second), re-sending within
# provider_execute_window_s (2 s), reading the provider's list after it.
if has_phase completer; then
	dir="$RUN/poll"
	mkdir -p "$dir"
	export CHARGE_KEY_PREFIX="poll:"
	export CHARGE_COMPLETER_SCHEDULE_S=1,2,3
	export CHARGE_PROVIDER_EXECUTE_WINDOW_S=2
	unset CHARGE_PROVIDER_WEBHOOK_SECRET
	sim_start "$dir" --late-ms "$SIM_LATE_MS" || bail "charge-provider-sim did not start"
	PORT=$(stack_port_pick) || bail "no free port"
	responder_start "$dir" || bail "the responder for the completer phase did not start"
	echo "# webhook (completer): no webhooks, completer_schedule_s 1,2,3, provider_execute_window_s 2"
	WEBHOOK_PHASE=completer run_tests "$dir" 120 test_webhook_sim.py
	stack_lighttpd_stop "$dir"
	stack_sim_stop
fi
exit $RC
