#!/usr/bin/env bash
# 03 - Two identical requests at the same moment, with the same key.
#
# Exactly one of them executes the charge (201, Idempotent-Replayed: false);
# the other finds the key in progress and gets 409 with Retry-After. A third
# request with "Prefer: wait=5" (RFC 7240), sent while the first is still
# running, waits for the outcome and gets it replayed instead of a 409.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_service

KEY=$(new_key)
write_body "$WORK/req.json" 4200 tok_visa

SEQ=$((SEQ + 1))
title "$SEQ. Two requests at once, same key (sent in parallel)"
show_request "$KEY" "$WORK/req.json"
say "  ... twice, at the same time; and 50 ms later a third, with Prefer: wait=5"
send_quiet a "$KEY" "$WORK/req.json" & pa=$!
send_quiet b "$KEY" "$WORK/req.json" & pb=$!
sleep 0.05
send_quiet c "$KEY" "$WORK/req.json" -H 'Prefer: wait=5' & pc=$!
wait "$pa" || fail "request A: no response ($(cat "$WORK/a.err"))"
wait "$pb" || fail "request B: no response ($(cat "$WORK/b.err"))"
wait "$pc" || fail "request C: no response ($(cat "$WORK/c.err"))"

for r in a b; do
	load_response "$r"
	say
	say "${B}Response to request ${r^^}:${R}"
	show_response
done

load_response a
sa=$STATUS ra=$(header Idempotent-Replayed)
load_response b
sb=$STATUS rb=$(header Idempotent-Replayed)
if [ "$sa" = 201 ] && [ "$ra" = false ] && [ "$sb" = 409 ]; then
	winner=a loser=b
elif [ "$sb" = 201 ] && [ "$rb" = false ] && [ "$sa" = 409 ]; then
	winner=b loser=a
else
	fail "expected one fresh 201 and one 409; got A: $sa (replayed: ${ra:-none}), B: $sb (replayed: ${rb:-none})"
fi
load_response "$loser"
[ -n "$(header Retry-After)" ] || fail "the 409 has no Retry-After"
[ "$(json_field "$RESP_BODY" type)" = /problems/request-in-progress ] ||
    fail "the 409 is not a request-in-progress problem"
say
say "Request ${winner^^} executed the charge; request ${loser^^} was told to retry later."

SEQ=$((SEQ + 1))
title "$SEQ. The third request, same key, with Prefer: wait=5"
show_request "$KEY" "$WORK/req.json" 'Prefer: wait=5'
say
load_response c
show_response
say "(it waited: answered after $RESP_TIME s)"
expect_status 201
expect_header Idempotent-Replayed true
cmp -s "$WORK/c.body" "$WORK/$winner.body" ||
    fail "the replay differs from the original body"
say "sha256 of the fresh body:    $(sha "$WORK/$winner.body")"
say "sha256 of the waited replay: $(sha "$WORK/c.body")"
check_one_charge "$KEY"
pass "three requests, one charge ($(json_field "$WORK/$winner.body" id)): 201, 409, and a replay after waiting."
