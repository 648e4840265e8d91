#!/usr/bin/env python3
"""The provider's webhook route through a web server (docs/API.md §17.5).

The harness (tests/webhook/run.sh) starts lighttpd + the responder, a
private Redis and charge-provider-sim, and passes them through the
environment: BASE_URL, SIM_URL, SIM_API_KEY, SIM_LATE_MS, E2E_REDIS_SOCKET,
REDIS_PID_FILE, RESPONDER_LOG, RESPONDER_BIN, E2E_PRINCIPAL_A /
E2E_API_KEY_A and the responder's CHARGE_* configuration. The events are
built here from the simulator's own charges (GET /v1/charges/<id>) and
signed as Stripe signs them. Python standard library only; prints TAP.
"""

import hashlib
import hmac
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import httpc  # noqa: E402  (tests/lib: the HTTP client)
import resp  # noqa: E402  (tests/lib: the Redis client)
import tap  # noqa: E402
from tap import check, diag, test  # noqa: E402

BASE = urllib.parse.urlsplit(os.environ["BASE_URL"])
SIM = urllib.parse.urlsplit(os.environ["SIM_URL"])
SIM_KEY = os.environ["SIM_API_KEY"]
SIM_LATE_S = int(os.environ.get("SIM_LATE_MS", "3000")) / 1000.0
REDIS_SOCKET = os.environ["E2E_REDIS_SOCKET"]
PRINCIPAL = os.environ["E2E_PRINCIPAL_A"]
API_KEY = os.environ["E2E_API_KEY_A"]
PREFIX = os.environ.get("CHARGE_KEY_PREFIX", "charge:")
SECRET = os.environ["CHARGE_PROVIDER_WEBHOOK_SECRET"]
SECRET_OLD = os.environ["CHARGE_PROVIDER_WEBHOOK_SECRET_PREVIOUS"]
PROVIDER_SECRET = os.environ["CHARGE_PROVIDER_SECRET"]
TOLERANCE_S = int(os.environ.get("CHARGE_PROVIDER_WEBHOOK_TOLERANCE_S", "300"))
MAX_BODY = int(os.environ.get("CHARGE_MAX_REQUEST_BYTES", "1048576"))
PATH = "/webhooks/provider"


def request(url, method, path, body=None, headers=None, timeout=30):
    return httpc.request(url, method, path, body, headers, timeout)


def charge(key, source, amount=1999):
    body = {"amount": amount, "currency": "usd", "source": source}
    return request(BASE, "POST", "/charge", json.dumps(body).encode(), {
        "Authorization": "Bearer " + API_KEY, "Idempotency-Key": key,
        "Content-Type": "application/json"})


def _redis(*args):
    return resp.command(REDIS_SOCKET, *args)


def snapshot():
    """Every key of the store with its type, value and whether it expires."""
    out = {}
    for k in sorted(_redis("KEYS", "*")):
        t = _redis("TYPE", k)
        if t == "hash":
            v = _redis("HGETALL", k)
        elif t == "zset":
            v = _redis("ZRANGE", k, "0", "-1", "WITHSCORES")
        elif t == "string":
            v = _redis("GET", k)
        else:
            v = t
        out[k] = (t, v, _redis("PTTL", k) > 0)
    return out


def rkey(key):
    return PREFIX + "idem:" + PRINCIPAL + ":" + key


def record(key):
    flat = _redis("HGETALL", rkey(key)) or []
    return {flat[i].decode(): flat[i + 1] for i in range(0, len(flat), 2)}


def state(key):
    v = _redis("HGET", rkey(key), "state")
    return v.decode() if v is not None else None


def indexed(key):
    return _redis("ZSCORE", PREFIX + "unknown", rkey(key)) is not None


def new_key(tag):
    return "wh-%s-%s" % (tag, uuid.uuid4().hex[:12])


def nonce():
    return "n" + uuid.uuid4().hex[:8]


def wait_for(fn, timeout_s, step=0.05):
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        v = fn()
        if v:
            return v
        time.sleep(step)
    return fn()


def sim_key(key):
    r = request(SIM, "GET", "/_sim/keys")
    check(r.status == 200, "GET /_sim/keys: %r" % r)
    for k in r.json().get("keys", []):
        md = k.get("metadata") or {}
        if md.get("charge_principal") == PRINCIPAL and md.get("charge_idempotency_key") == key:
            return k
    return None


def sim_charge(charge_id):
    r = request(SIM, "GET", "/v1/charges/" + charge_id, headers={"Authorization": "Bearer " + SIM_KEY})
    check(r.status == 200, "GET /v1/charges/%s: %r" % (charge_id, r))
    return r.json()


def downstream_key(key):
    """charge_ + hex HMAC-SHA256(provider_secret, principal NUL key NUL
    fingerprint): what the responder sends as the downstream key."""
    fp = record(key)["fingerprint"]
    msg = PRINCIPAL.encode() + b"\0" + key.encode() + b"\0" + fp
    return "charge_" + hmac.new(PROVIDER_SECRET.encode(), msg, hashlib.sha256).hexdigest()


def sign(payload, secret=SECRET, t=None):
    t = int(time.time()) if t is None else t
    mac = hmac.new(secret.encode(), str(t).encode() + b"." + payload, hashlib.sha256).hexdigest()
    return "t=%d,v1=%s" % (t, mac)


def event(etype, obj, eid=None):
    ev = {"id": eid or "evt_" + uuid.uuid4().hex[:24], "object": "event", "api_version": "2024-06-20",
          "created": int(time.time()), "type": etype, "data": {"object": obj}, "livemode": False}
    return json.dumps(ev, separators=(",", ":")).encode()


def post(payload, header=None, method="POST", extra=None):
    headers = {"Content-Type": "application/json"}
    if header is not None:
        headers["Stripe-Signature"] = header
    headers.update(extra or {})
    return request(BASE, method, PATH, payload, headers)


def ignored_event():
    return event("customer.created", {"id": "cus_" + nonce(), "object": "customer"})


def metric(name_labels):
    r = request(BASE, "GET", "/metrics")
    check(r.status == 200, "/metrics: %r" % r)
    for line in r.body.decode().splitlines():
        if line.startswith(name_labels + " "):
            return float(line.split()[-1])
    return None


def wh_metric(etype, result):
    return metric('charge_webhook_events_total{type="%s",result="%s"}' % (etype, result)) or 0.0


def expect_problem(r, status, slug, words):
    check(r.status == status, "status %d, want %d: %r" % (r.status, status, r))
    check(r.h("Content-Type") == "application/problem+json", "Content-Type %r" % r.h("Content-Type"))
    p = r.json()
    check(p.get("type") == "/problems/" + slug, "type %r, want %s" % (p.get("type"), slug))
    check(words in p.get("detail", ""), "detail %r does not say %r" % (p.get("detail"), words))


def unchanged(before, what):
    after = snapshot()
    check(after == before, "%s changed Redis:\n  before %r\n  after  %r" % (what, before, after))


def unknown_record(tag):
    """A request left unknown: the simulator charged it at once and
    answered after the deadline. Returns (key, source, the simulator's
    charge object, as GET /v1/charges/<id> gives it)."""
    key = new_key(tag)
    src = "tok_providerTimeout|" + nonce()
    r = charge(key, src)
    check(r.status == 504 and r.json().get("type") == "/problems/outcome-unknown", "first: %r" % r)
    check(state(key) == "unknown" and indexed(key), "record %r, indexed %r" % (state(key), indexed(key)))
    k = wait_for(lambda: (sim_key(key) or {}).get("charge") and sim_key(key), 5)
    check(k and k.get("charge"), "the simulator has no charge for %s: %r" % (key, k))
    return key, src, sim_charge(k["charge"])


def proven(key, c):
    """The charge as the provider reports it; metadata.charge_request is the
    downstream key the responder sent (checked against the simulator's own
    record of the key). A simulator build whose charges lack it (before the
    responder sent metadata[charge_request]) gets it from the test, which
    says so."""
    dk = downstream_key(key)
    k = sim_key(key)
    check(k["idempotency_key"] == dk, "downstream key %r, the simulator's %r" % (dk, k["idempotency_key"]))
    c = json.loads(json.dumps(c))
    md = c.setdefault("metadata", {})
    if "charge_request" not in md:
        diag("the charge carries no metadata.charge_request (the responder does not send it yet): the test adds the downstream key")
        md["charge_request"] = dk
    check(md["charge_request"] == dk, "metadata.charge_request %r, want %r" % (md["charge_request"], dk))
    return c


# ---------------------------------------------------------------- the route


@test("no provider_webhook_secret: the route is off (404 not-found), as plain CGI")
def t_off():
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHARGE_")}
    env.update({"CHARGE_REDIS_URL": os.environ["CHARGE_REDIS_URL"], "CHARGE_API_KEYS_FILE": os.environ["CHARGE_API_KEYS_FILE"],
                "CHARGE_METRICS_FILE": "none", "CHARGE_SPILL_DIR": os.environ["CHARGE_SPILL_DIR"],
                "GATEWAY_INTERFACE": "CGI/1.1", "REQUEST_METHOD": "POST", "REQUEST_URI": PATH,
                "CONTENT_LENGTH": "2", "CONTENT_TYPE": "application/json", "HTTP_STRIPE_SIGNATURE": "t=1,v1=00"})
    p = subprocess.run([os.environ["RESPONDER_BIN"]], input=b"{}", env=env, capture_output=True, timeout=20)
    out = p.stdout.decode(errors="replace")
    check(out.startswith("Status: 404"), "CGI answer %r (stderr %r)" % (out[:300], p.stderr[-300:]))
    check("/problems/not-found" in out, "answer %r" % out[:300])


@test("--check-config masks provider_webhook_secret and provider_webhook_secret_previous")
def t_masked():
    text = open(os.environ["CHECK_CONFIG_FILE"]).read()
    check("provider_webhook_secret = ********\n" in text, "check-config: %r" % text[-600:])
    check("provider_webhook_secret_previous = ********\n" in text, "check-config: %r" % text[-600:])
    check(SECRET not in text and SECRET_OLD not in text, "a secret is printed")


@test("GET on the webhook path: 405 with Allow: POST, nothing changed")
def t_method():
    before = snapshot()
    r = request(BASE, "GET", PATH)
    expect_problem(r, 405, "method-not-allowed", "POST")
    check(r.h("Allow") == "POST", "Allow %r" % r.h("Allow"))
    unchanged(before, "GET")


@test("a valid signature on an event of another type: 200 ignored, nothing changed")
def t_ignored():
    before = snapshot()
    n0 = wh_metric("other", "ignored")
    body = ignored_event()
    r = post(body, sign(body))
    check(r.status == 200 and r.json() == {"received": True, "result": "ignored"}, "%r" % r)
    check(r.h("Content-Type") == "application/json", "Content-Type %r" % r.h("Content-Type"))
    unchanged(before, "an ignored event")
    check(wh_metric("other", "ignored") == n0 + 1, "charge_webhook_events_total{other,ignored} did not count it")


SIG_CASES = [
    # name, header(body), status, slug, words in the detail
    ("missing header", lambda b: None, 400, "invalid-webhook", "Stripe-Signature"),
    ("empty header", lambda b: "", 400, "invalid-webhook", "Stripe-Signature"),
    ("malformed header (no t)", lambda b: "v1=" + "0" * 64, 400, "invalid-webhook", "malformed"),
    ("malformed header (garbage)", lambda b: "garbage", 400, "invalid-webhook", "malformed"),
    ("malformed header (short v1)", lambda b: sign(b).split(",")[0] + ",v1=abc", 400, "invalid-webhook", "malformed"),
    ("no v1 (another scheme only)", lambda b: sign(b).replace("v1=", "v0="), 400, "invalid-webhook", "no v1"),
    ("wrong secret", lambda b: sign(b, secret="whsec_someone_else"), 401, "webhook-signature-rejected", "matches"),
    ("tampered payload", lambda b: sign(b.replace(b'"livemode":false', b'"livemode":true ')), 401,
     "webhook-signature-rejected", "matches"),
    ("stale timestamp", lambda b: sign(b, t=int(time.time()) - TOLERANCE_S - 60), 401, "webhook-signature-rejected",
     "older than the tolerance"),
    ("future timestamp", lambda b: sign(b, t=int(time.time()) + TOLERANCE_S + 60), 401, "webhook-signature-rejected",
     "ahead"),
]


@test("every bad signature is refused (400 malformed or missing, 401 wrong, tampered, stale, future), naming what is wrong, nothing changed")
def t_signatures():
    failures = []
    n0 = wh_metric("other", "bad_signature")
    for name, header, status, slug, words in SIG_CASES:
        # a charge event for an unknown-looking request: if it got through
        # it would write the event's key at least
        body = event("charge.succeeded", {"id": "ch_x", "object": "charge", "amount": 1, "currency": "usd",
                                          "created": 1, "status": "succeeded",
                                          "metadata": {"charge_principal": PRINCIPAL,
                                                       "charge_idempotency_key": "wh-none"}})
        before = snapshot()
        r = post(body, header(body))
        try:
            expect_problem(r, status, slug, words)
            unchanged(before, name)
        except tap.Fail as e:
            failures.append("%s: %s" % (name, e))
    check(not failures, "\n".join(failures))
    n1 = wh_metric("other", "bad_signature")
    check(n1 == n0 + len(SIG_CASES), "bad_signature counted %r, want +%d" % (n1 - n0, len(SIG_CASES)))


@test("rotation: a header with two v1 values, and either configured secret alone, is accepted")
def t_rotation():
    body = ignored_event()
    t = int(time.time())
    new = sign(body, SECRET, t).split("v1=")[1]
    old = sign(body, SECRET_OLD, t).split("v1=")[1]
    for header in ("t=%d,v1=%s,v1=%s" % (t, new, old), "t=%d,v1=%s,v1=%s" % (t, "0" * 64, old),
                   "t=%d,v1=%s" % (t, old), "t=%d,v1=%s" % (t, new), "t=%d,v0=%s,v1=%s" % (t, "ab" * 32, new)):
        r = post(body, header)
        check(r.status == 200 and r.json()["result"] == "ignored", "%s: %r" % (header[:40], r))


@test("the body limit at its edge: exactly max_request_bytes is read (200), one more byte is 413 content-too-large, nothing changed")
def t_body_limit():
    before = snapshot()
    base = ignored_event()
    pad = MAX_BODY - len(base) - len(',"pad":""')
    body = base[:-1] + b',"pad":"' + b"x" * pad + b'"}'
    check(len(body) == MAX_BODY, "test bug: %d bytes" % len(body))
    r = post(body, sign(body))
    check(r.status == 200 and r.json()["result"] == "ignored", "at the limit: %r" % r)
    body = base[:-1] + b',"pad":"' + b"x" * (pad + 1) + b'"}'
    r = post(body, sign(body))
    expect_problem(r, 413, "content-too-large", str(MAX_BODY))
    unchanged(before, "the limit's edge")


@test("a signed body that is not an event: 400 invalid-webhook, nothing changed")
def t_not_event():
    before = snapshot()
    for body, words in ((b"[1,2]", "not an event"), (b'{"id":"evt_1","type":"charge.succeeded"}', "not an event"),
                        (event("charge.succeeded", {"id": "ch_1", "object": "charge"}), "data.object")):
        r = post(body, sign(body))
        expect_problem(r, 400, "invalid-webhook", words)
    unchanged(before, "a body that is not an event")


# ---------------------------------------------------------------- settling


SETTLED = {}


@test("an unknown outcome (charged, answer lost) is settled by its signed charge.succeeded within 1 s; the retry replays 201 byte-identical to what the provider path renders")
def t_settle():
    key, src, c = unknown_record("settle")
    c = proven(key, c)
    n0 = wh_metric("charge.succeeded", "settled")
    body = event("charge.succeeded", c)
    t0 = time.monotonic()
    r = post(body, sign(body))
    check(r.status == 200 and r.json() == {"received": True, "result": "settled"}, "%r" % r)
    done = wait_for(lambda: state(key) == "completed", 1.0, 0.01)
    took = time.monotonic() - t0
    check(done, "record %r after %.3f s" % (state(key), took))
    check(took < 1.0, "settled after %.3f s" % took)
    diag("settled %.0f ms after the event was posted (the 200 came after %.0f ms)" % (took * 1000, r.elapsed * 1000))
    check(not indexed(key), "still in the unknown index")
    check(wh_metric("charge.succeeded", "settled") == n0 + 1, "not counted as settled")
    rec = record(key)
    check(rec["status"] == b"201" and b"request" not in rec and b"lease_ms" not in rec, "record %r" % rec)
    r2 = charge(key, src)
    check(r2.status == 201 and r2.h("Idempotent-Replayed") == "true", "retry: %r" % r2)
    b = r2.json()
    check(b["id"] == c["id"] and b["created"] == c["created"] and b["amount"] == 1999 and b["idempotency_key"] == key,
          "body %r, charge %r" % (b, c["id"]))
    # what the retry renders from the provider's own answer, without the
    # webhook: the record gone, the same request runs again with the same
    # downstream key and the simulator replays its charge
    time.sleep(max(0.0, SIM_LATE_S + 0.3 - (time.monotonic() - t0)))
    _redis("DEL", rkey(key))
    r3 = charge(key, src)
    # the provider's replay is said as one (docs/API.md §17.2)
    check(r3.status == 201 and r3.h("Idempotent-Replayed") == "true", "re-run: %r" % r3)
    check(r3.body == r2.body, "the provider path renders\n  %r\nthe webhook recorded\n  %r" % (r3.body, r2.body))
    k = sim_key(key)
    check(k["charges"] == 1, "the simulator charged %r times" % k["charges"])
    SETTLED.update(key=key, src=src, charge=c, body=body, reply=r2.body)


@test("the same event delivered again: 200 duplicate, nothing changed")
def t_duplicate():
    check(SETTLED, "needs the settled record of the test before")
    before = snapshot()
    n0 = wh_metric("charge.succeeded", "duplicate")
    body = SETTLED["body"]
    for _ in range(3):
        r = post(body, sign(body))
        check(r.status == 200 and r.json()["result"] == "duplicate", "%r" % r)
    unchanged(before, "a redelivered event")
    check(wh_metric("charge.succeeded", "duplicate") == n0 + 3, "not counted as duplicates")


@test("another event for the charge the record settled with: 200 duplicate (a no-op), the record unchanged")
def t_same_charge():
    check(SETTLED, "needs the settled record")
    key = SETTLED["key"]
    before = record(key)
    body = event("charge.succeeded", SETTLED["charge"])
    r = post(body, sign(body))
    check(r.status == 200 and r.json()["result"] == "duplicate", "%r" % r)
    check(record(key) == before, "record changed")
    r2 = charge(key, SETTLED["src"])
    check(r2.body == SETTLED["reply"], "the replay changed")


@test("a settled record and an event with another charge for its request: provider-mismatch (200, alert in the log and /metrics), the record unchanged")
def t_settled_other_charge():
    check(SETTLED, "needs the settled record")
    key = SETTLED["key"]
    before = record(key)
    n0 = wh_metric("charge.succeeded", "mismatch")
    c = json.loads(json.dumps(SETTLED["charge"]))
    c["id"] = "ch_" + uuid.uuid4().hex[:24]
    body = event("charge.succeeded", c)
    r = post(body, sign(body))
    check(r.status == 200 and r.json()["result"] == "mismatch", "%r" % r)
    check(record(key) == before, "record changed")
    check(wh_metric("charge.succeeded", "mismatch") == n0 + 1, "not counted as a mismatch")
    log = wait_for(lambda: c["id"] in open(os.environ["RESPONDER_LOG"], errors="replace").read(), 2)
    check(log, "no log line names %s" % c["id"])
    lines = [l for l in open(os.environ["RESPONDER_LOG"], errors="replace") if c["id"] in l]
    check(any("provider-mismatch" in l for l in lines), "log %r" % lines)


MISMATCH = {}


@test("an unknown record and a charge not proven its own (amount, currency, downstream key): provider-mismatch, the record and the index untouched")
def t_mismatch():
    key, src, c = unknown_record("mismatch")
    c = proven(key, c)
    n0 = wh_metric("charge.succeeded", "mismatch")
    before = (record(key), _redis("ZSCORE", PREFIX + "unknown", rkey(key)))
    bad = []
    for what, change in (("amount", {"amount": 2000}), ("currency", {"currency": "eur"}),
                         ("downstream key", {"metadata": dict(c["metadata"], charge_request="charge_" + "0" * 64)}),
                         ("no downstream key", {"metadata": {k: v for k, v in c["metadata"].items()
                                                             if k != "charge_request"}})):
        body = event("charge.succeeded", dict(c, **change))
        r = post(body, sign(body))
        if r.status != 200 or r.json().get("result") != "mismatch":
            bad.append("%s: %r" % (what, r))
    check(not bad, "; ".join(bad))
    after = (record(key), _redis("ZSCORE", PREFIX + "unknown", rkey(key)))
    check(after == before, "record or index changed:\n  %r\n  %r" % (before, after))
    check(state(key) == "unknown", "state %r" % state(key))
    check(wh_metric("charge.succeeded", "mismatch") == n0 + 4, "mismatches counted %r" % (wh_metric("charge.succeeded", "mismatch") - n0))
    MISMATCH.update(key=key, since=time.time())


@test("an event for a request with no record, its charge older than completed_ttl_s (the record expired): 200 not_found, only the event's id kept")
def t_not_found():
    before = snapshot()
    ttl_s = int(os.environ.get("CHARGE_COMPLETED_TTL_S", "86400"))
    c = {"id": "ch_" + uuid.uuid4().hex[:24], "object": "charge", "amount": 1999, "currency": "usd",
         "created": int(time.time()) - ttl_s - 60, "status": "succeeded", "failure_code": None,
         "outcome": {"reason": None},
         "metadata": {"charge_principal": PRINCIPAL, "charge_idempotency_key": new_key("none"),
                      "charge_request": "charge_" + "1" * 64}}
    body = event("charge.succeeded", c)
    eid = json.loads(body)["id"]
    r = post(body, sign(body))
    check(r.status == 200 and r.json()["result"] == "not_found", "%r" % r)
    after = snapshot()
    ekey = (PREFIX + "event:" + eid).encode()
    check(set(after) - set(before) == {ekey}, "new keys %r" % (set(after) - set(before)))
    check(after[ekey][1] == b"not_found" and after[ekey][2], "event key %r" % (after[ekey],))
    ttl = _redis("PTTL", ekey)
    check(ttl > 3 * 86400 * 1000, "the event's id is kept %r ms, want > 3 days" % ttl)
    del after[ekey]
    check(after == before, "something else changed")


@test("issue 36: an event while its request's record is missing (a claim that lapsed, a record lost) is 503, its id not kept; delivered again once the record is back (unknown), it settles it")
def t_record_missing():
    key, src, c = unknown_record("missing")
    c = proven(key, c)
    saved = _redis("DUMP", rkey(key))
    check(saved is not None and _redis("DEL", rkey(key)) == 1, "the record was not there to take away")
    body = event("charge.succeeded", c)
    eid = json.loads(body)["id"]
    r = post(body, sign(body))
    diag("with no record: %r" % r)
    check(r.status == 503 and r.h("Retry-After"), "with no record: %r (want 503 with Retry-After: not final)" % r)
    check(_redis("EXISTS", PREFIX + "event:" + eid) == 0,
          "the event's id was kept (%r): its redeliveries could never settle the request"
          % (_redis("HGETALL", PREFIX + "event:" + eid),))
    check(_redis("RESTORE", rkey(key), 0, saved) in (b"OK", "OK"), "RESTORE failed")
    check(state(key) == "unknown", "state %r after RESTORE" % state(key))
    r = post(body, sign(body))
    check(r.status == 200 and r.json().get("result") == "settled", "redelivered with the record back: %r" % r)
    check(state(key) == "completed", "state %r" % state(key))
    r = charge(key, src)
    check(r.status == 201 and r.json().get("id") == c["id"], "the retry: %r (want 201 with %s)" % (r, c["id"]))


@test("issue 36: a fractional amount (1999.5 for a 1999 request) is refused (400 invalid-webhook naming the amount), never taken as 1999; nothing changed")
def t_fractional_amount():
    key, src, c = unknown_record("frac")
    c = proven(key, c)
    c["amount"] = c["amount"] + 0.5
    before = snapshot()
    body = event("charge.succeeded", c)
    r = post(body, sign(body))
    diag("amount %r: %r" % (c["amount"], r))
    expect_problem(r, 400, "invalid-webhook", "amount")
    unchanged(before, "the event with a fractional amount")
    check(state(key) == "unknown", "state %r" % state(key))


@test("out of order: the event before the request's own answer (still in progress) is 503 with Retry-After and changes nothing; delivered again after the request ended unknown, it settles it")
def t_early_event():
    key = new_key("early")
    src = "tok_providerTimeout|" + nonce()
    out = {}
    th = threading.Thread(target=lambda: out.update(r=charge(key, src)))
    th.start()
    k = wait_for(lambda: (sim_key(key) or {}).get("charge") and sim_key(key), 3, 0.02)
    check(k, "the simulator has no charge yet")
    check(state(key) == "in_progress", "state %r: too late to test the early event" % state(key))
    c = proven(key, sim_charge(k["charge"]))
    body = event("charge.succeeded", c)
    eid = json.loads(body)["id"]
    before = record(key)
    r = post(body, sign(body))
    expect_problem(r, 503, "service-unavailable", "still waiting")
    check(r.h("Retry-After") == "1", "Retry-After %r" % r.h("Retry-After"))
    check(_redis("EXISTS", PREFIX + "event:" + eid) == 0, "the event's claim was left behind")
    check(state(key) == "in_progress" and record(key) == before, "the record changed")
    th.join(10)
    check(out.get("r") is not None and out["r"].status == 504, "the request: %r" % out.get("r"))
    check(state(key) == "unknown", "state %r" % state(key))
    r = post(body, sign(body))
    check(r.status == 200 and r.json()["result"] == "settled", "redelivered: %r" % r)
    check(state(key) == "completed", "state %r" % state(key))


@test("out of order: an older event delivered after the record settled, and a charge.failed after charge.succeeded for the same charge, change nothing")
def t_out_of_order():
    check(SETTLED, "needs the settled record")
    key = SETTLED["key"]
    before = record(key)
    c = SETTLED["charge"]
    older = event("charge.succeeded", c)
    r = post(older, sign(older, t=int(time.time()) - TOLERANCE_S + 30))
    check(r.status == 200 and r.json()["result"] == "duplicate", "older event: %r" % r)
    failed = dict(c, status="failed", failure_code="card_declined", outcome={"reason": "generic_decline"})
    body = event("charge.failed", failed)
    r = post(body, sign(body))
    check(r.status == 200 and r.json()["result"] == "mismatch", "charge.failed after success: %r" % r)
    check(record(key) == before, "record changed")


@test("charge.failed settles an unknown record as the decline a retry would get: 402 payment-declined with the charge and its decline code")
def t_failed():
    key, src, c = unknown_record("failed")
    c = proven(key, c)
    failed = dict(c, id="ch_" + uuid.uuid4().hex[:24], status="failed", paid=False, captured=False,
                  failure_code="card_declined", failure_message="Your card has insufficient funds.",
                  outcome={"network_status": "declined_by_network", "reason": "insufficient_funds", "type": "issuer_declined"})
    body = event("charge.failed", failed)
    r = post(body, sign(body))
    check(r.status == 200 and r.json()["result"] == "settled", "%r" % r)
    check(state(key) == "failed" and not indexed(key), "state %r, indexed %r" % (state(key), indexed(key)))
    r2 = charge(key, src)
    check(r2.status == 402 and r2.h("Idempotent-Replayed") == "true", "retry: %r" % r2)
    p = r2.json()
    check(p.get("charge") == failed["id"] and p.get("decline_code") == "insufficient_funds", "problem %r" % p)
    # a real decline through the provider path, its charge id swapped
    key2 = new_key("decline")
    r3 = charge(key2, "tok_chargeDeclinedInsufficientFunds")
    check(r3.status == 402, "real decline: %r" % r3)
    real = r3.body.replace(r3.json()["charge"].encode(), failed["id"].encode())
    check(real == r2.body, "the provider path renders\n  %r\nthe webhook recorded\n  %r" % (real, r2.body))


@test("/metrics: charge_webhook_events_total by type and result, and charge_unknown_oldest_age_seconds from the index")
def t_metrics():
    check(MISMATCH, "needs the record left unknown by the mismatch test")
    r = request(BASE, "GET", "/metrics")
    text = r.body.decode()
    for res in ("settled", "duplicate", "ignored", "bad_signature", "malformed", "mismatch", "not_found", "retry", "error"):
        check('charge_webhook_events_total{type="charge.succeeded",result="%s"}' % res in text, "no %s line" % res)
    age = metric("charge_unknown_oldest_age_seconds")
    # the oldest unknown record is one of this run's: at least the mismatch
    # test's, and no older than the run
    check(age is not None, "no charge_unknown_oldest_age_seconds sample")
    least = time.time() - MISMATCH["since"] - 1
    check(least <= age <= 240, "age %r s, want at least %.1f" % (age, least))
    # what it is derived from: the index's second set, first-named times
    since = _redis("ZRANGE", "{" + PREFIX + "unknown}:since", "0", "0", "WITHSCORES")
    check(since and abs(time.time() - int(since[1]) / 1000.0 - age) <= 2, "since %r, age %r" % (since, age))
    diag("charge_unknown_oldest_age_seconds %g" % age)


@test("Redis down: a valid charge event is 503 with Retry-After (the provider delivers it again), within redis_timeout_ms")
def t_redis_down():
    key = MISMATCH["key"]
    body = event("charge.succeeded", {"id": "ch_" + nonce(), "object": "charge", "amount": 1999, "currency": "usd",
                                      "created": int(time.time()), "status": "succeeded",
                                      "metadata": {"charge_principal": PRINCIPAL, "charge_idempotency_key": key}})
    pid = int(open(os.environ["REDIS_PID_FILE"]).read())
    os.kill(pid, signal.SIGSTOP)
    try:
        r = post(body, sign(body))
    finally:
        os.kill(pid, signal.SIGCONT)
    expect_problem(r, 503, "service-unavailable", "unavailable")
    check(r.h("Retry-After") == "1", "Retry-After %r" % r.h("Retry-After"))
    check(r.elapsed < 3.0, "answered after %.2f s" % r.elapsed)
    # the claim (SET NX) may still run when Redis wakes: it is given back,
    # or lapses after lock_ttl_s
    eid = json.loads(body)["id"]
    gone = wait_for(lambda: _redis("EXISTS", PREFIX + "event:" + eid) == 0,
                    int(os.environ.get("CHARGE_LOCK_TTL_S", "5")) + 1, 0.2)
    check(gone, "the event's claim was left behind")


sys.exit(tap.run(only_env="WEBHOOK_ONLY"))
