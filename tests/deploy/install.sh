#!/usr/bin/env bash
# tests/deploy/install.sh - meson install into a temporary prefix, as a
# packager would: the daemon, the man page, www/ and the configuration
# templates land in the standard places, and the installed binary finds its
# installed configuration by itself. Prints TAP.
set -uo pipefail
REPO=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../.." && pwd)
N=0 FAILED=0
ok() { N=$((N + 1)); echo "ok $N - $1"; }
notok() { N=$((N + 1)); FAILED=$((FAILED + 1)); echo "not ok $N - $1"; [ -n "${2:-}" ] && printf '%s\n' "$2" | sed 's/^/#   /'; }

TMP=$(mktemp -d "${TMPDIR:-/tmp}/charge-install.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
P=$TMP/prefix
if meson setup "$TMP/build" "$REPO" --prefix="$P" -Dconf_path=sysconf \
	-Dtests=disabled >"$TMP/setup.log" 2>&1 &&
	ninja -C "$TMP/build" >"$TMP/build.log" 2>&1 &&
	meson install -C "$TMP/build" >"$TMP/install.log" 2>&1; then
	ok "meson install into a fresh prefix"
else
	notok "meson install into a fresh prefix" "$(tail -20 "$TMP"/*.log)"
	echo "1..$N"
	exit 1
fi

for f in sbin/charge share/man/man8/charge.8 sbin/charge-provider-sim \
	share/man/man8/charge-provider-sim.8 sbin/charge-reconcile \
	share/man/man8/charge-reconcile.8 etc/charge/charge.conf \
	etc/charge/api-keys share/charge/www/index.html \
	share/charge/www/problems/idempotency-key-reused \
	share/charge/conf/lighttpd.conf share/charge/conf/nginx.conf \
	share/charge/conf/apache-fcgid.conf share/charge/conf/apache-proxy-fcgi.conf \
	share/charge/conf/charge.service share/charge/conf/charge.socket \
	share/charge/conf/charge-provider-sim.service \
	share/charge/www/api.html share/charge/conf/snippets/nginx.conf \
	share/charge/conf/snippets/nginx-upstream.conf \
	share/charge/conf/snippets/lighttpd.conf share/charge/conf/snippets/apache.conf; do
	[ -e "$P/$f" ] && ok "installed: $f" || notok "installed: $f" "missing"
done
[ -d "$P/var/lib/charge/spill" ] && ok "installed: var/lib/charge/spill (state directory)" ||
	notok "installed: var/lib/charge/spill (state directory)"

v=$("$P/sbin/charge" --version)
want=$(sed -n "s/^ *version *: *'\([^']*\)'.*/\1/p" "$REPO/meson.build")
[ "$v" = "charge $want" ] && ok "charge --version: $v" || notok "charge --version" "got '$v', want 'charge $want'"
"$P/sbin/charge" --help | grep -q -- '--listen ADDR' && ok "charge --help lists the options" ||
	notok "charge --help lists the options"
"$P/sbin/charge" --no-such-option >/dev/null 2>&1
[ $? -eq 2 ] && ok "an unknown option exits 2" || notok "an unknown option exits 2"

v=$("$P/sbin/charge-provider-sim" --version)
[ "$v" = "charge-provider-sim $want" ] && ok "charge-provider-sim --version: $v" ||
	notok "charge-provider-sim --version" "got '$v', want 'charge-provider-sim $want'"
"$P/sbin/charge-provider-sim" --help | grep -q -- '--fault-rate NAME=P' &&
	ok "charge-provider-sim --help lists the options" || notok "charge-provider-sim --help lists the options"

v=$("$P/sbin/charge-reconcile" --version)
[ "$v" = "charge-reconcile $want" ] && ok "charge-reconcile --version: $v" ||
	notok "charge-reconcile --version" "got '$v', want 'charge-reconcile $want'"
"$P/sbin/charge-reconcile" --help | grep -q -- '--prometheus FILE' &&
	ok "charge-reconcile --help lists the options" || notok "charge-reconcile --help lists the options"

# the installed binary reads the installed configuration, not the checkout's
out=$(env -i PATH=/usr/bin:/bin "$P/sbin/charge" --check-config 2>&1)
if printf '%s\n' "$out" | grep -q "^spill_dir = $P/var/lib/charge/spill$" &&
	printf '%s\n' "$out" | grep -q '^redis_url = redis://127.0.0.1:6379$' &&
	printf '%s\n' "$out" | grep -q "^api_keys_file = $P/etc/charge/api-keys$"; then
	ok "the installed charge finds $P/etc/charge/charge.conf by itself"
else
	notok "the installed charge finds its installed configuration" "$out"
fi

# the man page renders without warnings and documents every key
if command -v groff >/dev/null 2>&1; then
	warn=$(groff -man -Tutf8 -ww "$P/share/man/man8/charge.8" 2>&1 >/dev/null)
	[ -z "$warn" ] && ok "charge(8) renders without warnings" || notok "charge(8) renders without warnings" "$warn"
	warn=$(groff -man -Tutf8 -ww "$P/share/man/man8/charge-provider-sim.8" 2>&1 >/dev/null)
	[ -z "$warn" ] && ok "charge-provider-sim(8) renders without warnings" ||
		notok "charge-provider-sim(8) renders without warnings" "$warn"
	missing=
	for opt in $("$P/sbin/charge-provider-sim" --help | grep -oE -- '--[a-z0-9-]+' | sort -u); do
		grep -qF -- "$(printf '%s' "$opt" | sed 's/-/\\-/g')" "$P/share/man/man8/charge-provider-sim.8" ||
			missing="$missing $opt"
	done
	[ -z "$missing" ] && ok "charge-provider-sim(8) documents every option of --help" ||
		notok "charge-provider-sim(8) documents every option of --help" "missing:$missing"
fi
missing=
for key in $(env -i PATH=/usr/bin:/bin "$P/sbin/charge" --check-config 2>/dev/null |
	sed -n 's/^\([a-z_]*\) = .*/\1/p'); do
	grep -q "$key" "$P/share/man/man8/charge.8" || missing="$missing $key"
done
[ -z "$missing" ] && ok "charge(8) documents every configuration key" ||
	notok "charge(8) documents every configuration key" "missing:$missing"

echo "1..$N"
[ "$FAILED" -eq 0 ]
