#!/usr/bin/env bash
# tests/alerts/run.sh - the alerting rules shipped in
# conf/prometheus/charge-alerts.yml: promtool check rules, promtool test
# rules over tests/alerts/charge-alerts.test.yml (a firing and a silent case
# per alert), the series and label values they read against the code, and
# per alert a rule that never fires and one that always fires, each of which
# the tests must catch (tests/alerts/check_alerts.py). Prints TAP; about 10 s.
set -uo pipefail
HERE=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")" && pwd)
exec timeout --foreground -k 5 120 /usr/bin/python3 "$HERE/check_alerts.py"
