#!/usr/bin/env bash
# Integration tests of lua/claim.lua, lua/record.lua and lua/release.lua
# against a private redis-server on a unix socket. Prints TAP lines.
# Usage: tests/lua/run.sh            (from any directory)
#        LUA_HARDENING=0 tests/lua/run.sh   skips the argument-validation
#                                          tests (bad arguments change nothing)
set -u

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd) || exit 2
LUA=${CHARGE_LUA_DIR:-$ROOT/lua}   # override only to test the tests
REDIS_SERVER=${REDIS_SERVER:-redis-server}
REDIS_CLI=${REDIS_CLI:-redis-cli}

N=0
FAILED=0
DIR=
RPID=

cleanup() {
	if [ -n "$RPID" ]; then
		kill "$RPID" 2>/dev/null
		wait "$RPID" 2>/dev/null
		RPID=
	fi
	if [ -n "$DIR" ]; then
		rm -rf "$DIR"
	fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---------------------------------------------------------------- TAP helpers

ok() {
	N=$((N + 1))
	echo "ok $N - $1"
}

notok() {
	N=$((N + 1))
	FAILED=$((FAILED + 1))
	echo "not ok $N - $1"
}

diag() {
	printf '%s\n' "$@" | sed 's/^/#   /'
}

# is DESC GOT EXPECTED: exact string comparison
is() {
	if [ "$2" == "$3" ]; then
		ok "$1"
	else
		notok "$1"
		echo "#   expected:"
		diag "$3"
		echo "#   got:"
		diag "$2"
	fi
}

# mark: notes the time (ms) before which no key of the test's Redis was
# written (fresh() calls it, and so does a test on an empty new Redis),
# so that a PTTL can be
# bounded by the time that really passed since, however loaded the machine
mark() { MARK_MS=$(date +%s%3N); }
MARK_MS=0

# in_ttl DESC PTTL TTL: a key given TTL (ms) after the mark has a PTTL in
# [TTL - the ms since the mark, TTL]
in_ttl() {
	local now
	now=$(date +%s%3N)
	in_range "$1" "$2" $(($3 - (now - MARK_MS) - 2)) "$3"
}

# in_range DESC VALUE LO HI: LO <= VALUE <= HI (integers)
in_range() {
	if [[ "$2" =~ ^-?[0-9]+$ ]] && [ "$2" -ge "$3" ] && [ "$2" -le "$4" ]; then
		ok "$1"
	else
		notok "$1"
		diag "expected $3..$4, got '$2'"
	fi
}

bail() {
	echo "Bail out! $*"
	[ -n "$DIR" ] && [ -f "$DIR/redis.log" ] && diag "$(tail -n 20 "$DIR/redis.log")"
	exit 1
}

# ---------------------------------------------------------------- Redis helpers

# r ARGS...: one command, replies in redis-cli's quoted (--no-raw) form, where
# strings are escaped like sdscatrepr and nil is (nil): byte-exact and
# unambiguous. Array index prefixes ("1) ", " 10) ") are stripped, one element
# per line.
r() {
	timeout 5 "$REDIS_CLI" -s "$SOCK" --no-raw "$@" | sed -E 's/^ *[0-9]+\) //'
}

# rv ARGS...: unquoted scalar reply (integers, simple strings, short bulks)
rv() {
	timeout 5 "$REDIS_CLI" -s "$SOCK" --raw "$@"
}

# ev SCRIPT KEY , ARGV...: run lua/SCRIPT.lua with EVAL (redis-cli --eval
# sends numkeys=1 and KEY as KEYS[1])
ev() {
	local s=$1
	shift
	r --eval "$LUA/$s.lua" "$@"
}

# repr: stdin bytes -> the quoted form redis-cli --no-raw prints
repr() {
	local out='"' b
	for b in $(od -An -v -tx1); do
		case $b in
		5c) out+='\\' ;;
		22) out+='\"' ;;
		0a) out+='\n' ;;
		0d) out+='\r' ;;
		09) out+='\t' ;;
		07) out+='\a' ;;
		08) out+='\b' ;;
		*)
			if ((16#$b >= 0x20 && 16#$b <= 0x7e)); then
				out+=$(printf "\\x$b")
			else
				out+="\\x$b"
			fi
			;;
		esac
	done
	printf '%s"' "$out"
}

# q STRING: quoted form of STRING; qf FORMAT: quoted form of printf FORMAT
q() { printf '%s' "$1" | repr; }
qf() { printf "$1" | repr; }

# lines ARGS...: the args, one per line (expected multi-element replies)
lines() { printf '%s\n' "$@"; }

# snap KEY: fields (sorted) and values of a hash, for before/after comparisons
snap() {
	local f
	for f in $(rv HKEYS "$1" | LC_ALL=C sort); do
		printf '%s=%s\n' "$f" "$(r HGET "$1" "$f")"
	done
}

# fields KEY: sorted field names
fields() { rv HKEYS "$1" | LC_ALL=C sort | tr '\n' ' ' | sed 's/ $//'; }

# keyspace: all keys, sorted, space separated
keyspace() { rv KEYS '*' | LC_ALL=C sort | tr '\n' ' ' | sed 's/ $//'; }

# start_redis EXTRA_ARGS...: start redis-server in $DIR, wait for PONG
start_redis() {
	"$REDIS_SERVER" --port 0 --unixsocket "$SOCK" --unixsocketperm 700 \
		--save '' --appendonly no --enable-debug-command local \
		--dir "$DIR" --logfile "$DIR/redis.log" --daemonize no "$@" &
	RPID=$!
	local _
	for _ in $(seq 1 100); do
		if [ "$(timeout 1 "$REDIS_CLI" -s "$SOCK" PING 2>/dev/null)" == PONG ]; then
			return 0
		fi
		if ! kill -0 "$RPID" 2>/dev/null; then
			RPID=
			bail "redis-server exited at start-up"
		fi
		sleep 0.05
	done
	bail "redis-server did not answer PING within 5 s"
}

stop_redis() {
	if [ -n "$RPID" ]; then
		kill "$1" "$RPID" 2>/dev/null
		wait "$RPID" 2>/dev/null
		RPID=
	fi
}

# fresh: empty database plus two sentinel keys the scripts must never touch
fresh() {
	mark
	r FLUSHALL >/dev/null
	r SET sentinel:str v >/dev/null
	r HSET sentinel:hash state in_progress owner o1 fingerprint fp1 >/dev/null
}
SENTINELS="sentinel:hash sentinel:str"

sentinels_intact() {
	local got
	got="$(keyspace) | $(r GET sentinel:str) | $(snap sentinel:hash) | $(rv PTTL sentinel:str) $(rv PTTL sentinel:hash)"
	is "$1" "$got" "$(keyspace_with "$2") | \"v\" | fingerprint=\"fp1\"
owner=\"o1\"
state=\"in_progress\" | -1 -1"
}

keyspace_with() {
	# shellcheck disable=SC2086 # word lists
	printf '%s\n' $SENTINELS $1 | LC_ALL=C sort | tr '\n' ' ' | sed 's/ $//'
}

# ---------------------------------------------------------------- set-up

for tool in "$REDIS_SERVER" "$REDIS_CLI" od timeout sha1sum; do
	command -v "$tool" >/dev/null 2>&1 || bail "$tool not found"
done
for s in claim record release lookup resume pending webhook; do
	[ -f "$LUA/$s.lua" ] || bail "$LUA/$s.lua missing"
done

DIR=$(mktemp -d "${TMPDIR:-/tmp}/charge-lua.XXXXXX") || bail "mktemp failed"
SOCK=$DIR/redis.sock
start_redis
T0=$(date +%s%N)

FP=aaaa000000000000000000000000000000000000000000000000000000000001
FP2=bbbb000000000000000000000000000000000000000000000000000000000002
# per-parameter digests: 7 x 8 hex, stored with the claim, opaque to the scripts
PR=00000001000000020000000300000004000000050000000600000007
PR2=00000001ffffffff0000000300000004000000050000000600000007
K=charge:idem:demo:key-1
CLAIM_TTL=30000
DONE_TTL=86400000
FAIL_TTL=300000
CT=application/json
PT=application/problem+json
BODY=$'{"id":"ch_0123","note":"line1\nline2","quote":"say \\"hi\\"","utf8":"café ✓ € 𝄞"}\n'

# ---------------------------------------------------------------- claim

echo "# claim on a fresh key"
fresh
is "claim on a fresh key -> claimed" "$(ev claim $K , $FP ownerA 1000 $CLAIM_TTL $PR)" '"claimed"'
is "claimed hash has exactly the claim fields" "$(fields $K)" \
	"created_ms fingerprint owner param_digests state"
is "claimed hash values" "$(r HMGET $K state fingerprint owner created_ms param_digests)" \
	"$(lines '"in_progress"' "\"$FP\"" '"ownerA"' '"1000"' "\"$PR\"")"
in_ttl "claim PTTL close to claim TTL $CLAIM_TTL" "$(rv PTTL $K)" $CLAIM_TTL
sentinels_intact "claim touched only KEYS[1]" "$K"

echo "# claim again while in_progress"
r PEXPIRE $K 55555 >/dev/null
before=$(snap $K)
is "same fingerprint, same owner -> claimed (retry-safe)" \
	"$(ev claim $K , $FP ownerA 2000 $CLAIM_TTL $PR)" '"claimed"'
is "retried claim leaves the hash unchanged (created_ms kept)" "$(snap $K)" "$before"
is "same fingerprint, other owner -> in_progress with the claim's created_ms" \
	"$(ev claim $K , $FP ownerB 2000 $CLAIM_TTL $PR)" "$(lines '"in_progress"' '"1000"')"
is "other fingerprint, other owner -> mismatch (in_progress) with the stored digests" \
	"$(ev claim $K , $FP2 ownerB 2000 $CLAIM_TTL $PR2)" "$(lines '"mismatch"' "\"$PR\"")"
is "other fingerprint, same owner -> mismatch (in_progress) with the stored digests" \
	"$(ev claim $K , $FP2 ownerA 2000 $CLAIM_TTL $PR2)" "$(lines '"mismatch"' "\"$PR\"")"
is "in_progress hash unchanged by in_progress/mismatch answers" "$(snap $K)" "$before"
in_range "in_progress/mismatch answers do not touch the TTL" "$(rv PTTL $K)" 50000 55555
sentinels_intact "repeated claims touched only KEYS[1]" "$K"

# ---------------------------------------------------------------- record inline

echo "# record completed inline"
fresh
ev claim $K , $FP ownerA 1000 $CLAIM_TTL $PR >/dev/null
is "owner records completed inline -> ok" \
	"$(ev record $K , ownerA $FP $PR completed 201 $CT '' $DONE_TTL 1500 $((1500 + DONE_TTL)) inline "$BODY" '' '')" '"ok"'
is "completed hash fields: body inline, no body_file/len/sha, no retry_after" "$(fields $K)" \
	"body content_type created_ms expires_ms fingerprint owner param_digests state status updated_ms"
is "completed hash values (created_ms from claim, updated_ms from record)" \
	"$(r HMGET $K state fingerprint owner created_ms updated_ms status content_type)" \
	"$(lines '"completed"' "\"$FP\"" '"ownerA"' '"1000"' '"1500"' '"201"' "\"$CT\"")"
is "stored body is byte-exact (newline, quotes, UTF-8)" "$(r HGET $K body)" "$(q "$BODY")"
is "expires_ms = the record's now + its TTL; params kept from the claim" \
	"$(r HMGET $K expires_ms param_digests)" "$(lines "\"$((1500 + DONE_TTL))\"" "\"$PR\"")"
in_ttl "completed PTTL = $DONE_TTL" "$(rv PTTL $K)" $DONE_TTL
sentinels_intact "record touched only KEYS[1]" "$K"

echo "# claim after completion replays"
expect=$(lines '"recorded"' '"completed"' '"201"' "\"$CT\"" '(nil)' "$(q "$BODY")" '(nil)' '(nil)' '(nil)' "\"$((1500 + DONE_TTL))\"")
is "same fingerprint, same owner -> recorded with body and nils" \
	"$(ev claim $K , $FP ownerA 3000 $CLAIM_TTL $PR)" "$expect"
is "same fingerprint, other owner -> recorded (same reply)" \
	"$(ev claim $K , $FP ownerB 3000 $CLAIM_TTL $PR)" "$expect"
is "other fingerprint -> mismatch (completed) with the stored digests" \
	"$(ev claim $K , $FP2 ownerB 3000 $CLAIM_TTL $PR2)" "$(lines '"mismatch"' "\"$PR\"")"
is "other fingerprint, original owner -> mismatch (completed)" \
	"$(ev claim $K , $FP2 ownerA 3000 $CLAIM_TTL $PR2 | head -1)" '"mismatch"'
in_ttl "claims do not change the completed TTL" "$(rv PTTL $K)" $DONE_TTL

echo "# inline ignores ARGV[13], ARGV[14]; empty body is an empty string, not nil"
fresh
ev claim $K , $FP ownerA 1000 $CLAIM_TTL $PR >/dev/null
is "inline record with ARGV[13]/[14] set -> ok" \
	"$(ev record $K , ownerA $FP $PR completed 204 text/plain '' $DONE_TTL 1500 $((1500 + DONE_TTL)) inline '' 5 deadbeef)" '"ok"'
is "inline record stores no body_file/body_len/body_sha256" "$(fields $K)" \
	"body content_type created_ms expires_ms fingerprint owner param_digests state status updated_ms"
is "claim replays an empty body as \"\"" "$(ev claim $K , $FP ownerB 2000 $CLAIM_TTL $PR)" \
	"$(lines '"recorded"' '"completed"' '"204"' '"text/plain"' '(nil)' '""' '(nil)' '(nil)' '(nil)' "\"$((1500 + DONE_TTL))\"")"

# ---------------------------------------------------------------- record failed

echo "# record failed with Retry-After"
fresh
FBODY='{"type":"/problems/provider-error","title":"Provider error","status":502}'
ev claim $K , $FP ownerA 1000 $CLAIM_TTL $PR >/dev/null
is "owner records failed with retry_after -> ok" \
	"$(ev record $K , ownerA $FP $PR failed 502 $PT 300 $FAIL_TTL 1700 $((1700 + FAIL_TTL)) inline "$FBODY" '' '')" '"ok"'
is "failed hash fields include retry_after" "$(fields $K)" \
	"body content_type created_ms expires_ms fingerprint owner param_digests retry_after state status updated_ms"
is "failed hash values" "$(r HMGET $K state status content_type retry_after created_ms updated_ms)" \
	"$(lines '"failed"' '"502"' "\"$PT\"" '"300"' '"1000"' '"1700"')"
in_ttl "failed PTTL = $FAIL_TTL" "$(rv PTTL $K)" $FAIL_TTL
fexpect=$(lines '"recorded"' '"failed"' '"502"' "\"$PT\"" '"300"' "$(q "$FBODY")" '(nil)' '(nil)' '(nil)' "\"$((1700 + FAIL_TTL))\"")
is "claim after failure, same fingerprint -> recorded with retry_after" \
	"$(ev claim $K , $FP ownerB 2000 $CLAIM_TTL $PR)" "$fexpect"
is "claim after failure, other fingerprint -> mismatch (failed)" \
	"$(ev claim $K , $FP2 ownerB 2000 $CLAIM_TTL $PR)" "$(lines '"mismatch"' "\"$PR\"")"
sentinels_intact "failed record touched only KEYS[1]" "$K"

echo "# completed and failed TTLs differ as passed"
K2=charge:idem:demo:key-2
ev claim $K2 , $FP ownerC 1000 $CLAIM_TTL $PR >/dev/null
ev record $K2 , ownerC $FP $PR completed 201 $CT '' $DONE_TTL 1500 $((1500 + DONE_TTL)) inline '{}' '' '' >/dev/null
in_ttl "completed key PTTL ~ 86400000" "$(rv PTTL $K2)" $DONE_TTL
in_ttl "failed key PTTL ~ 300000" "$(rv PTTL $K)" $FAIL_TTL

echo "# retry_after absent when ARGV[6] is ''"
fresh
ev claim $K , $FP ownerA 1000 $CLAIM_TTL $PR >/dev/null
ev record $K , ownerA $FP $PR failed 402 $PT '' $FAIL_TTL 1500 $((1500 + FAIL_TTL)) inline '{"decline_code":"card_declined"}' '' '' >/dev/null
is "failed without Retry-After has no retry_after field" "$(rv HEXISTS $K retry_after)" 0
is "claim replays retry_after as nil" "$(ev claim $K , $FP ownerB 2000 $CLAIM_TTL $PR | sed -n 5p)" '(nil)'

# ---------------------------------------------------------------- record file

echo "# record in file mode"
fresh
SHA=9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
# file mode expires at expires_ms (PEXPIREAT): a real now, not 1500
FNOW=$(date +%s%3N)
ev claim $K , $FP ownerA 1000 $CLAIM_TTL $PR >/dev/null
is "owner records completed in file mode -> ok" \
	"$(ev record $K , ownerA $FP $PR completed 201 $CT '' $DONE_TTL $FNOW $((FNOW + DONE_TTL)) file 0f3c9a.body 20000 $SHA)" '"ok"'
is "file hash has body_file/body_len/body_sha256 and no body" "$(fields $K)" \
	"body_file body_len body_sha256 content_type created_ms expires_ms fingerprint owner param_digests state status updated_ms"
is "file hash values" "$(r HMGET $K body_file body_len body_sha256 body)" \
	"$(lines '"0f3c9a.body"' '"20000"' "\"$SHA\"" '(nil)')"
is "claim replays file reference with body nil" "$(ev claim $K , $FP ownerB 2000 $CLAIM_TTL $PR)" \
	"$(lines '"recorded"' '"completed"' '"201"' "\"$CT\"" '(nil)' '(nil)' '"0f3c9a.body"' '"20000"' "\"$SHA\"" "\"$((FNOW + DONE_TTL))\"")"
sentinels_intact "file-mode record touched only KEYS[1]" "$K"

echo "# a file-mode record that lands late expires ttl after its file was written"
fresh
NOW_MS=$(date +%s%3N)
LATE=$((NOW_MS - 10000)) # now (ARGV[9]) taken when the file was written, 10 s ago
ev claim $K , $FP ownerA $LATE $CLAIM_TTL $PR >/dev/null
r DEL $K >/dev/null # the claim lapsed and nobody took the key
is "late file-mode record on a vanished claim -> ok" \
	"$(ev record $K , ownerA $FP $PR completed 201 $CT '' $DONE_TTL $LATE $((LATE + DONE_TTL)) file 0f3c9a.body 20000 $SHA)" '"ok"'
# the spill collector removes the file once older than the TTL plus
# lock_ttl_s: the record must not outlive that (it did: PTTL = the whole TTL)
got=$(rv PTTL $K)
in_range "its PTTL is the TTL less the 10 s since the file was written" "$got" \
	$((LATE + DONE_TTL - $(date +%s%3N) - 2)) $((LATE + DONE_TTL - MARK_MS + 2))
is "expires_ms is the instant it expires" "$(r HGET $K expires_ms)" "\"$((LATE + DONE_TTL))\""
fresh
ev claim $K , $FP ownerA $LATE $CLAIM_TTL $PR >/dev/null
ev record $K , ownerA $FP $PR completed 201 $CT '' $DONE_TTL $LATE $((LATE + DONE_TTL)) file 0f3c9a.body 20000 $SHA >/dev/null
got=$(rv PTTL $K)
in_range "the same for the owner's own claim" "$got" $((LATE + DONE_TTL - $(date +%s%3N) - 2)) $((LATE + DONE_TTL - MARK_MS + 2))
fresh
ev claim $K , $FP ownerA $LATE $CLAIM_TTL $PR >/dev/null
ev record $K , ownerA $FP $PR completed 201 $CT '' $DONE_TTL $LATE $((LATE + DONE_TTL)) inline '{}' '' '' >/dev/null
in_range "an inline record (no file to outlive) keeps its whole TTL from landing" "$(rv PTTL $K)" \
	$((DONE_TTL - 1000)) $DONE_TTL

# ---------------------------------------------------------------- binary body

echo "# binary body with NUL (via redis-cli -x: stdin becomes the last argument)"
fresh
SHA_RECORD=$(rv SCRIPT LOAD "$(cat "$LUA/record.lua")")
ev claim $K , $FP ownerA 1000 $CLAIM_TTL $PR >/dev/null
got=$(printf 'a\0b\n\377\r\t"\\z\0' | timeout 5 "$REDIS_CLI" -s "$SOCK" --no-raw -x \
	EVALSHA "$SHA_RECORD" 1 $K ownerA $FP $PR completed 201 application/octet-stream '' $DONE_TTL 1500 $((1500 + DONE_TTL)) inline |
	sed -E 's/^ *[0-9]+\) //')
is "EVALSHA record with a NUL-containing body (ARGV[10] from stdin) -> ok" "$got" '"ok"'
is "stored binary body is byte-exact" "$(r HGET $K body)" "$(qf 'a\0b\n\377\r\t"\\z\0')"
is "stored binary body, raw bytes (od)" "$(rv HGET $K body | od -An -tx1 | tr -s ' \n' ' ')" \
	"$(printf 'a\0b\n\377\r\t"\\z\0\n' | od -An -tx1 | tr -s ' \n' ' ')"
is "claim replays the binary body byte-exact" "$(ev claim $K , $FP ownerB 2000 $CLAIM_TTL $PR | sed -n 6p)" \
	"$(qf 'a\0b\n\377\r\t"\\z\0')"

# ---------------------------------------------------------------- fencing

echo "# fencing after the claim expired (real 200 ms expiry)"
fresh
ev claim $K , $FP ownerA 1000 200 $PR >/dev/null
in_range "short claim PTTL <= 200" "$(rv PTTL $K)" 1 200
sleep 0.3
is "claim expired: key gone" "$(rv EXISTS $K)" 0
is "second owner claims the expired key -> claimed" "$(ev claim $K , $FP ownerB 2000 $CLAIM_TTL $PR)" '"claimed"'
before=$(snap $K)
is "first owner's record -> fenced, with the holder's created_ms" \
	"$(ev record $K , ownerA $FP $PR completed 201 $CT '' $DONE_TTL 2100 $((2100 + DONE_TTL)) inline A-body '' '')" "$(lines '"fenced"' '"2000"')"
is "fenced record changed nothing" "$(snap $K)" "$before"
in_ttl "fenced record left the claim TTL" "$(rv PTTL $K)" $CLAIM_TTL
is "first owner's file-mode record -> fenced too" \
	"$(ev record $K , ownerA $FP $PR failed 502 $PT 300 $FAIL_TTL 2100 $((2100 + FAIL_TTL)) file x.body 1 $SHA)" "$(lines '"fenced"' '"2000"')"
is "still unchanged" "$(snap $K)" "$before"
is "second owner's record -> ok" \
	"$(ev record $K , ownerB $FP $PR completed 201 $CT '' $DONE_TTL 2200 $((2200 + DONE_TTL)) inline B-body '' '')" '"ok"'
is "record is the second owner's" "$(r HMGET $K state owner body created_ms updated_ms)" \
	"$(lines '"completed"' '"ownerB"' '"B-body"' '"2000"' '"2200"')"
sentinels_intact "fencing touched only KEYS[1]" "$K"

echo "# fencing after DEL and a reclaim with another fingerprint"
fresh
ev claim $K , $FP ownerA 1000 $CLAIM_TTL $PR >/dev/null
r DEL $K >/dev/null
ev claim $K , $FP2 ownerB 2000 $CLAIM_TTL $PR >/dev/null
before=$(snap $K)
is "old owner's record on a key reclaimed by another request -> mismatch" \
	"$(ev record $K , ownerA $FP $PR completed 201 $CT '' $DONE_TTL 2100 $((2100 + DONE_TTL)) inline A '' '')" "$(lines '"mismatch"' "\"$PR\"")"
is "mismatch: hash unchanged" "$(snap $K)" "$before"
ev record $K , ownerB $FP2 $PR completed 201 $CT '' $DONE_TTL 2150 $((2150 + DONE_TTL)) inline B '' '' >/dev/null
before=$(snap $K)
is "old owner's late record after the other request recorded -> mismatch" \
	"$(ev record $K , ownerA $FP $PR completed 201 $CT '' $DONE_TTL 2200 $((2200 + DONE_TTL)) inline A '' '')" "$(lines '"mismatch"' "\"$PR\"")"
is "late mismatching record: hash unchanged" "$(snap $K)" "$before"

echo "# a lapsed claim retaken by the same request: the old owner is fenced"
fresh
ev claim $K , $FP ownerA 1000 $CLAIM_TTL $PR >/dev/null
r DEL $K >/dev/null
ev claim $K , $FP ownerB 2000 $CLAIM_TTL $PR >/dev/null
before=$(snap $K)
is "old owner's record on a key reclaimed by the same request -> fenced" \
	"$(ev record $K , ownerA $FP $PR completed 201 $CT '' $DONE_TTL 2100 $((2100 + DONE_TTL)) inline A '' '')" "$(lines '"fenced"' '"2000"')"
is "fenced: hash unchanged" "$(snap $K)" "$before"

echo "# a non-owner cannot record over a live claim"
fresh
ev claim $K , $FP ownerA 1000 $CLAIM_TTL $PR >/dev/null
before=$(snap $K)
is "record by another owner while in_progress -> fenced" \
	"$(ev record $K , ownerB $FP $PR completed 201 $CT '' $DONE_TTL 1100 $((1100 + DONE_TTL)) inline B '' '')" "$(lines '"fenced"' '"1000"')"
is "hash unchanged" "$(snap $K)" "$before"

# ---------------------------------------------------------------- vanished key

echo "# vanished key (claim expired, nobody reclaimed)"
fresh
ev claim $K , $FP ownerA 1000 200 $PR >/dev/null
sleep 0.3
is "key has expired" "$(rv EXISTS $K)" 0
is "old owner records on the vanished key -> ok" \
	"$(ev record $K , ownerA $FP $PR completed 201 $CT '' $DONE_TTL 5000 $((5000 + DONE_TTL)) inline late-body '' '')" '"ok"'
is "vanished-key record: created_ms = updated_ms = record's now" \
	"$(r HMGET $K state fingerprint owner created_ms updated_ms status content_type body)" \
	"$(lines '"completed"' "\"$FP\"" '"ownerA"' '"5000"' '"5000"' '"201"' "\"$CT\"" '"late-body"')"
is "vanished-key record field set" "$(fields $K)" \
	"body content_type created_ms expires_ms fingerprint owner param_digests state status updated_ms"
is "vanished-key record writes the digests and expires_ms too" \
	"$(r HMGET $K param_digests expires_ms)" "$(lines "\"$PR\"" "\"$((5000 + DONE_TTL))\"")"
in_ttl "vanished-key record PTTL = $DONE_TTL" "$(rv PTTL $K)" $DONE_TTL
sentinels_intact "vanished-key record touched only KEYS[1]" "$K"

# ---------------------------------------------------------------- first wins

echo "# first recording wins"
fresh
ev claim $K , $FP ownerA 1000 $CLAIM_TTL $PR >/dev/null
ev record $K , ownerA $FP $PR completed 201 $CT '' $DONE_TTL 1500 $((1500 + DONE_TTL)) inline "$BODY" '' '' >/dev/null
r PEXPIRE $K 77777000 >/dev/null
before=$(snap $K)
is "same owner records again (a re-sent record) -> ok" \
	"$(ev record $K , ownerA $FP $PR completed 201 $CT '' $DONE_TTL 1500 $((1500 + DONE_TTL)) inline "$BODY" '' '')" '"ok"'
is "re-sent record did not write" "$(snap $K)" "$before"
is "same owner, whatever it sends again -> ok, nothing written" \
	"$(ev record $K , ownerA $FP $PR failed 502 $PT 300 $FAIL_TTL 1600 $((1600 + FAIL_TTL)) inline second '' '')" '"ok"'
is "second recording did not overwrite" "$(snap $K)" "$before"
is "another owner records -> recorded with the first values" \
	"$(ev record $K , ownerB $FP $PR completed 200 text/plain '' $DONE_TTL 1700 $((1700 + DONE_TTL)) file y.body 3 $SHA)" "$expect"
is "still not overwritten" "$(snap $K)" "$before"
in_range "late recordings did not touch the TTL" "$(rv PTTL $K)" 77000000 77777000
sentinels_intact "late recordings touched only KEYS[1]" "$K"

echo "# first recording wins over a failed record too"
fresh
ev claim $K , $FP ownerA 1000 $CLAIM_TTL $PR >/dev/null
ev record $K , ownerA $FP $PR failed 502 $PT 300 $FAIL_TTL 1700 $((1700 + FAIL_TTL)) inline "$FBODY" '' '' >/dev/null
before=$(snap $K)
is "record after failed -> recorded (failed values)" \
	"$(ev record $K , ownerB $FP $PR completed 201 $CT '' $DONE_TTL 1800 $((1800 + DONE_TTL)) inline ok '' '')" \
	"$(lines '"recorded"' '"failed"' '"502"' "\"$PT\"" '"300"' "$(q "$FBODY")" '(nil)' '(nil)' '(nil)' "\"$((1700 + FAIL_TTL))\"")"
is "failed record not overwritten" "$(snap $K)" "$before"

# ---------------------------------------------------------------- release

echo "# release"
fresh
ev claim $K , $FP ownerA 1000 $CLAIM_TTL $PR >/dev/null
before=$(snap $K)
is "release by a non-owner -> 0" "$(ev release $K , ownerB)" "(integer) 0"
is "non-owner release changed nothing" "$(snap $K)" "$before"
in_ttl "non-owner release kept the TTL" "$(rv PTTL $K)" $CLAIM_TTL
is "release by the owner while in_progress -> 1" "$(ev release $K , ownerA)" "(integer) 1"
is "owner release deleted the key" "$(rv EXISTS $K)" 0
sentinels_intact "release touched only KEYS[1]" ""
is "release of a missing key -> 0" "$(ev release $K , ownerA)" "(integer) 0"
is "release of a missing key creates nothing" "$(rv EXISTS $K)" 0
is "claim after release -> claimed (by anyone, any fingerprint)" \
	"$(ev claim $K , $FP2 ownerB 2000 $CLAIM_TTL $PR)" '"claimed"'

fresh
ev claim $K , $FP ownerA 1000 $CLAIM_TTL $PR >/dev/null
ev record $K , ownerA $FP $PR completed 201 $CT '' $DONE_TTL 1500 $((1500 + DONE_TTL)) inline 'done' '' '' >/dev/null
before=$(snap $K)
is "release by the owner after completion -> 0" "$(ev release $K , ownerA)" "(integer) 0"
is "completed record stays after release" "$(snap $K)" "$before"
in_ttl "completed TTL kept after release" "$(rv PTTL $K)" $DONE_TTL

fresh
ev claim $K , $FP ownerA 1000 $CLAIM_TTL $PR >/dev/null
ev record $K , ownerA $FP $PR failed 504 $PT 300 $FAIL_TTL 1500 $((1500 + FAIL_TTL)) inline timeout '' '' >/dev/null
before=$(snap $K)
is "release by the owner after failure -> 0" "$(ev release $K , ownerA)" "(integer) 0"
is "failed record stays after release" "$(snap $K)" "$before"

# ---------------------------------------------------------------- lookup

echo "# lookup: read-only introspection"
fresh
is "lookup of a missing key -> all nil, PTTL -2" "$(ev lookup $K)" \
	"$(lines '(nil)' '(nil)' '(nil)' '(nil)' '(nil)' '(integer) -2')"
is "lookup of a missing key creates nothing" "$(rv EXISTS $K)" 0
ev claim $K , $FP ownerA 1000 $CLAIM_TTL $PR >/dev/null
r PEXPIRE $K 55555 >/dev/null
before=$(snap $K)
got=$(ev lookup $K)
is "lookup of a claim -> in_progress, created_ms, no updated/expires/status" "$(printf '%s\n' "$got" | head -5)" \
	"$(lines '"in_progress"' '"1000"' '(nil)' '(nil)' '(nil)')"
in_range "lookup returns the PTTL" "$(printf '%s\n' "$got" | sed -n 6p | cut -d' ' -f2)" 50000 55555
is "lookup changed nothing" "$(snap $K)" "$before"
in_range "lookup did not extend the TTL" "$(rv PTTL $K)" 50000 55555
ev record $K , ownerA $FP $PR failed 502 $PT 300 $FAIL_TTL 1700 $((1700 + FAIL_TTL)) inline "$FBODY" '' '' >/dev/null
is "lookup of a failed record -> state, created, updated, expires, status" \
	"$(ev lookup $K | head -5)" \
	"$(lines '"failed"' '"1000"' '"1700"' "\"$((1700 + FAIL_TTL))\"" '"502"')"
got=$(ev lookup $K 2>&1)
case $(ev lookup $K , extra 2>&1) in
*"bad arguments"*) ok "lookup with an argument -> error" ;;
*) notok "lookup with an argument -> error" ;;
esac
sentinels_intact "lookup touched only KEYS[1]" "$K"

echo "# record size: a completed inline record stays a listpack under 1 KiB"
fresh
r CONFIG SET hash-max-listpack-value 1024 >/dev/null
CBODY='{"id":"ch_0123456789abcdef01234567","object":"charge","status":"succeeded","amount":1999,"currency":"usd","source":"tok_visa","customer":null,"description":null,"metadata":{},"line_items":[],"created":1763740800,"idempotency_key":"order-1001-2026-11-23"}'
KK=charge:idem:demo:order-1001-2026-11-23
ev claim $KK , $FP 0123456789abcdef0123456789abcdef 1763740800123 $CLAIM_TTL $PR >/dev/null
ev record $KK , 0123456789abcdef0123456789abcdef $FP $PR completed 201 $CT '' $DONE_TTL 1763740800345 $((1763740800345 + DONE_TTL)) inline "$CBODY" >/dev/null
is "completed record is a listpack" "$(rv OBJECT ENCODING $KK)" listpack
in_range "MEMORY USAGE of a completed record < 1024 bytes" "$(rv MEMORY USAGE $KK)" 1 1023
diag "MEMORY USAGE $(rv MEMORY USAGE $KK) bytes, $(rv HLEN $KK) fields"

# ---------------------------------------------------------------- one key only

echo "# each script touches only KEYS[1]: run as an ACL user allowed that key only"
fresh
AK=charge:idem:acl:only
r ACL SETUSER lim on nopass resetkeys "~$AK" -@all +eval +evalsha +script\|load \
	+exists +hmget +hset +hget +pexpire +pexpireat +pttl +del +get >/dev/null
la() { r --user lim --pass x "$@" 2>/dev/null; }
got=$(la EVAL "return redis.call('GET', KEYS[1] .. 'x')" 1 $AK)
case $got in
*NOPERM* | *"can't access at least one of the keys"*) ok "control: a script touching another key fails with NOPERM for this user" ;;
*) notok "control: a script touching another key fails with NOPERM for this user"; diag "got: $got" ;;
esac
is "ACL user: claim" "$(la --eval "$LUA/claim.lua" $AK , $FP ownerA 1000 $CLAIM_TTL $PR)" '"claimed"'
is "ACL user: claim again (other owner)" "$(la --eval "$LUA/claim.lua" $AK , $FP ownerB 1000 $CLAIM_TTL $PR | head -1)" '"in_progress"'
is "ACL user: claim (other fingerprint)" "$(la --eval "$LUA/claim.lua" $AK , $FP2 ownerB 1000 $CLAIM_TTL $PR | head -1)" '"mismatch"'
is "ACL user: release by non-owner" "$(la --eval "$LUA/release.lua" $AK , ownerB)" "(integer) 0"
is "ACL user: record by non-owner" \
	"$(la --eval "$LUA/record.lua" $AK , ownerB $FP $PR completed 201 $CT '' $DONE_TTL 1500 $((1500 + DONE_TTL)) inline x '' '' | head -1)" '"fenced"'
is "ACL user: release by owner" "$(la --eval "$LUA/release.lua" $AK , ownerA)" "(integer) 1"
is "ACL user: record on a vanished key" \
	"$(la --eval "$LUA/record.lua" $AK , ownerA $FP $PR completed 201 $CT 5 $DONE_TTL 1500 $((1500 + DONE_TTL)) file f.body 3 $SHA)" '"ok"'
is "ACL user: record again by the same owner (idempotent)" \
	"$(la --eval "$LUA/record.lua" $AK , ownerA $FP $PR completed 201 $CT '' $DONE_TTL 1500 $((1500 + DONE_TTL)) inline x '' '' | head -1)" '"ok"'
is "ACL user: record again by another owner (first wins)" \
	"$(la --eval "$LUA/record.lua" $AK , ownerB $FP $PR completed 201 $CT '' $DONE_TTL 1500 $((1500 + DONE_TTL)) inline x '' '' | head -1)" '"recorded"'
is "ACL user: claim of a recorded key" \
	"$(la --eval "$LUA/claim.lua" $AK , $FP ownerB 1000 $CLAIM_TTL $PR | head -1)" '"recorded"'
is "ACL user: release of a recorded key" "$(la --eval "$LUA/release.lua" $AK , ownerA)" "(integer) 0"
is "ACL user: lookup" "$(la --eval "$LUA/lookup.lua" $AK | head -1)" '"completed"'
sentinels_intact "after all ACL runs the keyspace is the sentinels plus KEYS[1]" "$AK"
r ACL DELUSER lim >/dev/null

# ---------------------------------------------------------------- EVALSHA

echo "# EVALSHA and NOSCRIPT"
fresh
r SCRIPT FLUSH >/dev/null
declare -A SHAS
for s in claim record release lookup resume pending webhook; do
	sha=$(timeout 5 "$REDIS_CLI" -s "$SOCK" --raw -x SCRIPT LOAD <"$LUA/$s.lua")
	is "SCRIPT LOAD $s.lua returns the SHA-1 of the file's bytes" "$sha" \
		"$(sha1sum <"$LUA/$s.lua" | cut -d' ' -f1)"
	SHAS[$s]=$sha
done
is "EVALSHA claim -> claimed" "$(r EVALSHA "${SHAS[claim]}" 1 $K $FP ownerA 1000 $CLAIM_TTL $PR)" '"claimed"'
is "EVALSHA record -> ok" \
	"$(r EVALSHA "${SHAS[record]}" 1 $K ownerA $FP $PR completed 201 $CT '' $DONE_TTL 1500 $((1500 + DONE_TTL)) inline "$BODY" '' '')" '"ok"'
is "EVALSHA claim -> recorded, byte-exact body" "$(r EVALSHA "${SHAS[claim]}" 1 $K $FP ownerB 2000 $CLAIM_TTL $PR)" "$expect"
is "EVALSHA release -> 0" "$(r EVALSHA "${SHAS[release]}" 1 $K ownerA)" "(integer) 0"
r SCRIPT FLUSH >/dev/null
got=$(r EVALSHA "${SHAS[claim]}" 1 $K $FP ownerB 2000 $CLAIM_TTL $PR 2>&1)
case $got in
"(error) NOSCRIPT"*) ok "EVALSHA after SCRIPT FLUSH -> NOSCRIPT error" ;;
*) notok "EVALSHA after SCRIPT FLUSH -> NOSCRIPT error"; diag "got: $got" ;;
esac
is "SCRIPT EXISTS after flush -> 0" "$(rv SCRIPT EXISTS "${SHAS[record]}")" 0
sha=$(timeout 5 "$REDIS_CLI" -s "$SOCK" --raw -x SCRIPT LOAD <"$LUA/claim.lua")
is "reloading gives the same SHA" "$sha" "${SHAS[claim]}"
is "EVALSHA works again after reload" "$(r EVALSHA "${SHAS[claim]}" 1 $K $FP ownerB 2000 $CLAIM_TTL $PR | head -1)" '"recorded"'

# ---------------------------------------------------------------- crash safety

echo "# DEBUG RELOAD keeps records and their TTLs"
fresh
ev claim $K , $FP ownerA 1000 $CLAIM_TTL $PR >/dev/null
ev record $K , ownerA $FP $PR completed 201 $CT '' $DONE_TTL 1500 $((1500 + DONE_TTL)) inline "$BODY" '' '' >/dev/null
ev claim $K2 , $FP ownerB 1000 $CLAIM_TTL $PR >/dev/null
b1=$(snap $K)
b2=$(snap $K2)
is "DEBUG RELOAD -> OK" "$(r DEBUG RELOAD)" 'OK'
is "completed record survives DEBUG RELOAD" "$(snap $K)" "$b1"
in_ttl "completed TTL survives DEBUG RELOAD" "$(rv PTTL $K)" $DONE_TTL
is "in_progress claim survives DEBUG RELOAD" "$(snap $K2)" "$b2"
in_ttl "claim TTL survives DEBUG RELOAD" "$(rv PTTL $K2)" $CLAIM_TTL
is "replay after DEBUG RELOAD" "$(ev claim $K , $FP ownerC 3000 $CLAIM_TTL $PR)" "$expect"

echo "# kill -9 and restart with AOF (appendfsync always) keeps records and TTLs"
stop_redis -TERM
rm -f "$DIR"/*.rdb
start_redis --appendonly yes --appendfsync always
mark
ev claim $K , $FP ownerA 1000 $CLAIM_TTL $PR >/dev/null
ev record $K , ownerA $FP $PR failed 502 $PT 300 $FAIL_TTL 1700 $((1700 + FAIL_TTL)) inline "$FBODY" '' '' >/dev/null
b1=$(snap $K)
stop_redis -KILL
start_redis --appendonly yes --appendfsync always
is "failed record survives kill -9 + AOF restart" "$(snap $K)" "$b1"
in_ttl "failed TTL survives kill -9 + AOF restart" "$(rv PTTL $K)" $FAIL_TTL
is "replay after restart (script cache was empty: --eval uses EVAL)" \
	"$(ev claim $K , $FP ownerB 2000 $CLAIM_TTL $PR)" "$fexpect"

# ---------------------------------------------------------------- hardening

# ---------------------------------------------------------------- unknown

echo "# an outcome recorded unknown, taken over by a retry, settled once"
fresh
UNK='{"type":"/problems/outcome-unknown"}'
REQ='{"amount":1999,"currency":"usd","source":"tok_visa"}'
ev claim $K , $FP ownerA 1000 $CLAIM_TTL $PR >/dev/null
is "owner records unknown (inline, with the request) -> ok" \
	"$(ev record $K , ownerA $FP $PR unknown 504 $PT 1 $DONE_TTL 1500 $((1500 + DONE_TTL)) inline "$UNK" "$REQ")" '"ok"'
is "unknown hash keeps the request, the answer and Retry-After" \
	"$(r HMGET $K state status retry_after request body)" "$(lines '"unknown"' '"504"' '"1"' "$(printf '%s' "$REQ" | repr)" "$(printf '%s' "$UNK" | repr)")"
in_ttl "unknown PTTL is the TTL given" "$(rv PTTL $K)" $DONE_TTL
is "unknown without the request is refused" \
	"$(ev record $K , ownerA $FP $PR unknown 504 $PT 1 $DONE_TTL 1500 $((1500 + DONE_TTL)) inline "$UNK" 2>&1 | grep -c 'ERR record: bad arguments')" "1"
is "a retry (other owner, same fingerprint) takes it over -> resumed, created_ms, quiet_ms (the unknown's updated_ms)" \
	"$(ev claim $K , $FP ownerB 2000 $CLAIM_TTL $PR)" "$(lines '"resumed"' '"1000"' '"1500"')"
is "the take-over sets owner and lease, keeps state and TTL" \
	"$(r HMGET $K state owner lease_ms)" "$(lines '"unknown"' '"ownerB"' "\"$((2000 + CLAIM_TTL))\"")"
in_ttl "the take-over keeps the record's TTL" "$(rv PTTL $K)" $DONE_TTL
is "the same owner again -> resumed (its own lease is no earlier attempt)" \
	"$(ev claim $K , $FP ownerB 2500 $CLAIM_TTL $PR)" "$(lines '"resumed"' '"1000"' '"1500"')"
is "a third attempt within the lease -> in_progress (since the take-over)" \
	"$(ev claim $K , $FP ownerC 3000 $CLAIM_TTL $PR)" "$(lines '"in_progress"' '"2000"')"
is "another fingerprint -> mismatch" "$(ev claim $K , $FP2 ownerC 3000 $CLAIM_TTL $PR2)" "$(lines '"mismatch"' "\"$PR\"")"
is "the old owner cannot record over the take-over -> fenced" \
	"$(ev record $K , ownerA $FP $PR completed 201 $CT '' $DONE_TTL 3500 $((3500 + DONE_TTL)) inline "$BODY" | head -1)" '"fenced"'
is "the completer cannot take it while leased -> leased" \
	"$(ev resume $K , ownerD 3000 $CLAIM_TTL)" "$(lines '"leased"' "\"$((2000 + CLAIM_TTL))\"")"
is "the lease holder settles it -> ok" \
	"$(ev record $K , ownerB $FP $PR completed 201 $CT '' $DONE_TTL 4000 $((4000 + DONE_TTL)) inline "$BODY")" '"ok"'
is "settled: no request, lease or Retry-After left" "$(fields $K)" \
	"body content_type created_ms expires_ms fingerprint owner param_digests state status updated_ms"
is "a settled record never changes: unknown again by its owner is not written" \
	"$(ev record $K , ownerB $FP $PR unknown 504 $PT 1 $DONE_TTL 5000 $((5000 + DONE_TTL)) inline "$UNK" "$REQ"; r HGET $K state)" "$(lines '"ok"' '"completed"')"
is "a settled record replays to a retry" "$(ev claim $K , $FP ownerE 6000 $CLAIM_TTL $PR | head -2)" "$(lines '"recorded"' '"completed"')"
is "resume of a settled record -> settled" "$(ev resume $K , ownerF 6000 $CLAIM_TTL)" "$(lines '"settled"' '"completed"')"

echo "# the completer's take-over (resume.lua)"
fresh
ev claim $K , $FP ownerA 1000 $CLAIM_TTL $PR >/dev/null
ev record $K , ownerA $FP $PR unknown 504 $PT 1 $DONE_TTL 1500 $((1500 + DONE_TTL)) inline "$UNK" "$REQ" >/dev/null
is "resume of an unknown record -> resumed with fingerprint, digests, request, created_ms, quiet_ms" \
	"$(ev resume $K , ownerD 2000 $CLAIM_TTL)" "$(lines '"resumed"' "\"$FP\"" "\"$PR\"" "$(printf '%s' "$REQ" | repr)" '"1000"' '"1500"')"
is "a retry within the completer's lease -> in_progress" \
	"$(ev claim $K , $FP ownerB 2500 $CLAIM_TTL $PR | head -1)" '"in_progress"'
is "after the lease a retry takes it over; quiet_ms is the lapsed lease's end" \
	"$(ev claim $K , $FP ownerB $((2000 + CLAIM_TTL + 1)) $CLAIM_TTL $PR)" "$(lines '"resumed"' '"1000"' "\"$((2000 + CLAIM_TTL))\"")"
is "the completer cannot take it while the retry holds it -> leased" \
	"$(ev resume $K , ownerD $((2000 + CLAIM_TTL + 2)) $CLAIM_TTL | head -1)" '"leased"'
is "after the retry's lease lapsed the completer takes it; quiet_ms is that lease's end" \
	"$(ev resume $K , ownerD $((2000 + 2 * CLAIM_TTL + 2)) $CLAIM_TTL | sed -n '1p;6p')" "$(lines '"resumed"' "\"$((2000 + 2 * CLAIM_TTL + 1))\"")"
is "resume of an absent record -> settled, nil" "$(ev resume charge:idem:demo:none , ownerD 2000 $CLAIM_TTL)" "$(lines '"settled"' '(nil)')"
sentinels_intact "unknown, resume touched only KEYS[1]" "$K"

echo "# the index of unknown outcomes (pending.lua)"
fresh
IDX=charge:unknown
is "add -> 1" "$(ev pending $IDX , add charge:idem:demo:a 5000)" "(integer) 1"
ev pending $IDX , add charge:idem:demo:b 9000 >/dev/null
ev pending $IDX , add charge:idem:demo:c 7000 >/dev/null
is "due at 8000: the size, then the names due, oldest first" \
	"$(ev pending $IDX , due 8000 16)" "$(lines '(integer) 3' '"charge:idem:demo:a"' '"charge:idem:demo:c"')"
is "due with a limit" "$(ev pending $IDX , due 8000 1)" "$(lines '(integer) 3' '"charge:idem:demo:a"')"
ev pending $IDX , add charge:idem:demo:a 10000 >/dev/null
is "add again moves it later" "$(ev pending $IDX , due 8000 16)" "$(lines '(integer) 3' '"charge:idem:demo:c"')"
ev pending $IDX , remove charge:idem:demo:c >/dev/null
is "remove forgets it" "$(ev pending $IDX , due 20000 16)" "$(lines '(integer) 2' '"charge:idem:demo:b"' '"charge:idem:demo:a"')"
is "bad arguments are refused" "$(ev pending $IDX , due x 16 2>&1 | grep -c 'ERR pending: bad arguments')" "1"
SINCE="{$IDX}:since"
is "beside the index, when each name was first named: a and b left" "$(rv ZRANGE "$SINCE" 0 -1 | LC_ALL=C sort | tr '\n' ' ')" \
	"charge:idem:demo:a charge:idem:demo:b "
a_first=$(rv ZSCORE "$SINCE" charge:idem:demo:a)
now_ms=$(( $(date +%s%N) / 1000000 ))
in_range "first named at Redis's clock (ms)" "$a_first" $((now_ms - 60000)) $((now_ms + 1000))
sleep 0.01
ev pending $IDX , add charge:idem:demo:a 30000 >/dev/null
is "named again: its first time is kept" "$(rv ZSCORE "$SINCE" charge:idem:demo:a)" "$a_first"
is "oldest: the index's size and the earliest first time" "$(ev pending $IDX , oldest)" \
	"$(lines '(integer) 2' "\"$a_first\"")"
ev pending $IDX , remove charge:idem:demo:a >/dev/null
ev pending $IDX , remove charge:idem:demo:b >/dev/null
is "oldest of an empty index: size 0, nil" "$(ev pending $IDX , oldest)" "$(lines '(integer) 0' '(nil)')"
ev pending '{t}charge:unknown' , add charge:idem:demo:t 5000 >/dev/null
is "an index name with a hash tag keeps it: <index>:since, the same cluster slot" \
	"$(rv ZRANGE '{t}charge:unknown:since' 0 -1)" "charge:idem:demo:t"
is "an index name with a '}' and no hash tag has no second set" \
	"$(ev pending 'a}b:unknown' , add charge:idem:demo:u 5000 >/dev/null; ev pending 'a}b:unknown' , oldest)" \
	"$(lines '(integer) 1' '(nil)')"
r DEL '{t}charge:unknown' '{t}charge:unknown:since' 'a}b:unknown' >/dev/null
sentinels_intact "pending touched only KEYS[1] and its second set (both gone once empty)" ""

echo "# the webhook route's keys (webhook.lua)"
fresh
EK=charge:event:evt_1
is "begin: a new event is claimed" "$(ev webhook $EK , begin 5000)" '"new"'
in_range "its claim lapses after the lease" "$(rv PTTL $EK)" 1 5000
is "begin again while claimed: seen, processing" "$(ev webhook $EK , begin 5000)" "$(lines '"seen"' '"processing"')"
is "forget: the claim goes" "$(ev webhook $EK , forget; rv EXISTS $EK)" "$(lines '(integer) 1' 0)"
ev webhook $EK , begin 5000 >/dev/null
is "done: kept with its result" "$(ev webhook $EK , done settled 345600000; rv GET $EK)" "$(lines '(integer) 1' settled)"
in_range "for the TTL given (4 days)" "$(rv PTTL $EK)" 345000000 345600000
is "begin after done: seen, with the result" "$(ev webhook $EK , begin 5000)" "$(lines '"seen"' '"settled"')"
is "forget after done changes nothing" "$(ev webhook $EK , forget >/dev/null; rv GET $EK)" "settled"
is "done with the value 'processing' is refused" "$(ev webhook $EK , done processing 1000 2>&1 | grep -c 'ERR webhook: bad arguments')" "1"
is "begin with a bad lease is refused" "$(ev webhook charge:event:x , begin 0 2>&1 | grep -c 'ERR webhook: bad arguments')" "1"
ev claim $K , $FP ownerA 1000 $CLAIM_TTL $PR >/dev/null
before=$(snap $K)
is "peek of a claim: its state and fingerprint, nothing else" \
	"$(ev webhook $K , peek | sed -n '1p;10p;11p')" "$(lines '"in_progress"' "\"$FP\"" '(nil)')"
ev record $K , ownerA $FP $PR unknown 504 $PT 1 $DONE_TTL 1500 $((1500 + DONE_TTL)) inline "$UNK" "$REQ" >/dev/null
is "peek of an unknown record: its kept request too" \
	"$(ev webhook $K , peek | sed -n '1p;11p')" "$(lines '"unknown"' "$(printf '%s' "$REQ" | repr)")"
before=$(snap $K)
ev webhook $K , peek >/dev/null
is "peek writes nothing" "$(snap $K)" "$before"
is "peek of no record: state nil" "$(ev webhook charge:idem:demo:none , peek | head -1)" "(nil)"
sentinels_intact "webhook touched only KEYS[1]" "$EK $K"

if [ "${LUA_HARDENING:-1}" = 1 ]; then
	echo "# hardening (beyond the header contract): bad arguments must not leave partial writes"
	fresh
	got=$(ev claim $K , $FP ownerA 1000 30.5 $PR 2>&1)
	is "claim with a non-integer TTL leaves no key (else: in_progress forever)" \
		"$(rv EXISTS $K) $(rv PTTL $K)" "0 -2"
	diag "claim reply: $got"
	fresh
	ev claim $K , $FP ownerA 1000 $CLAIM_TTL $PR >/dev/null
	before=$(snap $K)
	got=$(ev record $K , ownerA $FP $PR completed 201 $CT '' 8.6e7 1500 1501 inline b '' '' 2>&1)
	is "record with a non-integer TTL leaves the claim unchanged" "$(snap $K)" "$before"
	diag "record reply: $got; PTTL now $(rv PTTL $K)"
	fresh
	ev claim $K , $FP ownerA 1000 $CLAIM_TTL $PR >/dev/null
	before=$(snap $K)
	got=$(ev record $K , ownerA $FP $PR completed 201 $CT '' $DONE_TTL 1500 $((1500 + DONE_TTL)) inline 2>&1)
	is "record with the body (ARGV[12]) missing leaves the claim unchanged" "$(snap $K)" "$before"
	got=$(ev record $K , ownerA $FP $PR completed 201 $CT '' $DONE_TTL 1500 $((1501 + DONE_TTL)) inline b 2>&1)
	is "record whose expires_ms is not now + TTL leaves the claim unchanged" "$(snap $K)" "$before"
	got=$(ev record $K , ownerA $FP '' completed 201 $CT '' $DONE_TTL 1500 $((1500 + DONE_TTL)) inline b 2>&1)
	is "record without digests leaves the claim unchanged" "$(snap $K)" "$before"
	diag "record reply: $got; PTTL now $(rv PTTL $K)"
	# numbers past the bounds: PEXPIRE would fail after HSET, leaving a key
	# without expiry (Redis does not roll back a script)
	for big in 99999999999999999999 31536000001 1e20; do
		fresh
		got=$(ev claim $K , $FP ownerA 1000 $big $PR 2>&1)
		is "claim with TTL $big is refused and leaves no key" \
			"$(rv EXISTS $K) $(rv PTTL $K)" "0 -2"
		diag "claim reply: $got"
		fresh
		ev claim $K , $FP ownerA 1000 $CLAIM_TTL $PR >/dev/null
		before=$(snap $K)
		got=$(ev record $K , ownerA $FP $PR completed 201 $CT '' $big 1500 1501 inline b '' '' 2>&1)
		is "record with TTL $big leaves the claim unchanged, TTL kept" \
			"$(snap $K) $(rv PTTL $K | cut -c1)" "$before $(rv PTTL $K | cut -c1)"
		in_range "record with TTL $big: claim TTL still set" "$(rv PTTL $K)" 1 $CLAIM_TTL
	done
	fresh
	got=$(ev claim $K , $FP ownerA 1000 $CLAIM_TTL '' 2>&1)
	is "claim without digests is refused and leaves no key" "$(rv EXISTS $K)" "0"
	for bad in 0 -5 0x10 1e3 ' 12' 012 1.5 100000000000000; do
		fresh
		got=$(ev claim $K , $FP ownerA "$bad" $CLAIM_TTL $PR 2>&1)
		is "claim with now '$bad' is refused and leaves no key" "$(rv EXISTS $K)" "0"
	done
	fresh
	got=$(ev claim $K , $FP ownerA 999999999999999999999 $CLAIM_TTL $PR 2>&1)
	is "claim with an absurd clock is refused and leaves no key" "$(rv EXISTS $K)" "0"
	fresh
	ev claim $K , $FP ownerA 1000 $CLAIM_TTL $PR >/dev/null
	before=$(snap $K)
	got=$(ev record $K , ownerA $FP $PR completed 201 $CT 99999999999999999 $DONE_TTL 1500 $((1500 + DONE_TTL)) inline b '' '' 2>&1)
	is "record with an absurd Retry-After leaves the claim unchanged" "$(snap $K)" "$before"
	got=$(ev record $K , ownerA $FP $PR completed 201 $CT '' $DONE_TTL 1500 $((1500 + DONE_TTL)) file f.body 99999999999999999 $SHA 2>&1)
	is "record with an absurd body_len leaves the claim unchanged" "$(snap $K)" "$before"
else
	echo "# hardening tests not run (set LUA_HARDENING=1)"
fi

T1=$(date +%s%N)
echo "# elapsed $(((T1 - T0) / 1000000)) ms, $FAILED failed"
echo "1..$N"
[ "$FAILED" -eq 0 ]
