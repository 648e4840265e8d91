#!/usr/bin/env bash
# tools/openapi/lint.sh - lints docs/openapi.yaml with the pinned Redocly CLI
# (package.json, package-lock.json; installed here with `npm ci` when
# node_modules is missing or stale) and, with --html OUT, renders it into
# one self-contained HTML page (no CDN: Redoc's script is inlined).
# Prints one TAP line per step; exit status 1 when one fails.
#
#   tools/openapi/lint.sh                      lint
#   tools/openapi/lint.sh --html www/api.html  lint, then render
set -uo pipefail
DIR=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)
REPO=$(cd "$DIR/../.." && pwd)
SPEC=$REPO/docs/openapi.yaml
# no telemetry, no update check: nothing leaves the machine at test time
export REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true
export NO_UPDATE_NOTIFIER=1 npm_config_update_notifier=false npm_config_fund=false npm_config_audit=false

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
out=$(node_modules/.bin/redocly lint --config redocly.yaml --format=stylish "$SPEC" 2>&1)
if [ $? -eq 0 ]; then
	echo "ok - docs/openapi.yaml lints clean (redocly $ver, recommended-strict)"
else
	echo "not ok - docs/openapi.yaml lints clean (redocly $ver, recommended-strict)"
	printf '%s\n' "$out" | grep -v '[║╔╚]' | grep -vE '^\s*$' | sed 's/^/# /' | head -40
	rc=1
fi
if [ "${1:-}" = --html ] && [ -n "${2:-}" ]; then
	out=$(node_modules/.bin/redocly build-docs --config redocly.yaml --inlineBundle --title "charge API reference" "$SPEC" -o "$2" 2>&1)
	if [ $? -eq 0 ] && [ -s "$2" ]; then
		echo "ok - docs/openapi.yaml renders to one HTML page ($2)"
	else
		echo "not ok - docs/openapi.yaml renders to one HTML page ($2)"
		printf '%s\n' "$out" | grep -v '[║╔╚]' | sed 's/^/# /' | head -20
		rc=1
	fi
fi
exit $rc
