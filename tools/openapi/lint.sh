#!/usr/bin/env bash
# tools/openapi/lint.sh - lints docs/openapi.yaml with the pinned Redocly CLI
# (package.json, package-lock.json; installed here with `npm ci` when
# node_modules is missing or stale) and, with --html OUT, renders it into
# one self-contained HTML page (no CDN: Redoc's script is inlined).
# Prints one TAP line per step; exit status 1 when one fails.
#
#   tools/openapi/lint.sh                      lint
#   tools/openapi/lint.sh --html www/api.html  lint, then render
#   tools/openapi/lint.sh --check-html www/api.html
#                                   lint, and check that the committed page
#                                   is what the description renders to
set -uo pipefail
DIR=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)
REPO=$(cd "$DIR/../.." && pwd)
DESC=$REPO/docs/openapi.yaml
# no telemetry, no update check: nothing leaves the machine at test time
export REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true
export NO_UPDATE_NOTIFIER=1 npm_config_update_notifier=false npm_config_fund=false npm_config_audit=false

OUT=
[ -n "${2:-}" ] && OUT=$(realpath -m -- "$2")
rc=0
cd "$DIR" || exit 1
if [ ! -x node_modules/.bin/redocly ] ||
	[ package-lock.json -nt node_modules/.package-lock.json ]; then
	if ! npm ci --silent >"${TMPDIR:-/tmp}/charge-openapi-npm.log" 2>&1; then
		echo "not ok - npm ci in tools/openapi (the pinned @redocly/cli)"
		sed 's/^/# /' "${TMPDIR:-/tmp}/charge-openapi-npm.log" | tail -20
		exit 1
	fi
fi
ver=$(node_modules/.bin/redocly --version 2>/dev/null | head -1)
want=$(sed -n 's/.*"@redocly\/cli": "\([^"]*\)".*/\1/p' package.json)
if [ "$ver" != "$want" ]; then
	echo "not ok - redocly $want is installed (got '$ver')"
	exit 1
fi
out=$(node_modules/.bin/redocly lint --config redocly.yaml --format=stylish "$DESC" 2>&1)
if [ $? -eq 0 ]; then
	echo "ok - docs/openapi.yaml lints clean (redocly $ver, recommended-strict)"
else
	echo "not ok - docs/openapi.yaml lints clean (redocly $ver, recommended-strict)"
	printf '%s\n' "$out" | grep -v '[║╔╚]' | grep -vE '^\s*$' | sed 's/^/# /' | head -40
	rc=1
fi
# render DEST: the reference page, with Redoc's script inlined (no CDN).
# Redoc's footer logo is an <img> from cdn.redoc.ly, hidden when it fails to
# load: it becomes an empty data: URI, so that opening the page makes no
# request at all (the icon-set URLs of the bundle are never used here).
render() {
	local out
	out=$(node_modules/.bin/redocly build-docs --config redocly.yaml --inlineBundle \
		--title "charge API reference" "$DESC" -o "$1" 2>&1) &&
		sed -i 's#https://cdn\.redoc\.ly/redoc/logo-mini\(-full\)\{0,1\}\.svg#data:,#g' "$1"
	[ $? -eq 0 ] && [ -s "$1" ] && return 0
	printf '%s\n' "$out" | grep -v '[║╔╚]' | sed 's/^/# /' | head -20
	return 1
}
case ${1:-} in
--html)
	if render "$OUT"; then
		echo "ok - docs/openapi.yaml renders to one HTML page ($2)"
	else
		echo "not ok - docs/openapi.yaml renders to one HTML page ($2)"
		rc=1
	fi ;;
--check-html)
	tmp=$(mktemp -d "${TMPDIR:-/tmp}/charge-openapi.XXXXXX")
	if render "$tmp/api.html" && cmp -s "$tmp/api.html" "$OUT"; then
		echo "ok - $2 is docs/openapi.yaml rendered"
	else
		echo "not ok - $2 is docs/openapi.yaml rendered (run tools/openapi/lint.sh --html $2)"
		rc=1
	fi
	if [ ! -s "$OUT" ] ||
		grep -qiE '<(script|link)[^>]+(src|href)="(https?:)?//' "$OUT"; then
		echo "not ok - $2 loads nothing from the network"
		grep -oiE '<(script|link)[^>]+(src|href)="(https?:)?//[^"]*"' "$OUT" | head -5 | sed 's/^/# /'
		rc=1
	else
		echo "ok - $2 loads no script or style from the network"
	fi
	rm -rf "$tmp" ;;
esac
exit $rc
