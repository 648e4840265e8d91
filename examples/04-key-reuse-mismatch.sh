#!/usr/bin/env bash
# 04 - The same key with different parameters: 422.
#
# An Idempotency-Key stands for one request. Sending it again with a changed
# amount is a client bug (or a new payment that needs a new key): the service
# refuses it with 422 idempotency-key-reused, names the parameters that
# differ in "mismatched_params", and changes nothing; the original request
# still gets its original response.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_service

KEY=$(new_key)
write_body "$WORK/req.json" 1000 tok_visa
write_body "$WORK/changed.json" 1001 tok_visa

send "A charge of 1000" "$KEY" "$WORK/req.json"
expect_status 201
expect_header Idempotent-Replayed false
cp "$RESP_BODY" "$WORK/first.json"

send "The same key, amount changed to 1001" "$KEY" "$WORK/changed.json"
expect_status 422
[ "$(json_field "$RESP_BODY" type)" = /problems/idempotency-key-reused ] ||
    fail "the 422 is not an idempotency-key-reused problem"
[ "$(json_field "$RESP_BODY" mismatched_params)" = '["amount"]' ] ||
    fail "the 422 should name amount in mismatched_params"
[ -z "$(header Idempotent-Replayed)" ] ||
    fail "a 422 should not carry Idempotent-Replayed"

send "The original request again, same key" "$KEY" "$WORK/req.json"
expect_status 201
expect_header Idempotent-Replayed true
cmp -s "$RESP_BODY" "$WORK/first.json" || fail "the replay differs from the original"
check_one_charge "$KEY"
pass "the changed request was refused (422, mismatched_params: amount); the original charge is untouched."
