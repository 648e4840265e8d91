#!/usr/bin/env bash
# 07 - "Did my retry charge twice?" Asking the service about a key.
#
# The client's first attempt times out on its side; it does not know whether
# the payment happened. Instead of guessing, it asks:
# GET /charge/keys/<key> answers with the key's record (state, times, the
# recorded status), never the stored body, and never creates or extends
# a record. One record with one status means one charge. The retry with the
# same key then replays that charge. The key is percent-encoded in the path
# (this one holds "/"); another API key sees no record at all (404).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_service

KEY="order/$(new_key)"
write_body "$WORK/req.json" 2500 tok_visa

title "1. A charge whose answer the client gives up on after ${MAX_TIME:-0.1} s"
show_request "$KEY" "$WORK/req.json"
if send_quiet first "$KEY" "$WORK/req.json" --max-time "${MAX_TIME:-0.1}"; then
	note "(the answer came in time: $STATUS; the story goes on the same way)"
else
	say "${B}< (no answer: the client timed out)${R}"
fi
SEQ=1

lookup "What does the service know about this key?" "$KEY"
expect_status 200
state=$(json_field "$RESP_BODY" state)
case $state in
in_progress | completed) ;;
*) fail "state $state, want in_progress or completed" ;;
esac
note "state $state: the first attempt reached the service; no need to guess"

for _ in $(seq 1 50); do
	[ "$(json_field "$RESP_BODY" state)" = completed ] && break
	sleep 0.1
	curl -sS -o "$RESP_BODY" -H "Authorization: Bearer $API_KEY" \
	    "$BASE_URL/charge/keys/$(urlencode "$KEY")"
done
lookup "Asking again once it has finished" "$KEY"
expect_status 200
[ "$(json_field "$RESP_BODY" state)" = completed ] || fail "the charge did not complete"
[ "$(json_field "$RESP_BODY" status)" = 201 ] || fail "recorded status is not 201"
expires=$(json_field "$RESP_BODY" expires)
note "one record, status 201: one charge. Replays are guaranteed until $expires."

send "The retry with the same key" "$KEY" "$WORK/req.json"
expect_status 201
expect_header Idempotent-Replayed true
[ -n "$(header Idempotency-Key-Expires)" ] ||
    fail "the replay carries no Idempotency-Key-Expires"

lookup "Another API key asks about the same key" "$KEY" "${OTHER_API_KEY:-sk_test_demo2}"
expect_status 404
[ "$(json_field "$RESP_BODY" type)" = /problems/key-not-found ] ||
    fail "another principal should see key-not-found"

check_one_charge "$KEY"
pass "the retry replayed the one charge; the key's record said so before the retry was sent."
