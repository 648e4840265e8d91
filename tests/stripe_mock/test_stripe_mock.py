#!/usr/bin/env python3
"""The responder against a Stripe emulation nobody here wrote:
stripe-stateful-mock (npm, the version pinned in tests/stripe_mock/
package.json), run by tests/stripe_mock/run.sh through
tests/provider_faults/run.sh. One lighttpd stack with provider_url pointing
at it and an sk_test_ key (the mock accepts any key of that form).

What differs from our simulator, and is accepted here:
  * its charge ids are ch_ + 20 letters and digits (ours: 24 hex), and
    `created` is its clock: the 201 body takes both from it;
  * it stores a 500 under the Idempotency-Key, as Stripe does, and replays
    it (with Content-Type text/html); our simulator never stores a 500;
  * tok_429 is not stored: each retry is a new delivery (429 again);
  * so its chain tok_500|tok_visa|nonce never gets past the 500 under one
    key, where tok_429|tok_visa|nonce does;
  * it has no /v1/charges/search (GET answers 404 "No such charge: search")
    and no 409 for a key in flight.
Its list endpoint GET /v1/charges gives the charges (with our metadata),
from which the checks count charges per key.
"""
import http.client
import json
import os
import signal
import subprocess
import sys
import time
import uuid

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(REPO, "tests", "provider_faults"))
import provlib as P  # noqa: E402
from provlib import check, diag, test  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
MOCK_KEY = "sk_test_stripe_mock_" + uuid.uuid4().hex[:8]
MOCK = None
STACK = None


class Mock:
    def __init__(self):
        self.dir = os.path.join(P.RUN, "stripe-mock")
        os.makedirs(self.dir, exist_ok=True)
        self.port = P.free_port()
        self.log_path = os.path.join(self.dir, "mock.log")
        lf = open(self.log_path, "wb")
        self.proc = subprocess.Popen(["node", os.path.join(HERE, "serve.js"), str(self.port)], cwd=HERE,
                                     stdin=subprocess.DEVNULL, stdout=lf, stderr=lf, start_new_session=True)
        lf.close()
        with open(os.path.join(self.dir, "mock.pid"), "w") as f:
            f.write("%d node\n" % self.proc.pid)
        end = time.monotonic() + 20
        while time.monotonic() < end:
            with open(self.log_path, "rb") as f:
                if b"listening on" in f.read():
                    return
            check(self.proc.poll() is None, "stripe-stateful-mock exited: %s" % self.log())
            time.sleep(0.05)
        raise P.Fail("stripe-stateful-mock did not start: %s" % self.log())

    def log(self):
        with open(self.log_path, "rb") as f:
            return f.read()[-1500:].decode(errors="replace")

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.port

    def get(self, path):
        c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=10)
        try:
            c.request("GET", path, headers={"Authorization": "Bearer " + MOCK_KEY})
            r = c.getresponse()
            return r.status, json.loads(r.read() or b"{}")
        finally:
            c.close()

    def charges_for(self, key):
        """The mock's charges whose metadata names (PRINCIPAL, key)."""
        out = []
        st, j = self.get("/v1/charges?limit=100")
        check(st == 200, "GET /v1/charges: %d %r" % (st, j))
        for ch in j.get("data", []):
            md = ch.get("metadata") or {}
            if md.get("charge_principal") == P.PRINCIPAL and md.get("charge_idempotency_key") == key:
                out.append(ch)
        return out

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def setup():
    global MOCK, STACK
    MOCK = Mock()
    STACK = P.Stack("stripe-mock", procs=2, provider_url=MOCK.url, provider_api_key=MOCK_KEY)


def documented(rs):
    bad = P.undocumented(rs)
    check(not bad, "\n".join(bad[:10]))


@test("stripe-stateful-mock: tok_visa charges (201, its charge id and created), the retry replays byte for byte")
def t_charge():
    k = P.new_key("sm-visa")
    body = P.charge_body("tok_visa", amount=1999)
    r1 = P.post(STACK, k, body)
    check(r1.status == 201, "first answer %r" % r1)
    r2 = P.post(STACK, k, body)
    check(r2.status == 201 and r2.body == r1.body and r2.h("idempotent-replayed") == "true",
          "the retry %r, first %r" % (r2, r1))
    chs = MOCK.charges_for(k)
    check(len(chs) == 1, "the mock has %d charges for the key: %r" % (len(chs), chs))
    j = r1.json()
    check(j.get("id") == chs[0]["id"], "201 id %r, the mock's charge %r" % (j.get("id"), chs[0]["id"]))
    check(j.get("created") == chs[0]["created"], "201 created %r, the mock's %r" % (j.get("created"), chs[0]["created"]))
    check(chs[0]["amount"] == 1999 and chs[0]["currency"] == "usd", "the mock's charge: %r" % chs[0])
    diag("201 %s; the mock's id %s (not 24 hex)" % (r1.body[:120], chs[0]["id"]))
    documented([r1, r2])


@test("stripe-stateful-mock: tok_chargeDeclined is declined (402 payment-declined, its charge id), replayed")
def t_decline():
    k = P.new_key("sm-decl")
    body = P.charge_body("tok_chargeDeclined", amount=2500)
    r1 = P.post(STACK, k, body)
    check(r1.status == 402 and r1.ptype() == "/problems/payment-declined", "first answer %r" % r1)
    r2 = P.post(STACK, k, body)
    check(r2.status == 402 and r2.body == r1.body and r2.h("idempotent-replayed") == "true",
          "the retry %r, first %r" % (r2, r1))
    diag("402 %s" % r1.body[:200])
    documented([r1, r2])


@test("stripe-stateful-mock: 8 clients at once with one key: one charge at the mock, identical 201s")
def t_concurrent():
    jobs = [(P.new_key("sm-conc"), P.charge_body("tok_mastercard", amount=3000 + i)) for i in range(3)]
    P.hammer(STACK, jobs, threads_per_key=8, deadline_s=30, tag="sm-conc")
    for k, b in jobs:
        rs = [r for r in P.HISTORY if r.key == k and r.method == "POST"]
        oks = [r for r in rs if r.status == 201]
        check(oks, "key %s: no 201: %s" % (k, P.statuses(rs)))
        check(all(r.body == oks[0].body for r in oks), "key %s: 201 bodies differ" % k)
        chs = MOCK.charges_for(k)
        check(len(chs) == 1, "key %s: the mock has %d charges" % (k, len(chs)))
        documented(rs)
    diag("answers %s" % P.statuses([r for r in P.HISTORY if r.tag == "sm-conc"]))


def never_charged(tok, tag, threads):
    """A token the mock fails on every delivery under our key: documented
    answers, never a 201, nothing charged at the mock; past the execute
    window (6 s) the completer reads the mock's list of charges (it serves
    GET /v1/charges with has_more and starting_after, though it ignores
    created[...]: a superset) and settles the record failed (502)."""
    jobs = [(P.new_key(tag), P.charge_body(tok, amount=4200))]
    P.hammer(STACK, jobs, threads_per_key=threads, deadline_s=8, tag=tag)
    rs = [r for r in P.HISTORY if r.tag == tag]
    check(not any(r.status in (201, 402) for r in rs), "an outcome the mock never gave: %s" % P.statuses(rs))
    check(any(r.status == 504 and r.ptype() == P.UNKNOWN_TYPE for r in rs),
          "no 504 outcome-unknown: %s" % P.statuses(rs))
    check(MOCK.charges_for(jobs[0][0]) == [], "the mock charged: %r" % MOCK.charges_for(jobs[0][0]))
    # past the execute window and the last send's deadline + timeout, the
    # completer's next look (every 1 s) settles it: bounded at 15 s
    end = time.monotonic() + 15
    while True:
        st, j = P.key_state(STACK, jobs[0][0])
        if (st == 200 and j.get("state") == "failed") or time.monotonic() > end:
            break
        time.sleep(0.5)
    check(st == 200 and j.get("state") == "failed" and j.get("status") == 502,
          "GET /charge/keys after the schedule: %d %r" % (st, j))
    check(MOCK.charges_for(jobs[0][0]) == [], "the mock charged: %r" % MOCK.charges_for(jobs[0][0]))
    diag("answers %s; the key after the completer's schedule: %s" % (P.statuses(rs), j.get("state")))
    documented(rs)


@test("stripe-stateful-mock: tok_429 (429 on every delivery, not stored by the mock), 4 clients: "
      "504 outcome-unknown, nothing charged; the read-only list settles it failed (502)")
def t_429():
    never_charged("tok_429", "sm-429", 4)


@test("stripe-stateful-mock: tok_500 (the mock stores the 500 under the key and replays it), 4 clients: "
      "504 outcome-unknown, nothing charged; the read-only list settles it failed (502)")
def t_500():
    never_charged("tok_500", "sm-500", 4)


@test("stripe-stateful-mock: a chain tok_429|tok_429|tok_visa|nonce rides through the rate limits "
      "(201, one charge)")
def t_chain_429():
    k = P.new_key("sm-c429")
    body = P.charge_body("tok_429|tok_429|tok_visa|n%s" % uuid.uuid4().hex[:8], amount=4100)
    seen = P.retry_until_final(STACK, k, body, time.monotonic() + 20, tag="sm-c429")
    check(seen[-1].status == 201, "answers %s, last %r" % (P.statuses(seen), seen[-1]))
    check(len(MOCK.charges_for(k)) == 1, "the mock has %d charges" % len(MOCK.charges_for(k)))
    diag("answers %s" % P.statuses(seen))
    documented(seen)


@test("stripe-stateful-mock: a chain tok_500|tok_visa|nonce: the mock stores the 500 under the key, so the "
      "chain never moves on: 504 outcome-unknown, nothing charged; the read-only list settles it failed (502)")
def t_chain_500():
    never_charged("tok_500|tok_visa|n%s" % uuid.uuid4().hex[:8], "sm-c500", 2)


@test("stripe-stateful-mock: its other declines (insufficient funds, expired card, incorrect CVC): 402 with "
      "its decline code, replayed")
def t_declines():
    for tok in ("tok_chargeDeclinedInsufficientFunds", "tok_chargeDeclinedExpiredCard",
                "tok_chargeDeclinedIncorrectCvc"):
        k = P.new_key("sm-d")
        body = P.charge_body(tok, amount=2600)
        r1 = P.post(STACK, k, body)
        r2 = P.post(STACK, k, body)
        check(r1.status == 402 and r2.status == 402 and r1.body == r2.body, "%s: %r then %r" % (tok, r1, r2))
        diag("%s: decline_code %r" % (tok, r1.json().get("decline_code")))
        documented([r1, r2])


def main():
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        setup()
    except Exception as e:  # noqa: BLE001
        print("not ok 1 - stripe_mock: set-up: %s" % e)
        P.stop_all()
        if MOCK:
            MOCK.stop()
        return 1
    try:
        return P.tap.run("PROV_ONLY")
    finally:
        P.stop_all()
        MOCK.stop()


if __name__ == "__main__":
    sys.exit(main())
