#!/usr/bin/env bash
# tests/provider/run.sh - the responder against the provider simulator over
# HTTP: lighttpd + the responder + a private Redis + charge-provider-sim, all
# in a fresh temporary directory on loopback. Prints TAP lines (from
# tests/provider/test_provider.py); exits non-zero when a test failed or the
# stack did not start.
#
#   tests/provider/run.sh                            build/charge, build/charge-provider-sim
#   CHARGE_BIN=... CHARGE_SIM_BIN=... tests/provider/run.sh
#   PROVIDER_ONLY='unknown' tests/provider/run.sh     a subset (regex on names)
#   PROVIDER_KEEP=1 tests/provider/run.sh             keep the run directory
set -uo pipefail

REPO=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../.." && pwd)
BIN=${CHARGE_BIN:-$REPO/build/charge}
SIM=${CHARGE_SIM_BIN:-$REPO/build/charge-provider-sim}
SIM_LATE_MS=3000

# shellcheck source=tools/stack.sh
. "$REPO/tools/stack.sh"
# Only the CHARGE_* variables set below reach the responders.
stack_env_clear

bail() {
	echo "not ok 1 - provider: $*"
	exit 1
}

command -v python3 >/dev/null 2>&1 || bail "python3 is not installed"
[ -x "$BIN" ] || bail "responder binary $BIN not found (build it, or set CHARGE_BIN)"
[ -x "$SIM" ] || bail "the provider simulator $SIM is not built (meson builds charge-provider-sim from sim/; or set CHARGE_SIM_BIN)"
BIN=$(readlink -f "$BIN")
SIM=$(readlink -f "$SIM")

RUN=$(stack_rundir_create) || bail "cannot create a run directory"
SIM_PID=
SIM2_PID=
TLS_PID=
cleanup() {
	trap - EXIT INT TERM
	[ -n "$TLS_PID" ] && stack_stop_pid "$TLS_PID" python3 3
	# two simulators may run at once: each stopped by its own PID
	[ -n "$SIM_PID" ] && stack_stop_pid "$SIM_PID" "$STACK_SIM_COMM" 5
	[ -n "$SIM2_PID" ] && stack_stop_pid "$SIM2_PID" "$STACK_SIM_COMM" 5
	stack_stop_all "$RUN"
	if [ "${PROVIDER_KEEP:-0}" = 1 ]; then
		echo "# run directory kept: $RUN"
	else
		rm -rf "$RUN"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# the simulator: tok_providerTimeout charges at once and answers after
# SIM_LATE_MS, longer than the responder's deadline below
stack_sim_start "$RUN" "$RUN" "$SIM" --secret-key sk_test_provider --fsync never \
	--late-ms "$SIM_LATE_MS" 2>"$RUN/stack.err" ||
	{ sed 's/^/# /' "$RUN/stack.err"; bail "charge-provider-sim did not start"; }
SIM_PID=$STACK_SIM_PID
SIM_PORT=$STACK_PROVIDER_PORT

export E2E_PRINCIPAL_A=alice E2E_API_KEY_A="sk_test_alice_$RANDOM$RANDOM"
stack_api_keys_write "$RUN/api-keys" "$E2E_PRINCIPAL_A" "$E2E_API_KEY_A" ||
	bail "cannot write the api-keys file"
mkdir -p "$RUN/spill" && chmod 700 "$RUN/spill"

# provider_timeout_ms 500 per attempt, provider_deadline_ms 1700 for all of
# them: a tok_providerTimeout (answered after 3 s) ends unknown; three
# attempts always fit (the backoffs before the second and the third are at
# most 500 and 1000 ms), a fourth never does (at least 250 + 500 + 1000);
# with 1500 the third did not fit when both backoffs drew near their top;
# lock_ttl_s 5 > (1700 + redis_timeout_ms) / 1000; the completer asks at
# ages 1 s and 6 s, then every 5 s.
stack_env "$RUN" provider
export CHARGE_LOCK_TTL_S=5
export CHARGE_FAILED_TTL_S=60
export CHARGE_PROVIDER_URL="http://127.0.0.1:$SIM_PORT"
# the simulator executes within one attempt and sends no Date header
export CHARGE_PROVIDER_EXECUTE_MAX_MS=500 CHARGE_PROVIDER_CLOCK_SKEW_MAX_S=0
export CHARGE_PROVIDER_API_KEY=sk_test_provider
export CHARGE_PROVIDER_CONNECT_TIMEOUT_MS=500
export CHARGE_PROVIDER_TIMEOUT_MS=500
export CHARGE_PROVIDER_DEADLINE_MS=1700
export CHARGE_COMPLETER_SCHEDULE_S=1,6
# re-sent within 10 s of the request (ages 1 and 6), read only after it
export CHARGE_PROVIDER_EXECUTE_WINDOW_S=10
export CHARGE_THREADS=2

if ! "$BIN" --check-config >"$RUN/check-config.txt" 2>&1; then
	sed 's/^/# /' "$RUN/check-config.txt"
	bail "charge --check-config rejects the test configuration"
fi
stack_redis_start "$RUN" "$RUN/redis" "$RUN" 2>"$RUN/stack.err" ||
	{ sed 's/^/# /' "$RUN/stack.err"; bail "redis-server did not start"; }
PORT=$(stack_port_pick) || bail "no free port"
stack_lighttpd_start "$RUN" "$RUN" "$PORT" "$BIN" 2 2>"$RUN/stack.err" ||
	{ sed 's/^/# /' "$RUN/stack.err"; bail "lighttpd did not start"; }

export BASE_URL="http://127.0.0.1:$PORT"
export SIM_URL="http://127.0.0.1:$SIM_PORT"
export SIM_API_KEY=sk_test_provider
export SIM_LATE_MS
export E2E_REDIS_SOCKET="$RUN/redis.sock"
echo "# provider: $BASE_URL, responder $BIN, simulator $SIM at $SIM_URL, run dir $RUN"

timeout --foreground -k 10 240 python3 "$REPO/tests/provider/test_provider.py" | tee "$RUN/tap.txt"
rc=${PIPESTATUS[0]}

# Phase 2: HTTP over a unix socket to a second simulator, a completer
# schedule of one step (1 s) and an execute window of 1 s: an unknown
# outcome is settled by the read-only probe (the list of charges).
stack_lighttpd_stop "$RUN"
# (its store, PID file and log in RUN/sim2; the first one keeps running:
# phase 3's proxy is in front of it)
STACK_SIM_SOCKET="$RUN/sim.sock" stack_sim_start "$RUN/sim2" "$RUN/sim2" "$SIM" \
	--secret-key sk_test_provider --fsync never 2>"$RUN/stack.err"
sim2_rc=$?
SIM2_PID=$STACK_SIM_PID
export CHARGE_PROVIDER_URL="unix:$RUN/sim.sock"
export CHARGE_COMPLETER_SCHEDULE_S=1
export CHARGE_PROVIDER_EXECUTE_WINDOW_S=1
if [ "$sim2_rc" -ne 0 ] ||
	! stack_lighttpd_start "$RUN" "$RUN" "$PORT" "$BIN" 2 2>>"$RUN/stack.err"; then
	sed 's/^/# /' "$RUN/stack.err"
	echo "not ok - provider: phase 2 (unix socket) did not start"
	exit 1
fi
echo "# provider phase 2: $CHARGE_PROVIDER_URL, completer_schedule_s 1"
PROVIDER_PHASE=unix SIM_UNIX="$RUN/sim.sock" timeout --foreground -k 10 120 \
	python3 "$REPO/tests/provider/test_provider.py" | tee -a "$RUN/tap.txt"
rc2=${PIPESTATUS[0]}
[ "$rc" -eq 0 ] && rc=$rc2

# Phase 3: HTTPS. A test CA made here signs the certificate of a TLS proxy
# in front of the first simulator: trusted through provider_ca_file, the
# charge goes through; with the system's store only, it is refused (the
# simulator never sees the request).
stack_lighttpd_stop "$RUN"
(
	cd "$RUN" &&
	openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem \
		-days 2 -subj /CN=charge-test-ca &&
	openssl req -newkey rsa:2048 -nodes -keyout tls.key -out tls.csr -subj /CN=localhost &&
	printf 'subjectAltName=DNS:localhost,IP:127.0.0.1\n' >tls.ext &&
	openssl x509 -req -in tls.csr -CA ca.pem -CAkey ca.key -CAcreateserial \
		-out tls.pem -days 2 -extfile tls.ext
) >"$RUN/tls.log" 2>&1 || { sed 's/^/# /' "$RUN/tls.log"; echo "not ok - provider: cannot make the test CA"; exit 1; }
TLS_PORT=$(stack_port_pick) || bail "no free port"
python3 "$REPO/tests/provider/tls_proxy.py" "$RUN/tls.pem" "$RUN/tls.key" "$TLS_PORT" "$SIM_PORT" \
	>"$RUN/tls-proxy.log" 2>&1 &
TLS_PID=$!
for _ in $(seq 1 100); do
	grep -q listening "$RUN/tls-proxy.log" 2>/dev/null && break
	sleep 0.05
done
export CHARGE_PROVIDER_URL="https://localhost:$TLS_PORT"
export CHARGE_COMPLETER_SCHEDULE_S=1,5,30,90,300,3600
export CHARGE_PROVIDER_EXECUTE_WINDOW_S=60
for trust in ca none; do
	if [ $trust = ca ]; then
		export CHARGE_PROVIDER_CA_FILE="$RUN/ca.pem"
	else
		export CHARGE_PROVIDER_CA_FILE=
	fi
	stack_lighttpd_start "$RUN" "$RUN" "$PORT" "$BIN" 2 2>"$RUN/stack.err" ||
		{ sed 's/^/# /' "$RUN/stack.err"; echo "not ok - provider: phase 3 ($trust) did not start"; exit 1; }
	echo "# provider phase 3: $CHARGE_PROVIDER_URL, provider_ca_file '${CHARGE_PROVIDER_CA_FILE}'"
	PROVIDER_PHASE=tls-$trust timeout --foreground -k 10 60 \
		python3 "$REPO/tests/provider/test_provider.py" | tee -a "$RUN/tap.txt"
	rc3=${PIPESTATUS[0]}
	[ "$rc" -eq 0 ] && rc=$rc3
	stack_lighttpd_stop "$RUN"
done
if [ $rc -ne 0 ] && ! grep -q '^not ok' "$RUN/tap.txt"; then
	echo "not ok - provider: test_provider.py exited with status $rc"
fi
if [ $rc -ne 0 ]; then
	for f in lighttpd-error.log provider-sim.log sim2/provider-sim.log redis.log; do
		[ -s "$RUN/$f" ] || continue
		echo "# ---- last lines of $f"
		tail -n 30 "$RUN/$f" | sed 's/^/#   /'
	done
fi
exit $rc
