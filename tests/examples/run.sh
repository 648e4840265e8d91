#!/usr/bin/env bash
# tests/examples/run.sh - runs every story in examples/ against a running
# stack and prints one TAP line per story.
#
# env: BASE_URL      the stack (default http://127.0.0.1:8080); the caller
#                    starts it
#      FAILED_TTL_S  passed to story 05 (set it to the stack's
#                    CHARGE_FAILED_TTL_S, e.g. 2, so the story waits it out)
#      LEDGER        passed to the stories: the stack's provider ledger, so
#                    they count provider calls
#      EXAMPLE_TIMEOUT_S  limit for one story (default 60)
set -u

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
export BASE_URL=${BASE_URL:-http://127.0.0.1:8080}
TIMEOUT_S=${EXAMPLE_TIMEOUT_S:-60}
LOGDIR=$(mktemp -d "${TMPDIR:-/tmp}/charge-examples.XXXXXX") || exit 1
trap 'rm -rf "$LOGDIR"' EXIT

scripts=()
for s in "$ROOT"/examples/[0-9][0-9]-*.sh; do
	[ -e "$s" ] && scripts+=("$s")
done
echo "1..${#scripts[@]}"
echo "# BASE_URL=$BASE_URL FAILED_TTL_S=${FAILED_TTL_S:-unset} LEDGER=${LEDGER:-unset}"

n=0
failed=0
for s in "${scripts[@]}"; do
	n=$((n + 1))
	name=$(basename "$s")
	log="$LOGDIR/$name.log"
	start=$(date +%s)
	timeout -k 5 "$TIMEOUT_S" bash "$s" > "$log" 2>&1 < /dev/null
	rc=$?
	secs=$(( $(date +%s) - start ))
	if [ "$rc" -eq 0 ]; then
		echo "ok $n - $name (${secs}s)"
	else
		failed=$((failed + 1))
		if [ "$rc" -eq 124 ]; then
			echo "not ok $n - $name (timed out after ${TIMEOUT_S}s)"
		else
			echo "not ok $n - $name (exit $rc)"
		fi
		tail -n 40 "$log" | sed 's/\x1b\[[0-9;]*m//g; s/^/# /'
	fi
done
[ "$failed" -eq 0 ]
