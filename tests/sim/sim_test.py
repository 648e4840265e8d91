#!/usr/bin/env python3
"""Black-box tests of charge-provider-sim over real HTTP on loopback, for
tests/sim/run.sh (python3 standard library only). Starts and stops its own
simulators (each on 127.0.0.1 port 0, a data file under TMPDIR).

  sim_test.py SIM_BIN TMPDIR      (SIM_ONLY=regex runs some tests)
"""

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "lib"))
from tap import check, diag, run, test  # noqa: E402

BIN = os.path.abspath(sys.argv[1])
TMP = sys.argv[2]
SK = "sk_test_sim"
SK2 = "sk_test_other"
START_TIMEOUT_S = 10
SEQ = [0]


class Sim:
    """One simulator process; .port, .data; stop() asserts exit 0."""

    def __init__(self, *args, data=None):
        SEQ[0] += 1
        self.data = data or os.path.join(TMP, "sim%d.log" % SEQ[0])
        self.err = open(os.path.join(TMP, "sim%d.err" % SEQ[0]), "w+b")
        self.proc = subprocess.Popen(
            [BIN, "--listen", "127.0.0.1:0", "--data", self.data] + list(args),
            stdout=subprocess.DEVNULL, stderr=self.err)
        deadline = time.monotonic() + START_TIMEOUT_S
        self.port = None
        while time.monotonic() < deadline:
            self.err.seek(0)
            m = re.search(rb"listening on 127\.0\.0\.1:(\d+)", self.err.read())
            if m:
                self.port = int(m.group(1))
                break
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        if self.port is None:
            self.err.seek(0)
            raise RuntimeError("the simulator did not start: %r" % self.err.read())

    def stop(self):
        """SIGTERM; the exit status (0 expected)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                return "timeout"
        self.err.close()
        return self.proc.returncode

    def kill9(self):
        self.proc.kill()
        self.proc.wait()
        self.err.close()

    def conn(self, timeout=10):
        return http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)

    def sock(self, timeout=10):
        s = socket.create_connection(("127.0.0.1", self.port), timeout=timeout)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return s


def req(sim, method, path, form=None, key=None, sk=SK, headers=None, raw=None,
        conn=None):
    """One request; (status, lower-case headers, body bytes)."""
    h = {}
    if sk is not None:
        h["Authorization"] = "Bearer " + sk
    if key is not None:
        h["Idempotency-Key"] = key
    body = raw
    if form is not None:
        body = urllib.parse.urlencode(form).encode()
    if body is not None:
        h["Content-Type"] = "application/x-www-form-urlencoded"
    h.update(headers or {})
    c = conn or sim.conn()
    c.request(method, path, body=body, headers=h)
    r = c.getresponse()
    data = r.read()
    hdrs = {k.lower(): v for k, v in r.getheaders()}
    if conn is None:
        c.close()
    return r.status, hdrs, data


def charge(sim, key=None, source="tok_visa", amount=1999, extra=None, **kw):
    form = [("amount", str(amount)), ("currency", "usd"), ("source", source)]
    form += list(extra or [])
    return req(sim, "POST", "/v1/charges", form=form, key=key, **kw)


def raw_post(key, source, amount=1999, sk=SK):
    body = urllib.parse.urlencode([("amount", str(amount)), ("currency", "usd"),
                                   ("source", source)]).encode()
    return (b"POST /v1/charges HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
            sk.encode() + b"\r\nIdempotency-Key: " + key.encode() +
            b"\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: " +
            str(len(body)).encode() + b"\r\n\r\n" + body)


def sim_key(sim, key):
    st, _, body = req(sim, "GET", "/_sim/keys/" + urllib.parse.quote(key, safe=""),
                      sk=None)
    return json.loads(body) if st == 200 else None


def stats(sim):
    return json.loads(req(sim, "GET", "/_sim/stats", sk=None)[2])


def err_of(body):
    return json.loads(body)["error"]


MAIN = [None]
N = [0]


def main_sim():
    if MAIN[0] is None:
        MAIN[0] = Sim("--secret-key", SK, "--secret-key", SK2, "--late-ms", "1500",
                      "--trickle-ms", "5")
    return MAIN[0]


def fresh(prefix="k"):
    N[0] += 1
    return "%s-%d-%d" % (prefix, os.getpid(), N[0])


# --- tokens ---------------------------------------------------------------

SUCCESS = ["tok_visa", "tok_mastercard", "tok_amex", "tok_anythingElse"]
DECLINES = {
    "tok_chargeDeclined": ("card_declined", "generic_decline"),
    "tok_chargeDeclinedInsufficientFunds": ("card_declined", "insufficient_funds"),
    "tok_insufficientFunds": ("card_declined", "insufficient_funds"),
    "tok_chargeDeclinedExpiredCard": ("expired_card", "expired_card"),
    "tok_chargeDeclinedIncorrectCvc": ("incorrect_cvc", "incorrect_cvc"),
    "tok_chargeDeclinedFraudulent": ("card_declined", "fraudulent"),
}

CHARGE_KEYS = ["id", "object", "amount", "amount_captured", "amount_refunded",
               "captured", "created", "currency", "description", "failure_code",
               "failure_message", "livemode", "metadata", "outcome", "paid",
               "source", "status"]


@test("success tokens: 200 and a succeeded charge, members in the contract's order")
def t_success():
    s = main_sim()
    for tok in SUCCESS:
        st, h, body = charge(s, fresh(), tok, extra=[("metadata[b]", "2"),
                                                     ("metadata[a]", "1")])
        check(st == 200, "%s: status %d %s" % (tok, st, body))
        o = json.loads(body)
        check(list(o) == CHARGE_KEYS, "%s: members %s" % (tok, list(o)))
        check(re.fullmatch(r"ch_[0-9a-f]{24}", o["id"]), "id " + o["id"])
        check(o["status"] == "succeeded" and o["paid"] and o["captured"] and
              o["amount_captured"] == 1999 and o["currency"] == "usd" and
              o["source"] == tok, "%s: %s" % (tok, o))
        check(list(o["metadata"]) == ["a", "b"], "metadata sorted: %s" % o["metadata"])
        check(o["outcome"]["network_status"] == "approved_by_network", str(o))
        check(re.fullmatch(r"req_[0-9a-f]{24}", h["request-id"]), h["request-id"])
        check(h["content-type"] == "application/json", h["content-type"])
        check("stripe-should-retry" not in h, "no Stripe-Should-Retry on 200")


@test("decline tokens: 402 card_error naming the stored failed charge")
def t_declines():
    s = main_sim()
    for tok, (code, dcode) in DECLINES.items():
        k = fresh()
        st, h, body = charge(s, k, tok)
        check(st == 402, "%s: status %d" % (tok, st))
        e = err_of(body)
        check(list(e) == ["type", "code", "decline_code", "charge", "message"],
              "error members %s" % list(e))
        check(e["type"] == "card_error" and e["code"] == code and
              e["decline_code"] == dcode, "%s: %s" % (tok, e))
        check(h["stripe-should-retry"] == "false", "Should-Retry false on 402")
        st, _, cb = req(s, "GET", "/v1/charges/" + e["charge"])
        o = json.loads(cb)
        check(st == 200 and o["status"] == "failed" and not o["paid"] and
              not o["captured"] and o["amount_captured"] == 0 and
              o["failure_code"] == code and o["outcome"]["reason"] == dcode and
              o["outcome"]["type"] == "issuer_declined" and
              o["outcome"]["network_status"] == "declined_by_network", str(o))
        kk = sim_key(s, k)
        check(kk["charges"] == 1 and kk["status"] == 402 and kk["charge"] == e["charge"],
              str(kk))
        st2, h2, body2 = charge(s, k, tok)
        check(st2 == 402 and body2 == body and h2["idempotent-replayed"] == "true",
              "the 402 replays")


@test("idempotent replay: same status and bytes, Idempotent-Replayed true, fresh Request-Id")
def t_replay():
    s = main_sim()
    k = fresh()
    st1, h1, b1 = charge(s, k, extra=[("metadata[x]", "1"), ("description", "d")])
    # the same pairs in another order are the same parameters
    st2, h2, b2 = req(s, "POST", "/v1/charges", key=k, form=[
        ("description", "d"), ("metadata[x]", "1"), ("source", "tok_visa"),
        ("currency", "usd"), ("amount", "1999")])
    check(st1 == st2 == 200, "statuses %d %d" % (st1, st2))
    check(b1 == b2, "bytes differ:\n%r\n%r" % (b1, b2))
    check(h1["idempotent-replayed"] == "false" and h2["idempotent-replayed"] == "true",
          "%s / %s" % (h1.get("idempotent-replayed"), h2.get("idempotent-replayed")))
    check(h1["idempotency-key"] == k and h2["idempotency-key"] == k, "key echoed")
    check(h1["request-id"] != h2["request-id"], "Request-Id is fresh")
    kk = sim_key(s, k)
    check(kk["deliveries"] == 2 and kk["charges"] == 1, str(kk))


@test("same key, other parameters: 400 idempotency_error, nothing new stored")
def t_idem_error():
    s = main_sim()
    k = fresh()
    charge(s, k)
    st, h, b = charge(s, k, amount=2000)
    e = err_of(b)
    check(st == 400 and e["type"] == "idempotency_error", "%d %s" % (st, b))
    check("can only be used with the same parameters" in e["message"], e["message"])
    check(h["stripe-should-retry"] == "false", "Should-Retry false")
    st, _, _ = charge(s, k, extra=[("metadata[new]", "1")])
    check(st == 400, "metadata counts in the parameters: %d" % st)
    kk = sim_key(s, k)
    check(kk["charges"] == 1 and kk["deliveries"] == 3, str(kk))


@test("a delivery while the first is being processed: 409 idempotency_key_in_use")
def t_in_use():
    s = Sim("--latency-ms", "700")
    try:
        k = fresh()
        out = {}

        def first():
            out["first"] = charge(s, k)

        t = threading.Thread(target=first)
        t.start()
        time.sleep(0.25)
        st, h, b = charge(s, k)
        t.join(10)
        check(st == 409, "second: %d %s" % (st, b))
        e = err_of(b)
        check(e["code"] == "idempotency_key_in_use" and
              e["type"] == "invalid_request_error", str(e))
        check(h["stripe-should-retry"] == "true", "Should-Retry true on 409")
        check(out["first"][0] == 200, "first: %s" % (out["first"],))
        st3, h3, b3 = charge(s, k)
        check(st3 == 200 and b3 == out["first"][2] and
              h3["idempotent-replayed"] == "true", "then the stored answer")
        kk = sim_key(s, k)
        check(kk["charges"] == 1 and kk["deliveries"] == 3, str(kk))
        check(stats(s)["in_use"] == 1, str(stats(s)))
    finally:
        check(s.stop() == 0, "exit 0")


@test("token chain: the N-th delivery uses the N-th token, the last repeats")
def t_chain():
    s = main_sim()
    k = fresh()
    src = "tok_providerError|tok_providerError|tok_visa|n42"
    got = [charge(s, k, src) for _ in range(4)]
    check([g[0] for g in got] == [500, 500, 200, 200], str([g[0] for g in got]))
    check(got[3][2] == got[2][2] and got[3][1]["idempotent-replayed"] == "true",
          "the stored outcome replays")
    kk = sim_key(s, k)
    check(kk["deliveries"] == 4 and kk["charges"] == 1, str(kk))
    k2 = fresh()
    got = [charge(s, k2, "n1|tok_chargeDeclined|tok_visa")[0] for _ in range(2)]
    check(got == [402, 402], "a stored decline replays regardless of position: %s" % got)
    st, _, b = charge(s, fresh(), "n1|n2")
    check(st == 400 and err_of(b)["param"] == "source", "no token: %d %s" % (st, b))


@test("auth: no key, a wrong key, another account's key")
def t_auth():
    s = main_sim()
    k0 = fresh()
    st, h, b = charge(s, k0, sk=None)
    check(st == 401 and err_of(b)["type"] == "invalid_request_error", "%d %s" % (st, b))
    check(h["stripe-should-retry"] == "false", "Should-Retry false on 401")
    check(h.get("idempotency-key") == k0 and h.get("idempotent-replayed") == "false",
          "the key is echoed on a 401 too")
    check(sim_key(s, k0) is None, "a 401 is not a delivery")
    st, _, b = charge(s, fresh(), sk="sk_test_wrongABCD")
    check(st == 401 and err_of(b)["message"] == "Invalid API Key provided: sk_****ABCD",
          b.decode())
    st, _, b = req(s, "GET", "/v1/charges/ch_000000000000000000000000", sk="nope")
    check(st == 401, "GET needs auth too: %d" % st)
    k = fresh()
    st, _, b = charge(s, k, sk=SK2)
    check(st == 200, "second secret key: %d" % st)
    cid = json.loads(b)["id"]
    st, _, _ = req(s, "GET", "/v1/charges/" + cid, sk=SK)
    check(st == 404, "a charge is per account: %d" % st)
    st, h, _ = charge(s, k, sk=SK)
    check(st == 200 and h["idempotent-replayed"] == "false",
          "keys are per account: the same key under another account is new")


@test("validation: 400 invalid_request_error naming the param, never stored")
def t_validation():
    s = main_sim()
    base = [("amount", "1999"), ("currency", "usd"), ("source", "tok_visa")]

    def without(name):
        return [p for p in base if p[0] != name]

    cases = [
        (without("amount"), "amount", "parameter_missing"),
        ([("amount", "abc")] + without("amount"), "amount", "parameter_invalid_integer"),
        ([("amount", "-5")] + without("amount"), "amount", "parameter_invalid_integer"),
        ([("amount", "0")] + without("amount"), "amount", "amount_too_small"),
        ([("amount", "100000000")] + without("amount"), "amount", "amount_too_large"),
        (without("currency"), "currency", "parameter_missing"),
        ([("currency", "us")] + without("currency"), "currency", "parameter_invalid"),
        (without("source"), "source", "parameter_missing"),
        ([("source", "tok_" + "x" * 252)] + without("source"), "source", "parameter_invalid"),
        (base + [("foo", "1")], "foo", "parameter_unknown"),
        (base + [("description", "d" * 1001)], "description", "parameter_invalid"),
        (base + [("metadata[%s]" % ("n" * 41), "v")], "metadata[%s]" % ("n" * 41),
         "parameter_invalid"),
        (base + [("metadata[n]", "v" * 501)], "metadata[n]", "parameter_invalid"),
    ]
    for form, param, code in cases:
        k = fresh()
        st, h, b = req(s, "POST", "/v1/charges", form=form, key=k)
        e = err_of(b) if st == 400 else {}
        check(st == 400 and e.get("param") == param and e.get("code") == code and
              e.get("type") == "invalid_request_error",
              "%s: %d %s" % (param, st, b[:200]))
        check(list(e)[:3] == ["type", "code", "param"], "members %s" % list(e))
        check(h["stripe-should-retry"] == "false", "Should-Retry false")
        st, _, _ = charge(s, k)
        check(st == 200, "%s: a 400 is not stored under the key (then %d)" % (param, st))
    st, _, b = charge(s, fresh(), extra=[("currency", "eur")])
    check(st == 400, "a parameter twice: %d" % st)
    ok = charge(s, fresh(), extra=[("description", "d" * 1000)])[0]
    check(ok == 200, "description of 1000: %d" % ok)
    st, _, b = req(s, "POST", "/v1/charges", form=[("amount", "5"), ("currency", "EUR"),
                                                    ("source", "tok_visa")])
    check(st == 200 and json.loads(b)["currency"] == "eur", "currency lower-cased")


@test("GET /v1/charges/<id>: the created bytes, 404 resource_missing param id")
def t_get():
    s = main_sim()
    st, _, b = charge(s, fresh(), extra=[("description", "caf\u00e9 \"q\"")])
    cid = json.loads(b)["id"]
    st, _, g = req(s, "GET", "/v1/charges/" + cid)
    check(st == 200 and g == b, "%d\n%r\n%r" % (st, g, b))
    st, h, g = req(s, "GET", "/v1/charges/ch_ffffffffffffffffffffffff")
    e = err_of(g)
    check(st == 404 and e["code"] == "resource_missing" and e["param"] == "id", g.decode())
    check(h["stripe-should-retry"] == "false", "Should-Retry false on 404")
    st, _, _ = req(s, "GET", "/v1/nothing")
    check(st == 404, "unknown route: %d" % st)


@test("search by metadata: newest first, immediately consistent; other queries 400")
def t_search():
    s = main_sim()
    tag = fresh("order")
    ids = []
    for v in (tag, "other-" + tag, tag):
        st, _, b = charge(s, fresh(), extra=[("metadata[order_id]", v)])
        ids.append(json.loads(b)["id"])
    q = urllib.parse.quote("metadata['order_id']:'%s'" % tag)
    st, _, b = req(s, "GET", "/v1/charges/search?query=" + q)
    o = json.loads(b)
    check(st == 200 and o["object"] == "search_result" and not o["has_more"] and
          o["url"] == "/v1/charges/search", b[:200])
    check([c["id"] for c in o["data"]] == [ids[2], ids[0]], str([c["id"] for c in o["data"]]))
    st, _, b = req(s, "GET", "/v1/charges/search?query=" + urllib.parse.quote(
        "metadata['order_id']:'nothing-%s'" % tag))
    check(st == 200 and json.loads(b)["data"] == [], "no match: empty data")
    for bad in ["amount>5", "metadata['a']:'b' AND metadata['c']:'d'", ""]:
        st, _, b = req(s, "GET", "/v1/charges/search?query=" + urllib.parse.quote(bad))
        check(st == 400 and err_of(b)["param"] == "query", "%r: %d %s" % (bad, st, b))


# --- the list API and paged search ----------------------------------------

def get_json(sim, path, sk=SK, conn=None):
    st, _, b = req(sim, "GET", path, sk=sk, conn=conn)
    return st, json.loads(b)


def make_charges(sim, n, extra=None, sk=SK, source="tok_visa"):
    """n key-less charges on one kept-alive connection; their objects."""
    c = sim.conn()
    out = []
    for i in range(n):
        st, _, b = charge(sim, None, source, amount=100 + i, extra=extra, sk=sk,
                          conn=c)
        check(st in (200, 402), "charge %d: %d %s" % (i, st, b))
        out.append(json.loads(b) if st == 200 else
                   json.loads(req(sim, "GET", "/v1/charges/" + err_of(b)["charge"],
                                  sk=sk, conn=c)[2]))
    c.close()
    return out


def walk(sim, query, limit, sk=SK):
    """Follows starting_after from the newest page; (ids, pages)."""
    ids, pages, after = [], 0, None
    c = sim.conn()
    while True:
        q = query + "&limit=%d" % limit + ("&starting_after=" + after if after else "")
        st, o = get_json(sim, "/v1/charges?" + q, sk=sk, conn=c)
        check(st == 200 and o["object"] == "list" and o["url"] == "/v1/charges",
              "page %d: %d %s" % (pages, st, str(o)[:200]))
        check(len(o["data"]) <= limit, "page over the limit")
        pages += 1
        ids += [d["id"] for d in o["data"]]
        if not o["has_more"]:
            break
        check(o["data"], "has_more with an empty page")
        after = o["data"][-1]["id"]
        check(pages < 10000, "paging does not end")
    c.close()
    return ids, pages


def order_key(o):
    return o["created"]


@test("GET /v1/charges: newest first, ties in created kept in creation order; paging visits each charge once")
def t_list_paging():
    s = Sim("--secret-key", SK, "--secret-key", SK2, "--fsync", "never")
    try:
        made = make_charges(s, 30, extra=[("metadata[charge_request]", "r1"),
                                          ("metadata[x]", "a&b=c")])
        made += make_charges(s, 3, source="tok_chargeDeclined")
        time.sleep(1.1)
        made += make_charges(s, 24)
        other = make_charges(s, 5, sk=SK2)
        created = [m["created"] for m in made]
        check(len(set(created)) < len(created), "ties in created: %s" % sorted(set(created)))
        want = [m["id"] for m in reversed(made)]     # created desc, then sequence desc
        for limit in (1, 7, 10, 57, 100):
            ids, pages = walk(s, "", limit)
            check(ids == want, "limit %d: order %s..., want %s..." % (limit, ids[:3], want[:3]))
            check(pages == max(1, -(-len(want) // limit)) or
                  (len(want) % limit == 0 and pages == len(want) // limit),
                  "limit %d: %d pages" % (limit, pages))
        st, o = get_json(s, "/v1/charges")
        check(len(o["data"]) == 10 and o["has_more"], "default limit 10")
        full = {d["id"]: d for d in o["data"]}
        st, o = get_json(s, "/v1/charges?limit=100")
        byid = {d["id"]: d for d in o["data"]}
        for m in made[:33]:
            d = byid.get(m["id"])
            if d is None:
                continue
            check(d == m, "the listed object is the created one: %s" % m["id"])
        check(any(d["status"] == "failed" for d in byid.values()), "declines are listed")
        r1 = [d for d in byid.values() if d["metadata"].get("charge_request") == "r1"]
        check(r1 and all(d["metadata"] == {"charge_request": "r1", "x": "a&b=c"} for d in r1),
              "full metadata: %s" % (r1[:1],))
        check(not set(byid) & {m["id"] for m in other}, "another account's charges are not listed")
        ids, _ = walk(s, "", 2, sk=SK2)
        check(ids == [m["id"] for m in reversed(other)], "the other account sees its own")
        # ending_before: the page just newer than the cursor, newest first
        mid = want[20]
        st, o = get_json(s, "/v1/charges?limit=5&ending_before=" + mid)
        check([d["id"] for d in o["data"]] == want[15:20] and o["has_more"],
              "ending_before: %s" % [d["id"] for d in o["data"]])
        st, o = get_json(s, "/v1/charges?limit=5&ending_before=" + want[3])
        check([d["id"] for d in o["data"]] == want[0:3] and not o["has_more"],
              "ending_before near the top")
        st, o = get_json(s, "/v1/charges?limit=100&starting_after=" + want[-1])
        check(o["data"] == [] and not o["has_more"], "after the oldest: empty")
        # the order survives a restart (the file is replayed in order)
        check(s.stop() == 0, "exit 0")
        s = Sim("--secret-key", SK, "--secret-key", SK2, data=s.data)
        ids, _ = walk(s, "", 9)
        check(ids == want, "after a restart: the same order")
    finally:
        s.stop()


@test("GET /v1/charges: created[gt|gte|lt|lte] and created at their edges")
def t_list_ranges():
    s = Sim("--fsync", "never")
    try:
        made = make_charges(s, 4)
        time.sleep(1.1)
        made += make_charges(s, 4)
        time.sleep(1.1)
        made += make_charges(s, 4)
        secs = sorted(set(m["created"] for m in made))
        check(len(secs) >= 3, "three distinct seconds: %s" % secs)
        t = secs[1]
        at = [m["id"] for m in reversed(made) if m["created"] == t]
        older = [m["id"] for m in reversed(made) if m["created"] < t]
        newer = [m["id"] for m in reversed(made) if m["created"] > t]
        cases = {
            "created[gte]=%d&created[lte]=%d" % (t, t): at,
            "created=%d" % t: at,
            "created[gt]=%d" % t: newer,
            "created[gte]=%d" % t: newer + at,
            "created[lt]=%d" % t: older,
            "created[lte]=%d" % t: at + older,
            "created[gt]=%d&created[lt]=%d" % (t, t): [],
            "created[gt]=%d&created[lte]=%d" % (t - 1, t): at,
            "created[gte]=%d&created[lt]=%d" % (t, t + 1): at,
            "created[gte]=%d&created[lte]=%d" % (t + 1, t - 1): [],
            "created[gte]=0&created[lte]=%d" % (secs[-1] + 100): newer + at + older,
            "created[lt]=-5": [],
        }
        for q, want in cases.items():
            for limit in (1, 3, 100):
                ids, _ = walk(s, q, limit)
                check(ids == want, "%s limit %d: %d ids, want %d" % (q, limit, len(ids), len(want)))
        # a cursor outside the range still pages within it
        st, o = get_json(s, "/v1/charges?created[lte]=%d&starting_after=%s" % (t, newer[0]))
        check([d["id"] for d in o["data"]] == (at + older)[:10], "cursor newer than the range")
        st, o = get_json(s, "/v1/charges?created[gte]=%d&ending_before=%s" % (t, older[-1]))
        check([d["id"] for d in o["data"]] == (newer + at)[-10:], "ending_before older than the range")
    finally:
        check(s.stop() == 0, "exit 0")


@test("GET /v1/charges: limit 0/1/100/101 and bad parameters are 400 naming the param")
def t_list_params():
    s = Sim("--secret-key", SK, "--secret-key", SK2, "--fsync", "never")
    try:
        made = make_charges(s, 101)
        other = make_charges(s, 1, sk=SK2)[0]
        st, o = get_json(s, "/v1/charges?limit=1")
        check(st == 200 and len(o["data"]) == 1 and o["has_more"], "limit 1")
        st, o = get_json(s, "/v1/charges?limit=100")
        check(st == 200 and len(o["data"]) == 100 and o["has_more"], "limit 100")
        st, o = get_json(s, "/v1/charges?limit=100&starting_after=" + o["data"][-1]["id"])
        check(st == 200 and [d["id"] for d in o["data"]] == [made[0]["id"]] and
              not o["has_more"], "the 101st")
        bad = {
            "limit=0": ("limit", "parameter_invalid_integer"),
            "limit=101": ("limit", "parameter_invalid_integer"),
            "limit=": ("limit", "parameter_invalid_integer"),
            "limit=ten": ("limit", "parameter_invalid_integer"),
            "limit=-1": ("limit", "parameter_invalid_integer"),
            "limit=1&limit=2": ("limit", "parameter_invalid"),
            "created[gte]=abc": ("created[gte]", "parameter_invalid_integer"),
            "created%5Blte%5D=1.5": ("created[lte]", "parameter_invalid_integer"),
            "created[gt]=": ("created[gt]", "parameter_invalid_integer"),
            "created[lt]=99999999999999999999": ("created[lt]", "parameter_invalid_integer"),
            "created[eq]=5": ("created[eq]", "parameter_unknown"),
            "customer=cus_1": ("customer", "parameter_unknown"),
            "starting_after=ch_nope": ("starting_after", "resource_missing"),
            "ending_before=ch_000000000000000000000000": ("ending_before", "resource_missing"),
            "starting_after=" + other["id"]: ("starting_after", "resource_missing"),
            "starting_after=%s&ending_before=%s" % (made[5]["id"], made[1]["id"]):
                ("ending_before", "parameter_invalid"),
            "query=x": ("query", "parameter_unknown"),
        }
        for q, (param, code) in bad.items():
            st, h, b = req(s, "GET", "/v1/charges?" + q)
            e = err_of(b) if st == 400 else {}
            check(st == 400 and e.get("type") == "invalid_request_error" and
                  e.get("param") == param and e.get("code") == code,
                  "%s: %d %s" % (q, st, b))
            check(h["stripe-should-retry"] == "false", "%s: Should-Retry false" % q)
        st, _, b = req(s, "GET", "/v1/charges", sk=None)
        check(st == 401, "no key: %d" % st)
        st, _, b = req(s, "POST", "/v1/charges?limit=5", raw=b"amount=1")
        check(st == 400, "POST still creates (and validates): %d" % st)
    finally:
        check(s.stop() == 0, "exit 0")


@test("GET /v1/charges: paging 3000 charges by 100 stays fast (the index, not a scan per page)")
def t_list_scale():
    s = Sim("--fsync", "never")
    try:
        c = s.conn()
        body = urllib.parse.urlencode([("amount", "5"), ("currency", "usd"),
                                       ("source", "tok_visa"),
                                       ("metadata[charge_request]", "bulk")]).encode()
        h = {"Authorization": "Bearer " + SK,
             "Content-Type": "application/x-www-form-urlencoded"}
        for _ in range(3000):
            c.request("POST", "/v1/charges", body=body, headers=h)
            r = c.getresponse()
            r.read()
            check(r.status == 200, "charge: %d" % r.status)
        c.close()
        t0 = time.monotonic()
        ids, pages = walk(s, "created[gte]=0&created[lte]=%d" % (int(time.time()) + 5), 100)
        dt = time.monotonic() - t0
        check(len(ids) == 3000 and len(set(ids)) == 3000 and pages == 30,
              "%d ids, %d distinct, %d pages" % (len(ids), len(set(ids)), pages))
        diag("3000 charges in 30 pages of 100: %.2f s" % dt)
        check(dt < 20, "paging took %.1f s" % dt)
    finally:
        check(s.stop() == 0, "exit 0")


def search(sim, q, extra="", sk=SK):
    st, _, b = req(sim, "GET", "/v1/charges/search?query=" +
                   urllib.parse.quote(q, safe="") + extra, sk=sk)
    return st, json.loads(b)


def quote_sq(v):
    return "'" + v.replace("\\", "\\\\").replace("'", "\\'") + "'"


@test("search: a ' or \\ in the metadata name or value, escaped as Stripe's query language")
def t_search_escapes():
    s = main_sim()
    tag = fresh("esc")
    values = [tag + "-o'brien", tag + "-back\\slash", tag + "-both\\'x", tag + "-\\\\",
              tag + "-\"dq\"", tag + "-end\\"]
    ids = {}
    for v in values:
        st, _, b = charge(s, fresh(), extra=[("metadata[charge_request]", v),
                                              ("metadata[it's\\]", v)])
        check(st == 200, "charge %r: %d" % (v, st))
        ids[v] = json.loads(b)["id"]
    for v in values:
        for name in ("charge_request", "it's\\"):
            st, o = search(s, "metadata[%s]:%s" % (quote_sq(name), quote_sq(v)))
            check(st == 200 and [d["id"] for d in o["data"]] == [ids[v]],
                  "%r in %r: %d %s" % (v, name, st, str(o)[:200]))
    # double quotes, blanks around the colon
    v = values[0]
    st, o = search(s, "metadata[\"charge_request\"] : \"%s\"" % v.replace("\\", "\\\\"))
    check(st == 200 and [d["id"] for d in o["data"]] == [ids[v]], "double quotes: %s" % o)
    # a prefix is not a match; an unescaped quote ends the string (then 400)
    st, o = search(s, "metadata['charge_request']:'%s'" % tag)
    check(st == 200 and o["data"] == [], "no prefix match")
    for bad in ["metadata['charge_request']:'%s'" % values[0],  # o'brien unescaped
                "metadata['charge_request']:'abc",
                "metadata['charge_request']:'abc\\'",
                "metadata[charge_request]:'x'",
                "metadata['a']:'b' x"]:
        st, o = search(s, bad)
        check(st == 400 and o["error"]["param"] == "query", "%r: %d %s" % (bad, st, o))


@test("search paging: limit, has_more, next_page (opaque) visit every match once")
def t_search_paging():
    s = main_sim()
    tag = fresh("pg")
    made = []
    c = s.conn()
    for i in range(25):
        st, _, b = charge(s, None, extra=[("metadata[batch]", tag)], conn=c)
        made.append(json.loads(b)["id"])
        if i % 5 == 0:
            charge(s, None, extra=[("metadata[batch]", "x" + tag)], conn=c)
    c.close()
    q = "metadata['batch']:'%s'" % tag
    st, o = search(s, q)
    check(st == 200 and len(o["data"]) == 10 and o["has_more"] and
          isinstance(o["next_page"], str), "default limit 10: %s" % str(o)[:200])
    for limit in (1, 10, 24, 25, 100):
        seen, page, n = [], None, 0
        while True:
            st, o = search(s, q, "&limit=%d" % limit +
                           ("&page=" + urllib.parse.quote(page) if page else ""))
            check(st == 200 and o["object"] == "search_result" and len(o["data"]) <= limit,
                  "limit %d: %d %s" % (limit, st, str(o)[:200]))
            seen += [d["id"] for d in o["data"]]
            n += 1
            if not o["has_more"]:
                check(o["next_page"] is None, "next_page null on the last page")
                break
            page = o["next_page"]
            check(n < 100, "endless")
        check(seen == made[::-1], "limit %d: %d seen" % (limit, len(seen)))
    for extra, param in (("&limit=0", "limit"), ("&limit=101", "limit"),
                         ("&page=pg_nope", "page"), ("&page=" + made[3], "page"),
                         ("&starting_after=" + made[3], "starting_after")):
        st, o = search(s, q, extra)
        check(st == 400 and o["error"]["param"] == param, "%s: %d %s" % (extra, st, o))
    st, o = search(s, q, "&limit=5", sk=SK2)
    check(st == 200 and o["data"] == [], "another account finds nothing")
    st, _, b = req(s, "GET", "/v1/charges/search?limit=5")
    check(st == 400 and err_of(b)["param"] == "query", "no query: %d %s" % (st, b))


@test("files are created 0600 whatever the umask: the store and its compaction")
def t_file_mode():
    old = os.umask(0)
    try:
        s = Sim()
    finally:
        os.umask(old)
    try:
        check(os.stat(s.data).st_mode & 0o777 == 0o600,
              "store mode %o" % (os.stat(s.data).st_mode & 0o777))
        c = s.conn()
        k = fresh()
        for _ in range(80):
            charge(s, k, conn=c)
        c.close()
    finally:
        check(s.stop() == 0, "exit 0")
    os.chmod(s.data, 0o644)
    open(s.data + ".compact", "w").close()
    os.chmod(s.data + ".compact", 0o666)   # a stale one from a crash
    old = os.umask(0)
    try:
        s2 = Sim(data=s.data)
    finally:
        os.umask(old)
    try:
        n = open(s2.data, "rb").read().count(b"\n")
        check(n < 80, "compacted: %d lines" % n)
        check(os.stat(s2.data).st_mode & 0o777 == 0o600,
              "compacted store mode %o" % (os.stat(s2.data).st_mode & 0o777))
    finally:
        check(s2.stop() == 0, "exit 0")


@test("/_sim/keys: every key seen, with metadata; 404 for an unknown key")
def t_sim_keys():
    s = main_sim()
    k = "a key/with?odd&chars=+%"
    charge(s, k, "tok_providerError", extra=[("metadata[charge_principal]", "p1")])
    kk = sim_key(s, k)
    check(kk is not None and kk["idempotency_key"] == k and kk["deliveries"] == 1 and
          kk["charges"] == 0 and kk["charge"] is None and kk["status"] is None and
          kk["metadata"] == {"charge_principal": "p1"}, str(kk))
    check(sim_key(s, "never-" + fresh()) is None, "an unknown key is 404")
    keys = json.loads(req(s, "GET", "/_sim/keys", sk=None)[2])["keys"]
    check(any(x["idempotency_key"] == k for x in keys), "listed in /_sim/keys")
    check(all(x["charges"] <= 1 for x in keys), "charges per key <= 1")
    st = stats(s)
    check(set(st) == {"deliveries", "charges", "keys", "replays", "in_use", "faults",
                      "liberties", "webhooks"}, str(st))
    check(set(st["faults"]) == {"error", "charged_then_500", "charged_then_close",
                                "charged_then_reset", "charged_then_late", "reset",
                                "refuse", "trickle", "rate_limited"}, str(st["faults"]))


# --- faults on the wire --------------------------------------------------------


def send_raw(s, data, timeout=5):
    """Sends data; (bytes received until EOF, 'eof' | 'reset' | 'timeout')."""
    c = None
    got = b""
    try:
        # a connection reset at accept may be gone before connect(2) returns
        c = s.sock(timeout)
        c.sendall(data)
        while True:
            d = c.recv(65536)
            if not d:
                return got, "eof"
            got += d
    except ConnectionResetError:
        return got, "reset"
    except socket.timeout:
        return got, "timeout"
    finally:
        if c is not None:
            c.close()


@test("tok_providerError and tok_providerRateLimited: 500 / 429, nothing charged")
def t_error_tokens():
    s = main_sim()
    k = fresh()
    st, h, b = charge(s, k, "tok_providerError")
    check(st == 500 and err_of(b) == {"type": "api_error",
                                      "message": "An unknown error occurred"}, b.decode())
    check(h["stripe-should-retry"] == "true", "Should-Retry true on 500")
    k2 = fresh()
    st, h, b = charge(s, k2, "tok_providerRateLimited")
    check(st == 429 and err_of(b)["code"] == "lock_timeout", b.decode())
    check(h["stripe-should-retry"] == "true", "Should-Retry true on 429")
    for kk in (sim_key(s, k), sim_key(s, k2)):
        check(kk["charges"] == 0 and kk["deliveries"] == 1 and kk["status"] is None, str(kk))
    st, _, _ = charge(s, k, "tok_providerError")
    check(st == 500, "a 500 is not stored: the retry executes again (%d)" % st)


@test("tok_providerReset: RST after reading, nothing charged")
def t_reset():
    s = main_sim()
    k = fresh()
    got, how = send_raw(s, raw_post(k, "tok_providerReset"))
    check(how == "reset" and got == b"", "%s %r" % (how, got[:80]))
    kk = sim_key(s, k)
    check(kk["deliveries"] == 1 and kk["charges"] == 0, str(kk))


@test("tok_providerChargedThen500: charged and stored, the wire says 500")
def t_charged_500():
    s = main_sim()
    k = fresh()
    st, _, b = charge(s, k, "tok_providerChargedThen500")
    check(st == 500 and err_of(b)["type"] == "api_error", b.decode())
    kk = sim_key(s, k)
    check(kk["charges"] == 1 and kk["status"] == 200, str(kk))
    st, h, b = charge(s, k, "tok_providerChargedThen500")
    check(st == 200 and h["idempotent-replayed"] == "true" and
          json.loads(b)["id"] == kk["charge"], "the retry replays the charge")


@test("tok_providerChargedThenClose: charged, FIN without an answer")
def t_charged_close():
    s = main_sim()
    k = fresh()
    got, how = send_raw(s, raw_post(k, "tok_providerChargedThenClose"))
    check(how == "eof" and got == b"", "%s %r" % (how, got[:80]))
    kk = sim_key(s, k)
    check(kk["charges"] == 1 and kk["status"] == 200, str(kk))
    st, h, _ = charge(s, k, "tok_providerChargedThenClose")
    check(st == 200 and h["idempotent-replayed"] == "true", "replayed: %d" % st)


@test("tok_providerChargedThenReset: charged, RST without an answer")
def t_charged_reset():
    s = main_sim()
    k = fresh()
    got, how = send_raw(s, raw_post(k, "tok_providerChargedThenReset"))
    check(how == "reset" and got == b"", "%s %r" % (how, got[:80]))
    kk = sim_key(s, k)
    check(kk["charges"] == 1 and kk["status"] == 200, str(kk))


@test("tok_providerChargedThenLate / tok_providerTimeout: charged at once, answer after --late-ms, 409 meanwhile")
def t_late():
    s = main_sim()   # --late-ms 1500
    for tok in ("tok_providerChargedThenLate", "tok_providerTimeout"):
        k = fresh()
        c = s.sock(timeout=0.6)
        t0 = time.monotonic()
        c.sendall(raw_post(k, tok))
        try:
            early = c.recv(100)
        except socket.timeout:
            early = None
        check(early is None, "%s: nothing before --late-ms (%r)" % (tok, early))
        kk = sim_key(s, k)
        check(kk["charges"] == 1 and kk["status"] == 200, "charged at once: %s" % kk)
        st, h, b = charge(s, k, tok)
        check(st == 409 and h["stripe-should-retry"] == "true", "meanwhile: %d" % st)
        c.settimeout(5)
        got = b""
        while b"\r\n\r\n" not in got or not got.endswith(b"}"):
            d = c.recv(65536)
            if not d:
                break
            got += d
        dt = time.monotonic() - t0
        c.close()
        check(got.startswith(b"HTTP/1.1 200 ") and 1.3 <= dt < 6, "%s: %.2fs %r" % (tok, dt, got[:40]))
        check(json.loads(got.split(b"\r\n\r\n", 1)[1])["id"] == kk["charge"], "the charge")


@test("a half-closed client gets its answer; a client gone mid-answer is no harm")
def t_half_close():
    s = main_sim()
    c = s.sock()
    c.sendall(raw_post(fresh(), "tok_visa"))
    c.shutdown(socket.SHUT_WR)
    got = b""
    while True:
        d = c.recv(65536)
        if not d:
            break
        got += d
    c.close()
    check(got.startswith(b"HTTP/1.1 200 "), "after SHUT_WR: %r" % got[:40])
    # the client leaves while an answer trickles: writes fail (EPIPE), the
    # simulator lives on
    k = fresh()
    c = s.sock()
    c.sendall(raw_post(k, "tok_providerSlow"))
    check(len(c.recv(5)) > 0, "the trickle started")
    c.close()
    time.sleep(0.3)
    check(s.proc.poll() is None, "still running")
    check(sim_key(s, k)["charges"] == 1, "charged")
    st, _, _ = charge(s, fresh())
    check(st == 200, "still serving: %d" % st)
    st, _, _ = req(s, "GET", "/_sim/keys/" + urllib.parse.quote(k, safe="").replace("-", "%2D"), sk=None)
    check(st == 200, "a key with escaped characters in the path: %d" % st)


@test("a client gone during a late answer: the key stays in flight until --late-ms, then replays")
def t_late_gone():
    s = main_sim()   # --late-ms 1500
    k = fresh()
    t0 = time.monotonic()
    c = s.sock()
    c.sendall(raw_post(k, "tok_providerChargedThenLate"))
    time.sleep(0.2)
    c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    c.close()   # RST: the client gave up
    time.sleep(0.2)
    st, _, _ = charge(s, k, "tok_providerChargedThenLate")
    check(st == 409, "still in flight after the client left: %d" % st)
    time.sleep(max(0, 1.5 - (time.monotonic() - t0)) + 0.3)
    st, h, _ = charge(s, k, "tok_providerChargedThenLate")
    check(st == 200 and h["idempotent-replayed"] == "true", "then the replay: %d" % st)
    check(sim_key(s, k)["charges"] == 1, str(sim_key(s, k)))


@test("tok_providerSlow: charged, the answer trickles one byte per --trickle-ms")
def t_trickle():
    s = main_sim()   # --trickle-ms 5
    k = fresh()
    c = s.sock(timeout=10)
    t0 = time.monotonic()
    c.sendall(raw_post(k, "tok_providerSlow"))
    chunks = []
    got = b""
    while True:
        d = c.recv(65536)
        if not d:
            break
        chunks.append(d)
        got += d
        if b"\r\n\r\n" in got:
            head, body = got.split(b"\r\n\r\n", 1)
            m = re.search(rb"Content-Length: (\d+)", head)
            if m and len(body) >= int(m.group(1)):
                break
    dt = time.monotonic() - t0
    c.close()
    check(got.startswith(b"HTTP/1.1 200 "), repr(got[:40]))
    check(len(chunks) > len(got) / 4, "%d chunks for %d bytes" % (len(chunks), len(got)))
    check(dt >= len(got) * 0.005 * 0.8, "%.2fs for %d bytes" % (dt, len(got)))
    diag("%d bytes in %d chunks, %.2fs" % (len(got), len(chunks), dt))
    kk = sim_key(s, k)
    check(kk["charges"] == 1, str(kk))


def statuses_with_seed(seed, n=60):
    s = Sim("--seed", str(seed), "--fault-rate", "error=0.25",
            "--fault-rate", "charged_then_500=0.15", "--fault-rate", "rate_limited=0.1")
    try:
        out = [charge(s, "seed-%d" % i)[0] for i in range(n)]
        return out, stats(s)
    finally:
        check(s.stop() == 0, "exit 0")


@test("rate faults: deterministic with --seed, counted in /_sim/stats")
def t_rates():
    a, sa = statuses_with_seed(7)
    b, sb = statuses_with_seed(7)
    c, _ = statuses_with_seed(8)
    check(a == b, "same seed, same sequence:\n%s\n%s" % (a, b))
    check(a != c, "another seed, another sequence")
    f = sa["faults"]
    check(a.count(500) == f["error"] + f["charged_then_500"] and
          a.count(429) == f["rate_limited"], "%s %s" % (a, f))
    check(f["error"] > 0 and f["charged_then_500"] > 0 and a.count(200) > 0, str(f))
    check(sa["charges"] == a.count(200) + f["charged_then_500"], str(sa))
    diag("seed 7: %d x 200, %d x 500, %d x 429" % (a.count(200), a.count(500), a.count(429)))


@test("rate fault refuse: a new connection is reset before anything is read")
def t_refuse():
    s = Sim("--fault-rate", "refuse=1")
    try:
        got, how = send_raw(s, raw_post(fresh(), "tok_visa"))
        check(how == "reset" and got == b"", "%s %r" % (how, got))
    finally:
        check(s.stop() == 0, "exit 0")


@test("many concurrent deliveries on one key: exactly one charge")
def t_concurrent():
    s = Sim("--latency-ms", "20")
    try:
        k = fresh()
        results = []
        lock = threading.Lock()

        def worker():
            c = s.conn()
            for _ in range(5):
                r = charge(s, k, conn=c)
                with lock:
                    results.append(r)
            c.close()

        ts = [threading.Thread(target=worker) for _ in range(24)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(60)
        sts = [r[0] for r in results]
        check(len(sts) == 120 and set(sts) <= {200, 409}, str(sorted(set(sts))))
        bodies = {r[2] for r in results if r[0] == 200}
        check(len(bodies) == 1, "every 200 is the same charge: %d bodies" % len(bodies))
        kk = sim_key(s, k)
        check(kk["charges"] == 1 and kk["deliveries"] == 120, str(kk))
        check(stats(s)["charges"] == 1, str(stats(s)))
        diag("%d x 200, %d x 409" % (sts.count(200), sts.count(409)))
    finally:
        check(s.stop() == 0, "exit 0")


@test("soak: every fault at once from 16 threads for 4 s; at most one charge per key, exit 0")
def t_soak():
    rates = ["error", "charged_then_500", "charged_then_close", "charged_then_reset",
             "charged_then_late", "reset", "trickle", "rate_limited", "refuse"]
    args = ["--late-ms", "200", "--trickle-ms", "1", "--latency-p50-ms", "1",
            "--latency-p99-ms", "30", "--max-connections", "12"]
    for r in rates:
        args += ["--fault-rate", r + "=0.05"]
    s = Sim(*args)
    counts = {"ok": 0, "err": 0}
    lock = threading.Lock()
    stop = time.monotonic() + 4

    def worker(n):
        i = 0
        c = None
        while time.monotonic() < stop:
            i += 1
            k = "soak-%d-%d" % (n, i // 3)   # each key delivered about 3 times
            try:
                if c is None:
                    c = s.conn(timeout=2)
                charge(s, k, conn=c)
                with lock:
                    counts["ok"] += 1
            except (OSError, http.client.HTTPException):
                with lock:
                    counts["err"] += 1
                if c is not None:
                    c.close()
                c = None
        if c is not None:
            c.close()

    try:
        ts = [threading.Thread(target=worker, args=(n,)) for n in range(16)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(30)
        check(s.proc.poll() is None, "alive after the soak")

        def read(path):
            # the refuse rate resets any new connection, ours too
            for _ in range(50):
                try:
                    return json.loads(req(s, "GET", path, sk=None)[2])
                except ConnectionResetError:
                    time.sleep(0.01)
            raise AssertionError("GET %s: every connection reset" % path)

        keys = read("/_sim/keys")["keys"]
        check(keys and all(x["charges"] <= 1 for x in keys),
              "charges per key <= 1 over %d keys" % len(keys))
        st = read("/_sim/stats")
        check(all(st["faults"][r] > 0 for r in rates if r != "refuse"), str(st["faults"]))
        diag("%d answers, %d connection errors; %s" % (counts["ok"], counts["err"], st))
    finally:
        check(s.stop() == 0, "exit 0")


# --- limits ------------------------------------------------------------------------


@test("limits: Idempotency-Key 255/256, empty; body 64 KiB; metadata 50/51 pairs; headers")
def t_limits():
    s = main_sim()
    st, h, _ = charge(s, "k" * 255)
    check(st == 200 and h["idempotency-key"] == "k" * 255, "255: %d" % st)
    st, _, b = charge(s, "k" * 256)
    check(st == 400 and err_of(b)["param"] == "Idempotency-Key", "256: %d %s" % (st, b))
    st, _, b = charge(s, "")
    check(st == 400 and err_of(b)["param"] == "Idempotency-Key", "empty: %d %s" % (st, b))
    st, _, b = charge(s, "k" * 600)
    check(st == 400, "600: %d" % st)
    core = b"amount=1999&currency=usd&source=tok_visa&"
    body = core + b"&" * (65536 - len(core))
    st, _, b = req(s, "POST", "/v1/charges", raw=body, key=fresh())
    check(st == 200, "a body of 65536 bytes: %d %s" % (st, b[:100]))
    st, _, b = req(s, "POST", "/v1/charges", raw=body + b"&", key=fresh())
    check(st == 413, "65537 bytes: %d" % st)
    meta = [("metadata[m%02d]" % i, "v" * 500) for i in range(50)]
    st, _, b = charge(s, fresh(), extra=meta)
    check(st == 200 and len(json.loads(b)["metadata"]) == 50, "50 pairs: %d" % st)
    st, _, b = charge(s, fresh(), extra=meta + [("metadata[x]", "1")])
    check(st == 400 and err_of(b)["param"] == "metadata", "51 pairs: %d %s" % (st, b))
    st, _, _ = charge(s, fresh(), extra=[("metadata[%s]" % ("n" * 40), "v")])
    check(st == 200, "a 40-character name: %d" % st)
    st, _, _ = charge(s, fresh(), headers={"X-Big": "x" * 17000})
    check(st == 431, "17000 bytes of header: %d" % st)
    st, _, _ = req(s, "GET", "/v1/charges/" + "x" * 9000)
    check(st == 414, "a 9000-byte target: %d" % st)


@test("keep-alive and pipelining: answers in order on one connection")
def t_keepalive():
    s = main_sim()
    c = s.conn()
    for _ in range(3):
        st, _, _ = charge(s, fresh(), conn=c)
        check(st == 200, "kept-alive: %d" % st)
    c.close()
    k1, k2 = fresh(), fresh()
    got, how = send_raw(s, raw_post(k1, "tok_visa") + raw_post(k2, "tok_chargeDeclined") +
                        b"GET /_sim/keys/" + k2.encode() +
                        b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    heads = re.findall(rb"HTTP/1\.1 (\d+) ", got)
    check(heads == [b"200", b"402", b"200"] and how == "eof", "%s %s" % (heads, how))


@test("Expect: 100-continue is answered; a chunked body is read (and bounded)")
def t_expect_chunked():
    s = main_sim()
    body = urllib.parse.urlencode([("amount", "1999"), ("currency", "usd"),
                                   ("source", "tok_visa"),
                                   ("description", "d" * 900)]).encode()
    head = (b"POST /v1/charges HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
            SK.encode() + b"\r\nIdempotency-Key: " + fresh().encode() +
            b"\r\nExpect: 100-continue\r\nContent-Length: " +
            str(len(body)).encode() + b"\r\n\r\n")
    c = s.sock()
    c.sendall(head)
    got = c.recv(100)
    check(got == b"HTTP/1.1 100 Continue\r\n\r\n", "100 Continue: %r" % got)
    c.sendall(body)
    got = c.recv(65536)
    c.close()
    check(got.startswith(b"HTTP/1.1 200 "), repr(got[:40]))

    def chunked(data, size):
        out = b""
        for i in range(0, len(data), size):
            part = data[i:i + size]
            out += b"%x\r\n" % len(part) + part + b"\r\n"
        return out + b"0\r\n\r\n"

    def post_chunked(data):
        k = fresh()
        got, _ = send_raw(s, b"POST /v1/charges HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
                          SK.encode() + b"\r\nIdempotency-Key: " + k.encode() +
                          b"\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n" +
                          chunked(data, 1000))
        return got

    got = post_chunked(body)
    check(got.startswith(b"HTTP/1.1 200 "), "chunked: %r" % got[:40])
    core = b"amount=1999&currency=usd&source=tok_visa&"
    got = post_chunked(core + b"&" * (65537 - len(core)))
    check(got.startswith(b"HTTP/1.1 413 "), "chunked, 65537 bytes: %r" % got[:40])


@test("--max-connections: a connection over the bound is closed")
def t_max_conn():
    s = Sim("--max-connections", "2")
    try:
        a, b = s.sock(), s.sock()
        time.sleep(0.1)
        got, how = send_raw(s, raw_post(fresh(), "tok_visa"))
        check(got == b"" and how in ("eof", "reset"), "third: %s %r" % (how, got[:40]))
        a.close()
        b.close()
        time.sleep(0.2)
        check(charge(s, fresh())[0] == 200, "then again accepted")
    finally:
        check(s.stop() == 0, "exit 0")


# --- durability ------------------------------------------------------------------


@test("durability: kill -9, a torn last line, restart: charges, answers and counts survive")
def t_durability():
    s = Sim("--fsync", "batch")
    data = s.data
    k1, k2, k3 = fresh(), fresh(), fresh()
    _, _, b1 = charge(s, k1, extra=[("metadata[o]", "1")])
    _, _, b2 = charge(s, k2, "tok_chargeDeclinedExpiredCard")
    charge(s, k3, "tok_providerError|tok_visa")
    _, _, bn = charge(s, None)
    before = {k: sim_key(s, k) for k in (k1, k2, k3)}
    st_before = stats(s)
    s.kill9()
    with open(data, "ab") as f:
        f.write(b"C\t1795000000\t0000")    # torn: no newline
    s2 = Sim("--fsync", "batch", data=data)
    try:
        after = {k: sim_key(s2, k) for k in (k1, k2, k3)}
        check(after == before, "keys:\n%s\n%s" % (before, after))
        st = stats(s2)
        check(st["deliveries"] == st_before["deliveries"] and
              st["charges"] == st_before["charges"] and st["keys"] == st_before["keys"],
              "%s\n%s" % (st_before, st))
        st, h, r1 = charge(s2, k1, extra=[("metadata[o]", "1")])
        check(st == 200 and r1 == b1 and h["idempotent-replayed"] == "true", "replay of k1")
        st, _, r2 = charge(s2, k2, "tok_chargeDeclinedExpiredCard")
        check(st == 402 and r2 == b2, "replay of the 402")
        st, _, r3 = charge(s2, k3, "tok_providerError|tok_visa")
        check(st == 200, "the chain continues at its 2nd delivery: %d" % st)
        cid = json.loads(bn)["id"]
        st, _, g = req(s2, "GET", "/v1/charges/" + cid)
        check(st == 200 and g == bn, "a key-less charge survives")
        with open(data, "rb") as f:
            content = f.read()
        check(content.endswith(b"\n") and b"\t0000C" not in content and
              b"C\t1795000000\t0000\n" not in content, "the torn line was cut")
        check(sim_key(s2, k3)["deliveries"] == 2, str(sim_key(s2, k3)))
    finally:
        check(s2.stop() == 0, "exit 0")
    s3 = Sim(data=data)
    try:
        check(sim_key(s3, k3)["deliveries"] == 2 and sim_key(s3, k3)["charges"] == 1,
              "after a clean stop too")
    finally:
        check(s3.stop() == 0, "exit 0")


@test("every --fsync mode: what was answered survives kill -9 of the simulator")
def t_fsync_modes():
    for mode in ("always", "batch", "never"):
        s = Sim("--fsync", mode)
        keys = [fresh(mode) for _ in range(5)]
        bodies = [charge(s, k)[2] for k in keys]
        s.kill9()
        s2 = Sim("--fsync", mode, data=s.data)
        try:
            for k, b in zip(keys, bodies):
                st, h, r = charge(s2, k)
                check(st == 200 and r == b and h["idempotent-replayed"] == "true",
                      "%s: %s replays (%d)" % (mode, k, st))
        finally:
            check(s2.stop() == 0, "exit 0")


@test("latency: the charge happens even when the client leaves; log-normal draws")
def t_latency():
    s = Sim("--latency-ms", "400")
    try:
        k = fresh()
        c = s.sock()
        c.sendall(raw_post(k, "tok_visa"))
        time.sleep(0.1)
        c.close()
        kk = sim_key(s, k)
        check(kk["deliveries"] == 1 and kk["charges"] == 0, "not yet: %s" % kk)
        time.sleep(0.6)
        kk = sim_key(s, k)
        check(kk["charges"] == 1 and kk["status"] == 200, "charged after the delay: %s" % kk)
        # one more in flight when SIGTERM comes: dropped cleanly (exit 0)
        c = s.sock()
        c.sendall(raw_post(fresh(), "tok_visa"))
        time.sleep(0.1)
        c.close()
    finally:
        check(s.stop() == 0, "exit 0")
    s = Sim("--latency-p50-ms", "30", "--latency-p99-ms", "120", "--seed", "3")
    try:
        c = s.conn()
        times = []
        for _ in range(40):
            t0 = time.monotonic()
            charge(s, fresh(), conn=c)
            times.append(time.monotonic() - t0)
        c.close()
        times.sort()
        med = times[len(times) // 2]
        check(0.015 <= med <= 0.15, "median %.3fs" % med)
        check(times[-1] < 2.0, "max %.3fs" % times[-1])
        diag("log-normal p50 30 ms, p99 120 ms: median %.0f ms, max %.0f ms" %
             (med * 1000, times[-1] * 1000))
    finally:
        check(s.stop() == 0, "exit 0")


@test("--idle-timeout-s: an idle kept-alive connection is closed")
def t_idle():
    s = Sim("--idle-timeout-s", "1")
    try:
        c = s.sock(timeout=5)
        t0 = time.monotonic()
        try:
            d = c.recv(10)
        except ConnectionResetError:
            d = b""
        dt = time.monotonic() - t0
        c.close()
        check(d == b"" and 0.9 <= dt < 4.5, "closed after %.2fs (%r)" % (dt, d))
    finally:
        check(s.stop() == 0, "exit 0")


@test("--listen unix:PATH: HTTP over a unix socket")
def t_unix():
    path = os.path.join(TMP, "sim.sock")
    err = open(os.path.join(TMP, "unix.err"), "w+b")
    p = subprocess.Popen([BIN, "--listen", "unix:" + path, "--data",
                          os.path.join(TMP, "unix.log")], stderr=err)
    try:
        for _ in range(200):
            if os.path.exists(path):
                break
            time.sleep(0.02)
        c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        c.settimeout(5)
        c.connect(path)
        c.sendall(raw_post(fresh(), "tok_visa"))
        got = c.recv(65536)
        c.close()
        check(got.startswith(b"HTTP/1.1 200 "), repr(got[:60]))
        err.seek(0)
        check(b"listening on unix:" + path.encode() in err.read(), "the ready line")
    finally:
        p.send_signal(signal.SIGTERM)
        check(p.wait(timeout=10) == 0, "exit 0")
        err.close()


@test("compaction at start: history summed up, counts, answers and charges kept")
def t_compaction():
    s = Sim()
    data = s.data
    k1, k2 = fresh(), fresh()
    c = s.conn()
    _, _, b1 = charge(s, k1, extra=[("metadata[o]", "7")], conn=c)
    for _ in range(69):
        charge(s, k1, extra=[("metadata[o]", "7")], conn=c)
    c.close()
    _, _, b2 = charge(s, k2, "tok_chargeDeclined")
    _, _, bn = charge(s, None)
    check(s.stop() == 0, "exit 0")
    lines_before = open(data, "rb").read().count(b"\n")
    s2 = Sim(data=data)
    try:
        content = open(data, "rb").read()
        check(content.count(b"\n") == 5 and lines_before == 74,
              "%d lines, then %d" % (lines_before, content.count(b"\n")))
        check(sim_key(s2, k1)["deliveries"] == 70 and sim_key(s2, k1)["charges"] == 1 and
              sim_key(s2, k1)["metadata"] == {"o": "7"}, str(sim_key(s2, k1)))
        st, h, r = charge(s2, k1, extra=[("metadata[o]", "7")])
        check(st == 200 and r == b1 and h["idempotent-replayed"] == "true", "k1 replays")
        st, _, r = charge(s2, k2, "tok_chargeDeclined")
        check(st == 402 and r == b2, "k2 replays its 402")
        st, _, g = req(s2, "GET", "/v1/charges/" + json.loads(bn)["id"])
        check(st == 200 and g == bn, "the key-less charge")
        k3 = fresh()
        _, _, b3 = charge(s2, k3)
        s2.kill9()
    finally:
        if s2.proc.poll() is None:
            s2.stop()
    s3 = Sim(data=data)
    try:
        check(sim_key(s3, k1)["deliveries"] == 71, str(sim_key(s3, k1)))
        st, _, r = charge(s3, k3)
        check(st == 200 and r == b3, "appended after the compaction, then kill -9")
        check(not os.path.exists(data + ".compact"), "no temporary file left")
    finally:
        check(s3.stop() == 0, "exit 0")


@test("--retention-s: expired keys are pruned at start")
def t_retention():
    s = Sim()
    data = s.data
    k = fresh()
    charge(s, k)
    check(s.stop() == 0, "exit 0")
    time.sleep(2.2)
    s2 = Sim("--retention-s", "1", data=data)
    try:
        check(sim_key(s2, k) is None, "the key is gone")
        check(stats(s2)["keys"] == 0, str(stats(s2)))
    finally:
        check(s2.stop() == 0, "exit 0")


@test("command line: --help, --version, bad options exit 2; SIGTERM exits 0")
def t_cli():
    r = subprocess.run([BIN, "--help"], capture_output=True, timeout=10)
    check(r.returncode == 0 and b"--fault-rate" in r.stdout, "--help")
    r = subprocess.run([BIN, "--version"], capture_output=True, timeout=10)
    check(r.returncode == 0 and r.stdout.startswith(b"charge-provider-sim "), "--version")
    for bad in (["--fault-rate", "nope=1"], ["--fault-rate", "error=2"],
                ["--fsync", "sometimes"], ["--latency-p50-ms", "5"], []):
        r = subprocess.run([BIN, "--listen", "127.0.0.1:0",
                            "--data", os.path.join(TMP, "cli.log")] + bad
                           if bad else [BIN], capture_output=True, timeout=10)
        check(r.returncode == 2, "%s: exit %d" % (bad, r.returncode))
    s = Sim()
    charge(s, fresh())
    check(s.stop() == 0, "SIGTERM: exit 0")


# --- webhooks ----------------------------------------------------------------

WHSEC = "whsec_test_0123456789abcdef"


class Receiver:
    """A webhook endpoint on 127.0.0.1 (or a unix socket) that checks every
    Stripe-Signature against its secrets and records each delivery;
    behave(event, nth) -> (status, delay_s) decides the answer, nth being the
    0-based count of earlier deliveries of that event id."""

    def __init__(self, secrets=(WHSEC,), behave=None, unix=None):
        import http.server
        import socketserver
        self.secrets = list(secrets)
        self.behave = behave or (lambda ev, nth: (200, 0))
        self.got = []        # (monotonic, path, event dict, sig ok, header)
        self.lock = threading.Lock()
        rec = self

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                n = int(self.headers.get("Content-Length", "0"))
                body = self.rfile.read(n)
                hdr = self.headers.get("Stripe-Signature", "")
                ok = rec.verify(hdr, body)
                ev = json.loads(body)
                with rec.lock:
                    nth = sum(1 for g in rec.got if g[2]["id"] == ev["id"])
                    rec.got.append((time.monotonic(), self.path, ev, ok, hdr,
                                    dict(self.headers)))
                status, delay = rec.behave(ev, nth)
                if delay:
                    time.sleep(delay)
                out = b'{"received":true}'
                try:
                    self.send_response(status)
                    self.send_header("Content-Length", str(len(out)))
                    self.end_headers()
                    self.wfile.write(out)
                except OSError:
                    pass

            def log_message(self, *a):
                pass

            def address_string(self):
                return "peer"

        if unix:
            class U(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
                daemon_threads = True
                request_queue_size = 128

            class HU(H):
                def setup(self):
                    self.client_address = ("unix", 0)
                    super().setup()
            self.srv = U(unix, HU)
            self.url = "unix:%s:/hooks/unix" % unix
        else:
            class T(http.server.ThreadingHTTPServer):
                daemon_threads = True
                request_queue_size = 128   # the simulator connects many at once
            self.srv = T(("127.0.0.1", 0), H)
            self.url = "http://127.0.0.1:%d/webhooks/provider" % self.srv.server_address[1]
        self.thread = threading.Thread(target=self.srv.serve_forever, daemon=True)
        self.thread.start()

    def verify(self, hdr, body):
        """True when t is within 300 s and some v1 matches some secret."""
        import hashlib
        import hmac
        try:
            items = [p.split("=", 1) for p in hdr.split(",")]
            t = [v for k, v in items if k == "t"][0]
            v1s = [v for k, v in items if k == "v1"]
        except (ValueError, IndexError):
            return False
        if abs(int(t) - time.time()) > 300:
            return False
        want = [hmac.new(s.encode(), t.encode() + b"." + body, hashlib.sha256).hexdigest()
                for s in self.secrets]
        return any(hmac.compare_digest(v, w) for v in v1s for w in want)

    def events(self):
        with self.lock:
            return list(self.got)

    def wait(self, cond, timeout=10):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if cond(self.events()):
                return True
            time.sleep(0.02)
        return False

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()


def wh_sim(rec, *args):
    urls = rec if isinstance(rec, list) else [rec]
    a = []
    for r in urls:
        a += ["--webhook-url", r if isinstance(r, str) else r.url]
    return Sim(*(a + ["--webhook-secret", WHSEC, "--fsync", "never"] + list(args)))


def sim_events(sim, q=""):
    st, _, b = req(sim, "GET", "/_sim/events" + q, sk=None)
    check(st == 200, "/_sim/events: %d" % st)
    return json.loads(b)["events"]


@test("webhooks: one signed event per charge outcome, the charge object inside, /_sim/events")
def t_webhook_basic():
    rec = Receiver()
    s = wh_sim(rec)
    try:
        k = fresh()
        st, _, b = charge(s, k, extra=[("metadata[charge_request]", "r-" + k)])
        ok_charge = json.loads(b)
        st2, _, b2 = charge(s, fresh(), "tok_chargeDeclinedInsufficientFunds")
        failed_id = err_of(b2)["charge"]
        _, _, fb = req(s, "GET", "/v1/charges/" + failed_id)
        check(rec.wait(lambda g: len(g) >= 2), "two deliveries: %d" % len(rec.events()))
        time.sleep(0.3)
        got = rec.events()
        check(len(got) == 2, "exactly two deliveries: %d" % len(got))
        by_type = {g[2]["type"]: g for g in got}
        check(set(by_type) == {"charge.succeeded", "charge.failed"}, str(list(by_type)))
        for g in got:
            _, path, ev, sig_ok, hdr, headers = g
            check(sig_ok, "signature verifies: %s" % hdr)
            check(re.fullmatch(r"t=\d+,v1=[0-9a-f]{64}", hdr), "header shape: %s" % hdr)
            check(path == "/webhooks/provider", "path " + path)
            check(headers.get("Content-Type", "").startswith("application/json"),
                  "content type %s" % headers.get("Content-Type"))
            check(re.fullmatch(r"evt_[0-9a-f]{24}", ev["id"]) and ev["object"] == "event" and
                  abs(ev["created"] - time.time()) < 30, "event: %s" % str(ev)[:200])
            check(list(ev)[:2] == ["id", "object"] and "data" in ev and "type" in ev,
                  "members %s" % list(ev))
        ev = by_type["charge.succeeded"][2]
        check(ev["data"]["object"] == ok_charge, "the succeeded charge object")
        check(ev["data"]["object"]["metadata"] == {"charge_request": "r-" + k}, "metadata")
        check(ev["request"]["idempotency_key"] == k, "request.idempotency_key")
        ev = by_type["charge.failed"][2]
        check(ev["data"]["object"] == json.loads(fb) and
              ev["data"]["object"]["status"] == "failed", "the failed charge object")
        evs = sim_events(s)
        check(len(evs) == 2 and all(e["deliveries"][0]["state"] == "delivered" and
                                    len(e["deliveries"][0]["attempts"]) == 1 and
                                    e["deliveries"][0]["attempts"][0]["status"] == 200
                                    for e in evs), "introspection: %s" % str(evs)[:300])
        check([e["charge"] for e in evs] == [ok_charge["id"], failed_id], "oldest first")
        one = sim_events(s, "?charge=" + failed_id)
        check(len(one) == 1 and one[0]["type"] == "charge.failed", "?charge= filter")
        st, _, b = req(s, "GET", "/_sim/events/" + one[0]["id"], sk=None)
        check(st == 200 and json.loads(b)["id"] == one[0]["id"], "one event by id")
        st, _, _ = req(s, "GET", "/_sim/events/evt_000000000000000000000000", sk=None)
        check(st == 404, "unknown event: %d" % st)
        w = stats(s)["webhooks"]
        check(w["events"] == 2 and w["delivered"] == 2 and w["attempts"] == 2, str(w))
        # a replay is no new charge: no new event
        charge(s, k, extra=[("metadata[charge_request]", "r-" + k)])
        time.sleep(0.3)
        check(len(rec.events()) == 2, "a replay sends nothing")
    finally:
        check(s.stop() == 0, "exit 0")
        rec.close()
    s = Sim()
    try:
        check(stats(s)["webhooks"] is None and sim_events(s) == [], "no --webhook-url: none")
    finally:
        check(s.stop() == 0, "exit 0")


@test("webhooks: a 500 is retried with exponential backoff, re-signed; bounded by --webhook-attempts")
def t_webhook_retry():
    rec = Receiver(behave=lambda ev, nth: (500, 0) if nth < 2 else (200, 0))
    s = wh_sim(rec, "--webhook-retry-ms", "150", "--webhook-attempts", "4")
    try:
        st, _, b = charge(s, fresh())
        cid = json.loads(b)["id"]
        check(rec.wait(lambda g: len(g) >= 3), "three attempts: %d" % len(rec.events()))
        time.sleep(0.5)
        got = rec.events()
        check(len(got) == 3 and len({g[2]["id"] for g in got}) == 1, "%d deliveries" % len(got))
        check(all(g[3] for g in got), "every attempt signed")
        gaps = [got[i + 1][0] - got[i][0] for i in range(2)]
        check(0.13 <= gaps[0] < 1.0 and 0.28 <= gaps[1] < 1.5 and gaps[1] > gaps[0],
              "backoff 150 ms then 300 ms: %s" % gaps)
        d = sim_events(s, "?charge=" + cid)[0]["deliveries"][0]
        check(d["state"] == "delivered" and [a["status"] for a in d["attempts"]] == [500, 500, 200],
              str(d))
    finally:
        check(s.stop() == 0, "exit 0")
        rec.close()
    rec = Receiver(behave=lambda ev, nth: (503, 0))
    s = wh_sim(rec, "--webhook-retry-ms", "50", "--webhook-attempts", "3")
    try:
        charge(s, fresh())
        check(rec.wait(lambda g: len(g) >= 3), "3 attempts")
        time.sleep(0.6)
        check(len(rec.events()) == 3, "then no more: %d" % len(rec.events()))
        d = sim_events(s)[0]["deliveries"][0]
        check(d["state"] == "failed" and len(d["attempts"]) == 3, str(d))
        check(stats(s)["webhooks"]["failed"] == 1, str(stats(s)["webhooks"]))
    finally:
        check(s.stop() == 0, "exit 0")
        rec.close()


@test("webhooks: no answer (refused, timeout) is retried; a hanging endpoint never blocks the loop")
def t_webhook_no_answer():
    dead = socket.socket()
    dead.bind(("127.0.0.1", 0))
    port = dead.getsockname()[1]
    dead.close()                       # nothing listens there now
    hang = Receiver(behave=lambda ev, nth: (200, 3.0) if nth == 0 else (200, 0))
    s = wh_sim(["http://127.0.0.1:%d/x" % port, hang], "--webhook-retry-ms", "100",
               "--webhook-attempts", "4", "--webhook-timeout-ms", "400")
    try:
        cids = []
        c = s.conn()
        for _ in range(20):
            t0 = time.monotonic()
            st, _, b = charge(s, fresh(), conn=c)
            check(st == 200 and time.monotonic() - t0 < 1.0,
                  "a charge answered while deliveries hang: %.2f s" % (time.monotonic() - t0))
            cids.append(json.loads(b)["id"])
        c.close()
        check(hang.wait(lambda g: len({x[2]["id"] for x in g}) == 20 and len(g) >= 40,
                        timeout=30),
              "each event again after its timeout: %d" % len(hang.events()))
        time.sleep(1.0)
        evs = sim_events(s)
        for e in evs:
            dead_d = [d for d in e["deliveries"] if d["url"].endswith("/x")][0]
            check(dead_d["state"] == "failed" and len(dead_d["attempts"]) == 4 and
                  all(a["status"] is None and "ECONNREFUSED" in a["error"]
                      for a in dead_d["attempts"]), "refused: %s" % dead_d)
            hd = [d for d in e["deliveries"] if not d["url"].endswith("/x")][0]
            check(hd["state"] == "delivered" and hd["attempts"][0]["error"] ==
                  "timeout after 400 ms" and hd["attempts"][-1]["status"] == 200,
                  "timeout then 200: %s" % hd)
    finally:
        check(s.stop() == 0, "exit 0")
        hang.close()


@test("webhooks: --webhook-dup-rate, --webhook-drop-rate, --webhook-shuffle-rate, seeded")
def t_webhook_faults():
    rec = Receiver()
    s = wh_sim(rec, "--webhook-dup-rate", "1")
    try:
        charge(s, fresh())
        check(rec.wait(lambda g: len(g) >= 2), "two copies")
        time.sleep(0.3)
        got = rec.events()
        check(len(got) == 2 and got[0][2] == got[1][2] and all(g[3] for g in got),
              "the same event twice, both signed")
        ds = sim_events(s)[0]["deliveries"]
        check(sorted(d["duplicate"] for d in ds) == [False, True], str(ds))
    finally:
        check(s.stop() == 0, "exit 0")
        rec.close()
    rec = Receiver()
    s = wh_sim(rec, "--webhook-drop-rate", "1")
    try:
        charge(s, fresh())
        time.sleep(0.5)
        check(rec.events() == [], "dropped: nothing arrives")
        d = sim_events(s)[0]["deliveries"][0]
        check(d["state"] == "dropped" and d["attempts"] == [], str(d))
    finally:
        check(s.stop() == 0, "exit 0")
        rec.close()

    def run(seed):
        rec = Receiver()
        s = wh_sim(rec, "--seed", str(seed), "--webhook-shuffle-rate", "0.5",
                   "--webhook-shuffle-ms", "600", "--webhook-dup-rate", "0.3",
                   "--webhook-drop-rate", "0.2")
        try:
            made = []
            c = s.conn()
            for _ in range(30):
                made.append(json.loads(charge(s, None, conn=c)[2])["id"])
            c.close()
            time.sleep(1.5)
            evs = sim_events(s)
            shape = [(len(e["deliveries"]), [(d["duplicate"], d["state"], d["delay_ms"] > 0)
                                             for d in e["deliveries"]]) for e in evs]
            order = [g[2]["data"]["object"]["id"] for g in rec.events()]
            return made, shape, order, stats(s)["webhooks"]
        finally:
            check(s.stop() == 0, "exit 0")
            rec.close()

    made, shape, order, w = run(7)
    _, shape2, _, w2 = run(7)
    _, shape3, _, _ = run(8)
    check(shape == shape2 and shape != shape3, "the same seed, the same faults")
    check(w["dropped"] > 0 and w["duplicated"] > 0 and w["shuffled"] > 0, str(w))
    delivered = [cid for cid in made if cid in order]
    first_seen = sorted(set(order), key=order.index)
    check(first_seen != delivered, "arrival order differs from creation order")
    check(len(order) == w["delivered"] == w["deliveries"] - w["dropped"],
          "every undropped delivery arrived once: %d, %s" % (len(order), w))


@test("webhooks: a charge whose answer is lost (close, late) still sends its event at once")
def t_webhook_lost_answer():
    rec = Receiver()
    s = wh_sim(rec, "--late-ms", "3000")
    try:
        k = fresh()
        got, how = send_raw(s, raw_post(k, "tok_providerChargedThenClose"), timeout=5)
        check(got == b"" and how == "eof", "closed without an answer: %r %s" % (got[:50], how))
        check(rec.wait(lambda g: len(g) == 1, timeout=3), "the event arrived")
        check(rec.events()[0][2]["request"]["idempotency_key"] == k, "its key")
        t0 = time.monotonic()
        sk = s.sock()
        sk.sendall(raw_post(fresh(), "tok_providerChargedThenLate"))
        check(rec.wait(lambda g: len(g) == 2, timeout=2), "late answer: the event first")
        check(time.monotonic() - t0 < 2.0, "before the late answer")
        sk.close()
    finally:
        check(s.stop() == 0, "exit 0")
        rec.close()


@test("webhooks: several secrets (one from a file) sign one v1 each (rotation); a unix socket endpoint")
def t_webhook_secrets_unix():
    path = os.path.join(TMP, "hook.sock")
    rec_old = Receiver(secrets=["whsec_old"])
    rec_new = Receiver(secrets=["whsec_new"], unix=path)
    sf = os.path.join(TMP, "whsec")
    with open(sf, "w") as f:
        f.write("whsec_new\n")
    s = Sim("--webhook-url", rec_old.url, "--webhook-url", rec_new.url,
            "--webhook-secret", "whsec_old", "--webhook-secret-file", sf)
    try:
        charge(s, fresh())
        check(rec_old.wait(lambda g: len(g) == 1) and rec_new.wait(lambda g: len(g) == 1),
              "both endpoints")
        for r in (rec_old, rec_new):
            g = r.events()[0]
            check(g[3] and g[4].count("v1=") == 2, "two v1, one valid here: %s" % g[4])
        check(rec_new.events()[0][1] == "/hooks/unix", "path after the socket")
        check(rec_new.events()[0][5].get("Host") == "localhost", "Host: localhost")
    finally:
        check(s.stop() == 0, "exit 0")
        rec_old.close()
        rec_new.close()


@test("webhooks: SIGTERM with deliveries in flight and pending exits 0; the command line")
def t_webhook_stop_cli():
    rec = Receiver(behave=lambda ev, nth: (200, 2.0))
    s = wh_sim(rec, "--webhook-concurrency", "2", "--webhook-max-events", "5")
    c = s.conn()
    for _ in range(12):
        charge(s, None, conn=c)
    c.close()
    time.sleep(0.3)
    w = stats(s)["webhooks"]
    check(w["in_flight"] == 2 and w["evicted"] == 7, "bounded: %s" % w)
    check(len(sim_events(s)) == 5, "5 events kept")
    check(s.stop() == 0, "SIGTERM with deliveries in flight: exit 0 (no leak under ASan)")
    rec.close()
    for bad in (["--webhook-url", "http://127.0.0.1:9/x"],
                ["--webhook-secret", "whsec_x"],
                ["--webhook-url", "https://127.0.0.1/x", "--webhook-secret", "s"],
                ["--webhook-url", "http://example.com/x", "--webhook-secret", "s"],
                ["--webhook-url", "http://127.0.0.1:70000/x", "--webhook-secret", "s"],
                ["--webhook-url", "unix:", "--webhook-secret", "s"],
                ["--webhook-url", "http://127.0.0.1/x", "--webhook-secret", "s",
                 "--webhook-dup-rate", "1.5"],
                ["--webhook-url", "http://127.0.0.1/x", "--webhook-secret", "s",
                 "--webhook-attempts", "0"],
                ["--webhook-url", "http://127.0.0.1/x", "--webhook-secret-file",
                 os.path.join(TMP, "no-such-secret")],
                ["--webhook-url", "http://127.0.0.1/x", "--webhook-secret-file", "/dev/null"]):
        r = subprocess.run([BIN, "--listen", "127.0.0.1:0",
                            "--data", os.path.join(TMP, "cli.log")] + bad,
                           capture_output=True, timeout=10)
        check(r.returncode == 2, "%s: exit %d" % (bad, r.returncode))


# --- the provider's liberties (sim/world.c) ---------------------------------

def lib_stats(sim):
    return stats(sim)["liberties"]


@test("liberty: --clock-offset-s shifts every charge's created and the Date header; the list filters on that clock")
def t_clock_offset():
    import email.utils
    for off in (-150, 150):
        s = Sim("--clock-offset-s", str(off))
        try:
            now = time.time()
            st, h, b = charge(s, fresh())
            created = json.loads(b)["created"]
            date = email.utils.parsedate_to_datetime(h["date"]).timestamp()
            check(st == 200 and abs(created - (now + off)) <= 2,
                  "offset %d: created %d, now %d" % (off, created, now))
            check(abs(date - (now + off)) <= 2, "offset %d: Date %s" % (off, h["date"]))
            # a range on our clock misses it; one on the provider's finds it
            ours = json.loads(req(s, "GET", "/v1/charges?created[gte]=%d&created[lte]=%d" % (
                now - 60, now + 60))[2])["data"]
            theirs = json.loads(req(s, "GET", "/v1/charges?created[gte]=%d&created[lte]=%d" % (
                created - 1, created + 1))[2])["data"]
            check(ours == [] and len(theirs) == 1, "ours %d, theirs %d" % (len(ours), len(theirs)))
        finally:
            check(s.stop() == 0, "exit 0")
    r = subprocess.run([BIN, "--listen", "127.0.0.1:0", "--data", os.path.join(TMP, "cl.log"),
                        "--clock-offset-s", "86401"], capture_output=True, timeout=10)
    check(r.returncode == 2, "--clock-offset-s 86401: exit %d" % r.returncode)


@test("liberty: --slow-rate/--slow-ms: the execution lands late, re-sends meanwhile get 409, then the replay")
def t_slow():
    s = Sim("--slow-rate", "1", "--slow-ms", "1200")
    try:
        k = fresh()
        t0 = time.monotonic()
        # the client gives up after 300 ms, as a client with a short timeout does
        c = s.conn(timeout=0.3)
        try:
            c.request("POST", "/v1/charges", body=b"amount=1999&currency=usd&source=tok_visa",
                      headers={"Authorization": "Bearer " + SK, "Idempotency-Key": k,
                               "Content-Type": "application/x-www-form-urlencoded"})
            c.getresponse()
            check(False, "the slow execution answered within 300 ms")
        except socket.timeout:
            pass
        finally:
            c.close()
        st, _, b = charge(s, k)
        check(st == 409 and err_of(b)["code"] == "idempotency_key_in_use", "re-send: %d %s" % (st, b))
        check(sim_key(s, k)["charges"] == 0, "nothing charged yet")
        while time.monotonic() - t0 < 1.5:
            time.sleep(0.05)
        st, h, b = charge(s, k)
        check(st == 200 and h["idempotent-replayed"] == "true", "after it: %d %s" % (st, b))
        check(sim_key(s, k)["charges"] == 1, "charged once")
        check(lib_stats(s)["slow"] == 1, str(lib_stats(s)))
    finally:
        check(s.stop() == 0, "exit 0")


@test("liberty: --saved-500-rate: a 500 saved under the key once execution began, replayed byte for byte; charged or not")
def t_saved_500():
    s = Sim("--saved-500-rate", "1", "--seed", "7")
    try:
        seen = {"charged": 0, "not": 0}
        for _ in range(12):
            k = fresh()
            st, h, b = charge(s, k)
            check(st == 500 and err_of(b)["type"] == "api_error", "%d %s" % (st, b))
            st2, h2, b2 = charge(s, k)
            check(st2 == 500 and b2 == b and h2["idempotent-replayed"] == "true",
                  "replay: %d %s %s" % (st2, b2, h2.get("idempotent-replayed")))
            kk = sim_key(s, k)
            check(kk["status"] == 500, str(kk))
            seen["charged" if kk["charges"] == 1 else "not"] += 1
        check(seen["charged"] > 0 and seen["not"] > 0, "both kinds: %s" % seen)
        ls = lib_stats(s)
        check(ls["saved_500"] == seen["not"] and ls["charged_saved_500"] == seen["charged"], str(ls))
    finally:
        check(s.stop() == 0, "exit 0")
    # the same seed, the same draws; other rates of the seed unchanged
    a = Sim("--saved-500-rate", "0.5", "--seed", "11")
    b = Sim("--saved-500-rate", "0.5", "--seed", "11")
    try:
        ra = [charge(a, fresh())[0] for _ in range(16)]
        rb = [charge(b, fresh())[0] for _ in range(16)]
        check(ra == rb and 500 in ra and 200 in ra, "%s / %s" % (ra, rb))
    finally:
        check(a.stop() == 0 and b.stop() == 0, "exit 0")


@test("liberty: --params-error-rate: a re-send with the same form answered 400 idempotency_error")
def t_params_error():
    s = Sim("--params-error-rate", "1")
    try:
        k = fresh()
        st, _, _ = charge(s, k)
        check(st == 200, "the first executes: %d" % st)
        st, h, b = charge(s, k)
        check(st == 400 and err_of(b)["type"] == "idempotency_error" and
              h["stripe-should-retry"] == "false", "%d %s" % (st, b))
        check(sim_key(s, k)["charges"] == 1, "charged once")
        check(lib_stats(s)["params_error"] == 1, str(lib_stats(s)))
    finally:
        check(s.stop() == 0, "exit 0")


@test("liberty: --search-lag-ms: search shows a charge only after the lag; the list at once")
def t_search_lag():
    s = Sim("--search-lag-ms", "800")
    try:
        v = fresh("lag")
        st, _, b = charge(s, fresh(), extra=[("metadata[w]", v)])
        cid = json.loads(b)["id"]
        q = "/v1/charges/search?" + urllib.parse.urlencode({"query": "metadata['w']:'%s'" % v})
        early = json.loads(req(s, "GET", q)[2])["data"]
        listed = [c["id"] for c in json.loads(req(s, "GET", "/v1/charges?limit=100")[2])["data"]]
        check(early == [] and cid in listed, "early search %r, list has it: %s" % (early, cid in listed))
        time.sleep(0.9)
        late = [c["id"] for c in json.loads(req(s, "GET", q)[2])["data"]]
        check(late == [cid], "after the lag: %r" % late)
    finally:
        check(s.stop() == 0, "exit 0")


@test("liberty: --busy-per-s: background charges in every account at the rate, listed, with busy metadata")
def t_busy():
    s = Sim("--busy-per-s", "200", "--secret-key", SK, "--secret-key", SK2)
    try:
        time.sleep(1.0)
        n = lib_stats(s)["busy"]
        # 1 s at 200/s in 2 accounts (the loop may be late on a loaded machine)
        check(200 <= n <= 440, "busy charges after 1 s: %d" % n)
        page = json.loads(req(s, "GET", "/v1/charges?limit=100", sk=SK2)[2])
        check(page["has_more"] and all("busy" in c["metadata"] for c in page["data"]),
              "the other account's list: %d" % len(page["data"]))
    finally:
        check(s.stop() == 0, "SIGTERM stops the background charges: exit 0")


@test("liberty: --foreign-rate: a delivery answered 200 with another charge of the account, not executed; --bare-402-rate: a 402 {}")
def t_foreign_bare():
    s = Sim("--foreign-rate", "1")
    try:
        st, _, b = charge(s, fresh())
        check(st == 200 and lib_stats(s)["foreign"] == 0, "no other charge yet: executed (%d)" % st)
        other = json.loads(b)["id"]
        k = fresh()
        st, _, b = charge(s, k)
        check(st == 200 and json.loads(b)["id"] == other, "the other charge: %s" % b[:80])
        kk = sim_key(s, k)
        check(kk["charges"] == 0 and kk["deliveries"] == 1, "not executed: %s" % kk)
    finally:
        check(s.stop() == 0, "exit 0")
    s = Sim("--bare-402-rate", "1")
    try:
        k = fresh()
        st, _, b = charge(s, k, "tok_chargeDeclined")
        check(st == 402 and b == b"{}", "%d %s" % (st, b))
        st2, h2, b2 = charge(s, k, "tok_chargeDeclined")
        check(st2 == 402 and b2 == b"{}" and h2["idempotent-replayed"] == "true", "replayed alike")
        check(sim_key(s, k)["charges"] == 1 and lib_stats(s)["bare_402"] == 1, str(lib_stats(s)))
    finally:
        check(s.stop() == 0, "exit 0")


def main():
    try:
        return run(only_env="SIM_ONLY")
    finally:
        if MAIN[0] is not None:
            rc = MAIN[0].stop()
            print(("ok" if rc == 0 else "not ok") +
                  " - the main simulator exits 0 on SIGTERM (%s)" % rc)


if __name__ == "__main__":
    sys.exit(main())
