#!/usr/bin/env bash
# 01 - A fresh charge, then the same request again: the replay.
#
# The first request with a new Idempotency-Key executes the charge (201,
# Idempotent-Replayed: false). Sending the same request with the same key
# again does not charge again: it gets the recorded response, byte for byte,
# with Idempotent-Replayed: true.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_service

KEY=$(new_key)
write_body "$WORK/req.json" 1999 tok_visa

send "A fresh charge with a new key" "$KEY" "$WORK/req.json"
expect_status 201
expect_header Idempotent-Replayed false
cp "$RESP_BODY" "$WORK/first.json"
ID=$(json_field "$WORK/first.json" id)
[ -n "$ID" ] || fail "the 201 body has no charge id"

send "The same request, same key (a retry)" "$KEY" "$WORK/req.json"
expect_status 201
expect_header Idempotent-Replayed true
cp "$RESP_BODY" "$WORK/second.json"

title "Comparing the two bodies"
say "sha256 of the fresh body:    $(sha "$WORK/first.json")"
say "sha256 of the replayed body: $(sha "$WORK/second.json")"
cmp -s "$WORK/first.json" "$WORK/second.json" ||
    fail "the replayed body differs from the original"
check_one_charge "$KEY"
pass "one charge ($ID); the retry got the recorded response, byte for byte."
