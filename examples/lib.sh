# lib.sh - shared functions of the example stories (source it from bash).
#
# env: BASE_URL  the service (default http://127.0.0.1:8080, ./run.sh's default)
#      API_KEY   the API key (default sk_test_demo)
#      LEDGER    optional: path of the provider ledger; when set, the stories
#                count the provider calls made for their keys
#      VERBOSE   1 prints whole bodies (default: long bodies are abbreviated)

BASE_URL=${BASE_URL:-http://127.0.0.1:8080}
BASE_URL=${BASE_URL%/}
API_KEY=${API_KEY:-sk_test_demo}
VERBOSE=${VERBOSE:-0}

# Bodies longer than this many lines are abbreviated when printed.
SHOW_LINES=40
# Request bodies longer than this many bytes are abbreviated when printed.
SHOW_SENT_BYTES=300

WORK=$(mktemp -d "${TMPDIR:-/tmp}/charge-example.XXXXXX") || exit 1
trap 'rm -rf "$WORK"' EXIT

if [ -t 1 ]; then
	B=$'\e[1m' DIM=$'\e[2m' RED=$'\e[31m' GRN=$'\e[32m' R=$'\e[0m'
else
	B='' DIM='' RED='' GRN='' R=''
fi

# Filled by send / the last response: status, seconds it took, files of
# headers and body.
STATUS=''
RESP_TIME=''
RESP_HEADERS=''
RESP_BODY=''
SEQ=0

say() { printf '%s\n' "$*"; }
title() { printf '\n%s== %s ==%s\n' "$B" "$*" "$R"; }
note() { printf '%s%s%s\n' "$DIM" "$*" "$R"; }

# fail MESSAGE: the story did not happen as it should; exit 1.
fail() {
	printf '\n%sFAILED: %s%s\n' "$RED" "$*" "$R"
	exit 1
}

# pass MESSAGE: the story's conclusion.
pass() {
	printf '\n%sOK: %s%s\n' "$GRN" "$*" "$R"
}

# new_key: prints a fresh random Idempotency-Key (a UUID v4).
new_key() {
	cat /proc/sys/kernel/random/uuid
}

# mask KEY: the first 8 characters of a secret, for printing.
mask() {
	local k=$1
	if [ "${#k}" -le 8 ]; then printf '%s' "$k"; else printf '%s...' "${k:0:8}"; fi
}

# pretty FILE: prints a JSON body indented (abbreviated past SHOW_LINES lines
# unless VERBOSE=1); a body that is not JSON is printed as it is.
pretty() {
	python3 - "$1" "$SHOW_LINES" "$VERBOSE" "$DIM" "$R" <<'EOF'
import json, sys
path, show, verbose = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
dim, reset = sys.argv[4], sys.argv[5]
raw = open(path, "rb").read()
if not raw:
    print(dim + "(empty body)" + reset)
    sys.exit(0)
try:
    text = json.dumps(json.loads(raw), indent=2, ensure_ascii=False)
except ValueError:
    text = raw.decode("utf-8", "replace").rstrip("\n")
lines = text.split("\n")
if verbose or len(lines) <= show:
    print(text)
else:
    print("\n".join(lines[:20]))
    print(dim + "    ... %d more lines ..." % (len(lines) - 25) + reset)
    print("\n".join(lines[-5:]))
    print(dim + "(body: %d bytes, %d lines pretty-printed; VERBOSE=1 prints it all)"
          % (len(raw), len(lines)) + reset)
EOF
}

# reason CODE: the reason phrase of an HTTP status.
reason() {
	case $1 in
	200) echo OK ;; 201) echo Created ;; 400) echo Bad Request ;;
	401) echo Unauthorized ;; 402) echo Payment Required ;;
	404) echo Not Found ;; 405) echo Method Not Allowed ;;
	409) echo Conflict ;; 413) echo Content Too Large ;;
	415) echo Unsupported Media Type ;; 422) echo Unprocessable Content ;;
	500) echo Internal Server Error ;; 502) echo Bad Gateway ;;
	503) echo Service Unavailable ;; 504) echo Gateway Timeout ;;
	*) echo ;;
	esac
}

# header NAME: the value of a header of the last response ('' if absent).
header() {
	awk -v n="$1" 'BEGIN { n = tolower(n) }
		{ sub(/\r$/, "") }
		/^HTTP\// { v = ""; found = 0; next }
		{ i = index($0, ":"); if (i == 0) next
		  if (tolower(substr($0, 1, i - 1)) == n) { v = substr($0, i + 1)
		    sub(/^[ \t]+/, "", v); found = 1 } }
		END { if (found) print v }' "$RESP_HEADERS"
}

# json_field FILE PATH: a member of a JSON body, e.g. json_field f decline_code.
json_field() {
	python3 - "$1" "$2" <<'EOF'
import json, sys
try:
    v = json.load(open(sys.argv[1], 'rb'))
    for p in sys.argv[2].split('.'):
        v = v[int(p)] if isinstance(v, list) else v[p]
except Exception:
    sys.exit(0)
print(v if not isinstance(v, (dict, list)) else json.dumps(v))
EOF
}

# sha FILE: the hex SHA-256 of a file.
sha() {
	sha256sum "$1" | cut -d' ' -f1
}

# show_request KEY BODY-FILE [extra header lines...]: prints what is sent.
show_request() {
	local key=$1 bodyf=$2 bytes
	shift 2
	bytes=$(wc -c < "$bodyf")
	say "${B}> POST $BASE_URL/charge${R}"
	say "> Authorization: Bearer $(mask "$API_KEY")"
	say "> Idempotency-Key: $key"
	say "> Content-Type: application/json"
	local h
	for h in "$@"; do say "> $h"; done
	if [ "$bytes" -le "$SHOW_SENT_BYTES" ] || [ "$VERBOSE" = 1 ]; then
		say "> $(cat "$bodyf")"
	else
		say "> $(head -c "$SHOW_SENT_BYTES" "$bodyf")..."
		note "  (request body: $bytes bytes)"
	fi
}

# show_response [NAME]: prints the last (or the named) response.
show_response() {
	local h v
	say "${B}< $STATUS $(reason "$STATUS")${R}"
	for h in Content-Type Idempotent-Replayed Retry-After \
	    Idempotency-Key-Expires X-Request-Id WWW-Authenticate Allow \
	    Content-Length; do
		v=$(header "$h")
		[ -n "$v" ] && say "< $h: $v"
	done
	pretty "$RESP_BODY"
}

# load_response NAME: makes a response saved by send_quiet the "last" one.
load_response() {
	RESP_HEADERS="$WORK/$1.headers"
	RESP_BODY="$WORK/$1.body"
	STATUS=$(sed -n 1p "$WORK/$1.status")
	# shellcheck disable=SC2034 # read by the stories
	RESP_TIME=$(sed -n 2p "$WORK/$1.status")
}

# send_quiet NAME KEY BODY-FILE [curl args...]: POST /charge, saving the
# response under NAME in $WORK; prints nothing. Returns curl's exit status
# (28 when --max-time ran out). STATUS is 000 when no response came.
send_quiet() {
	local name=$1 key=$2 bodyf=$3 rc=0
	shift 3
	curl -sS -o "$WORK/$name.body" -D "$WORK/$name.headers" \
	    -w '%{http_code}\n%{time_total}\n' -X POST \
	    -H "Authorization: Bearer $API_KEY" \
	    -H "Idempotency-Key: $key" \
	    -H 'Content-Type: application/json' \
	    --data-binary "@$bodyf" "$@" "$BASE_URL/charge" \
	    > "$WORK/$name.status" 2> "$WORK/$name.err" || rc=$?
	[ -s "$WORK/$name.status" ] || echo 000 > "$WORK/$name.status"
	touch "$WORK/$name.body" "$WORK/$name.headers"
	load_response "$name"
	return "$rc"
}

# send LABEL KEY BODY-FILE [curl args...]: prints the request, sends it,
# prints the response. Sets STATUS, RESP_HEADERS, RESP_BODY; returns curl's
# exit status. Extra "-H 'Name: value'" arguments are shown as sent headers.
send() {
	local label=$1 key=$2 bodyf=$3 rc=0 extra=() a prev=''
	shift 3
	for a in "$@"; do
		[ "$prev" = -H ] && extra+=("$a")
		prev=$a
	done
	SEQ=$((SEQ + 1))
	title "$SEQ. $label"
	show_request "$key" "$bodyf" "${extra[@]}"
	say
	send_quiet "r$SEQ" "$key" "$bodyf" "$@" || rc=$?
	if [ "$rc" -ne 0 ]; then
		say "${B}< (no response: curl exit $rc: $(head -c 200 "$WORK/r$SEQ.err"))${R}"
		return "$rc"
	fi
	show_response
	return 0
}

# urlencode STRING: STRING percent-encoded for a path segment.
urlencode() {
	python3 -c 'import sys, urllib.parse; print(urllib.parse.quote(sys.argv[1], safe=""))' "$1"
}

# lookup LABEL KEY [API-KEY]: GET /charge/keys/<KEY> (the key
# percent-encoded), printing the request and the response like send.
lookup() {
	local label=$1 key=$2 api=${3:-$API_KEY} path
	path="/charge/keys/$(urlencode "$key")"
	SEQ=$((SEQ + 1))
	title "$SEQ. $label"
	say "${B}> GET $BASE_URL$path${R}"
	say "> Authorization: Bearer $(mask "$api")"
	say
	curl -sS -o "$WORK/r$SEQ.body" -D "$WORK/r$SEQ.headers" \
	    -w '%{http_code}\n%{time_total}\n' \
	    -H "Authorization: Bearer $api" "$BASE_URL$path" \
	    > "$WORK/r$SEQ.status" 2> "$WORK/r$SEQ.err" ||
	    fail "GET $path: $(head -c 200 "$WORK/r$SEQ.err")"
	load_response "r$SEQ"
	show_response
}

# expect_status CODE: the last response's status must be CODE.
expect_status() {
	[ "$STATUS" = "$1" ] || fail "expected status $1, got $STATUS"
}

# expect_header NAME VALUE: the last response's header NAME must be VALUE.
expect_header() {
	local v
	v=$(header "$1")
	[ "$v" = "$2" ] || fail "expected header $1: $2, got '${v:-<absent>}'"
}

# write_body FILE AMOUNT SOURCE [CURRENCY]: writes a small charge request.
write_body() {
	printf '{"amount":%s,"currency":"%s","source":"%s","description":"example %s"}' \
	    "$2" "${4:-usd}" "$3" "$(basename "$0" .sh)" > "$1"
}

# ledger_count KEY: how many provider calls the ledger lists for KEY
# (prints nothing when LEDGER is not set).
ledger_count() {
	[ -n "${LEDGER:-}" ] || return 0
	[ -r "$LEDGER" ] || { echo "unreadable"; return 0; }
	awk -F '\t' -v k="$1" '$3 == k { n++ } END { print n + 0 }' "$LEDGER"
}

# check_one_charge KEY: with LEDGER set, exactly one provider call for KEY.
check_one_charge() {
	local c
	c=$(ledger_count "$1")
	if [ -z "$c" ]; then
		note "(set LEDGER=/path/to/provider-ledger.log to count provider calls)"
		return 0
	fi
	say "Provider ledger: $c call(s) for key $1"
	[ "$c" = 1 ] || fail "expected exactly 1 provider call for $1 in $LEDGER, found $c"
}

# require_service: stops early, with a clear message, when nothing answers.
require_service() {
	if ! curl -sS -o /dev/null --max-time 5 "$BASE_URL/healthz" 2>"$WORK/health.err"; then
		fail "no service at $BASE_URL ($(head -c 200 "$WORK/health.err")); start it with ./run.sh or set BASE_URL"
	fi
}
