#!/usr/bin/env bash
# tests/stripe_mock/run.sh - the responder against stripe-stateful-mock, a
# Stripe emulation from npm (the version pinned in package.json and
# package-lock.json, installed here with npm ci into
# tests/stripe_mock/node_modules), started on 127.0.0.1 by serve.js. The
# stack (Redis, lighttpd, responders) comes from tests/provider_faults/run.sh;
# the cases are test_stripe_mock.py. Prints TAP.
#
#   CHARGE_BIN=build-asan/charge tests/stripe_mock/run.sh   (./test.sh stripe_mock)
set -u
HERE=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)
# paths given relative to where we were started, before the cd
for v in CHARGE_BIN PROV_SIM_BIN; do
	[ -n "${!v:-}" ] && export "$v=$(readlink -f "${!v}")"
done
cd "$HERE" || exit 1

bail() {
	echo "not ok 1 - stripe_mock set-up: $1"
	[ -f "$HERE/.setup.log" ] && sed 's/^/# /' "$HERE/.setup.log" | tail -n 20
	rm -f "$HERE/.setup.log"
	exit 1
}

command -v node >/dev/null || bail "node is not installed (apt-get install nodejs npm)"
command -v npm >/dev/null || bail "npm is not installed (apt-get install npm)"
# node_modules/.lock-stamp: the package-lock.json last installed from.
if [ ! -f node_modules/stripe-stateful-mock/package.json ] ||
	! cmp -s package-lock.json node_modules/.lock-stamp; then
	echo "# npm ci (stripe-stateful-mock)"
	npm ci --no-audit --no-fund --loglevel=error >"$HERE/.setup.log" 2>&1 ||
		bail "npm ci failed"
	cp package-lock.json node_modules/.lock-stamp || bail "cannot write node_modules"
fi
rm -f "$HERE/.setup.log"

PROV_SUITE=stripe_mock PROV_SCRIPT="$HERE/test_stripe_mock.py" PROV_NEED_SIM=0 \
	PROV_TIMEOUT_S=${PROV_TIMEOUT_S:-90} exec "$HERE/../provider_faults/run.sh"
