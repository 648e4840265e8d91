#!/usr/bin/env bash
# The FastCGI codec (src/codec/fcgi_codec.c) against libfcgi's own reader:
# tests/fcgi_diff/fcgi_diff.c, built by meson as build/fcgi_diff, reads
# hand-made and generated streams both ways in one process and prints TAP.
# FCGI_DIFF_CASES and FCGI_DIFF_SEED change the generated streams (default
# 400 from a fixed seed); DIFF_VERBOSE=1 prints both outcomes of every
# difference on stderr.
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd) || exit 2
BUILD=${FCGI_DIFF_BUILD:-$ROOT/build}

if ! ninja -C "$BUILD" fcgi_diff >/tmp/fcgi-diff-build.$$.log 2>&1; then
	echo "not ok 1 - build fcgi_diff"
	sed 's/^/# /' /tmp/fcgi-diff-build.$$.log | tail -20
	rm -f /tmp/fcgi-diff-build.$$.log
	exit 1
fi
rm -f /tmp/fcgi-diff-build.$$.log
timeout 90 "$BUILD/fcgi_diff" "${FCGI_DIFF_CASES:-400}" \
	"${FCGI_DIFF_SEED:-20261125}"
rc=$?
if [ "$rc" -eq 124 ] || [ "$rc" -gt 128 ]; then
	echo "not ok - fcgi_diff timed out or died (status $rc)"
fi
exit "$rc"
