#!/usr/bin/env bash
# 05 - A declined card: the decline is recorded, replayed, and expires.
#
# tok_chargeDeclined makes the provider decline: 402 payment-declined with
# decline_code card_declined. A failure is recorded like a success, but only
# for failed_ttl_s (300 s by default): within that time a retry with the same
# key replays the 402 (Idempotent-Replayed: true) without calling the
# provider; after it, the same request executes again.
#
# env: FAILED_TTL_S  the service's failed_ttl_s. When it is at most
#                    MAX_TTL_WAIT_S (default 30), the story waits that long and
#                    shows the retry executing again (the tests run the
#                    service with CHARGE_FAILED_TTL_S=2 and set FAILED_TTL_S=2).
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_service

MAX_TTL_WAIT_S=${MAX_TTL_WAIT_S:-30}
KEY=$(new_key)
write_body "$WORK/req.json" 3100 tok_chargeDeclined

send "A charge with a card that will be declined" "$KEY" "$WORK/req.json"
expect_status 402
expect_header Idempotent-Replayed false
code=$(json_field "$RESP_BODY" decline_code)
[ "$code" = card_declined ] || fail "expected decline_code card_declined, got '$code'"
[ "$(json_field "$RESP_BODY" type)" = /problems/payment-declined ] ||
    fail "the 402 is not a payment-declined problem"
cp "$RESP_BODY" "$WORK/first.json"

send "The same request, same key, right away" "$KEY" "$WORK/req.json"
expect_status 402
expect_header Idempotent-Replayed true
cmp -s "$RESP_BODY" "$WORK/first.json" || fail "the replayed 402 differs from the original"
say "sha256 of both bodies: $(sha "$WORK/first.json") / $(sha "$RESP_BODY")"
say
say "The decline is replayed: the provider was not asked again."
check_one_charge "$KEY"

KEY2=$(new_key)
write_body "$WORK/req2.json" 3100 tok_insufficientFunds
send "Another card, another key: tok_insufficientFunds" "$KEY2" "$WORK/req2.json"
expect_status 402
code=$(json_field "$RESP_BODY" decline_code)
[ "$code" = insufficient_funds ] || fail "expected decline_code insufficient_funds, got '$code'"

title "After failed_ttl_s"
say "A failed outcome is kept for failed_ttl_s seconds (default 300). After"
say "that the record is gone and a retry with the same key executes again:"
say "the provider is idempotent on the key, so that can never charge twice."
if [ -z "${FAILED_TTL_S:-}" ]; then
	note "(set FAILED_TTL_S to the service's failed_ttl_s, e.g. run the service"
	note " with CHARGE_FAILED_TTL_S=2 and this story with FAILED_TTL_S=2, to see it)"
	pass "declined once, replayed once."
	exit 0
fi
[[ $FAILED_TTL_S =~ ^[0-9]+$ ]] || fail "FAILED_TTL_S is not a number: $FAILED_TTL_S"
if [ "$FAILED_TTL_S" -gt "$MAX_TTL_WAIT_S" ]; then
	note "(FAILED_TTL_S=$FAILED_TTL_S is more than MAX_TTL_WAIT_S=$MAX_TTL_WAIT_S: not waiting)"
	pass "declined once, replayed once."
	exit 0
fi
say "Waiting $((FAILED_TTL_S + 1)) s (FAILED_TTL_S=$FAILED_TTL_S)..."
sleep "$((FAILED_TTL_S + 1))"
tries=0
while :; do
	send "The same request, same key, after failed_ttl_s" "$KEY" "$WORK/req.json"
	expect_status 402
	[ "$(header Idempotent-Replayed)" = true ] || break
	tries=$((tries + 1))
	[ "$tries" -lt 5 ] || fail "still replayed $((FAILED_TTL_S + 1 + tries)) s after the decline: is the service's failed_ttl_s really $FAILED_TTL_S?"
	sleep 1
done
expect_header Idempotent-Replayed false
c=$(ledger_count "$KEY")
if [ -n "$c" ]; then
	say "Provider ledger: $c call(s) for key $KEY (the retry called the provider again)"
	[ "$c" = 2 ] || fail "expected 2 provider calls for $KEY in $LEDGER, found $c"
fi
pass "declined, replayed within failed_ttl_s, executed again after it."
