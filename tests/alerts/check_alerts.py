#!/usr/bin/env python3
"""check_alerts.py - conf/prometheus/charge-alerts.yml, printing TAP.

  1. promtool check rules accepts the file;
  2. promtool test rules passes tests/alerts/charge-alerts.test.yml;
  3. every alert has a case where it fires and one where it is silent;
  4. every series a rule reads is one the code exports (src/codec/metrics.c, or
     charge-reconcile's textfile, src/reconcile/rc_report.c), and every
     outcome / result label value it names is one the code writes;
  5. the tests can fail: for each alert, the rules with that alert's expr
     replaced by one that never fires, then by one that always fires,
     must each make promtool test rules fail.
Python 3 with python3-yaml; promtool from Debian's prometheus package.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
RULES = os.path.join(ROOT, "conf", "prometheus", "charge-alerts.yml")
TESTS = os.path.join(HERE, "charge-alerts.test.yml")
sys.path.insert(0, os.path.join(ROOT, "tests", "docs"))
import check_api  # noqa: E402  (its readers of the C sources)

N = [0]
FAILED = [0]


def tap(ok, name, detail=""):
    N[0] += 1
    print("%s %d - alerts: %s" % ("ok" if ok else "not ok", N[0], name))
    if not ok:
        FAILED[0] += 1
        for line in str(detail).splitlines()[-20:]:
            print("#   " + line)
    sys.stdout.flush()


def promtool(*args, cwd=None):
    p = subprocess.run(["promtool"] + list(args), capture_output=True, text=True,
                       cwd=cwd, timeout=120)
    return p.returncode, p.stdout + p.stderr


def alerts(doc):
    return [r for g in doc["groups"] for r in g["rules"] if "alert" in r]


def exported_series():
    """Series names: the responder's /metrics and the reconciler's textfile."""
    names = set(check_api.code_metric_series())
    text = check_api.read(os.path.join(ROOT, "src", "reconcile", "rc_report.c"))
    for lit in check_api.c_literals(text):
        names.update(re.findall(r"\bcharge_reconcile_[a-z_]+", lit))
    return names


def label_values():
    """{label: set of values the code writes} for the labels rules match."""
    problems = check_api.code_problems()
    metrics = check_api.read(os.path.join(ROOT, "src", "codec", "metrics.c"))
    m = re.search(r"metrics_webhook_results\[\]\s*=\s*\{(.*?)\};", metrics, re.S)
    kinds = re.findall(r'charge_reconcile_findings\{kind=\\"([a-z]+)\\"\}',
                       check_api.read(os.path.join(ROOT, "src", "reconcile", "rc_report.c")))
    return {"outcome": set(problems) | set(check_api.code_outcome_labels()),
            "result": set(check_api.c_literals(m.group(1))) if m else set(),
            "kind": set(kinds)}


def check_names(doc):
    series, values = exported_series(), label_values()
    bad = []
    for r in alerts(doc):
        expr = r["expr"]
        for n in set(re.findall(r"\bcharge_[a-z_]+\b", expr)):
            if n not in series:
                bad.append("%s: %s is not a series the code exports" % (r["alert"], n))
        for label, op, val in re.findall(r'\b(outcome|result|kind)\s*(=~|!~|=|!=)\s*"([^"]*)"', expr):
            for v in val.split("|"):
                if v not in values[label]:
                    bad.append("%s: %s%s\"%s\" is no value the code writes" % (r["alert"], label, op, v))
    tap(not bad and series and values["outcome"] and values["result"],
        "every series and label value the rules read is one the code exports (%d series known)"
        % len(series), "\n".join(bad) or "the code's names were not found")


def check_cases(doc, tests):
    cases = {}
    for t in tests["tests"]:
        for c in t.get("alert_rule_test", []):
            fires = bool(c.get("exp_alerts"))
            cases.setdefault(c["alertname"], [0, 0])[0 if fires else 1] += 1
    for r in alerts(doc):
        f, s = cases.get(r["alert"], [0, 0])
        tap(f >= 1 and s >= 1, "%s has %d firing and %d silent cases" % (r["alert"], f, s),
            "needs at least one of each in %s" % os.path.relpath(TESTS, ROOT))
    unknown = sorted(set(cases) - {r["alert"] for r in alerts(doc)})
    tap(not unknown, "every alert the tests name is in the rules", ", ".join(unknown))


def check_mutants(doc):
    """Each alert's tests catch a rule that never fires and one that always does."""
    tmp = tempfile.mkdtemp(prefix="charge-alerts.")
    try:
        # the tests name the rules relative to themselves: keep the layout
        os.makedirs(os.path.join(tmp, "conf", "prometheus"))
        os.makedirs(os.path.join(tmp, "tests", "alerts"))
        shutil.copy(TESTS, os.path.join(tmp, "tests", "alerts"))
        for r in alerts(doc):
            caught = []
            for what, expr in (("never fires", "vector(1) > 2"), ("always fires", "vector(1)")):
                mutant = yaml.safe_load(yaml.safe_dump(doc))
                for g in mutant["groups"]:
                    for x in g["rules"]:
                        if x.get("alert") == r["alert"]:
                            x["expr"] = expr
                with open(os.path.join(tmp, "conf", "prometheus", "charge-alerts.yml"), "w",
                          encoding="utf-8") as f:
                    yaml.safe_dump(mutant, f)
                rc, _ = promtool("test", "rules", "charge-alerts.test.yml",
                                 cwd=os.path.join(tmp, "tests", "alerts"))
                caught.append((what, rc != 0))
            tap(all(c for _, c in caught),
                "%s: the tests fail when it never fires and when it always fires" % r["alert"],
                "; ".join("%s: %s" % (w, "caught" if c else "NOT caught") for w, c in caught))
    finally:
        shutil.rmtree(tmp)


def main():
    if shutil.which("promtool") is None:
        tap(False, "promtool is installed (Debian's prometheus package)")
        print("1..%d" % N[0])
        return 1
    rc, out = promtool("check", "rules", RULES)
    tap(rc == 0, "promtool check rules %s" % os.path.relpath(RULES, ROOT), out)
    rc, out = promtool("test", "rules", os.path.basename(TESTS), cwd=HERE)
    tap(rc == 0 and "SUCCESS" in out, "promtool test rules %s" % os.path.relpath(TESTS, ROOT), out)
    with open(RULES, encoding="utf-8") as f:
        doc = yaml.safe_load(f)
    with open(TESTS, encoding="utf-8") as f:
        tests = yaml.safe_load(f)
    check_cases(doc, tests)
    check_names(doc)
    check_mutants(doc)
    print("1..%d" % N[0])
    return 1 if FAILED[0] else 0


if __name__ == "__main__":
    sys.exit(main())
