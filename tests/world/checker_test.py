#!/usr/bin/env python3
"""checker_test.py - the world checker against planted histories: each rule
fires on its own planted defect and on nothing else, and a clean history
passes every rule. Prints TAP; run by tests/world/run.sh before the worlds."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import checker  # noqa: E402

KEY = "w1-x-0"
T0 = 1_800_000_000.0


class Sched:
    clock_offset_s = 0
    slow_ms = 0
    nemesis = []


class Op:
    def __init__(self, t0, status, body, ptype=None, phase="load"):
        self.key, self.t0, self.t1, self.status, self.body = KEY, t0, t0 + 0.1, status, body
        self.ptype, self.phase, self.err, self.attempt, self.replayed, self.req = ptype, phase, None, 0, None, 0


def charge(cid, created=T0, status="succeeded", amount=1999, key=KEY):
    return {"id": cid, "created": int(created), "status": status, "amount": amount, "currency": "usd",
            "metadata": {"charge_principal": "demo", "charge_idempotency_key": key}}


def body201(cid):
    return b'{"id":"%s","object":"charge","status":"succeeded","amount":1999}' % cid.encode()


P502 = b'{"type":"/problems/provider-error","status":502}'


def evidence(history, charges, record=None, state=("completed", 1.0), sim_keys=None):
    return checker.Evidence(
        seed=1, schedule=Sched, history=history, records={KEY: record or {}}, states={KEY: state},
        charges=charges, sim_keys=sim_keys or [], sim_stats={}, keys={KEY: {"amount": 1999}},
        t_quiet=T0 + 10, bound_s=18, execute_window_s=4, principal="demo", gave_up=set(), phases={},
        notes={})


CLEAN = dict(history=[Op(T0, 201, body201("ch_a"))], charges=[charge("ch_a")],
             record={"state": b"completed", "status": b"201", "body": body201("ch_a")})

PLANTED = {
    "told_failed_but_charged": dict(CLEAN, history=[Op(T0, 502, P502, "/problems/provider-error")],
                                    record={"state": b"failed", "status": b"502", "body": P502}),
    "foreign_charge": dict(CLEAN, history=[Op(T0, 201, body201("ch_other"))],
                           record={"state": b"completed", "status": b"201", "body": body201("ch_other")}),
    "one_charge": dict(CLEAN, charges=[charge("ch_a"), charge("ch_b", status="failed")]),
    "ack_changed": dict(CLEAN, history=[Op(T0, 201, body201("ch_a")),
                                        Op(T0 + 5, 502, P502, "/problems/provider-error", "final")]),
    "charge_after_window": dict(CLEAN, charges=[charge("ch_a", created=T0 + 9)]),
    "unsettled": dict(CLEAN, state=("unknown", None)),
}


def main():
    rules = [r.__name__ for r in checker.RULES]
    cases = [("a clean history", CLEAN, set())] + [
        ("a planted %s" % name, case, {name}) for name, case in PLANTED.items()]
    print("1..%d" % len(cases))
    failed = 0
    for n, (what, case, want) in enumerate(cases, 1):
        got = set(checker.check(evidence(**case))["violations"])
        # a 502 after a 201 is both an ack_changed and a told-failed
        if want == {"ack_changed"}:
            got.discard("told_failed_but_charged")
        ok = got == want
        failed += not ok
        print("%s %d - world checker: %s fires %s" % (
            "ok" if ok else "not ok", n, what, ", ".join(sorted(want)) or "no rule"))
        if not ok:
            print("#   got %s (rules: %s)" % (sorted(got), rules))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
