#!/usr/bin/env bash
# 06 - A large order: the response is spilled to a file, replays stay exact.
#
# An order with 1000 line items gets a charge object that echoes all of them:
# far more than spill_threshold_bytes (16 KiB by default). Such a body is not
# kept inline in Redis; it is written to a file in spill_dir (temporary name,
# fsync, rename) that the record references with its length and SHA-256. A
# replay reads the file, checks both, and sends it byte for byte.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$(dirname "$0")/lib.sh"
require_service

ITEMS=${ITEMS:-1000}
SPILL_THRESHOLD=${SPILL_THRESHOLD:-16384}
KEY=$(new_key)
python3 - "$WORK/req.json" "$ITEMS" <<'PY'
import json, sys
items = [{"description": "Item %04d of the large example order" % (i + 1),
          "quantity": 1 + i % 3,
          "unit_amount": 100 + (i * 37) % 900} for i in range(int(sys.argv[2]))]
req = {"amount": sum(it["quantity"] * it["unit_amount"] for it in items),
       "currency": "eur", "source": "tok_visa",
       "description": "large order example", "line_items": items}
with open(sys.argv[1], "w") as f:
    json.dump(req, f, separators=(",", ":"))
PY

send "An order with $ITEMS line items" "$KEY" "$WORK/req.json"
expect_status 201
expect_header Idempotent-Replayed false
cp "$RESP_BODY" "$WORK/first.json"
size=$(wc -c < "$WORK/first.json")
n=$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["line_items"]))' "$WORK/first.json")
[ "$n" = "$ITEMS" ] || fail "the charge echoes $n line items, sent $ITEMS"
say
say "The response body is $size bytes (spill_threshold_bytes: $SPILL_THRESHOLD),"
say "so the service stored it in a spill file rather than in the Redis hash."
[ "$size" -gt "$SPILL_THRESHOLD" ] ||
    fail "the body ($size bytes) is not larger than $SPILL_THRESHOLD bytes"

send "The same order, same key" "$KEY" "$WORK/req.json"
expect_status 201
expect_header Idempotent-Replayed true
cp "$RESP_BODY" "$WORK/second.json"

title "Comparing the two bodies"
say "fresh:    $(wc -c < "$WORK/first.json") bytes, sha256 $(sha "$WORK/first.json")"
say "replayed: $(wc -c < "$WORK/second.json") bytes, sha256 $(sha "$WORK/second.json")"
cmp -s "$WORK/first.json" "$WORK/second.json" ||
    fail "the replayed body differs from the original"
check_one_charge "$KEY"
pass "a $size-byte response, spilled and replayed byte for byte."
