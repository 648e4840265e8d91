#!/usr/bin/env python3
"""Settling an ambiguous provider outcome, over real sockets, against a
scripted hostile provider (tests/settle/hostile_provider.py); issue 27's
reproductions, one test each (docs/testing.md, "settle").

The harness (tests/settle/run.sh) starts the stack and passes it through
the environment: BASE_URL (the web server), HOSTILE_URL (the provider and
its control API), SETTLE_WINDOW_S (provider_execute_window_s),
E2E_REDIS_SOCKET, E2E_PRINCIPAL_A / E2E_API_KEY_A, CHARGE_* (the responder's
configuration). Python standard library only; prints TAP. Every test prints
what it saw: the client's answers with their times (seconds after the
record was created), and the provider's deliveries.
"""

import functools
import json
import os
import sys
import time
import urllib.parse
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import httpc  # noqa: E402  (tests/lib: the HTTP client)
import resp  # noqa: E402  (tests/lib: the Redis client)
import tap  # noqa: E402
from tap import check, diag, test  # noqa: E402

BASE = urllib.parse.urlsplit(os.environ["BASE_URL"])
HOSTILE = urllib.parse.urlsplit(os.environ["HOSTILE_URL"])
REDIS_SOCKET = os.environ["E2E_REDIS_SOCKET"]
PRINCIPAL = os.environ["E2E_PRINCIPAL_A"]
API_KEY = os.environ["E2E_API_KEY_A"]
PREFIX = os.environ.get("CHARGE_KEY_PREFIX", "charge:")
WINDOW_S = float(os.environ.get("SETTLE_WINDOW_S", "3"))
TIMEOUT_S = int(os.environ.get("CHARGE_PROVIDER_TIMEOUT_MS", "500")) / 1000.0
DEADLINE_S = int(os.environ.get("CHARGE_PROVIDER_DEADLINE_MS", "1500")) / 1000.0
EXECUTE_MAX_S = int(os.environ.get("SETTLE_EXECUTE_MAX_MS", "6000")) / 1000.0
# what settling may take past 2 x provider_execute_window_s: one call's
# deadline, the completer's tick, the list's quiet, and room for a loaded
# machine
ALLOWANCE_S = float(os.environ.get("SETTLE_ALLOWANCE_S", str(DEADLINE_S + 2.5)))
# how long a client keeps retrying before the test gives up on a settle
BUDGET_S = 2 * WINDOW_S + 14


class Resp(httpc.Resp):
    """The shared answer, with a json() that is {} for a body that is not
    JSON (a WAF's HTML page) and the body shown as text."""

    def json(self):
        try:
            return json.loads(self.body)
        except ValueError:
            return {}

    def __repr__(self):
        return "HTTP %d %s" % (self.status, self.body[:300].decode("utf-8", "replace"))


def request(url, method, path, body=None, headers=None, timeout=30):
    return httpc.request(url, method, path, body, headers, timeout, resp=Resp)


def charge(key, amount=1999, currency="usd", source="tok_visa"):
    body = {"amount": amount, "currency": currency, "source": source}
    return request(BASE, "POST", "/charge", json.dumps(body).encode(), {
        "Authorization": "Bearer " + API_KEY, "Idempotency-Key": key,
        "Content-Type": "application/json"})


# --- the hostile provider's control API -----------------------------------

def hp(method, path, obj=None):
    body = json.dumps(obj).encode() if obj is not None else None
    r = request(HOSTILE, method, path, body, {"Content-Type": "application/json"})
    check(r.status == 200, "hostile provider %s %s: %r" % (method, path, r))
    return r.json()


def script(*rules):
    return hp("POST", "/_script", {"rules": list(rules), "replace": True})


def hp_log(key=None, method=None):
    q = {}
    if key is not None:
        q["client_key"] = key
    if method is not None:
        q["method"] = method
    return hp("GET", "/_log?" + urllib.parse.urlencode(q))["log"]


def hp_charges(key, amount=None, principal=PRINCIPAL):
    """The provider's charges for this principal's key (and amount)."""
    cs = hp("GET", "/_charges?" + urllib.parse.urlencode({"client_key": key, "principal": principal}))["charges"]
    return [c for c in cs if amount is None or c["amount"] == amount]


# --- Redis ------------------------------------------------------------------

def _redis(*args):
    return resp.command(REDIS_SOCKET, *args)


def rkey(key):
    return PREFIX + "idem:" + PRINCIPAL + ":" + key


def state(key):
    v = _redis("HGET", rkey(key), "state")
    return v.decode() if v is not None else None


def created_s(key):
    """The record's created_ms, in seconds (None: no record)."""
    v = _redis("HGET", rkey(key), "created_ms")
    return int(v) / 1000.0 if v is not None else None


def metric(name):
    """The sum of a /metrics series over its labels; None when absent."""
    text = request(BASE, "GET", "/metrics").body.decode()
    total, found = 0.0, False
    for line in text.splitlines():
        if line.startswith(name) and line[len(name):len(name) + 1] in (" ", "{"):
            total += float(line.rsplit(" ", 1)[1])
            found = True
    return total if found else None


def new_key(tag):
    return "settle-%s-%s" % (tag, uuid.uuid4().hex[:12])


# --- what a test saw ----------------------------------------------------------

class Seen:
    """The client's answers for one key, with times after t0 (the record's
    creation once known)."""

    def __init__(self, key):
        self.key = key
        self.t0 = time.time()
        self.answers = []   # (t, Resp)

    def add(self, r):
        self.answers.append((time.time(), r))
        return r

    def base(self):
        c = created_s(self.key)
        return c if c is not None else self.t0

    def line(self):
        b = self.base()
        out = []
        for t, r in self.answers:
            cid = r.json().get("id") or r.json().get("charge") or ""
            out.append("%d@%.1fs%s" % (r.status, t - b, (" " + cid) if cid else ""))
        return ", ".join(out)

    def statuses(self):
        return [r.status for _, r in self.answers]


def deliveries_line(key, base):
    out = []
    for e in hp_log(key):
        out.append("%s %s@%.2fs%s %s%s" % (
            e["method"], e.get("amount") or "", e["t"] - base,
            " (kept conn)" if e.get("reused") else "",
            e["outcome"] or e["action"],
            (" " + e["charge"]) if e.get("charge") else ""))
    return "; ".join(out) or "none"


def reads_line(since):
    """The provider's list/search requests since a time."""
    out = []
    for e in hp_log(method="GET"):
        if e["t"] >= since:
            q = urllib.parse.unquote(e["query"])
            out.append("%s@%.1fs %s n=%s [%s]" % (e["path"], e["t"] - since, e["outcome"], e.get("count"),
                                                q[:120]))
    return "; ".join(out) or "none"


def settle(seen, amount=1999, currency="usd", source="tok_visa", budget_s=BUDGET_S, check_each=None):
    """One client retrying at Retry-After until an answer other than 409 and
    504, or budget_s: the last answer."""
    end = time.monotonic() + budget_s
    r = None
    while time.monotonic() < end:
        r = seen.add(charge(seen.key, amount, currency, source))
        if check_each is not None:
            check_each(r)
        if r.status not in (409, 504):
            return r
        time.sleep(min(float(r.h("Retry-After") or "1"), 2.0))
    return r


def settle_test(name):
    """A test that starts and ends with a provider without rules."""
    def deco(fn):
        @functools.wraps(fn)
        def wrapped():
            hp("POST", "/_reset", {})
            try:
                fn()
            finally:
                hp("POST", "/_reset", {})
        return test(name)(wrapped)
    return deco


def is_nothing_charged(r):
    return r.status == 502 and "nothing was charged" in r.json().get("detail", "")


# --- the reproductions of issue 27 ------------------------------------------

def trace(seen, key, base):
    """The test's story as diagnostics: the client's answers, the
    provider's deliveries of key and the responder's reads, timed from base."""
    diag("answers: " + seen.line())
    diag("deliveries: " + deliveries_line(key, base))
    diag("reads: " + reads_line(base))


def expect_run1(seen, final, key, charge_id):
    """Never a 502, the final answer 201 with run 1's charge charge_id, and
    that charge the only one the provider holds for key."""
    no_502(seen, charge_id)
    check(final is not None and final.status == 201 and final.json().get("id") == charge_id,
          "final answer %r (want 201 with run 1's %s)" % (final, charge_id))
    check(len(hp_charges(key)) == 1, "charges at the provider: %r" % hp_charges(key))


@settle_test("1. a key reused after its record expired: the 5000 usd request (provider hangs, charges nothing) settles 502 'nothing was charged', never 201 with the old 1000 usd charge")
def t_reused_key():
    key = new_key("reuse")
    r1 = charge(key, amount=1000)
    check(r1.status == 201, "the first request (1000 usd): %r" % r1)
    old = r1.json()["id"]
    check(_redis("DEL", rkey(key)) == 1, "the record was not there to delete")
    script({"match": {"client_key": key, "amount": 5000}, "action": "hang", "hang_s": 2})
    seen = Seen(key)
    r2 = seen.add(charge(key, amount=5000))
    check(r2.status == 504, "the 5000 usd request's first answer: %r (want 504 outcome-unknown)" % r2)
    base = seen.base()
    final = settle(seen, amount=5000)
    trace(seen, key, base)
    wrong = [r for _, r in seen.answers if r.status == 201]
    check(not wrong, "answered 201 for 5000 usd with %s (the 1000 usd charge is %s): %r" % (
        wrong[0].json().get("id"), old, wrong[0]) if wrong else "")
    check(final is not None and is_nothing_charged(final),
          "final answer %r after %.1f s (want 502 nothing was charged)" % (final, time.time() - base))
    check(hp_charges(key, amount=5000) == [], "the provider holds 5000 usd charges: %r" % hp_charges(key, 5000))
    check(state(key) == "failed", "record state %r" % state(key))


def refusing_phase(seen, status, seconds):
    """The provider refuses everything with status for seconds; the client
    keeps retrying: every answer stays 504 (or 409), the record unknown."""
    script({"method": "POST", "match": {"client_key": seen.key}, "action": "status", "status": status},
           {"method": "GET", "action": "status", "status": status})
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        r = seen.add(charge(seen.key))
        check(r.status in (409, 504), "while the provider answers %d: %r at %.1fs (want 504, the record stays unknown)"
              % (status, r, time.time() - seen.base()))
        st = state(seen.key)
        check(st == "unknown", "while the provider answers %d: record state %r" % (status, st))
        time.sleep(min(float(r.h("Retry-After") or "1"), 1.0))


@settle_test("2a. 401, then 403 (a WAF), on the re-asks after a delivery that charged and whose answer was lost: 504 unknown while refused, never 502; then 201 with the original charge")
def t_refused_reask():
    key = new_key("refuse")
    # the first delivery charges and its connection closes; the rest of
    # the first call hangs (ambiguous, nothing more)
    script({"match": {"client_key": key}, "first": 1, "last": 1, "action": "charge_drop"},
           {"match": {"client_key": key}, "first": 2, "action": "hang", "hang_s": 1.5})
    seen = Seen(key)
    r1 = seen.add(charge(key))
    check(r1.status == 504, "first answer %r (want 504: the charge's answer was lost)" % r1)
    charges = hp_charges(key)
    check(len(charges) == 1, "the provider should hold one charge: %r" % charges)
    ours = charges[0]["id"]
    base = seen.base()
    try:
        refusing_phase(seen, 401, WINDOW_S + 1)   # a rotated key, past the execute window
        refusing_phase(seen, 403, 3)              # a WAF
    finally:
        diag("answers: " + seen.line())
        diag("deliveries: " + deliveries_line(key, base))
    hp("POST", "/_reset", {})
    final = settle(seen)
    diag("after the provider is back: " + seen.line())
    diag("reads: " + reads_line(base))
    check(final is not None and final.status == 201 and final.json().get("id") == ours,
          "final answer %r (want 201 with the original charge %s)" % (final, ours))
    check(len(hp_charges(key)) == 1, "charges at the provider: %r" % hp_charges(key))
    r = charge(key)
    check(r.status == 201 and r.body == final.body and r.h("Idempotent-Replayed") == "true", "replay %r" % r)


def one_call_403(tag, first_action):
    """Attempt 1 charges and its answer is lost (first_action), every later
    delivery gets 403: the call answers 504, never 502; once the provider
    is back, 201 with that charge."""
    key = new_key(tag)
    script({"match": {"client_key": key}, "first": 1, "last": 1, "action": first_action, "hang_s": 1.0},
           {"match": {"client_key": key}, "first": 2, "action": "status", "status": 403})
    seen = Seen(key)
    r1 = seen.add(charge(key))
    base = seen.base()
    diag("%s: answer %r; deliveries: %s" % (first_action, r1, deliveries_line(key, base)))
    charges = hp_charges(key)
    check(len(charges) == 1, "the provider should hold one charge: %r" % charges)
    check(r1.status == 504, "%s then 403 in one call: %r (want 504 outcome-unknown: the provider holds %s)"
          % (first_action, r1, charges[0]["id"]))
    check(state(key) == "unknown", "record state %r" % state(key))
    hp("POST", "/_reset", {})
    final = settle(seen)
    diag("%s: answers %s" % (first_action, seen.line()))
    check(final is not None and final.status == 201 and final.json().get("id") == charges[0]["id"],
          "final answer %r (want 201 with %s)" % (final, charges[0]["id"]))


@settle_test("2b. inside one call: attempt 1 charges and its answer is lost (timeout; closed on a fresh connection), attempt 2 gets 403: 504, not 502; later 201 with that charge")
def t_refused_in_call():
    one_call_403("in-call-hang", "charge_hang")
    # every delivery on a fresh connection: no kept connection to lose
    hp("POST", "/_config", {"keepalive": False})
    try:
        one_call_403("in-call-drop", "charge_drop")
    finally:
        hp("POST", "/_config", {"keepalive": True})


@settle_test("2c. a kept connection closed after its delivery charged, the next delivery (a new connection) got 403: 504, not 502")
def t_refused_resend():
    # the first delivery that arrives on a kept connection charges and the
    # connection closes. The client does not re-send a request a byte of
    # which was written (libcurl did, within the same attempt): the attempt
    # ends as one that may have executed, and the next one, on a fresh
    # connection, gets 403
    warm = new_key("warm")
    for i in range(6):   # kept connections on every event loop
        check(charge("%s-%d" % (warm, i)).status == 201, "warm-up charge failed")
    for round_ in range(6):
        key = new_key("resend")
        script({"match": {"client_key": key, "reused": True}, "first": 1, "last": 1, "action": "charge_drop"},
               {"match": {"client_key": key}, "first": 2, "action": "status", "status": 403})
        seen = Seen(key)
        r1 = seen.add(charge(key))
        base = seen.base()
        log = hp_log(key)
        if not log or not log[0].get("reused"):
            diag("round %d: the first delivery came on a fresh connection; again" % round_)
            hp("POST", "/_reset", {})
            continue
        diag("answer %r; deliveries: %s" % (r1, deliveries_line(key, base)))
        charges = hp_charges(key)
        check(len(charges) == 1, "the provider should hold one charge: %r" % charges)
        check(r1.status == 504, "charged, connection closed, sent again, 403: %r (want 504: the provider holds %s)"
              % (r1, charges[0]["id"]))
        hp("POST", "/_reset", {})
        final = settle(seen)
        diag("answers: " + seen.line())
        check(final is not None and final.status == 201 and final.json().get("id") == charges[0]["id"],
              "final answer %r (want 201 with %s)" % (final, charges[0]["id"]))
        return
    # no reuse at all: no kept connection to lose
    reused = [e for e in hp_log(method="POST") if e.get("reused")]
    check(not reused, "no first delivery came on a kept connection in 6 rounds (%d others did)" % len(reused))
    diag("the responder kept no connection to the provider: nothing to lose on one")


@settle_test("3. a slow provider (each POST answered 1.2 s late, past provider_timeout_ms; its search index lags a minute): the charge executes inside the execute window; final 201 with it, never 502")
def t_slow_provider():
    key = new_key("slow")
    hp("POST", "/_config", {"search_lag_s": 60})
    script({"match": {"client_key": key}, "action": "slow", "delay_s": TIMEOUT_S + 0.7})
    seen = Seen(key)
    r1 = seen.add(charge(key))
    check(r1.status == 504, "first answer %r (want 504)" % r1)
    base = seen.base()
    final = settle(seen)
    trace(seen, key, base)
    charges = hp_charges(key)
    check(len(charges) == 1, "the provider should hold one charge: %r" % charges)
    c = charges[0]
    diag("the charge executed %.2f s after the record was created" % (c["_t"] - base))
    check(c["_t"] - base < WINDOW_S, "the charge executed after the execute window (%.2f s)" % (c["_t"] - base))
    bad = [r for _, r in seen.answers if r.status == 502]
    check(not bad, "answered 502 while the provider held %s: %r" % (c["id"], bad[0]) if bad else "")
    check(final is not None and final.status == 201 and final.json().get("id") == c["id"],
          "final answer %r (want 201 with %s)" % (final, c["id"]))


@settle_test("4. our charge on page 2 of the list (page 1 full of other principals' charges under the same client key order-1001): 201 with ours")
def t_paged():
    key = "order-1001"
    _redis("DEL", rkey(key))
    script({"match": {"client_key": key, "principal": PRINCIPAL}, "first": 1, "last": 1, "action": "charge_drop"},
           {"match": {"client_key": key, "principal": PRINCIPAL}, "first": 2, "action": "status", "status": 500})
    seen = Seen(key)
    r1 = seen.add(charge(key))
    check(r1.status == 504, "first answer %r (want 504)" % r1)
    charges = hp_charges(key)
    check(len(charges) == 1, "the provider should hold one charge of ours: %r" % charges)
    ours = charges[0]["id"]
    # 150 charges of other principals with the same client key, newer than
    # ours: a list of 100 a page has ours on page 2
    hp("POST", "/_seed", {"n": 150, "client_key": key, "amount": 1999, "currency": "usd"})
    base = seen.base()
    final = settle(seen)
    diag("answers: " + seen.line())
    diag("reads: " + reads_line(base))
    check(final is not None and final.status == 201 and final.json().get("id") == ours,
          "final answer %r (want 201 with our %s, on page 2)" % (final, ours))


@settle_test("5. a 200 for a different charge (1 jpy, another principal): never recorded as ours; 504, charge_provider_mismatch_total > 0")
def t_wrong_200():
    key = new_key("wrong")
    script({"match": {"client_key": key}, "action": "wrong_charge", "wrong_amount": 1, "wrong_currency": "jpy"})
    seen = Seen(key)
    r1 = seen.add(charge(key))
    base = seen.base()
    diag("answer %r; deliveries: %s" % (r1, deliveries_line(key, base)))
    wrong = {e["charge"] for e in hp_log(key) if e["outcome"] == "wrong_charge"}
    check(r1.status == 504, "first answer %r (want 504: the provider answered with %s, not ours)"
          % (r1, ", ".join(sorted(wrong))))
    m = metric("charge_provider_mismatch_total")
    diag("charge_provider_mismatch_total %r" % m)
    check(m is not None and m > 0, "charge_provider_mismatch_total %r (want > 0)" % m)
    check(state(key) == "unknown", "record state %r (want unknown)" % state(key))
    # the provider behaves again: whatever settles it agrees with the provider
    hp("POST", "/_reset", {})
    final = settle(seen)
    diag("answers: " + seen.line())
    ids = {r.json().get("id") for _, r in seen.answers if r.status == 201}
    check(not ids & wrong, "recorded the wrong charge %r" % (ids & wrong))
    ours = hp_charges(key, amount=1999)
    if final is not None and final.status == 201:
        check([c["id"] for c in ours] == [final.json()["id"]], "201 %r, the provider holds %r" % (final, ours))
    else:
        check(final is not None and is_nothing_charged(final) and ours == [],
              "final %r, the provider holds %r" % (final, ours))


@settle_test("6. a 402 card_error without a charge id: 402 payment-declined (not 504), replayed byte for byte")
def t_decline_no_id():
    key = new_key("decline")
    script({"match": {"client_key": key}, "action": "decline_no_id"})
    r1 = charge(key)
    diag("answer %r; deliveries: %s" % (r1, deliveries_line(key, time.time() - r1.elapsed)))
    check(r1.status == 402 and r1.json().get("type") == "/problems/payment-declined",
          "answer %r (want 402 payment-declined)" % r1)
    check(state(key) == "failed", "record state %r" % state(key))
    r2 = charge(key)
    check(r2.status == 402 and r2.body == r1.body and r2.h("Idempotent-Replayed") == "true", "replay %r" % r2)


@settle_test("7. a request never delivered (every POST dropped before it executes): settles 502 within window + deadline + execute max + allowance, no POST after the execute window")
def t_never_delivered():
    key = new_key("never")
    script({"match": {"client_key": key}, "action": "drop"})
    seen = Seen(key)
    r1 = seen.add(charge(key))
    check(r1.status == 504, "first answer %r (want 504)" % r1)
    base = seen.base()
    # the stated bound (docs/API.md §17.3): the last re-send starts before
    # the window ends and its call lasts at most provider_deadline_ms; a
    # delivery may execute provider_execute_max_ms after it was sent; then
    # the completer's read (its tick, the call) settles it
    bound = base + WINDOW_S + DEADLINE_S + EXECUTE_MAX_S + ALLOWANCE_S
    # nobody retries: the completer settles it
    while time.time() < bound + 5 and state(key) != "failed":
        time.sleep(0.2)
    settled_at = time.time()
    st = state(key)
    posts = [e for e in hp_log(key) if e["method"] == "POST"]
    late = [e for e in posts if e["t"] > base + WINDOW_S + 0.25]
    diag("record %s at %.1f s (bound %.1f s)" % (st, settled_at - base, bound - base))
    diag("deliveries: " + deliveries_line(key, base))
    diag("reads: " + reads_line(base))
    check(not late, "%d POST deliveries after the execute window (%.0f s), first at %.2f s" % (
        len(late), WINDOW_S, late[0]["t"] - base) if late else "")
    check(st == "failed", "record state %r after %.1f s" % (st, settled_at - base))
    check(settled_at <= bound, "settled after %.1f s, past window + deadline + execute max + allowance (%.1f s)"
          % (settled_at - base, bound - base))
    r2 = charge(key)
    check(is_nothing_charged(r2) and r2.h("Idempotent-Replayed") == "true", "replay %r" % r2)
    check(hp_charges(key) == [], "the provider holds %r" % hp_charges(key))


@settle_test("8. a record lost in Redis, retried: the provider replays (Idempotent-Replayed: true), so does the client's answer, with the same bytes")
def t_replayed_header():
    key = new_key("lost")
    r1 = charge(key)
    check(r1.status == 201 and r1.h("Idempotent-Replayed") == "false", "first %r (%r)" % (r1, r1.h("Idempotent-Replayed")))
    check(_redis("DEL", rkey(key)) == 1, "the record was not there to delete")
    time.sleep(1.1)   # a later second: our clock must not show in the body
    r2 = charge(key)
    diag("deliveries: " + deliveries_line(key, time.time() - 2))
    diag("the retry said Idempotent-Replayed: %r" % r2.h("Idempotent-Replayed"))
    check(r2.status == 201 and r2.body == r1.body, "retry %r, first %r" % (r2, r1))
    check(r2.h("Idempotent-Replayed") == "true",
          "the provider replayed, the client was told Idempotent-Replayed: %r" % r2.h("Idempotent-Replayed"))
    posts = [e for e in hp_log(key) if e["method"] == "POST"]
    check([e["outcome"] for e in posts] == ["executed", "replayed"], "deliveries %r" % [e["outcome"] for e in posts])


# --- the reproductions of issue 36 ------------------------------------------

IDEMPOTENCY_ERROR = {"error": {"type": "idempotency_error", "code": "idempotency_error",
                               "message": "Keys for idempotent requests can only be used with the same "
                                          "parameters they were first used with."}}


def no_502(seen, holder):
    bad = [r for _, r in seen.answers if r.status == 502]
    check(not bad, "answered 502 while the provider held %s: %r" % (holder, bad[0]) if bad else "")


@settle_test("36.4 one attempt's answer does not leak into the next: a 200 with another request's failed charge, then a 402 without an error object: 504 unknown, never 402 naming the other charge; later 201 with ours")
def t_leak():
    key = new_key("leak")
    foreign = {"id": "ch_foreign" + uuid.uuid4().hex[:12], "object": "charge", "amount": 1999,
               "currency": "usd", "created": int(time.time()), "status": "failed",
               "failure_code": "card_declined", "outcome": {"type": "issuer_declined", "reason": "stolen_card"},
               "metadata": {"charge_request": "charge_" + "0" * 64, "charge_principal": "mallory"}}
    script({"match": {"client_key": key}, "first": 1, "last": 1, "action": "status", "status": 200,
            "body": foreign},
           {"match": {"client_key": key}, "first": 2, "action": "status", "status": 402,
            "body": "<html>declined</html>", "content_type": "text/html"})
    seen = Seen(key)
    r1 = seen.add(charge(key))
    base = seen.base()
    diag("answer %r; deliveries: %s" % (r1, deliveries_line(key, base)))
    check(foreign["id"] not in r1.body.decode("utf-8", "replace"),
          "the answer names the other request's charge %s: %r" % (foreign["id"], r1))
    check(r1.status == 504, "first answer %r (want 504: nothing proven)" % r1)
    check(state(key) == "unknown", "record state %r (want unknown)" % state(key))
    hp("POST", "/_reset", {})
    final = settle(seen)
    diag("answers: " + seen.line())
    ours = hp_charges(key)
    check(len(ours) == 1, "the provider should hold one charge of ours: %r" % ours)
    check(final is not None and final.status == 201 and final.json().get("id") == ours[0]["id"],
          "final answer %r (want 201 with %s)" % (final, ours[0]["id"] if ours else None))


@settle_test("36.3 a 400 idempotency_error to a fresh claim (the record of a run that charged was lost): never 502; 504, then 201 with the earlier run's charge")
def t_idempotency_error():
    key = new_key("idemerr")
    script({"match": {"client_key": key}, "first": 1, "last": 1, "action": "charge_drop"},
           {"match": {"client_key": key}, "first": 2, "action": "hang", "hang_s": 1.5})
    seen = Seen(key)
    r1 = seen.add(charge(key))
    check(r1.status == 504, "run 1: %r (want 504: the charge's answer was lost)" % r1)
    charges = hp_charges(key)
    check(len(charges) == 1, "the provider should hold run 1's charge: %r" % charges)
    base = seen.base()
    # run 1's responder is gone and its record with it: the retry is a fresh
    # claim; the provider refuses its form (as across a deploy that changed it)
    check(_redis("DEL", rkey(key)) == 1, "the record was not there to delete")
    script({"match": {"client_key": key}, "action": "status", "status": 400, "body": IDEMPOTENCY_ERROR})
    final = settle(seen)
    trace(seen, key, base)
    expect_run1(seen, final, key, charges[0]["id"])


@settle_test("36.2 a 409 proves a delivery executing now: the first delivery executes for longer than every re-send and the execute window (re-sends get 409); no 502 before it lands; 201 with its charge")
def t_in_use():
    key = new_key("inuse")
    # the first delivery takes the key and charges only after delay_s: the
    # responder's attempt times out, its re-sends get 409 until then
    delay = WINDOW_S + 2.0
    check(delay < EXECUTE_MAX_S, "the test needs provider_execute_max_ms above %.1f s" % delay)
    script({"match": {"client_key": key}, "first": 1, "last": 1, "action": "execute_late", "delay_s": delay})
    seen = Seen(key)
    r1 = seen.add(charge(key))
    check(r1.status == 504, "first answer %r (want 504)" % r1)
    base = seen.base()
    final = settle(seen)
    trace(seen, key, base)
    charges = hp_charges(key)
    check(len(charges) == 1, "the provider should hold one charge: %r" % charges)
    in_use = [e for e in hp_log(key) if e["outcome"] == "in_use"]
    check(in_use, "no re-send was answered 409: the test did not test")
    diag("the charge landed %.2f s after the record was created" % (charges[0]["_t"] - base))
    no_502(seen, charges[0]["id"])
    check(final is not None and final.status == 201 and final.json().get("id") == charges[0]["id"],
          "final answer %r (want 201 with %s)" % (final, charges[0]["id"]))


SKEW_MAX_S = float(os.environ.get("SETTLE_SKEW_MAX_S", "60"))


@settle_test("36.1a the provider's clock 150 s ahead, then 150 s behind: a charge whose answer was lost is found by the list (its range on the provider's measured clock): never 502, 201 with it")
def t_clock_found():
    for offset in (150, -150):
        hp("POST", "/_reset", {})
        hp("POST", "/_config", {"clock_offset_s": offset})
        key = new_key("clock%+d" % offset)
        script({"match": {"client_key": key}, "first": 1, "last": 1, "action": "charge_drop"},
               {"match": {"client_key": key}, "first": 2, "action": "hang", "hang_s": 1.5})
        seen = Seen(key)
        r1 = seen.add(charge(key))
        check(r1.status == 504, "clock %+d s: first answer %r (want 504)" % (offset, r1))
        base = seen.base()
        charges = hp_charges(key)
        check(len(charges) == 1, "clock %+d s: the provider should hold one charge: %r" % (offset, charges))
        # the provider answers nothing for this key any more: only a read of
        # its list can settle it, after the execute window
        script({"match": {"client_key": key}, "action": "hang", "hang_s": 1.0})
        final = settle(seen)
        diag("clock %+d s: answers: %s" % (offset, seen.line()))
        diag("clock %+d s: reads: %s" % (offset, reads_line(base)))
        if charges:
            no_502(seen, charges[0]["id"])
            check(final is not None and final.status == 201 and final.json().get("id") == charges[0]["id"],
                  "clock %+d s: final answer %r (want 201 with %s)" % (offset, final, charges[0]["id"]))


@settle_test("36.1b the provider's clock 150 s ahead (beyond provider_clock_skew_max_s): a request never delivered is not concluded failed (504, counted in charge_provider_clock_skew_total); once the clock agrees, it settles 502")
def t_clock_absence():
    check(150 > SKEW_MAX_S, "the test needs provider_clock_skew_max_s below 150")
    hp("POST", "/_config", {"clock_offset_s": 150})
    key = new_key("clockabs")
    script({"match": {"client_key": key}, "action": "drop"})
    before = metric("charge_provider_clock_skew_total") or 0
    seen = Seen(key)
    r1 = seen.add(charge(key))
    check(r1.status == 504, "first answer %r (want 504)" % r1)
    base = seen.base()
    bound = base + WINDOW_S + DEADLINE_S + EXECUTE_MAX_S + ALLOWANCE_S
    while time.time() < bound and state(key) == "unknown":
        time.sleep(0.2)
    st = state(key)
    skew = (metric("charge_provider_clock_skew_total") or 0) - before
    diag("record %s at %.1f s (the bound for a provider whose clock agrees: %.1f s); charge_provider_clock_skew_total +%d"
         % (st, time.time() - base, bound - base, skew))
    diag("reads: " + reads_line(base))
    check(st == "unknown", "record state %r with the provider's clock 150 s off (want unknown)" % st)
    check(skew > 0, "charge_provider_clock_skew_total did not grow")
    # the provider's clock is fixed: the next read proves absence
    # (12 s was enough in most runs: the next probes' times depend on the
    # completer's schedule and on a loaded machine's delays; one whole-suite
    # run in five found it still unknown at 12 s)
    hp("POST", "/_config", {"clock_offset_s": 0})
    agreed = time.time()
    end = agreed + 30
    while time.time() < end and state(key) == "unknown":
        time.sleep(0.2)
    diag("after the clock agreed (%.1f s): record %s at +%.1f s" % (agreed - base, state(key), time.time() - agreed))
    if state(key) != "failed":
        diag("reads: " + reads_line(base))
    check(state(key) == "failed", "record state %r after the clock agreed again" % state(key))
    check(hp_charges(key) == [], "the provider holds %r" % hp_charges(key))


@settle_test("36.5 an earlier run outside the probe's window: run 1 charged 150 s before and its record was lost; run 2's re-sends are replayed but their answers lost: never 502, 201 with run 1's charge (the search covers what the list does not)")
def t_earlier_run():
    key = new_key("earlier")
    script({"match": {"client_key": key}, "first": 1, "last": 1, "action": "charge_drop",
            "created_offset_s": -150},
           {"match": {"client_key": key}, "first": 2, "action": "hang", "hang_s": 1.5})
    seen = Seen(key)
    r1 = seen.add(charge(key))
    check(r1.status == 504, "run 1: %r (want 504)" % r1)
    charges = hp_charges(key)
    check(len(charges) == 1, "the provider should hold run 1's charge: %r" % charges)
    diag("run 1's charge is stamped %d s before now" % (charges[0]["created"] - time.time()))
    # run 1's record is lost; run 2 is a fresh claim whose every delivery
    # is replayed by the provider and its answer lost on the way back
    check(_redis("DEL", rkey(key)) == 1, "the record was not there to delete")
    script({"match": {"client_key": key}, "action": "charge_drop"})
    final = settle(seen)
    base = seen.base()
    trace(seen, key, base)
    expect_run1(seen, final, key, charges[0]["id"])


@settle_test("36.6 a busy account (3 000 other charges in the window, 100 ms a page of the list: more pages than one call's deadline reads): the probe goes on where the last one stopped; a request never delivered settles 502 within the stated bound")
def t_busy_account():
    n, page_s = 3000, 0.1
    hp("POST", "/_seed", {"n": n, "client_key": "busy-other", "amount": 1999, "currency": "usd",
                          "spread_s": 30})
    hp("POST", "/_config", {"list_delay_s": page_s})
    key = new_key("busy")
    script({"match": {"client_key": key}, "action": "drop"})
    seen = Seen(key)
    r1 = seen.add(charge(key))
    check(r1.status == 504, "first answer %r (want 504)" % r1)
    base = seen.base()
    pages = n // 100 + 2
    per_call = max(1, int((DEADLINE_S - 0.3) / page_s))
    probes = -(-pages // per_call)
    # the stated bound: the first read that can prove absence, then one
    # read a completer tick after another, each going on where the last
    # stopped; room for a loaded machine
    bound = base + WINDOW_S + DEADLINE_S + EXECUTE_MAX_S + ALLOWANCE_S + 2 * probes * (DEADLINE_S + 1.5)
    while time.time() < bound and state(key) != "failed":
        time.sleep(0.25)
    st = state(key)
    reads = [e for e in hp_log(method="GET") if e["t"] >= base]
    lists = [e for e in reads if e["path"] == "list"]
    searches = [e for e in reads if e["path"] == "search"]
    diag("record %s at %.1f s (bound %.1f s: %d pages of %d charges, about %d a call, %d calls)"
         % (st, time.time() - base, bound - base, pages, n, per_call, probes))
    diag("provider reads for the request: %d list pages, %d searches" % (len(lists), len(searches)))
    lte = sorted({urllib.parse.parse_qs(e["query"]).get("created[lte]", ["?"])[0] for e in lists})
    diag("list ranges' created[lte]: %s" % ", ".join(lte))
    check(st == "failed", "record state %r after %.1f s: a busy account never settles" % (st, time.time() - base))
    check(hp_charges(key) == [], "the provider holds %r" % hp_charges(key))


sys.exit(tap.run(only_env="SETTLE_ONLY"))
