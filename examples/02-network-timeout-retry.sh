#!/usr/bin/env bash
# 02 - The client gives up, then retries with the same key.
#
# The client's timeout (MAX_TIME, default 0.1 s) is shorter than the
# provider's latency (200 ms in the demo configuration), so the client
# disconnects while the charge is still running. It does not know whether it
# was charged, so it retries with the SAME key: while the first attempt is
# still running it gets 409 with Retry-After, and it waits that long and
# retries; then it gets the outcome of the first attempt, replayed. One charge.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_service

MAX_TIME=${MAX_TIME:-0.1}
MAX_ATTEMPTS=${MAX_ATTEMPTS:-10}
KEY=$(new_key)
write_body "$WORK/req.json" 2500 tok_visa

rc=0
send "A charge; the client gives up after ${MAX_TIME} s (curl --max-time)" \
    "$KEY" "$WORK/req.json" --max-time "$MAX_TIME" || rc=$?
if [ "$rc" -eq 28 ]; then
	say "The client timed out: it cannot know whether the customer was charged."
elif [ "$rc" -eq 0 ]; then
	note "(the response came before the client's timeout: is the provider latency below ${MAX_TIME} s?)"
else
	fail "curl failed with exit status $rc"
fi

attempt=1
delay=1
seen_409=0
while :; do
	attempt=$((attempt + 1))
	send "Retry with the same key (attempt $attempt)" "$KEY" "$WORK/req.json" ||
	    fail "no response to the retry"
	[ "$STATUS" = 409 ] || break
	seen_409=1
	[ "$attempt" -lt "$MAX_ATTEMPTS" ] || fail "still 409 after $attempt attempts"
	ra=$(header Retry-After)
	[ -n "$ra" ] || fail "409 without Retry-After"
	[[ $ra =~ ^[0-9]+$ ]] || fail "Retry-After is not a number of seconds: $ra"
	# Honour Retry-After, and back off further on each repeated 409.
	wait_s=$(( ra > delay ? ra : delay ))
	say "Still in progress: waiting $wait_s s (Retry-After: $ra) before retrying."
	sleep "$wait_s"
	delay=$((delay * 2))
done

expect_status 201
replayed=$(header Idempotent-Replayed)
if [ "$replayed" = true ]; then
	say "The retry got the first attempt's charge, replayed."
elif [ "$replayed" = false ] && [ "$seen_409" = 1 ]; then
	fail "a first attempt was in progress (409), yet the retry executed a new charge"
elif [ "$replayed" = false ]; then
	note "(the first attempt never reached the service, so the retry executed it)"
else
	fail "the 201 has no Idempotent-Replayed header"
fi
ID=$(json_field "$RESP_BODY" id)
[ -n "$ID" ] || fail "the 201 body has no charge id"
KEY_BACK=$(json_field "$RESP_BODY" idempotency_key)
[ "$KEY_BACK" = "$KEY" ] || fail "the charge names key '$KEY_BACK', sent $KEY"
check_one_charge "$KEY"
pass "one charge ($ID) despite the client's timeout; $attempt requests in all."
