#!/usr/bin/env bash
# tests/deploy/package.sh - the Debian package, as an operator takes it in.
# Prints TAP. Builds charge_<version>_amd64.deb from the work tree
# (dpkg-buildpackage -us -uc -b in a temporary copy), runs lintian (no error,
# no warning that is not explained in debian/charge.lintian-overrides) and
# checks what the package holds. Then, as root only (CI runs as root on a
# throwaway machine): installs it with dpkg -i, runs the installed units'
# ExecStart as their User=/Group= with their Environment=, UMask= and
# LoadCredential= (the
# demo provider charge-provider-sim.service, then charge.service against a
# private redis-server on a free loopback port, CHARGE_REDIS_URL), charges
# through an nginx whose configuration includes the installed snippet (the
# charge reaches the simulator over its socket, as the installed charge.conf
# says), and purges the package: the users, the state and the configuration
# are gone.
# Not root: the install steps print "# skipped" and count as nothing.
set -uo pipefail
REPO=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../.." && pwd)
# shellcheck source=tools/stack.sh
. "$REPO/tools/stack.sh"

N=0 FAILED=0
ok() { N=$((N + 1)); echo "ok $N - $1"; }
notok() {
	N=$((N + 1)); FAILED=$((FAILED + 1)); echo "not ok $N - $1"
	[ -n "${2:-}" ] && printf '%s\n' "$2" | sed 's/^/#   /'
	return 0
}
t() { # t NAME COMMAND...: ok when COMMAND succeeds
	local name=$1; shift
	if "$@" >/dev/null 2>&1; then ok "$name"; else notok "$name"; fi
}
finish() { echo "1..$N"; [ "$FAILED" -eq 0 ]; exit $?; }

VERSION=$(sed -n "s/^ *version *: *'\([^']*\)'.*/\1/p" "$REPO/meson.build")
ARCH=$(dpkg --print-architecture)
TMP=$(mktemp -d "${TMPDIR:-/tmp}/charge-package.XXXXXX")
chmod 755 "$TMP"
INSTALLED=0 CHARGE_PID= NGINX_PID= REDIS_PID= SIM_PID=
cleanup() {
	trap - EXIT INT TERM
	[ -n "$NGINX_PID" ] && kill -QUIT "$NGINX_PID" 2>/dev/null
	[ -n "$CHARGE_PID" ] && kill -TERM "$CHARGE_PID" 2>/dev/null
	[ -n "$SIM_PID" ] && kill -TERM "$SIM_PID" 2>/dev/null
	[ -n "$REDIS_PID" ] && kill -TERM "$REDIS_PID" 2>/dev/null
	wait 2>/dev/null
	# never leave the package behind on the test machine
	[ "$INSTALLED" = 1 ] && dpkg --purge charge >/dev/null 2>&1
	rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- build ------------------------------------------------------------------
mkdir "$TMP/charge-$VERSION"
(cd "$REPO" && git -c safe.directory="$REPO" ls-files -co --exclude-standard -z |
	tar --null -cf - -T - 2>/dev/null) | tar -xf - -C "$TMP/charge-$VERSION"
DEB=$TMP/charge_${VERSION}_$ARCH.deb
if (cd "$TMP/charge-$VERSION" && dpkg-buildpackage -us -uc -b) >"$TMP/build.log" 2>&1 &&
	[ -f "$DEB" ]; then
	ok "dpkg-buildpackage builds charge_${VERSION}_$ARCH.deb"
else
	notok "dpkg-buildpackage builds charge_${VERSION}_$ARCH.deb" "$(tail -25 "$TMP/build.log")"
	finish
fi

# --- lintian ------------------------------------------------------------------
lintian --fail-on error,warning --display-level '>=warning' \
	"$TMP/charge_${VERSION}_${ARCH}.changes" >"$TMP/lintian.log" 2>&1
rc=$?
out=$(grep -v 'running with root privileges' "$TMP/lintian.log")
if [ "$rc" -eq 0 ] && [ -z "$out" ]; then
	ok "lintian: no error, no unexplained warning"
else
	notok "lintian: no error, no unexplained warning (status $rc)" "$out"
fi

# --- contents -----------------------------------------------------------------
dpkg-deb -c "$DEB" | awk '{print $1, $2, $6}' >"$TMP/contents"
dpkg-deb --ctrl-tarfile "$DEB" | tar -xOf - ./conffiles >"$TMP/conffiles" 2>/dev/null
has() { grep -qE "^$1 $2 \\./$3\$" "$TMP/contents"; }
t "holds /usr/sbin/charge" has '-rwxr-xr-x' root/root usr/sbin/charge
t "holds charge(8)" has '-rw-r--r--' root/root usr/share/man/man8/charge.8.gz
t "holds /usr/sbin/charge-provider-sim" has '-rwxr-xr-x' root/root usr/sbin/charge-provider-sim
t "holds charge-provider-sim(8)" has '-rw-r--r--' root/root usr/share/man/man8/charge-provider-sim.8.gz
t "holds /usr/sbin/charge-reconcile" has '-rwxr-xr-x' root/root usr/sbin/charge-reconcile
t "holds charge-reconcile(8)" has '-rw-r--r--' root/root usr/share/man/man8/charge-reconcile.8.gz
t "holds /etc/charge/api-keys, mode 0640" has '-rw-r-----' root/root etc/charge/api-keys
t "holds /etc/charge/charge.conf, mode 0640" has '-rw-r-----' root/root etc/charge/charge.conf
t "/etc/charge/charge.conf and /etc/charge/api-keys are conffiles" \
	diff <(sort "$TMP/conffiles") <(printf '%s\n' /etc/charge/api-keys /etc/charge/charge.conf)
t "holds the systemd unit" has '-rw-r--r--' root/root lib/systemd/system/charge.service
t "holds its socket unit" has '-rw-r--r--' root/root lib/systemd/system/charge.socket
t "holds the demo provider's unit" has '-rw-r--r--' root/root lib/systemd/system/charge-provider-sim.service
t "holds the reconciler's unit" has '-rw-r--r--' root/root lib/systemd/system/charge-reconcile.service
t "holds the reconciler's timer" has '-rw-r--r--' root/root lib/systemd/system/charge-reconcile.timer
t "holds /usr/share/charge/www (demo page, API reference, problem pages)" \
	grep -qE ' \./usr/share/charge/www/(api\.html|index\.html|problems/not-found)$' "$TMP/contents"
t "holds the web-server snippets in /usr/share/charge/conf/snippets" \
	test "$(grep -cE ' \./usr/share/charge/conf/snippets/(nginx|lighttpd|apache)\.conf$' "$TMP/contents")" = 3
t "holds nothing under /var (postinst and systemd make /var/lib/charge)" \
	test -z "$(grep ' \./var/' "$TMP/contents")"
SIM_SOCK=/run/charge-provider-sim/sim.sock
dpkg-deb --fsys-tarfile "$DEB" | tar -xOf - ./etc/charge/charge.conf >"$TMP/charge.conf" 2>/dev/null
t "the package's charge.conf: provider_url = unix:$SIM_SOCK (the demo provider)" \
	grep -qx "provider_url = unix:$SIM_SOCK" "$TMP/charge.conf"
t "the package's charge.conf says to replace it with a real provider's https URL" \
	grep -q "^# provider's https URL" "$TMP/charge.conf"

# --- the snippets parse in their servers (from the package's files) ---------
X=$TMP/x
dpkg-deb -x "$DEB" "$X"
SN=$X/usr/share/charge/conf/snippets
mkdir -p "$TMP/snip/logs"
cat >"$TMP/snip/nginx.conf" <<EOF
pid $TMP/snip/nginx.pid;
error_log $TMP/snip/logs/error.log;
events { }
http {
    include /etc/nginx/mime.types;
    access_log $TMP/snip/logs/access.log;
    client_body_temp_path $TMP/snip/body;
    fastcgi_temp_path $TMP/snip/fastcgi;
    proxy_temp_path $TMP/snip/proxy;
    uwsgi_temp_path $TMP/snip/uwsgi;
    scgi_temp_path $TMP/snip/scgi;
    include $SN/nginx-upstream.conf;
    server { listen 127.0.0.1:$(stack_port_pick); include $SN/nginx.conf; }
}
EOF
out=$(nginx -t -p "$TMP/snip" -c "$TMP/snip/nginx.conf" -e "$TMP/snip/logs/error.log" 2>&1)
[ $? -eq 0 ] && ok "the nginx snippets (upstream and routes) pass nginx -t" ||
	notok "the nginx snippets (upstream and routes) pass nginx -t" "$out"
cat >"$TMP/snip/lighttpd.conf" <<EOF
server.document-root = "$X/usr/share/charge/www"
server.port = 8
include "$SN/lighttpd.conf"
EOF
out=$(lighttpd -tt -f "$TMP/snip/lighttpd.conf" 2>&1)
[ $? -eq 0 ] && ok "the lighttpd snippet passes lighttpd -tt" || notok "the lighttpd snippet passes lighttpd -tt" "$out"
M=/usr/lib/apache2/modules
cat >"$TMP/snip/apache.conf" <<EOF
ServerRoot "$TMP/snip"
ServerName 127.0.0.1
Listen 127.0.0.1:8
PidFile "$TMP/snip/httpd.pid"
DefaultRuntimeDir "$TMP/snip"
ErrorLog "$TMP/snip/logs/apache-error.log"
LoadModule mpm_event_module $M/mod_mpm_event.so
LoadModule authz_core_module $M/mod_authz_core.so
LoadModule proxy_module $M/mod_proxy.so
LoadModule proxy_fcgi_module $M/mod_proxy_fcgi.so
Include "$SN/apache.conf"
EOF
out=$(apache2 -t -f "$TMP/snip/apache.conf" 2>&1)
[ $? -eq 0 ] && ok "the Apache snippet passes apache2 -t (mod_proxy_fcgi)" ||
	notok "the Apache snippet passes apache2 -t (mod_proxy_fcgi)" "$out"

# --- install, run, purge (root only) ----------------------------------------
if [ "$(id -u)" -ne 0 ]; then
	echo "# skipped: dpkg -i, the service and the purge need root (not root here)"
	finish
fi
if dpkg -s charge >/dev/null 2>&1; then
	notok "the package charge is not installed before the test" \
		"an earlier install is present; remove it with: dpkg --purge charge"
	finish
fi
if dpkg -i "$DEB" >"$TMP/install.log" 2>&1; then
	INSTALLED=1
	ok "dpkg -i installs it"
else
	notok "dpkg -i installs it" "$(tail -20 "$TMP/install.log")"
	finish
fi
# an upgrade runs postinst configure again: the users exist by then
if dpkg -i "$DEB" >"$TMP/reinstall.log" 2>&1; then
	ok "dpkg -i again (postinst configure over an installed package)"
else
	notok "dpkg -i again (postinst configure over an installed package)" "$(tail -20 "$TMP/reinstall.log")"
fi
# a machine running systemd started the unit: run our own copy instead
if [ -d /run/systemd/system ]; then
	systemctl stop charge.service charge-provider-sim.service >/dev/null 2>&1
fi

uid=$(getent passwd charge | cut -d: -f3)
shell=$(getent passwd charge | cut -d: -f7)
t "postinst made the system user charge (uid $uid < 1000, $shell)" \
	test -n "$uid" -a "${uid:-1000}" -lt 1000 -a "$shell" = /usr/sbin/nologin
t "/etc/charge/api-keys is root:charge 0640 (readable by the service only)" \
	test "$(stat -c '%U:%G %a' /etc/charge/api-keys)" = "root:charge 640"
t "/etc/charge/charge.conf is root:charge 0640 (it holds provider_secret)" \
	test "$(stat -c '%U:%G %a' /etc/charge/charge.conf)" = "root:charge 640"
t "/var/lib/charge belongs to charge" test "$(stat -c %U /var/lib/charge 2>/dev/null)" = charge
t "postinst made /etc/charge/credentials root's only (0700)" \
	test "$(stat -c '%U:%G %a' /etc/charge/credentials)" = "root:root 700"
t "a random provider_secret credential (root 0600, 32 bytes in base64)" \
	test "$(stat -c '%U %a %s' /etc/charge/credentials/provider_secret)" = "root 600 45"
t "the demo provider's key as the provider_api_key credential (root 0600)" \
	test "$(stat -c '%U %a' /etc/charge/credentials/provider_api_key):$(cat /etc/charge/credentials/provider_api_key)" = "root 600:sk_test_sim"
t "the unit is enabled (multi-user.target.wants)" \
	test -L /etc/systemd/system/multi-user.target.wants/charge.service
t "postinst enabled the socket unit" \
	test -L /etc/systemd/system/sockets.target.wants/charge.socket
t "the demo provider's unit is enabled (multi-user.target.wants)" \
	test -L /etc/systemd/system/multi-user.target.wants/charge-provider-sim.service
suid=$(getent passwd charge-provider-sim | cut -d: -f3)
t "postinst made the system user charge-provider-sim (uid $suid < 1000)" \
	test -n "$suid" -a "${suid:-1000}" -lt 1000
t "postinst made charge a member of the group charge-provider-sim (its socket)" \
	grep -qE '^charge-provider-sim:[^:]*:[^:]*:(.*,)?charge(,|$)' /etc/group
t "/var/lib/charge-provider-sim belongs to charge-provider-sim, mode 0750" \
	test "$(stat -c '%U %a' /var/lib/charge-provider-sim 2>/dev/null)" = "charge-provider-sim 750"

# A unit's directives (one value per line in these units).
UNIT=
directive() { sed -n "s/^$1=//p" "$UNIT"; }
# unit_start UNIT LOG [VAR=VALUE...]: what systemd does for UNIT without
# systemd: RuntimeDirectory= (StateDirectory= exists: postinst), then its
# ExecStart as User=/Group= with the supplementary groups, UMask= and
# Environment= (and the VAR=VALUE given). Sets UNIT_PID, UNIT_EXEC, UNIT_USER,
# UNIT_GROUP, UNIT_RUNDIR.
unit_start() {
	UNIT=$1
	local log=$2 umask_ supp envs
	shift 2
	UNIT_EXEC=$(directive ExecStart)
	UNIT_USER=$(directive User) UNIT_GROUP=$(directive Group) umask_=$(directive UMask)
	# systemd's supplementary groups: those /etc/group lists the user in,
	# and SupplementaryGroups= (the user's own group from passwd is not
	# among them)
	supp=$( (getent group | awk -F: -v u="$UNIT_USER" '{n = split($4, m, ","); for (i = 1; i <= n; i++) if (m[i] == u) print $1}'
		directive SupplementaryGroups | tr ' ' '\n'; echo "$UNIT_GROUP") | grep . | sort -u | paste -sd,)
	UNIT_RUNDIR=/run/$(directive RuntimeDirectory)
	install -d -o "$UNIT_USER" -g "$UNIT_GROUP" -m "$(directive RuntimeDirectoryMode | grep . || echo 0755)" "$UNIT_RUNDIR"
	# LoadCredential=ID:PATH: a private copy readable by User= only in
	# $CREDENTIALS_DIRECTORY, which %d in Environment= names
	local creds lc
	creds=$TMP/credentials/$(basename "$UNIT")
	install -d -o "$UNIT_USER" -m 0500 "$creds"
	while IFS= read -r lc; do
		[ -n "$lc" ] && install -o "$UNIT_USER" -m 0400 "${lc#*:}" "$creds/${lc%%:*}"
	done < <(directive LoadCredential)
	mapfile -t envs < <(directive Environment | sed "s#%d#$creds#g")
	envs+=("CREDENTIALS_DIRECTORY=$creds")
	# shellcheck disable=SC2086
	(umask "${umask_:-0022}" && exec env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin "${envs[@]}" "$@" \
		setpriv --reuid="$UNIT_USER" --regid="$UNIT_GROUP" --groups="$supp" $UNIT_EXEC) \
		>"$log" 2>&1 &
	UNIT_PID=$!
}

# the demo provider first (charge.service is ordered after it)
unit_start /lib/systemd/system/charge-provider-sim.service "$TMP/sim.log"
SIM_PID=$UNIT_PID
t "the simulator's ExecStart listens on $SIM_SOCK" \
	test "$UNIT_EXEC" = "/usr/sbin/charge-provider-sim --listen unix:$SIM_SOCK --data /var/lib/charge-provider-sim/store"
for _ in $(seq 1 50); do [ -S "$SIM_SOCK" ] && break; sleep 0.1; done
sim_get() { curl -s --max-time 5 --unix-socket "$SIM_SOCK" "http://sim$1"; }
if [ -S "$SIM_SOCK" ] && kill -0 "$SIM_PID" 2>/dev/null &&
	sim_get /_sim/stats | grep -q '"charges":0'; then
	ok "the simulator's ExecStart runs as $UNIT_USER:$UNIT_GROUP; GET /_sim/stats over its socket: no charge yet"
else
	notok "the simulator's ExecStart runs as $UNIT_USER:$UNIT_GROUP and answers on its socket" \
		"$(ls -l "$SIM_SOCK" 2>&1; sim_get /_sim/stats; tail -20 "$TMP/sim.log")"
fi
t "the simulator's socket is srwxrwx--- charge-provider-sim:charge-provider-sim (UMask=0007)" \
	test "$(stat -c '%A %U:%G' "$SIM_SOCK" 2>/dev/null)" = "srwxrwx--- charge-provider-sim:charge-provider-sim"

REDIS_PORT=$(stack_port_pick)
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no \
	--dir "$TMP" --logfile "$TMP/redis.log" &
REDIS_PID=$!
for _ in $(seq 1 50); do
	redis-cli -p "$REDIS_PORT" ping 2>/dev/null | grep -q PONG && break
	sleep 0.1
done

unit_start /lib/systemd/system/charge.service "$TMP/charge.log" \
	CHARGE_REDIS_URL="redis://127.0.0.1:$REDIS_PORT"
CHARGE_PID=$UNIT_PID
RUNDIR=$UNIT_RUNDIR
t "ExecStart runs the installed binary on a socket under $RUNDIR" \
	test "$UNIT_EXEC" = "/usr/sbin/charge --listen $RUNDIR/charge.sock"
for _ in $(seq 1 50); do [ -S "$RUNDIR/charge.sock" ] && break; sleep 0.1; done
if [ -S "$RUNDIR/charge.sock" ] && kill -0 "$CHARGE_PID" 2>/dev/null; then
	ok "the unit's ExecStart runs as $UNIT_USER:$UNIT_GROUP with the installed configuration"
else
	notok "the unit's ExecStart runs as $UNIT_USER:$UNIT_GROUP with the installed configuration" \
		"$(tail -20 "$TMP/charge.log")"
fi

HTTP_PORT=$(stack_port_pick)
mkdir -p "$TMP/nginx/logs"
cat >"$TMP/nginx/nginx.conf" <<EOF
daemon off;
user www-data www-data;
worker_processes 1;
pid $TMP/nginx/nginx.pid;
error_log $TMP/nginx/logs/error.log warn;
events { worker_connections 64; }
http {
    include /etc/nginx/mime.types;
    access_log $TMP/nginx/logs/access.log;
    client_body_temp_path $TMP/nginx/body;
    fastcgi_temp_path $TMP/nginx/fastcgi;
    proxy_temp_path $TMP/nginx/proxy;
    uwsgi_temp_path $TMP/nginx/uwsgi;
    scgi_temp_path $TMP/nginx/scgi;
    include /usr/share/charge/conf/snippets/nginx-upstream.conf;
    server {
        listen 127.0.0.1:$HTTP_PORT;
        include /usr/share/charge/conf/snippets/nginx.conf;
    }
}
EOF
nginx -p "$TMP/nginx" -c "$TMP/nginx/nginx.conf" -e "$TMP/nginx/logs/error.log" &
NGINX_PID=$!
B=http://127.0.0.1:$HTTP_PORT
for _ in $(seq 1 50); do
	[ "$(stack_http_status "$B/healthz")" = 200 ] && break
	sleep 0.1
done

status=$(stack_http_status "$B/healthz")
[ "$status" = 200 ] && ok "GET /healthz through the installed nginx snippet: 200" ||
	notok "GET /healthz through the installed nginx snippet: 200" \
		"got $status; $(tail -n 5 "$TMP/nginx/logs/error.log" "$TMP/charge.log")"
KEY=package-$$-$RANDOM
charge() {
	curl -s -D "$TMP/h$1" -o "$TMP/b$1" -w '%{http_code}' "$B/charge" \
		-H 'Authorization: Bearer sk_test_demo' -H "Idempotency-Key: $KEY" \
		-H 'Content-Type: application/json' \
		-d '{"amount":1999,"currency":"usd","source":"tok_visa"}'
}
s1=$(charge 1)
s2=$(charge 2)
if [ "$s1" = 201 ] && grep -qi '^Idempotent-Replayed: false' "$TMP/h1"; then
	ok "POST /charge through the snippet: 201 (demo key of the installed api-keys)"
else
	notok "POST /charge through the snippet: 201" "got $s1: $(cat "$TMP/h1" "$TMP/b1" 2>/dev/null)"
fi
if [ "$s2" = 201 ] && grep -qi '^Idempotent-Replayed: true' "$TMP/h2" && cmp -s "$TMP/b1" "$TMP/b2"; then
	ok "the same request again: the replay, byte for byte"
else
	notok "the same request again: the replay" "got $s2: $(cat "$TMP/h2" "$TMP/b2" 2>/dev/null)"
fi
stats=$(sim_get /_sim/stats)
keys=$(sim_get /_sim/keys)
if grep -q '"charges":1,' <<<"$stats" && grep -q '"deliveries":1,' <<<"$stats" &&
	[ "$(grep -o '"idempotency_key"' <<<"$keys" | wc -l)" = 1 ] &&
	grep -q '"charges":1,' <<<"$keys"; then
	ok "the charge reached the demo provider over $SIM_SOCK: 1 key, 1 charge (the replay did not call it)"
else
	notok "the charge reached the demo provider over $SIM_SOCK: 1 key, 1 charge" \
		"stats: $stats" "keys: $keys" "$(tail -5 "$TMP/charge.log" "$TMP/sim.log")"
fi
t "the API reference is served beside the demo page (/api.html)" \
	test "$(stack_http_status "$B/api.html")" = 200
s=$(curl -s -o "$TMP/b404" -w '%{http_code} %{content_type}' "$B/nope")
[ "$s" = "404 application/problem+json" ] && ok "an unknown path: the responder's 404 problem+json" ||
	notok "an unknown path: the responder's 404 problem+json" "got $s"

kill -QUIT "$NGINX_PID" 2>/dev/null; wait "$NGINX_PID" 2>/dev/null; NGINX_PID=
kill -TERM "$CHARGE_PID" 2>/dev/null; wait "$CHARGE_PID" 2>/dev/null; CHARGE_PID=
kill -TERM "$REDIS_PID" 2>/dev/null; wait "$REDIS_PID" 2>/dev/null; REDIS_PID=
kill -TERM "$SIM_PID" 2>/dev/null; wait "$SIM_PID" 2>/dev/null
t "the simulator exits 0 on SIGTERM; its store is in /var/lib/charge-provider-sim" \
	test $? -eq 0 -a "$(stat -c %U /var/lib/charge-provider-sim/store 2>/dev/null)" = charge-provider-sim
SIM_PID=

if dpkg --purge charge >"$TMP/purge.log" 2>&1; then
	INSTALLED=0
	ok "dpkg --purge removes it"
else
	notok "dpkg --purge removes it" "$(tail -20 "$TMP/purge.log")"
fi
t "purge removed the user charge" test -z "$(getent passwd charge)"
t "purge removed the group charge" test -z "$(getent group charge)"
t "purge removed the user and group charge-provider-sim" \
	test -z "$(getent passwd charge-provider-sim)$(getent group charge-provider-sim)"
t "purge removed /var/lib/charge-provider-sim and /run/charge-provider-sim" \
	test ! -e /var/lib/charge-provider-sim -a ! -e /run/charge-provider-sim
t "purge removed /var/lib/charge" test ! -e /var/lib/charge
t "purge removed /etc/charge" test ! -e /etc/charge
t "purge removed $RUNDIR" test ! -e "$RUNDIR"
t "purge removed the enable symlink" test ! -L /etc/systemd/system/multi-user.target.wants/charge.service
t "purge removed the demo provider's enable symlink" \
	test ! -L /etc/systemd/system/multi-user.target.wants/charge-provider-sim.service
t "purge removed the statoverrides" test -z "$(dpkg-statoverride --list '/etc/charge/*')"
finish
