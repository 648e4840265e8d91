# shellcheck shell=bash
# tests/ha/common.sh - what the scale-out suites (sentinel.sh, cluster.sh,
# nodes.sh) share. Sourced after REPO is set:
#
#   ha_suite_init NAME        run directory, clean CHARGE_*, cleanup trap
#   ha_suite_env DIR          the responder's configuration for a test stack
#   ha_suite_stack NAME DIR PROCS   lighttpd + responders in DIR; sets
#                             HA_STACK_URL (the stack's PID is in DIR)
#   ha_suite_bail WHAT        "not ok" and exit
#   ha_suite_logs DIR...      the responder logs' tails, as TAP comments
#
# Every process is started here or by tools/ha.sh and stopped by its PID.

# shellcheck source=tools/stack.sh
. "$REPO/tools/stack.sh"
# shellcheck source=tools/ha.sh
. "$REPO/tools/ha.sh"

BIN=$(readlink -f "${HA_RESPONDER_BIN:-${CHARGE_BIN:-$REPO/build/charge}}")
HA_SUITE=
HA_SUITE_RUN=
HA_SUITE_STACKS=()
HA_SUITE_TOPOLOGIES=()

ha_suite_bail() {
	echo "not ok 1 - $HA_SUITE: $*"
	exit 1
}

ha_suite_cleanup() {
	local d
	trap - EXIT INT TERM
	for d in "${HA_SUITE_STACKS[@]}"; do
		STACK_LIGHTTPD_PID= stack_lighttpd_stop "$d"
	done
	for d in "${HA_SUITE_TOPOLOGIES[@]}"; do
		ha_stop_all "$d"
	done
	if [ "${HA_KEEP:-0}" = 1 ]; then
		echo "# run directory kept: $HA_SUITE_RUN"
	else
		rm -rf "$HA_SUITE_RUN"
	fi
}

ha_suite_init() {
	HA_SUITE=$1
	stack_env_clear
	command -v redis-sentinel >/dev/null 2>&1 ||
		ha_suite_bail "redis-sentinel is not installed"
	[ -x "$BIN" ] || ha_suite_bail "responder binary $BIN not found"
	HA_SUITE_RUN=$(stack_rundir_create) || ha_suite_bail "no run directory"
	trap ha_suite_cleanup EXIT
	trap 'exit 130' INT TERM
	export HA_RESPONDER_BIN=$BIN
	export HA_API_KEY="sk_test_ha_$RANDOM$RANDOM" HA_PRINCIPAL=ha
	stack_api_keys_write "$HA_SUITE_RUN/api-keys" "$HA_PRINCIPAL" \
		"$HA_API_KEY" || ha_suite_bail "cannot write the api-keys file"
}

# ha_suite_topology DIR: remembers a tools/ha.sh directory to stop.
ha_suite_topology() {
	HA_SUITE_TOPOLOGIES+=("$1")
}

# ha_suite_env DIR: the responder's configuration (CHARGE_REDIS_URL is the
# caller's). lock_ttl_s 2 > provider_timeout_ms + provider_latency_ms.
ha_suite_env() {
	local dir=$1
	mkdir -p "$dir/spill" && chmod 700 "$dir/spill"
	export CHARGE_REDIS_TIMEOUT_MS=1000
	export CHARGE_LOCK_TTL_S=2
	export CHARGE_COMPLETED_TTL_S=86400
	export CHARGE_FAILED_TTL_S=120
	export CHARGE_MAX_REQUEST_BYTES=65536
	export CHARGE_SPILL_DIR="$dir/spill"
	export CHARGE_SPILL_THRESHOLD_BYTES=16384
	export CHARGE_PROVIDER_LATENCY_MS=50
	export CHARGE_PROVIDER_TIMEOUT_MS=600
	export CHARGE_API_KEYS_FILE="$HA_SUITE_RUN/api-keys"
	export CHARGE_PROVIDER_LEDGER="$dir/ledger.log"
	export CHARGE_PROVIDER_SECRET="ha-secret-$HA_SUITE"
	export CHARGE_METRICS_FILE="$dir/metrics.shm"
	export CHARGE_LOG_LEVEL=info
	export CHARGE_THREADS=1
	export HA_LEDGER=$CHARGE_PROVIDER_LEDGER HA_SPILL_DIR=$CHARGE_SPILL_DIR
}

# ha_suite_stack NAME DIR PROCS: a lighttpd stack with PROCS responders in
# DIR (its own run directory), on a free port.
ha_suite_stack() {
	local name=$1 dir=$2 procs=$3 port
	mkdir -p "$dir"
	"$BIN" --check-config >"$dir/check-config.txt" 2>&1 || {
		sed 's/^/# /' "$dir/check-config.txt"
		ha_suite_bail "$name: charge --check-config rejects the configuration"
	}
	port=$(stack_port_pick) || ha_suite_bail "no free port"
	HA_SUITE_STACKS+=("$dir")
	STACK_LIGHTTPD_PID=
	stack_lighttpd_start "$dir" "$dir" "$port" "$BIN" "$procs" 2>"$dir/stack.err" || {
		sed 's/^/# /' "$dir/stack.err"
		ha_suite_bail "$name: lighttpd did not start"
	}
	HA_STACK_URL="http://127.0.0.1:$port"
}

# ha_suite_stop_stack DIR
ha_suite_stop_stack() {
	STACK_LIGHTTPD_PID= stack_lighttpd_stop "$1"
}

# ha_suite_logs DIR...: the last responder log lines of each stack.
ha_suite_logs() {
	local d
	for d in "$@"; do
		[ -s "$d/lighttpd.stderr.log" ] || continue
		echo "# ---- last lines of $d/lighttpd.stderr.log"
		tail -n 20 "$d/lighttpd.stderr.log" | sed 's/^/#   /'
	done
}
