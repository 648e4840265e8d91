#!/usr/bin/env bash
# test.sh - install what is missing, build, run every test suite, and end
# with one line "N passed, N failed". Each suite prints TAP-style lines
# (ok N - ... / not ok N - ...); this script counts them. A suite that exits
# non-zero without printing a "not ok" line counts as one failure.
#
#   ./test.sh            everything, TEST_JOBS (4) suites at once
#   ./test.sh unit lua   only the named suites (see SUITES below)
#   ./test.sh --quick    the inner loop: QUICK_SUITES below (under 2 min)
#   ./test.sh --quick unit structure
#                        the inner loop: installs nothing and builds only
#                        what the named suites use (the unit test binaries;
#                        the responder's objects; the ASan tree only for a
#                        suite that runs it)
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cd "$ROOT"
# meson compiles through ccache when it is installed (it is in PACKAGES):
# paths relative to the checkout, so that another clone, and the trees
# that suites build of their own (release, TSan, install, the package),
# hit the same cache
export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$ROOT}
# (the checkout's folder kept out of the hash: a clone elsewhere hits too;
# its debug info then names the folder of the first build, nothing more)
export CCACHE_NOHASHDIR=${CCACHE_NOHASHDIR:-true}

PACKAGES=(gcc pkg-config meson ninja-build python3
	libfcgi-dev libfcgi-bin libhiredis-dev libuv1-dev libcurl4-openssl-dev node-llhttp libcjson-dev libssl-dev libcmocka-dev
	redis-server redis-sentinel redis-tools lighttpd curl valgrind clang-14 libclang-rt-14-dev procps
	chromium apache2 libapache2-mod-fcgid nginx-light spawn-fcgi
	wrk gnuplot-nox groff-base systemd fiu-utils clang-format-14 nftables iproute2
	build-essential debhelper dpkg-dev lintian fakeroot adduser prometheus python3-jsonschema python3-yaml
	openssl ccache)

install_packages() {
	local missing=() p
	for p in "${PACKAGES[@]}"; do
		dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
	done
	# node may come from outside Debian (this image has one); else Debian's
	command -v node >/dev/null 2>&1 || missing+=(nodejs npm)
	[ ${#missing[@]} -eq 0 ] && return 0
	echo "# installing: ${missing[*]}"
	if [ "$(id -u)" -ne 0 ]; then
		echo "test.sh: missing packages (${missing[*]}) and not root" >&2
		return 1
	fi
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

ASAN_ARGS=(-Db_sanitize=address,undefined -Dc_args=-fno-sanitize-recover=all)

# setup DIR [MESON_ARGS...]: meson setup DIR, once.
setup() {
	local dir=$1; shift
	[ -f "$dir/build.ninja" ] && return 0
	meson setup "$dir" "$@" >"$LOGDIR/setup-$dir.log" 2>&1 ||
		{ cat "$LOGDIR/setup-$dir.log"; return 1; }
}

# ninja_in DIR [TARGET...]: builds those targets of DIR (all without any).
ninja_in() {
	local dir=$1; shift
	ninja -C "$dir" "$@" >"$LOGDIR/build-$dir.log" 2>&1 ||
		{ cat "$LOGDIR/build-$dir.log"; return 1; }
}

build() {
	setup "$@" && ninja_in "$1"
}

# --quick: what the named suites use, and nothing else. unit runs every
# build/test_* binary, so all of them are built (none stale); structure
# reads the objects of src/ (the charge and charge-reconcile targets, whose
# mains the module map names); any other suite gets the
# whole plain tree; the ASan tree only when a suite's function names it.
build_quick() {
	local s plain=() full=0 asan=0
	setup build || return 1
	for s in "${SUITES_FOR_BUILD[@]}"; do
		declare -F "suite_$s" >/dev/null || { echo "test.sh: no suite $s" >&2; return 1; }
		case $s in
		unit)
			# shellcheck disable=SC2207
			plain+=($(ninja -C build -t targets all | sed -n 's/^\(test_[a-z_0-9]*\): .*/\1/p'))
			;;
		structure) plain+=(charge charge-reconcile) ;;
		fuzz) ;; # its own clang build (tests/fuzz/run.sh), no meson tree
		*) full=1 ;;
		esac
		declare -f "suite_$s" | grep -qE 'with_asan|build-asan' && asan=1
	done
	if [ $full -eq 1 ]; then
		ninja_in build || return 1
	elif [ ${#plain[@]} -gt 0 ]; then
		ninja_in build "${plain[@]}" || return 1
	fi
	[ $asan -eq 0 ] || build build-asan "${ASAN_ARGS[@]}"
}

LOGDIR=$(mktemp -d /tmp/charge-test.XXXXXX)
# readable and traversable by nobody, which writes the sanitizer reports of
# the responders that Apache and nginx run (as nobody when started as root)
chmod 755 "$LOGDIR"
PASSED=0
FAILED=0

# run_suite NAME COMMAND...: runs it with its output in $LOGDIR/NAME.tap,
# then counts its TAP lines into $LOGDIR/NAME.count ("ok nok seconds").
# A suite that exits non-zero without a "not ok" line counts one failure.
run_suite() {
	local name=$1; shift
	local log="$LOGDIR/$name.tap" rc ok nok t0 t1 cpu
	t0=$(date +%s.%N)
	{
		echo "# --- suite $name: $*"
		"$@" 2>&1
	} >"$log" </dev/null
	rc=$?
	t1=$(date +%s.%N)
	# the CPU its processes used (those reaped within this subshell: a
	# daemon that a suite leaves to init is not counted)
	times >"$LOGDIR/$name.times"
	cpu=$(sed -n 2p "$LOGDIR/$name.times" | awk '{ n = split($1 " " $2, t, " ")
		for (i = 1; i <= n; i++) { split(t[i], p, "m"); s += p[1] * 60 + p[2] }
		printf "%.0f", s }')
	ok=$(grep -cE '^ok ' "$log")
	nok=$(grep -cE '^not ok ' "$log")
	if [ "$rc" -ne 0 ] && [ "$nok" -eq 0 ]; then
		echo "not ok - suite $name exited with status $rc" >>"$log"
		nok=1
	fi
	echo "# --- suite $name: $ok passed, $nok failed" >>"$log"
	echo "$ok $nok $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }') $cpu" \
		>"$LOGDIR/$name.count"
}

# suite_finished NAME: prints a finished suite's output and adds up its counts.
suite_finished() {
	local name=$1 ok nok secs cpu
	cat "$LOGDIR/$name.tap"
	read -r ok nok secs cpu <"$LOGDIR/$name.count"
	PASSED=$((PASSED + ok))
	FAILED=$((FAILED + nok))
	echo "$secs $name $ok $nok $cpu" >>"$LOGDIR/times"
}

# run_parallel JOBS SUITE...: at most JOBS suites at once, each in the
# background with its output kept apart and printed whole when it ends.
# Every suite picks free ports and a private directory of its own, so
# they do not meet; the order given is the order they start (longest
# first keeps the pool full to the end).
run_parallel() {
	local jobs=$1 s pid name
	shift
	declare -A running=()
	for s in "$@"; do
		while [ ${#running[@]} -ge "$jobs" ]; do
			wait -n 2>/dev/null
			for pid in "${!running[@]}"; do
				kill -0 "$pid" 2>/dev/null && continue
				wait "$pid" 2>/dev/null
				suite_finished "${running[$pid]}"
				unset "running[$pid]"
			done
		done
		run_suite "$s" "suite_$s" &
		running[$!]=$s
	done
	for pid in "${!running[@]}"; do
		wait "$pid" 2>/dev/null
		suite_finished "${running[$pid]}"
	done
}

# times_report: every suite's wall time, slowest first (kept in $LOGDIR/times).
times_report() {
	[ -f "$LOGDIR/times" ] || return 0
	echo "# suite wall times, slowest first (wall s, CPU s, suite, passed, failed):"
	sort -rn "$LOGDIR/times" | tee "$LOGDIR/times.sorted" |
		awk '{ printf "#   %7.1f %6d  %-18s %5d %3d\n", $1, $5, $2, $3, $4 }'
}

# Unit tests: every tests/unit/test_*.c executable, plain, then under
# valgrind (one extra check per executable: no errors, no definite leaks).
suite_unit() {
	local t rc
	for t in build/test_*; do
		[ -f "$t" ] && [ -x "$t" ] || continue
		echo "# $t"
		CMOCKA_MESSAGE_OUTPUT=TAP "$t" | grep -vE '^1\.\.'
	done
	for t in build/test_*; do
		[ -f "$t" ] && [ -x "$t" ] || continue
		CMOCKA_MESSAGE_OUTPUT=TAP valgrind -q --error-exitcode=99 \
			--leak-check=full --errors-for-leak-kinds=definite \
			"$t" >"$LOGDIR/vg-$(basename "$t").log" 2>&1
		rc=$?
		if [ $rc -eq 0 ]; then
			echo "ok - valgrind $(basename "$t"): no errors, no leaks"
		else
			echo "not ok - valgrind $(basename "$t") (status $rc)"
			sed 's/^/# /' "$LOGDIR/vg-$(basename "$t").log" | tail -40
		fi
	done
}

# The same unit tests built with ASan + UBSan (leaks, overflows, UB).
suite_unit_asan() {
	local t
	for t in build-asan/test_*; do
		[ -f "$t" ] && [ -x "$t" ] || continue
		echo "# $t"
		CMOCKA_MESSAGE_OUTPUT=TAP "$t" | grep -vE '^1\.\.'
	done
}

# checker CMD...: runs a checker that prints TAP; one that ends non-zero
# without a "not ok" line (it crashed) counts as a failure of its own
checker() {
	local out rc
	out=$("$@" 2>&1)
	rc=$?
	printf '%s\n' "$out"
	if [ $rc -ne 0 ] && ! grep -q '^not ok' <<<"$out"; then
		echo "not ok - $* exited with status $rc"
	fi
}

# The shape of the code: includes and calls (the undefined symbols of
# build/'s objects) follow the module map of src/LAYERS (library headers
# kept to their folder by its `only` lines); every state machine is one
# enum, one table and one asserting setter, its only writer
# (tools/check-states.py); no function of src/ over 90 lines and no file
# of src/ or sim/ over 1 000 (tools/check-sizes.py); the checkers fail on
# planted faults (tests/structure/run.sh).
suite_structure() {
	checker python3 tools/check-map.py --stats src build
	checker python3 tools/check-states.py src
	# no function of src/ over 90 lines, no file of src/ or sim/ over 1 000
	checker python3 tools/check-sizes.py
	tests/structure/run.sh | grep -vE '^1\.\.'
	# one message, one literal (git grep finds where a text is written)
	checker python3 tools/check-literals.py src
	checker python3 tools/check-literals.py sim    # charge-provider-sim
	# libcurl is charge-reconcile's only (provider_sync.c): the responder's
	# provider client is http1.c, and libcurl's libraries would be mapped
	# into every responder process whether used or not
	if ! ldd build/charge >"$LOGDIR/ldd-charge.log" 2>&1; then
		echo "not ok - ldd build/charge"
	elif grep -q 'libcurl' "$LOGDIR/ldd-charge.log"; then
		echo "not ok - the responder (build/charge) does not link libcurl"
		grep 'libcurl' "$LOGDIR/ldd-charge.log" | sed 's/^/# /'
	else
		echo "ok - the responder (build/charge) does not link libcurl"
	fi
	if git grep -nE '^(<<<<<<<|>>>>>>>) ' -- . >/dev/null 2>&1; then
		echo "not ok - no merge conflict markers in tracked files"
		git grep -nE '^(<<<<<<<|>>>>>>>) ' -- . | sed 's/^/# /'
	else
		echo "ok - no merge conflict markers in tracked files"
	fi
	# shellcheck disable=SC2046
	if clang-format-14 --dry-run --Werror $(git ls-files '*.c' '*.h') \
		>"$LOGDIR/format.log" 2>&1; then
		echo "ok - every C file is formatted with .clang-format"
	else
		echo "not ok - every C file is formatted with .clang-format (clang-format-14 -i FILE)"
		grep -E '^[^ ].*: error' "$LOGDIR/format.log" | cut -d: -f1 | sort -u | sed 's/^/# /'
	fi
}

# Every build type builds, warnings as errors: meson's release build (-O3)
# and a build with the distribution's flags, as a package build uses them
# (dpkg-buildflags with every hardening feature: -O2, fortify, PIE, relro).
suite_builds() {
	local name dir
	(
	for name in release dpkg-buildflags; do
		dir="$LOGDIR/build-$name"
		rm -rf "$dir"
		case $name in
		release)
			meson setup "$dir" --buildtype=release -Dwerror=true \
				>"$LOGDIR/setup-$name.log" 2>&1 ;;
		dpkg-buildflags)
			export DEB_BUILD_MAINT_OPTIONS=hardening=+all
			CFLAGS="$(dpkg-buildflags --get CFLAGS) $(dpkg-buildflags --get CPPFLAGS)" \
				LDFLAGS=$(dpkg-buildflags --get LDFLAGS) \
				meson setup "$dir" --buildtype=plain -Dwerror=true \
				>"$LOGDIR/setup-$name.log" 2>&1 ;;
		esac
		if [ $? -eq 0 ] && ninja -C "$dir" >"$LOGDIR/build-$name.log" 2>&1; then
			echo "ok - the tree builds with $name flags, warnings as errors"
		else
			echo "not ok - the tree builds with $name flags, warnings as errors"
			grep -hE 'error|FAILED' "$LOGDIR/setup-$name.log" "$LOGDIR/build-$name.log" 2>/dev/null |
				head -20 | sed 's/^/# /'
		fi
		rm -rf "$dir"
	done
	)
}

suite_lua() { tests/lua/run.sh; }

# The Redis client (src/store/redis/) on a libuv loop (tests/redis_async/driver.c) against real
# redis-server, redis-sentinel and a cluster; the ASan build's driver.
suite_redis_async() { with_asan redis_async tests/redis_async/run.sh; }

# Redis over TLS (rediss schemes): a TLS-only node, each refusal, a TLS
# cluster and TLS sentinels, the responder as CGI; the ASan build's.
suite_redis_tls() { with_asan redis_tls tests/redis_tls/run.sh; }

# libFuzzer smoke run over every parser (clang-14, ASan + UBSan).
suite_fuzz() { tests/fuzz/run.sh; }

# The FastCGI codec against libfcgi's own reader: hand-made and generated
# streams, the same params and body or both refuse.
suite_fcgi_diff() { tests/fcgi_diff/run.sh; }

# Sanitizer reports of responder processes go to files; none may exist.
asan_check() {
	local dir=$1 what=$2 f
	if compgen -G "$dir/[at]san.*" >/dev/null; then
		echo "not ok - $what: sanitizer reports"
		for f in "$dir"/[at]san.*; do
			sed 's/^/# /' "$f" | head -30
		done
	else
		echo "ok - $what: no sanitizer report from any responder process"
	fi
}

# with_asan NAME CMD...: runs CMD with the ASan build as CHARGE_BIN and the
# sanitizers' reports going to files; afterwards none may exist.
with_asan() {
	local name=$1 dir="$LOGDIR/asan-$1" rc
	shift
	mkdir -p "$dir"
	chmod 777 "$dir"        # Apache and nginx run the responders as nobody
	ASAN_OPTIONS="log_path=$dir/asan:detect_leaks=1" \
		UBSAN_OPTIONS="log_path=$dir/asan:print_stacktrace=1" \
		CHARGE_BIN="$ROOT/build-asan/charge" "$@"
	rc=$?
	asan_check "$dir" "$name"
	return $rc
}

# The end-to-end suite over real HTTP through each web server.
suite_e2e() { E2E_SERVER=lighttpd with_asan e2e tests/e2e/run.sh; }
suite_e2e_apache() { E2E_SERVER=apache E2E_MAX_PROCS=4 with_asan e2e_apache tests/e2e/run.sh; }
suite_e2e_apache_cgi() { E2E_SERVER=apache-cgi with_asan e2e_apache_cgi tests/e2e/run.sh; }
suite_e2e_nginx() { E2E_SERVER=nginx with_asan e2e_nginx tests/e2e/run.sh; }
suite_e2e_apache_proxy() { E2E_SERVER=apache-proxy with_asan e2e_apache_proxy tests/e2e/run.sh; }

# Many requests at once (the plain build, for speed): 1 000 charges through
# lighttpd, nginx and Apache mod_proxy_fcgi, max_inflight's 503, SIGTERM
# with 500 charges in flight; threads per responder process sampled.
suite_concurrency() { tests/concurrency/run.sh; }

# The FastCGI protocol on the responder's own socket: kept-alive and
# pipelined requests, multiplexing refused, management records, unknown
# roles, malformed records.
suite_fcgi_wire() { with_asan fcgi_wire tests/fcgi_wire/run.sh; }

# charge-provider-sim, the Stripe-compatible provider simulator, as a black
# box over HTTP (the ASan build): tokens, idempotency, faults on the wire,
# rate faults with a seed, limits, durability across kill -9, SIGTERM.
suite_sim() { SIM_BIN="$ROOT/build-asan/charge-provider-sim" with_asan sim tests/sim/run.sh; }

# The fault matrix (Redis killed, frozen, out of memory; spill dir full;
# lost Redis replies; responders stopped, killed, out of descriptors; bad
# and stalled clients; a soak) and one gate over everything it sent.
suite_faults() { with_asan faults tests/faults/run.sh; }

# The responder against charge-provider-sim over HTTP (ASan build): the
# provider's id and created in the 201, byte-identical replays and re-runs,
# retries with the same downstream key, unknown outcomes settled by a retry
# and by the completer.
suite_provider() { with_asan provider tests/provider/run.sh; }

# The provider's webhook route (POST /webhooks/provider) through lighttpd
# with the simulator: every signature case with nothing changed in Redis,
# an unknown outcome settled by its signed event, duplicates, out-of-order
# events, a mismatching charge, the metrics, Redis down; then the
# simulator's own deliveries settling 12 unknown outcomes (median time from
# the charge to completed < 1 s), every delivery duplicated and reordered
# (nothing changes twice), and the completer-only time beside it. About a
# minute.
suite_webhook() { with_asan webhook tests/webhook/run.sh; }

# The responder against the provider simulator over HTTP, through lighttpd:
# every fault token and token chains, fault rates with a seed, the simulator
# killed and restarted mid-flight and down, many clients per key; a checker
# over the simulator's own counts (one charge per key, every key settles,
# 2xx/402 byte-identical, documented answers); a lost Redis record is
# invisible (Redis flushed and restarted; deleted: run first); last,
# charge-reconcile over the run: 0 orphans, phantoms, duplicates. About a
# minute (bounded at 200 s).
suite_provider_faults() { with_asan provider_faults tests/provider_faults/run.sh; }

# The responder against stripe-stateful-mock (npm, pinned in
# tests/stripe_mock/package-lock.json): charges, declines, replays, its
# failure tokens.
suite_stripe_mock() { with_asan stripe_mock tests/stripe_mock/run.sh; }

# The responder against the simulator behind TLS (nginx, a test CA made
# with openssl): the right CA trusted, the system store, another CA and a
# wrong name refused.
suite_provider_tls() { with_asan provider_tls tests/provider_tls/run.sh; }

# Settling an ambiguous provider outcome (issue 27's reproductions) against
# a scripted hostile provider (tests/settle/hostile_provider.py), ASan
# build: a key reused after expiry, 401/403 on a re-ask, a slow provider, a
# charge on page 2 of the list, a wrong 200, a 402 without an id, a
# never-delivered request settled read-only, a provider's replay passed on.
# About two minutes (bounded at 420 s).
suite_settle() { with_asan settle tests/settle/run.sh; }

# charge-reconcile (ASan build) on a seeded history through Redis, the
# simulator and lighttpd: a clean history is 0/0/0 and exit 0; a planted
# orphan, phantom and duplicate are found exactly, exit 1; --json against
# docs/reconcile.schema.json, --prometheus, the window, -c, read-only (a
# Redis user that may only read), Sentinel and Cluster, exit 2 on errors.
suite_reconcile() { with_asan reconcile tests/reconcile/run.sh; }

# The world test (tests/world/, docs/testing.md): 50 seeds x 200 requests,
# retrying clients against 3 responders and the simulator with a random
# subset of its faults and liberties per seed, a nemesis of ours, a checker
# over every answer, the records and the provider's ledger; the plain build
# (ASan would triple each seed). WORLD_LONG=1: 100 seeds (20 000 requests).
suite_world() { CHARGE_BIN="$ROOT/build/charge" tests/world/run.sh; }

# Scale-out: the e2e suite against a Redis Cluster; the responders behind
# Redis Sentinel (failover under load, WAIT), on a Redis Cluster (routing,
# ASK/MOVED, reshard under load), and two web nodes sharing Redis and
# spill_dir.
suite_e2e_cluster() { E2E_SERVER=lighttpd E2E_REDIS=cluster with_asan e2e_cluster tests/e2e/run.sh; }
suite_ha_sentinel() { with_asan ha_sentinel tests/ha/sentinel.sh; }
suite_ha_cluster() { with_asan ha_cluster tests/ha/cluster.sh; }
suite_ha_nodes() { with_asan ha_nodes tests/ha/nodes.sh; }

# Network partitions (Jepsen's nemeses: split brain, primary isolated, no
# majority, flapping, a slow lossy link) between three Redis nodes in their
# own network namespaces; needs root (prints "# skipped:" otherwise).
suite_partitions() { with_asan partitions tests/partitions/run.sh; }

# The binary as a plain CGI program, without a web server.
suite_cgi() { with_asan cgi tests/cgi/run.sh; }

# The standalone listener's signals and threads.
suite_signals() { with_asan signals tests/signals/run.sh; }
# The edges of a connection's and a process's life (misbehaving FastCGI
# peers, bounds, the drain) and a churn-and-stop soak, under ASan.
suite_edges() { with_asan edges tests/edges/run.sh; }
# 4 096 idle kept FastCGI connections: descriptors, memory per connection,
# reaped after keepalive_idle_timeout_ms (plain build: RSS as deployed).
suite_kept_conns() { tests/kept_conns/run.sh; }

# Restarts under load behind nginx, Apache mod_proxy_fcgi and lighttpd, a
# socket holder standing in for systemd's socket activation: 0 failed
# requests, 0 lost outcomes, replays byte for byte; /readyz while draining.
suite_restart() { tests/deploy_live/run.sh; }

# ThreadSanitizer: the threaded listener (nginx, 4 worker threads) through
# the whole e2e suite, and the signal tests.
suite_tsan() {
	local dir="$LOGDIR/tsan" rc=0
	build build-tsan -Db_sanitize=thread -Dtests=disabled || return 1
	mkdir -p "$dir"
	chmod 777 "$dir"
	export TSAN_OPTIONS="log_path=$dir/tsan"
	CHARGE_BIN="$ROOT/build-tsan/charge" tests/signals/run.sh || rc=1
	E2E_SERVER=nginx CHARGE_BIN="$ROOT/build-tsan/charge" tests/e2e/run.sh || rc=1
	# a reload (SIGHUP) under load: the configuration handed to the loops
	CHARGE_BIN="$ROOT/build-tsan/charge" tests/deploy_live/run.sh reload readyz || rc=1
	unset TSAN_OPTIONS
	asan_check "$dir" "tsan (threads)"
	return $rc
}

# conf/prometheus/charge-alerts.yml: promtool check and test rules (a
# firing and a silent case per alert, each caught when it never or always
# fires), the series and labels it reads against the code.
suite_alerts() { tests/alerts/run.sh; }

# The responder's JSON logs and the ids it sends on (X-Request-Id,
# traceparent, the provider's Request-Id): charge --listen against the
# simulator's request log (plain build).
suite_logs() { tests/logs/run.sh; }

# Every deployment configuration of conf/ with curl (plain build).
suite_deploy() { tests/cgi/deploy.sh; }

# meson install into a temporary prefix: the daemon, charge(8), www/, the
# configuration templates; --help, --version and the installed conf.
suite_install() { tests/deploy/install.sh; }

# conf/charge.service and conf/charge-provider-sim.service through
# systemd-analyze verify and security (nothing is started).
suite_systemd() { tests/deploy/systemd.sh; }

# The Debian package: dpkg-buildpackage, lintian, its contents; as root
# also dpkg -i, the units' ExecStart as their users (the demo provider, then
# the responder behind the installed nginx snippet, charging through the
# simulator's socket), and dpkg --purge.
suite_package() { tests/deploy/package.sh; }

# docs/API.md against the code and docs/openapi.yaml: problem types,
# configuration keys (one default wherever written), routes, statuses and
# headers agree; no dead link or anchor; nothing points outside the
# repository (Debian's python3: python3-yaml). Then the description lints
# clean with the pinned Redocly CLI, and www/api.html is its rendering.
suite_docs() {
	local rc=0
	/usr/bin/python3 tests/docs/check_api.py || rc=1
	tools/openapi/lint.sh --check-html www/api.html || rc=1
	return $rc
}

# bench/run with a one-second duration: keeps the harness alive; no timing
# assertions.
suite_bench_smoke() { bench/run --smoke; }

# The curl stories of examples/ and the demo page in headless Chromium.
suite_examples() { tests/with-stack.sh tests/examples/run.sh; }
suite_browser() { STACK_WITH_SIM=1 tests/with-stack.sh tests/browser/run.sh; }

# Every suite, in the order they start: the longest first (a recent
# whole run's times, docs/testing.md), so that the pool of parallel jobs
# stays full to the end. bench_smoke (no timing assertions, but it loads
# both cores for a minute) starts last, beside the short suites that end
# the list, none of which bounds a time.
SUITES=(world partitions faults redis_tls settle edges fuzz ha_sentinel unit tsan builds sim
	provider e2e_apache redis_async provider_tls provider_faults e2e_cluster deploy e2e_apache_cgi
	e2e_apache_proxy e2e_nginx stripe_mock e2e webhook ha_cluster install package signals alerts
	examples reconcile browser structure lua fcgi_wire docs unit_asan cgi systemd logs ha_nodes
	fcgi_diff bench_smoke)
# Suites whose checks bound a time or a rate under load, or that hold a
# race to the timing of an idle machine: they run alone, after the others.
# restart: 0 failed requests while the responder restarts under load, a
# race of the hand-back of kept connections against the web servers'
# reuse of them (docs/deploying.md)
SERIAL_SUITES=(restart concurrency kept_conns)
# ./test.sh --quick with no suite named: the inner loop, one suite per
# layer and route (docs/testing.md): the pure modules plain and under
# ASan, the shape of the code, and /charge, /webhooks and the FastCGI
# wire through real processes.
QUICK_SUITES=(structure unit unit_asan docs cgi fcgi_wire lua webhook)
# TEST_JOBS=N: how many suites run at once (default 4 on this 2-core
# machine: most of a suite's time is spent waiting on timers and sockets).
TEST_JOBS=${TEST_JOBS:-4}

QUICK=0
if [ "${1:-}" = --quick ]; then
	QUICK=1
	shift
	SUITES=("${QUICK_SUITES[@]}")
	SERIAL_SUITES=()
fi
if [ $# -gt 0 ]; then
	# named suites: those that must run alone still do, after the rest
	want=("$@")
	SUITES=()
	SERIAL_NAMED=()
	for s in "${want[@]}"; do
		case " ${SERIAL_SUITES[*]} " in
		*" $s "*) SERIAL_NAMED+=("$s") ;;
		*) SUITES+=("$s") ;;
		esac
	done
	SERIAL_SUITES=(${SERIAL_NAMED[@]+"${SERIAL_NAMED[@]}"})
fi

START=$(date +%s)
if [ $QUICK -eq 1 ]; then
	ALL_SUITES=(${SUITES[@]+"${SUITES[@]}"} ${SERIAL_SUITES[@]+"${SERIAL_SUITES[@]}"})
	SUITES_FOR_BUILD=("${ALL_SUITES[@]}")
	build_quick || { echo "0 passed, 1 failed"; exit 1; }
else
	install_packages || { echo "0 passed, 1 failed"; exit 1; }
	build build || { echo "0 passed, 1 failed"; exit 1; }
	build build-asan "${ASAN_ARGS[@]}" || { echo "0 passed, 1 failed"; exit 1; }
fi
echo "# built in $(($(date +%s) - START)) s; suites: ${SUITES[*]:-} (${TEST_JOBS} at once); alone: ${SERIAL_SUITES[*]:-}"

[ ${#SUITES[@]} -gt 0 ] && run_parallel "$TEST_JOBS" "${SUITES[@]}"
[ ${#SERIAL_SUITES[@]} -gt 0 ] && run_parallel 1 "${SERIAL_SUITES[@]}"

times_report
echo "# total wall time: $(($(date +%s) - START)) s"
echo "# logs: $LOGDIR"
echo "$PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
