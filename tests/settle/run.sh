#!/usr/bin/env bash
# tests/settle/run.sh - settling an ambiguous provider outcome, over real
# sockets, against a scripted hostile provider (tests/settle/
# hostile_provider.py): lighttpd + the responder + a private Redis + the
# hostile provider, all in a fresh temporary directory on loopback. Prints
# TAP lines (from tests/settle/test_settle.py); exits non-zero when a test
# failed or the stack did not start.
#
#   tests/settle/run.sh                       build/charge
#   CHARGE_BIN=... tests/settle/run.sh
#   SETTLE_ONLY='page 2' tests/settle/run.sh   a subset (regex on names)
#   SETTLE_KEEP=1 tests/settle/run.sh          keep the run directory
#
# The timings are short so that every test ends within seconds:
# provider_timeout_ms 500 per attempt, provider_deadline_ms 1500 per call,
# completer_schedule_s 1,4,8, provider_execute_window_s 3.
set -uo pipefail

REPO=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../.." && pwd)
BIN=${CHARGE_BIN:-$REPO/build/charge}
# The timings; SETTLE_DEFAULTS=1 takes the shipped defaults instead (a
# run of minutes: the never-delivered request then settles at the 90 s step)
WINDOW_S=3
SCHEDULE=1,4,8
TIMEOUT_MS=500
DEADLINE_MS=1500
LOCK_TTL_S=5
# provider_execute_max_ms: a delivery may execute this long after its send
EXECUTE_MAX_MS=6000
# provider_clock_skew_max_s
SKEW_MAX_S=60
# provider_search_lag_s: the probe searches, then lists the last 10 s
SEARCH_LAG_S=10
if [ "${SETTLE_DEFAULTS:-0}" = 1 ]; then
	WINDOW_S=60 SCHEDULE=1,5,30,90,300,3600 TIMEOUT_MS=5000 DEADLINE_MS=12000 LOCK_TTL_S=30
	EXECUTE_MAX_MS=60000 SEARCH_LAG_S=300
fi

# shellcheck source=tools/stack.sh
. "$REPO/tools/stack.sh"
stack_env_clear

bail() {
	echo "not ok 1 - settle: $*"
	exit 1
}

command -v python3 >/dev/null 2>&1 || bail "python3 is not installed"
[ -x "$BIN" ] || bail "responder binary $BIN not found (build it, or set CHARGE_BIN)"
BIN=$(readlink -f "$BIN")

RUN=$(stack_rundir_create) || bail "cannot create a run directory"
HP_PID=
cleanup() {
	trap - EXIT INT TERM
	stack_stop_all "$RUN"
	[ -n "$HP_PID" ] && stack_stop_pid "$HP_PID" python3 3
	if [ "${SETTLE_KEEP:-0}" = 1 ]; then
		echo "# run directory kept: $RUN"
	else
		rm -rf "$RUN"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

HP_KEY="sk_test_hostile_$RANDOM$RANDOM"
HP_PORT=$(stack_port_pick) || bail "no free port"
setsid python3 "$REPO/tests/settle/hostile_provider.py" --port "$HP_PORT" \
	--api-key "$HP_KEY" </dev/null >"$RUN/hostile.log" 2>&1 &
HP_PID=$!
for _ in $(seq 1 100); do
	grep -q "listening on" "$RUN/hostile.log" 2>/dev/null && break
	stack_pid_alive "$HP_PID" || break
	sleep 0.05
done
grep -q "listening on" "$RUN/hostile.log" ||
	{ sed 's/^/# /' "$RUN/hostile.log"; bail "the hostile provider did not start"; }

export E2E_PRINCIPAL_A=alice E2E_API_KEY_A="sk_test_alice_$RANDOM$RANDOM"
stack_api_keys_write "$RUN/api-keys" "$E2E_PRINCIPAL_A" "$E2E_API_KEY_A" ||
	bail "cannot write the api-keys file"
mkdir -p "$RUN/spill" && chmod 700 "$RUN/spill"

# provider_execute_window_s, provider_execute_max_ms and
# provider_clock_skew_max_s go in a private charge.conf (the repository's
# plus those lines): the web server passes the responder only the CHARGE_*
# variables its configuration names. Everything else is a CHARGE_* override.
if ! cp "$REPO/conf/charge.conf" "$RUN/charge.conf" ||
	! printf '\n# tests/settle\nprovider_execute_window_s = %s\nprovider_execute_max_ms = %s\nprovider_clock_skew_max_s = %s\nprovider_search_lag_s = %s\n' \
		"$WINDOW_S" "$EXECUTE_MAX_MS" "$SKEW_MAX_S" "$SEARCH_LAG_S" >>"$RUN/charge.conf"; then
	bail "cannot write $RUN/charge.conf"
fi
export CHARGE_CONF="$RUN/charge.conf"

# lock_ttl_s > (provider_deadline_ms + redis_timeout_ms) / 1000
stack_env "$RUN" provider
export CHARGE_LOCK_TTL_S=$LOCK_TTL_S
export CHARGE_FAILED_TTL_S=600
export CHARGE_PROVIDER_URL="http://127.0.0.1:$HP_PORT"
export CHARGE_PROVIDER_API_KEY=$HP_KEY
export CHARGE_PROVIDER_CONNECT_TIMEOUT_MS=500
export CHARGE_PROVIDER_TIMEOUT_MS=$TIMEOUT_MS
export CHARGE_PROVIDER_DEADLINE_MS=$DEADLINE_MS
export CHARGE_COMPLETER_SCHEDULE_S=$SCHEDULE
export CHARGE_THREADS=2

# a build from before one of those keys: run without it (its tests then
# show what that build does)
for _ in 1 2 3 4; do
	"$BIN" --check-config >"$RUN/check-config.txt" 2>&1 && break
	k=$(sed -n "s/.*unknown key '\([a-z_0-9]*\)'.*/\1/p" "$RUN/check-config.txt" | head -n 1)
	[ -n "$k" ] || break
	echo "# this responder has no $k: running without it"
	sed -i "/^$k = /d" "$RUN/charge.conf"
done
if ! "$BIN" --check-config >"$RUN/check-config.txt" 2>&1; then
	sed 's/^/# /' "$RUN/check-config.txt"
	bail "charge --check-config rejects the test configuration"
fi
grep -E '^(provider_execute_(window_s|max_ms)|provider_clock_skew_max_s|provider_search_lag_s|completer_schedule_s|provider_(timeout|deadline)_ms) ' "$RUN/check-config.txt" |
	sed 's/^/# /'
stack_redis_start "$RUN" "$RUN/redis" "$RUN" 2>"$RUN/stack.err" ||
	{ sed 's/^/# /' "$RUN/stack.err"; bail "redis-server did not start"; }
PORT=$(stack_port_pick) || bail "no free port"
stack_lighttpd_start "$RUN" "$RUN" "$PORT" "$BIN" 2 2>"$RUN/stack.err" ||
	{ sed 's/^/# /' "$RUN/stack.err"; bail "lighttpd did not start"; }

export BASE_URL="http://127.0.0.1:$PORT"
export HOSTILE_URL="http://127.0.0.1:$HP_PORT"
export SETTLE_WINDOW_S=$WINDOW_S SETTLE_EXECUTE_MAX_MS=$EXECUTE_MAX_MS SETTLE_SKEW_MAX_S=$SKEW_MAX_S
export E2E_REDIS_SOCKET="$RUN/redis.sock"
echo "# settle: $BASE_URL, responder $BIN, hostile provider at $HOSTILE_URL, run dir $RUN"

timeout --foreground -k 10 420 python3 "$REPO/tests/settle/test_settle.py" | tee "$RUN/tap.txt"
rc=${PIPESTATUS[0]}
if [ "$rc" -ne 0 ] && ! grep -q '^not ok' "$RUN/tap.txt"; then
	echo "not ok - settle: test_settle.py exited with status $rc"
fi
if [ "$rc" -ne 0 ]; then
	for f in lighttpd-error.log hostile.log redis.log; do
		[ -s "$RUN/$f" ] || continue
		echo "# ---- last lines of $f"
		tail -n 30 "$RUN/$f" | sed 's/^/#   /'
	done
fi
exit "$rc"
