#!/usr/bin/env bash
# systemd.sh - checks conf/charge.service, printing TAP: systemd-analyze
# verify accepts it (on a copy whose ExecStart names the built binary,
# build/charge, and with the man page of Documentation= reachable), its
# hardening and lifecycle directives are present, TimeoutStopSec covers the
# longest request in hand, every CHARGE_<KEY> it sets is a configuration key,
# its secrets are systemd credentials (LoadCredential=, CHARGE_<KEY>_FILE),
# and systemd-analyze security rates its exposure "OK" or better. Then the
# same for conf/charge-provider-sim.service, the demo provider that
# charge.service pulls in (Wants=/After=): verify (with build/charge-provider-sim),
# its identity, socket, store, restart policy and hardening, and its rating.
# And conf/charge.socket, the listening socket systemd holds across the
# service's restarts: verify beside charge.service, its ListenStream is the
# path of charge.service's --listen, owner, group and mode.
# No service is started. Exit status 1 when any check fails.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
UNIT=${CHARGE_UNIT:-$ROOT/conf/charge.service}
BIN=${CHARGE_BIN:-$ROOT/build/charge}
INSTALLED_BIN=/usr/local/sbin/charge
SIM_UNIT=${CHARGE_SIM_UNIT:-$ROOT/conf/charge-provider-sim.service}
SOCKET_UNIT=${CHARGE_SOCKET_UNIT:-$ROOT/conf/charge.socket}
SIM_BIN=${CHARGE_SIM_BIN:-$ROOT/build/charge-provider-sim}
SIM_INSTALLED_BIN=/usr/local/sbin/charge-provider-sim
MAX_EXPOSURE=2.0          # systemd-analyze security: <= 2.0 is rated "OK"

N=0
FAILED=0
ok() { N=$((N + 1)); echo "ok $N - $1"; }
not_ok() {
	N=$((N + 1)); FAILED=$((FAILED + 1))
	echo "not ok $N - $1"
	shift
	local line
	for line in "$@"; do echo "#   $line"; done
}
skip() { N=$((N + 1)); echo "ok $N - $1 # SKIP $2"; }

TMP=$(mktemp -d /tmp/charge-systemd.XXXXXX)
trap 'rm -rf "$TMP"' EXIT

if [ ! -f "$UNIT" ]; then
	not_ok "conf/charge.service exists"
	echo "1..$N"
	exit 1
fi
ok "conf/charge.service exists"

# The unit's directives, "Key=value" per line, comments and blanks dropped.
directives() { grep -vE '^[[:space:]]*(#|;|$)' "$UNIT"; }

# --- systemd-analyze verify ---------------------------------------------
if [ ! -x "$BIN" ]; then
	not_ok "the responder is built" "$BIN is missing: build first (./test.sh unit)"
else
	ok "the responder is built ($BIN)"
fi
if ! command -v systemd-analyze >/dev/null 2>&1; then
	skip "systemd-analyze verify accepts the unit" "systemd-analyze not installed"
elif [ ! -x "$BIN" ]; then
	not_ok "systemd-analyze verify accepts the unit" "no binary to substitute for $INSTALLED_BIN"
else
	# verify checks that ExecStart's binary exists and runs man(1) for
	# Documentation=man:charge(8): give it the build and the page.
	sed "s#$INSTALLED_BIN#$BIN#g" "$UNIT" >"$TMP/charge.service"
	mkdir -p "$TMP/man/man8"
	cp "$ROOT/docs/charge.8" "$TMP/man/man8/" 2>/dev/null
	out=$(cd "$TMP" && MANPATH="$TMP/man" systemd-analyze verify "$TMP/charge.service" 2>&1)
	rc=$?
	if [ "$rc" -eq 0 ] && [ -z "$out" ]; then
		ok "systemd-analyze verify accepts the unit (no warnings)"
	else
		mapfile -t lines <<<"$out"
		not_ok "systemd-analyze verify accepts the unit (no warnings)" \
			"exit status $rc" "${lines[@]}"
	fi
fi

# --- required directives ----------------------------------------------------
# "Key=regex": the unit must have a line Key=<value matching regex>.
REQUIRED=(
	"Type=notify"
	"NotifyAccess=main"
	"ExecStart=$INSTALLED_BIN --listen /run/charge/charge\\.sock"
	"ExecReload=/bin/kill -HUP \\\$MAINPID"
	"Wants=charge\\.socket"
	"After=.*charge\\.socket.*"
	"RuntimeDirectoryPreserve=yes"
	"Environment=CHARGE_CONF=/usr/local/etc/charge/charge\\.conf"
	"Restart=always"
	"User=charge"
	"SupplementaryGroups=charge"
	"UMask=0007"
	"RuntimeDirectory=charge"
	"StateDirectory=charge"
	"ReadWritePaths=.*/var/lib/charge.*"
	"KillSignal=SIGTERM"
	"TimeoutStopSec=[0-9]+s?"
	"LimitCORE=0"
	"NoNewPrivileges=yes"
	"ProtectSystem=strict"
	"ProtectHome=yes"
	"PrivateTmp=yes"
	"PrivateDevices=yes"
	"PrivateMounts=yes"
	"ProtectKernelTunables=yes"
	"ProtectKernelModules=yes"
	"ProtectKernelLogs=yes"
	"ProtectControlGroups=yes"
	"ProtectClock=yes"
	"ProtectHostname=yes"
	"RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6"
	"RestrictNamespaces=yes"
	"RestrictRealtime=yes"
	"RestrictSUIDSGID=yes"
	"MemoryDenyWriteExecute=yes"
	"LockPersonality=yes"
	"CapabilityBoundingSet="
	"SystemCallArchitectures=native"
	"SystemCallFilter=@system-service"
)
for req in "${REQUIRED[@]}"; do
	key=${req%%=*}
	re=${req#*=}
	shown=${re//\\/}
	line=$(directives | grep -E "^${key}=${re}\$" | head -1)
	if [ -n "$line" ] || { [ -z "$re" ] && directives | grep -qx "${key}="; }; then
		ok "${line:-$key=}"
	else
		have=$(directives | grep -E "^${key}=" | tr '\n' ' ')
		not_ok "$key=$shown" "found: ${have:-nothing}"
	fi
done

# --- TimeoutStopSec covers the longest request in hand --------------------
# Defaults from src/base/defaults.h: reading the body, Prefer: wait, the provider
# phase (provider_deadline_ms bounds every attempt of it) and two Redis
# round trips.
def() { sed -nE "s/^#define[[:space:]]+$1[[:space:]]+([0-9]+).*/\\1/p" "$ROOT/src/base/defaults.h"; }
req_ms=$(def DEF_REQUEST_TIMEOUT_MS)
wait_s=$(def DEF_MAX_WAIT_S)
prov_ms=$(def DEF_PROVIDER_DEADLINE_MS)
redis_ms=$(def DEF_REDIS_TIMEOUT_MS)
stop=$(directives | sed -nE 's/^TimeoutStopSec=([0-9]+)s?$/\1/p' | tail -1)
if [ -z "$req_ms" ] || [ -z "$wait_s" ] || [ -z "$prov_ms" ] || [ -z "$redis_ms" ]; then
	not_ok "TimeoutStopSec covers the longest request in hand" \
		"cannot read the defaults from src/base/defaults.h"
else
	need_ms=$((req_ms + wait_s * 1000 + prov_ms + 2 * redis_ms))
	if [ -n "$stop" ] && [ $((stop * 1000)) -gt "$need_ms" ] &&
	    [ $((stop * 1000)) -gt "$prov_ms" ]; then
		ok "TimeoutStopSec=${stop}s exceeds request_timeout_ms + max_wait_s + provider_deadline_ms + 2 x redis_timeout_ms (${need_ms} ms)"
	else
		not_ok "TimeoutStopSec covers the longest request in hand" \
			"TimeoutStopSec=${stop:-unset} s, need more than $need_ms ms"
	fi
fi

# --- every CHARGE_<KEY> is a configuration key ------------------------------
keys=$(sed -nE 's/^[[:space:]]*\{ "([a-z0-9_]+)", CFG_.*/\1/p' "$ROOT/src/config/config.c")
bad=()
for var in $(directives | sed -nE 's/^Environment=(CHARGE_[A-Z0-9_]+)=.*/\1/p'); do
	[ "$var" = CHARGE_CONF ] && continue
	key=$(printf '%s' "${var#CHARGE_}" | tr 'A-Z' 'a-z')
	grep -qx "$key" <<<"$keys" || bad+=("$var: no configuration key $key in src/config/config.c")
done
if [ ${#bad[@]} -eq 0 ]; then
	ok "every CHARGE_<KEY> set by Environment= is a configuration key"
else
	not_ok "every CHARGE_<KEY> set by Environment= is a configuration key" "${bad[@]}"
fi

# --- secrets as systemd credentials (issue 37) --------------------------------
# credentials FILE: the unit reads provider_secret and provider_api_key from
# LoadCredential= files through CHARGE_<KEY>_FILE=%d/<id>, every such
# variable names a credential it loads, and no secret is set in Environment=.
credentials() {
	local f=$1 bad=() id var
	local d
	d=$(grep -vE '^[[:space:]]*(#|;|$)' "$f")
	for key in provider_secret provider_api_key; do
		var=CHARGE_$(tr 'a-z' 'A-Z' <<<"$key")_FILE
		grep -qx "Environment=$var=%d/$key" <<<"$d" || bad+=("no Environment=$var=%d/$key")
	done
	for id in $(sed -nE 's#^Environment=CHARGE_[A-Z0-9_]+_FILE=%d/([A-Za-z0-9_.-]+)$#\1#p' <<<"$d"); do
		grep -qE "^LoadCredential=$id:/" <<<"$d" || bad+=("%d/$id: no LoadCredential=$id:/...")
	done
	for var in CHARGE_PROVIDER_SECRET CHARGE_PROVIDER_API_KEY CHARGE_PROVIDER_WEBHOOK_SECRET \
		CHARGE_PROVIDER_WEBHOOK_SECRET_PREVIOUS CHARGE_REDIS_URL; do
		grep -qE "^Environment=$var=" <<<"$d" && bad+=("Environment=$var= puts a secret in the environment")
	done
	printf '%s\n' "${bad[@]}"
}
out=$(credentials "$UNIT")
if [ -z "$out" ]; then
	ok "provider_secret and provider_api_key are systemd credentials (LoadCredential=, CHARGE_<KEY>_FILE=%d/...), no secret in Environment="
else
	mapfile -t lines <<<"$out"
	not_ok "the secrets are systemd credentials" "${lines[@]}"
fi

# --- writable paths are where the sandbox lets the service write -----------
bad=()
for var in CHARGE_SPILL_DIR CHARGE_PROVIDER_LEDGER CHARGE_METRICS_FILE; do
	path=$(directives | sed -nE "s/^Environment=$var=(.*)/\\1/p" | tail -1)
	case $path in
	/var/lib/charge/* | /run/charge/*) ;;
	*) bad+=("$var=${path:-unset} is outside /var/lib/charge and /run/charge") ;;
	esac
done
if [ ${#bad[@]} -eq 0 ]; then
	ok "spill_dir, provider_ledger and metrics_file are under StateDirectory/RuntimeDirectory"
else
	not_ok "spill_dir, provider_ledger and metrics_file are under StateDirectory/RuntimeDirectory" "${bad[@]}"
fi

# --- systemd-analyze security -----------------------------------------------
if ! command -v systemd-analyze >/dev/null 2>&1 || [ ! -f "$TMP/charge.service" ]; then
	skip "systemd-analyze security rates the unit OK" "no systemd-analyze or no verified copy"
elif ! out=$(cd "$TMP" && systemd-analyze security --offline=true "$TMP/charge.service" 2>&1); then
	if grep -q "offline" <<<"$out"; then
		skip "systemd-analyze security rates the unit OK" "this systemd has no --offline"
	else
		mapfile -t lines <<<"$out"
		not_ok "systemd-analyze security rates the unit OK" "${lines[@]: -5}"
	fi
else
	level=$(sed -nE 's/.*Overall exposure level for [^:]*: ([0-9.]+).*/\1/p' <<<"$out")
	if [ -n "$level" ] && awk -v l="$level" -v m="$MAX_EXPOSURE" 'BEGIN { exit !(l <= m) }'; then
		ok "systemd-analyze security: exposure $level (at most $MAX_EXPOSURE)"
	else
		not_ok "systemd-analyze security: exposure at most $MAX_EXPOSURE" "got ${level:-no rating}"
	fi
fi

# unit_exposure WHO FILE: systemd-analyze security rates the verified copy
# FILE (run from its folder) at most MAX_EXPOSURE; WHO names it ("the
# simulator's"). Skipped without a verified copy or without --offline.
unit_exposure() {
	local who=$1 f=$2 out level
	if [ ! -f "$f" ] || ! command -v systemd-analyze >/dev/null 2>&1; then
		skip "systemd-analyze security rates $who unit OK" "no verified copy"
	elif out=$(cd "$(dirname "$f")" && systemd-analyze security --offline=true "$f" 2>&1); then
		level=$(sed -nE 's/.*Overall exposure level for [^:]*: ([0-9.]+).*/\1/p' <<<"$out")
		if [ -n "$level" ] && awk -v l="$level" -v m="$MAX_EXPOSURE" 'BEGIN { exit !(l <= m) }'; then
			ok "systemd-analyze security of $who unit: exposure $level (at most $MAX_EXPOSURE)"
		else
			not_ok "systemd-analyze security of $who unit: exposure at most $MAX_EXPOSURE" \
				"got ${level:-no rating}"
		fi
	else
		skip "systemd-analyze security rates $who unit OK" "this systemd has no --offline"
	fi
}

# --- conf/charge-provider-sim.service --------------------------------------
if [ ! -f "$SIM_UNIT" ]; then
	not_ok "conf/charge-provider-sim.service exists"
else
	ok "conf/charge-provider-sim.service exists"
	sim_directives() { grep -vE '^[[:space:]]*(#|;|$)' "$SIM_UNIT"; }
	if ! command -v systemd-analyze >/dev/null 2>&1; then
		skip "systemd-analyze verify accepts the simulator's unit" "systemd-analyze not installed"
	elif [ ! -x "$SIM_BIN" ]; then
		not_ok "systemd-analyze verify accepts the simulator's unit" \
			"$SIM_BIN is missing: build first"
	else
		sed "s#$SIM_INSTALLED_BIN#$SIM_BIN#g" "$SIM_UNIT" >"$TMP/charge-provider-sim.service"
		cp "$ROOT/docs/charge-provider-sim.8" "$TMP/man/man8/" 2>/dev/null
		# beside charge.service, which pulls it in
		units=("$TMP/charge-provider-sim.service")
		[ -f "$TMP/charge.service" ] && units+=("$TMP/charge.service")
		out=$(cd "$TMP" && MANPATH="$TMP/man" systemd-analyze verify "${units[@]}" 2>&1)
		rc=$?
		if [ "$rc" -eq 0 ] && [ -z "$out" ]; then
			ok "systemd-analyze verify accepts the simulator's unit beside charge.service (no warnings)"
		else
			mapfile -t lines <<<"$out"
			not_ok "systemd-analyze verify accepts the simulator's unit (no warnings)" \
				"exit status $rc" "${lines[@]}"
		fi
	fi
	SIM_REQUIRED=(
		"Type=exec"
		"ExecStart=$SIM_INSTALLED_BIN --listen unix:/run/charge-provider-sim/sim\\.sock --data /var/lib/charge-provider-sim/[a-z]+"
		"User=charge-provider-sim"
		"Group=charge-provider-sim"
		"UMask=0007"
		"RuntimeDirectory=charge-provider-sim"
		"StateDirectory=charge-provider-sim"
		"ReadWritePaths=.*/var/lib/charge-provider-sim.*"
		"Restart=on-failure"
		"KillSignal=SIGTERM"
		"LimitCORE=0"
		"NoNewPrivileges=yes"
		"ProtectSystem=strict"
		"ProtectHome=yes"
		"PrivateTmp=yes"
		"PrivateDevices=yes"
		"PrivateNetwork=yes"
		"ProtectKernelTunables=yes"
		"ProtectKernelModules=yes"
		"ProtectControlGroups=yes"
		"RestrictAddressFamilies=AF_UNIX"
		"RestrictNamespaces=yes"
		"MemoryDenyWriteExecute=yes"
		"CapabilityBoundingSet="
		"SystemCallArchitectures=native"
		"SystemCallFilter=@system-service"
	)
	for req in "${SIM_REQUIRED[@]}"; do
		key=${req%%=*}
		re=${req#*=}
		shown=${re//\\/}
		line=$(sim_directives | grep -E "^${key}=${re}\$" | head -1)
		if [ -n "$line" ] || { [ -z "$re" ] && sim_directives | grep -qx "${key}="; }; then
			ok "simulator: ${line:-$key=}"
		else
			have=$(sim_directives | grep -E "^${key}=" | tr '\n' ' ')
			not_ok "simulator: $key=$shown" "found: ${have:-nothing}"
		fi
	done
	# charge.service pulls the demo provider in and starts after it
	if directives | grep -qE '^Wants=.*\bcharge-provider-sim\.service\b' &&
		directives | grep -qE '^After=.*\bcharge-provider-sim\.service\b'; then
		ok "charge.service: Wants= and After= charge-provider-sim.service"
	else
		not_ok "charge.service: Wants= and After= charge-provider-sim.service" \
			"found: $(directives | grep -E '^(Wants|After)=' | tr '\n' ' ')"
	fi
	unit_exposure "the simulator's" "$TMP/charge-provider-sim.service"
fi

# --- conf/charge-reconcile.service and .timer -------------------------------
# The reconciler's hourly run (issue 37): verify both (the timer names the
# service; with build/charge-reconcile), the run's window and textfile, its
# identity and hardening, and its rating.
RC_UNIT=${CHARGE_RECONCILE_UNIT:-$ROOT/conf/charge-reconcile.service}
RC_TIMER=${RC_UNIT%.service}.timer
RC_BIN=${CHARGE_RECONCILE_BIN:-$(dirname "$BIN")/charge-reconcile}
RC_INSTALLED_BIN=/usr/local/sbin/charge-reconcile
if [ ! -f "$RC_UNIT" ] || [ ! -f "$RC_TIMER" ]; then
	not_ok "conf/charge-reconcile.service and .timer exist"
else
	ok "conf/charge-reconcile.service and .timer exist"
	rc_directives() { grep -vE '^[[:space:]]*(#|;|$)' "$1"; }
	mkdir -p "$TMP/rc"
	if ! command -v systemd-analyze >/dev/null 2>&1; then
		skip "systemd-analyze verify accepts the reconciler's service and timer" "systemd-analyze not installed"
	elif [ ! -x "$RC_BIN" ]; then
		not_ok "systemd-analyze verify accepts the reconciler's service and timer" \
			"$RC_BIN is missing: build first"
	else
		sed "s#$RC_INSTALLED_BIN#$RC_BIN#g" "$RC_UNIT" >"$TMP/rc/charge-reconcile.service"
		cp "$RC_TIMER" "$TMP/rc/charge-reconcile.timer"
		cp "$ROOT/docs/charge-reconcile.8" "$TMP/man/man8/" 2>/dev/null
		out=$(cd "$TMP/rc" && MANPATH="$TMP/man" systemd-analyze verify \
			"$TMP/rc/charge-reconcile.service" "$TMP/rc/charge-reconcile.timer" 2>&1)
		rc=$?
		if [ "$rc" -eq 0 ] && [ -z "$out" ]; then
			ok "systemd-analyze verify accepts the reconciler's service and timer (no warnings)"
		else
			mapfile -t lines <<<"$out"
			not_ok "systemd-analyze verify accepts the reconciler's service and timer (no warnings)" \
				"exit status $rc" "${lines[@]}"
		fi
	fi
	RC_REQUIRED=(
		"$RC_UNIT|Type=oneshot"
		"$RC_UNIT|ExecStart=$RC_INSTALLED_BIN --quiet --since [0-9]+h --until 5m --prometheus /var/lib/charge-reconcile/charge_reconcile\\.prom"
		"$RC_UNIT|Environment=CHARGE_CONF=/usr/local/etc/charge/charge\\.conf"
		"$RC_UNIT|Environment=CHARGE_SPILL_DIR=$(directives | sed -nE 's/^Environment=CHARGE_SPILL_DIR=//p' | tail -1)"
		"$RC_UNIT|User=charge"
		"$RC_UNIT|StateDirectory=charge-reconcile"
		"$RC_UNIT|StateDirectoryMode=0755"
		"$RC_UNIT|LimitCORE=0"
		"$RC_UNIT|NoNewPrivileges=yes"
		"$RC_UNIT|ProtectSystem=strict"
		"$RC_UNIT|ProtectHome=yes"
		"$RC_UNIT|PrivateTmp=yes"
		"$RC_UNIT|PrivateDevices=yes"
		"$RC_UNIT|RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6"
		"$RC_UNIT|MemoryDenyWriteExecute=yes"
		"$RC_UNIT|CapabilityBoundingSet="
		"$RC_UNIT|SystemCallFilter=@system-service"
		"$RC_TIMER|OnCalendar=hourly"
		"$RC_TIMER|Persistent=true"
		"$RC_TIMER|WantedBy=timers\\.target"
	)
	for req in "${RC_REQUIRED[@]}"; do
		file=${req%%|*}
		req=${req#*|}
		key=${req%%=*}
		re=${req#*=}
		shown=${re//\\/}
		line=$(rc_directives "$file" | grep -E "^${key}=${re}\$" | head -1)
		if [ -n "$line" ] || { [ -z "$re" ] && rc_directives "$file" | grep -qx "${key}="; }; then
			ok "reconciler $(basename "$file"): ${line:-$key=}"
		else
			have=$(rc_directives "$file" | grep -E "^${key}=" | tr '\n' ' ')
			not_ok "reconciler $(basename "$file"): $key=$shown" "found: ${have:-nothing}"
		fi
	done
	out=$(credentials "$RC_UNIT")
	if [ -z "$out" ]; then
		ok "the reconciler reads provider_secret and provider_api_key from the same credentials"
	else
		mapfile -t lines <<<"$out"
		not_ok "the reconciler's secrets are systemd credentials" "${lines[@]}"
	fi
	# the window (--since) is younger than completed_ttl_s's default: older
	# charges have lost their records (docs/reconcile.md)
	since_h=$(rc_directives "$RC_UNIT" | sed -nE 's/^ExecStart=.* --since ([0-9]+)h .*/\1/p')
	ttl_s=$(def DEF_COMPLETED_TTL_S)
	if [ -n "$since_h" ] && [ -n "$ttl_s" ] && [ $((since_h * 3600)) -lt "$ttl_s" ]; then
		ok "the reconciler's window (--since ${since_h}h) is younger than completed_ttl_s (${ttl_s} s)"
	else
		not_ok "the reconciler's window is younger than completed_ttl_s" \
			"--since ${since_h:-?}h, completed_ttl_s ${ttl_s:-?}"
	fi
	unit_exposure "the reconciler's" "$TMP/rc/charge-reconcile.service"
fi

# --- conf/charge.socket ------------------------------------------------------
if [ ! -f "$SOCKET_UNIT" ]; then
	not_ok "conf/charge.socket exists"
else
	ok "conf/charge.socket exists"
	sock_directives() { grep -vE '^[[:space:]]*(#|;|$)' "$SOCKET_UNIT"; }
	if ! command -v systemd-analyze >/dev/null 2>&1 || [ ! -f "$TMP/charge.service" ]; then
		skip "systemd-analyze verify accepts charge.socket" "no systemd-analyze or no verified charge.service"
	else
		cp "$SOCKET_UNIT" "$TMP/charge.socket"
		out=$(cd "$TMP" && MANPATH="$TMP/man" systemd-analyze verify "$TMP/charge.socket" "$TMP/charge.service" 2>&1)
		rc=$?
		if [ "$rc" -eq 0 ] && [ -z "$out" ]; then
			ok "systemd-analyze verify accepts charge.socket beside charge.service (no warnings)"
		else
			mapfile -t lines <<<"$out"
			not_ok "systemd-analyze verify accepts charge.socket (no warnings)" "exit status $rc" "${lines[@]}"
		fi
	fi
	path=$(directives | sed -nE 's/^ExecStart=[^ ]+ --listen ([^ ]+)$/\1/p')
	SOCK_REQUIRED=(
		"ListenStream=${path:-/run/charge/charge.sock}"
		"SocketUser=charge"
		"SocketGroup=www-data"
		"SocketMode=0660"
		"Accept=no"
		"Service=charge\\.service"
		"WantedBy=sockets\\.target"
	)
	for req in "${SOCK_REQUIRED[@]}"; do
		key=${req%%=*}
		re=${req#*=}
		line=$(sock_directives | grep -E "^${key}=${re}\$" | head -1)
		if [ -n "$line" ]; then
			ok "charge.socket: $line"
		else
			not_ok "charge.socket: $key=${re//\\/}" "found: $(sock_directives | grep -E "^${key}=" | tr '\n' ' ')"
		fi
	done
fi

echo "1..$N"
[ "$FAILED" -eq 0 ]
