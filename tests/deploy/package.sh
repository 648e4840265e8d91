#!/usr/bin/env bash
# tests/deploy/package.sh - the Debian package, as an operator takes it in.
# Prints TAP. Builds charge_<version>_amd64.deb from the work tree
# (dpkg-buildpackage -us -uc -b in a temporary copy), runs lintian (no error,
# no warning that is not explained in debian/charge.lintian-overrides) and
# checks what the package holds. Then, as root only (CI runs as root on a
# throwaway machine): installs it with dpkg -i, runs the installed unit's
# ExecStart as its User=/Group= with its Environment= and UMask= against a
# private redis-server on a free loopback port (CHARGE_REDIS_URL), charges
# through an nginx whose configuration includes the installed snippet, and
# purges the package: the user, the state and the configuration are gone.
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
INSTALLED=0 CHARGE_PID= NGINX_PID= REDIS_PID=
cleanup() {
	trap - EXIT INT TERM
	[ -n "$NGINX_PID" ] && kill -QUIT "$NGINX_PID" 2>/dev/null
	[ -n "$CHARGE_PID" ] && kill -TERM "$CHARGE_PID" 2>/dev/null
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
t "holds /etc/charge/api-keys, mode 0640" has '-rw-r-----' root/root etc/charge/api-keys
t "holds /etc/charge/charge.conf, mode 0640" has '-rw-r-----' root/root etc/charge/charge.conf
t "/etc/charge/charge.conf and /etc/charge/api-keys are conffiles" \
	diff <(sort "$TMP/conffiles") <(printf '%s\n' /etc/charge/api-keys /etc/charge/charge.conf)
t "holds the systemd unit" has '-rw-r--r--' root/root lib/systemd/system/charge.service
t "holds /usr/share/charge/www (demo page, API reference, problem pages)" \
	grep -qE ' \./usr/share/charge/www/(api\.html|index\.html|problems/not-found)$' "$TMP/contents"
t "holds the web-server snippets in /usr/share/charge/conf/snippets" \
	test "$(grep -cE ' \./usr/share/charge/conf/snippets/(nginx|lighttpd|apache)\.conf$' "$TMP/contents")" = 3
t "holds nothing under /var (postinst and systemd make /var/lib/charge)" \
	test -z "$(grep ' \./var/' "$TMP/contents")"

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
# a machine running systemd started the unit: run our own copy instead
if [ -d /run/systemd/system ]; then
	systemctl stop charge.service >/dev/null 2>&1
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
t "the unit is enabled (multi-user.target.wants)" \
	test -L /etc/systemd/system/multi-user.target.wants/charge.service

# The unit's directives (one value per line in this unit).
UNIT=/lib/systemd/system/charge.service
directive() { sed -n "s/^$1=//p" "$UNIT"; }
EXEC=$(directive ExecStart)
USER_=$(directive User) GROUP_=$(directive Group) UMASK_=$(directive UMask)
# systemd's supplementary groups: those /etc/group lists the user in, and
# SupplementaryGroups= (the user's own group from passwd is not among them)
SUPP=$( (getent group | awk -F: -v u="$USER_" '{n = split($4, m, ","); for (i = 1; i <= n; i++) if (m[i] == u) print $1}'
	directive SupplementaryGroups | tr ' ' '\n'; echo "$GROUP_") | grep . | sort -u | paste -sd,)
RUNDIR=/run/$(directive RuntimeDirectory) RUNMODE=$(directive RuntimeDirectoryMode)
t "ExecStart runs the installed binary on a socket under $RUNDIR" \
	test "$EXEC" = "/usr/sbin/charge --listen $RUNDIR/charge.sock"
mapfile -t ENVS < <(directive Environment)

REDIS_PORT=$(stack_port_pick)
redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save '' --appendonly no \
	--dir "$TMP" --logfile "$TMP/redis.log" &
REDIS_PID=$!
for _ in $(seq 1 50); do
	redis-cli -p "$REDIS_PORT" ping 2>/dev/null | grep -q PONG && break
	sleep 0.1
done

# what systemd does before ExecStart: RuntimeDirectory= (StateDirectory=
# exists: postinst), then the process as User=/Group= with UMask=
install -d -o "$USER_" -g "$GROUP_" -m "${RUNMODE:-0755}" "$RUNDIR"
# shellcheck disable=SC2086
(umask "${UMASK_:-0022}" && exec env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin "${ENVS[@]}" \
	CHARGE_REDIS_URL="redis://127.0.0.1:$REDIS_PORT" \
	setpriv --reuid="$USER_" --regid="$GROUP_" --groups="$SUPP" $EXEC) \
	>"$TMP/charge.log" 2>&1 &
CHARGE_PID=$!
for _ in $(seq 1 50); do [ -S "$RUNDIR/charge.sock" ] && break; sleep 0.1; done
if [ -S "$RUNDIR/charge.sock" ] && kill -0 "$CHARGE_PID" 2>/dev/null; then
	ok "the unit's ExecStart runs as $USER_:$GROUP_ with the installed configuration"
else
	notok "the unit's ExecStart runs as $USER_:$GROUP_ with the installed configuration" \
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
t "the provider ledger is in /var/lib/charge, owned by charge" \
	test "$(stat -c %U /var/lib/charge/provider-ledger.log 2>/dev/null)" = charge
t "the API reference is served beside the demo page (/api.html)" \
	test "$(stack_http_status "$B/api.html")" = 200
s=$(curl -s -o "$TMP/b404" -w '%{http_code} %{content_type}' "$B/nope")
[ "$s" = "404 application/problem+json" ] && ok "an unknown path: the responder's 404 problem+json" ||
	notok "an unknown path: the responder's 404 problem+json" "got $s"

kill -QUIT "$NGINX_PID" 2>/dev/null; wait "$NGINX_PID" 2>/dev/null; NGINX_PID=
kill -TERM "$CHARGE_PID" 2>/dev/null; wait "$CHARGE_PID" 2>/dev/null; CHARGE_PID=
kill -TERM "$REDIS_PID" 2>/dev/null; wait "$REDIS_PID" 2>/dev/null; REDIS_PID=

if dpkg --purge charge >"$TMP/purge.log" 2>&1; then
	INSTALLED=0
	ok "dpkg --purge removes it"
else
	notok "dpkg --purge removes it" "$(tail -20 "$TMP/purge.log")"
fi
t "purge removed the user charge" test -z "$(getent passwd charge)"
t "purge removed the group charge" test -z "$(getent group charge)"
t "purge removed /var/lib/charge" test ! -e /var/lib/charge
t "purge removed /etc/charge" test ! -e /etc/charge
t "purge removed $RUNDIR" test ! -e "$RUNDIR"
t "purge removed the enable symlink" test ! -L /etc/systemd/system/multi-user.target.wants/charge.service
t "purge removed the statoverrides" test -z "$(dpkg-statoverride --list '/etc/charge/*')"
finish
