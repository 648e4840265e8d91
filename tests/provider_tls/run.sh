#!/usr/bin/env bash
# tests/provider_tls/run.sh - the responder against the simulator behind
# TLS: a test CA and a server certificate made here with openssl, nginx
# terminating TLS on 127.0.0.1 in front of the simulator; the right CA is
# trusted, the system store, another CA and a wrong name are refused
# (test_provider_tls.py). The stack comes from tests/provider_faults/run.sh.
# Prints TAP.
#
#   CHARGE_BIN=build-asan/charge tests/provider_tls/run.sh   (./test.sh provider_tls)
set -u
HERE=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)
for p in openssl nginx; do
	command -v "$p" >/dev/null 2>&1 || { echo "not ok 1 - provider_tls: $p is not installed"; exit 1; }
done
PROV_SUITE=provider_tls PROV_SCRIPT="$HERE/test_provider_tls.py" \
	PROV_TIMEOUT_S=${PROV_TIMEOUT_S:-90} exec "$HERE/../provider_faults/run.sh"
