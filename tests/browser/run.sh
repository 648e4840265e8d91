#!/usr/bin/env bash
# tests/browser/run.sh - installs playwright-core (npm ci, into
# tests/browser/node_modules) and runs the headless-Chromium test of the demo
# page against a running stack. Prints TAP lines.
#
# env: BASE_URL    the stack (default http://127.0.0.1:8080); the caller starts it
#      SCREENSHOT  where the screenshot goes (default tests/browser/artifacts/demo.png)
#      SETTLE_SCREENSHOT  the page with a 504 settled by the webhook (default
#                  settle.png beside SCREENSHOT; needs SIM_URL: tests/with-stack.sh
#                  with STACK_WITH_SIM=1)
#      CHROMIUM    the browser (default /usr/bin/chromium, Debian's package
#                  "chromium"; installed here with apt-get when missing and root)
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
cd "$HERE" || exit 1
export BASE_URL=${BASE_URL:-http://127.0.0.1:8080}
export CHROMIUM=${CHROMIUM:-/usr/bin/chromium}

bail() {
	echo "not ok 1 - browser test set-up: $1"
	[ -f "$HERE/.setup.log" ] && sed 's/^/# /' "$HERE/.setup.log" | tail -n 20
	rm -f "$HERE/.setup.log"
	exit 1
}

if [ ! -x "$CHROMIUM" ]; then
	if [ "$(id -u)" = 0 ] && command -v apt-get > /dev/null; then
		echo "# installing Debian's chromium"
		{ apt-get update -qq &&
		    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; } \
		    > "$HERE/.setup.log" 2>&1 || bail "apt-get install chromium failed"
	fi
	[ -x "$CHROMIUM" ] || bail "no browser at $CHROMIUM (apt-get install chromium)"
fi
command -v node > /dev/null || bail "node is not installed (apt-get install nodejs npm)"
command -v npm > /dev/null || bail "npm is not installed (apt-get install npm)"

# node_modules/.lock-stamp: the package-lock.json last installed from.
if [ ! -f node_modules/playwright-core/package.json ] ||
    ! cmp -s package-lock.json node_modules/.lock-stamp; then
	echo "# npm ci (playwright-core)"
	npm ci --no-audit --no-fund --loglevel=error > "$HERE/.setup.log" 2>&1 ||
	    bail "npm ci failed"
	cp package-lock.json node_modules/.lock-stamp || bail "cannot write node_modules"
fi
rm -f "$HERE/.setup.log"

exec timeout -k 5 300 node demo.test.mjs
