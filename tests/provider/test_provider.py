#!/usr/bin/env python3
"""The responder against charge-provider-sim over HTTP (docs/API.md §17).

The harness (tests/provider/run.sh) starts the stack and passes it through
the environment: BASE_URL (the web server), SIM_URL and SIM_API_KEY (the
simulator), SIM_LATE_MS (how late tok_providerTimeout answers),
E2E_REDIS_SOCKET, E2E_PRINCIPAL_A / E2E_API_KEY_A, CHARGE_* (the responder's
configuration). Python standard library only; prints TAP.
"""

import json
import os
import sys
import time
import urllib.parse
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import httpc  # noqa: E402  (the HTTP client)
import resp  # noqa: E402  (the Redis client)
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
DEADLINE_S = int(os.environ.get("CHARGE_PROVIDER_DEADLINE_MS", "1700")) / 1000.0


PHASE = os.environ.get("PROVIDER_PHASE", "tcp")
SIM_UNIX = os.environ.get("SIM_UNIX", "")


def request(url, method, path, body=None, headers=None, timeout=30):
    return httpc.request(url, method, path, body, headers, timeout,
                         unix_path=SIM_UNIX if url is SIM else None)


def charge(key, source="tok_visa", amount=1999, description=None):
    body = {"amount": amount, "currency": "usd", "source": source}
    if description is not None:
        body["description"] = description
    return request(BASE, "POST", "/charge", json.dumps(body).encode(), {
        "Authorization": "Bearer " + API_KEY, "Idempotency-Key": key,
        "Content-Type": "application/json"})


def sim_key(key):
    """The simulator's view of our request: found by its metadata."""
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


def _redis(*args):
    return resp.command(REDIS_SOCKET, *args)


def rkey(key):
    return PREFIX + "idem:" + PRINCIPAL + ":" + key


def state(key):
    v = _redis("HGET", rkey(key), "state")
    return v.decode() if v is not None else None


def new_key(tag):
    return "prov-%s-%s" % (tag, uuid.uuid4().hex[:12])


def wait_for(fn, timeout_s, step=0.2):
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        v = fn()
        if v:
            return v
        time.sleep(step)
    return fn()


@test("201 through the simulator over HTTP: id and created are the provider's charge's")
def t_201():
    key = new_key("201")
    r = charge(key, description="Café & tea")
    check(r.status == 201, "status: %r" % r)
    body = r.json()
    k = sim_key(key)
    check(k is not None, "the simulator has no delivery for this request")
    check(k["charges"] == 1 and k["charge"] == body["id"],
          "simulator: %r, our id %r" % (k, body["id"]))
    c = sim_charge(body["id"])
    check(c["created"] == body["created"], "created %r, the provider's %r" % (body["created"], c["created"]))
    check(c["metadata"].get("charge_idempotency_key") == key, "metadata %r" % c["metadata"])
    check(c.get("description") == "Café & tea", "description %r" % c.get("description"))
    check(r.h("Idempotent-Replayed") == "false", "Idempotent-Replayed %r" % r.h("Idempotent-Replayed"))


@test("the replay is byte-identical, and the provider is not asked again")
def t_replay():
    key = new_key("replay")
    r1 = charge(key)
    check(r1.status == 201, "first: %r" % r1)
    r2 = charge(key)
    check(r2.status == 201 and r2.body == r1.body, "replay differs: %r vs %r" % (r2, r1))
    check(r2.h("Idempotent-Replayed") == "true", "Idempotent-Replayed %r" % r2.h("Idempotent-Replayed"))
    k = sim_key(key)
    check(k["deliveries"] == 1 and k["charges"] == 1, "simulator %r" % k)


@test("402 through the simulator: the failed charge's id, replayed byte for byte")
def t_402():
    key = new_key("402")
    r1 = charge(key, source="tok_chargeDeclinedInsufficientFunds")
    check(r1.status == 402, "status: %r" % r1)
    p = r1.json()
    k = sim_key(key)
    check(p.get("charge") == k["charge"] and p.get("decline_code") == "insufficient_funds",
          "problem %r, simulator %r" % (p, k))
    r2 = charge(key, source="tok_chargeDeclinedInsufficientFunds")
    check(r2.status == 402 and r2.body == r1.body, "replay differs: %r" % r2)


@test("a record deleted in Redis, then the retry: byte-identical body, one charge at the provider")
def t_lost_record():
    key = new_key("lost")
    r1 = charge(key)
    check(r1.status == 201, "first: %r" % r1)
    check(_redis("DEL", rkey(key)) == 1, "the record was not there to delete")
    time.sleep(1.1)  # a later second: our clock must not show in the body
    r2 = charge(key)
    check(r2.status == 201, "retry: %r" % r2)
    check(r2.body == r1.body, "bodies differ:\n%r\n%r" % (r1.body, r2.body))
    # the provider answered the re-run as a replay: so does the answer (issue 27)
    check(r2.h("Idempotent-Replayed") == "true", "the provider's replay not said (%r)" % r2.h("Idempotent-Replayed"))
    k = sim_key(key)
    check(k["charges"] == 1 and k["deliveries"] == 2, "simulator %r" % k)


@test("a fault chain (500, 500, then a charge) is retried with the same key: 201, one charge")
def t_retried():
    key = new_key("chain")
    r = charge(key, source="tok_providerError|tok_providerError|tok_visa|" + nonce())
    check(r.status == 201, "status: %r" % r)
    k = sim_key(key)
    check(k["deliveries"] == 3 and k["charges"] == 1 and k["charge"] == r.json()["id"], "simulator %r" % k)


def nonce():
    return "n" + uuid.uuid4().hex[:8]


@test("tok_providerTimeout (charged at once, answered late): 504 outcome-unknown, then the retry with the same key gets the stored charge: 201, one charge")
def t_late():
    key = new_key("late")
    src = "tok_providerTimeout|" + nonce()
    r1 = charge(key, source=src)
    # the attempt times out; its retries meet 409 in_use until the deadline
    check(r1.status == 504 and r1.json().get("type") == "/problems/outcome-unknown", "first: %r" % r1)
    time.sleep(SIM_LATE_S + 0.2)  # the simulator has answered (late) and stored it
    r2 = charge(key, source=src)
    check(r2.status == 201, "retry: %r" % r2)
    k = sim_key(key)
    check(k["charges"] == 1 and k["deliveries"] >= 2 and k["charge"] == r2.json()["id"], "simulator %r" % k)
    c = sim_charge(r2.json()["id"])
    check(c["created"] == r2.json()["created"], "created %r, the provider's %r" % (r2.json()["created"], c["created"]))


# five 500s outlast provider_deadline_ms (1.7 s: at most three attempts)
ERRORS = "tok_providerError|tok_providerError|tok_providerError|tok_providerError|tok_providerError"


@test("500s until the deadline: 504 outcome-unknown (recorded unknown, indexed), then the retry settles it: 201, one charge")
def t_unknown_retry():
    key = new_key("unk")
    src = ERRORS + "|tok_visa|" + nonce()
    r1 = charge(key, source=src)
    check(r1.status == 504, "status: %r" % r1)
    check(r1.json().get("type") == "/problems/outcome-unknown", "problem %r" % r1.body)
    check(r1.h("Retry-After") == "1", "Retry-After %r" % r1.h("Retry-After"))
    check(r1.elapsed < DEADLINE_S + 1.0, "answered after %.2fs, past provider_deadline_ms" % r1.elapsed)
    st = state(key)
    check(st in ("unknown", "completed"), "record state %r" % st)
    if st == "unknown":
        check(_redis("ZSCORE", PREFIX + "unknown", rkey(key)) is not None, "not in the index")
        check(b"amount" in (_redis("HGET", rkey(key), "request") or b""), "no request kept to ask again")
    r2 = charge(key, source=src)
    if r2.status == 504:  # still 500s: one more round
        r2 = charge(key, source=src)
    check(r2.status == 201, "retry: %r" % r2)
    k = sim_key(key)
    check(k["charges"] == 1 and k["charge"] == r2.json()["id"], "simulator %r, ours %r" % (k, r2.body))
    r3 = charge(key, source=src)
    check(r3.status == 201 and r3.body == r2.body and r3.h("Idempotent-Replayed") == "true", "replay %r" % r3)
    check(state(key) == "completed", "record state %r" % state(key))
    check(_redis("ZSCORE", PREFIX + "unknown", rkey(key)) is None, "still in the index")


@test("an unknown outcome nobody retries: the completer settles it (completed, the provider's charge)")
def t_unknown_completer():
    key = new_key("compl")
    src = ERRORS + "|tok_visa|" + nonce()
    r1 = charge(key, source=src)
    check(r1.status == 504, "status: %r" % r1)
    st = wait_for(lambda: state(key) == "completed", 25)
    check(st, "record still %r after 25 s" % state(key))
    check(_redis("ZSCORE", PREFIX + "unknown", rkey(key)) is None, "still in the index")
    r2 = charge(key, source=src)
    check(r2.status == 201 and r2.h("Idempotent-Replayed") == "true", "replay %r" % r2)
    k = sim_key(key)
    check(k["charges"] == 1 and k["charge"] == r2.json()["id"], "simulator %r" % k)
    m = request(BASE, "GET", "/metrics").body.decode()
    check('charge_completer_settled_total{outcome="completed"} ' in m and "charge_unknown_outstanding" in m,
          "no completer series in /metrics")
    diag("simulator: %r" % k)



SCHEDULE_S = [int(x) for x in os.environ.get("CHARGE_COMPLETER_SCHEDULE_S", "1,6").split(",")]
WINDOW_S = int(os.environ.get("CHARGE_PROVIDER_EXECUTE_WINDOW_S", "60"))
TIMEOUT_S = int(os.environ.get("CHARGE_PROVIDER_TIMEOUT_MS", "500")) / 1000.0


def retry_until_settled(key, src, budget_s):
    """One client retrying at Retry-After until a settled answer: (final response, seconds)."""
    t0 = time.monotonic()
    r = None
    while time.monotonic() - t0 < budget_s:
        r = charge(key, source=src)
        if r.status not in (409, 504):
            break
        time.sleep(float(r.h("Retry-After") or "1"))
    return r, time.monotonic() - t0


def t_retry_settles(nclients):
    import threading
    key = new_key("settle%d" % nclients)
    src = "tok_providerError|" + nonce()  # 500 on every delivery, nothing charged
    # past the execute window, a retry probes read-only; its "none" counts
    # once no delivery can execute (the last re-send's deadline + timeout)
    bound = WINDOW_S + DEADLINE_S + TIMEOUT_S + 2.0
    out = [None] * nclients

    def client(i):
        out[i] = retry_until_settled(key, src, bound + 10)
    ths = [threading.Thread(target=client, args=(i,)) for i in range(nclients)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    for r, secs in out:
        check(r is not None and r.status == 502, "final answer %r after %.1f s" % (r, secs))
        check(secs <= bound, "settled after %.1f s, past the bound %.1f s" % (secs, bound))
        if r is not None and r.status == 502:
            check("nothing was charged" in r.json().get("detail", ""), "detail %r" % r.body)
    diag("clients settled after %s s" % ", ".join("%.1f" % s for _, s in out))
    check(state(key) == "failed", "record state %r" % state(key))
    r2 = charge(key, source=src)
    check(r2.status == 502 and r2.h("Idempotent-Replayed") == "true", "replay %r" % r2)
    check(all(r.body == r2.body for r, _ in out if r is not None), "replays differ from the answers")
    k = sim_key(key)
    check(k is not None and k["charges"] == 0, "simulator %r" % k)
    check(_redis("ZSCORE", PREFIX + "unknown", rkey(key)) is None, "still in the index")


@test("a client retrying a key the provider never accepts (500s only) gets the settled 502 (probe: none) within the execute window + deadline + timeout + 2 s")
def t_retry_settles_1():
    t_retry_settles(1)


@test("four clients retrying a key the provider never accepts: each gets the same settled 502 within the bound, nothing charged")
def t_retry_settles_4():
    t_retry_settles(4)


if PHASE == "unix":
    del tap.TESTS[:]

    @test("over a unix socket (provider_url unix:/...): 201 with the provider's id, replayed byte for byte")
    def t_unix():
        key = new_key("unix")
        r1 = charge(key)
        check(r1.status == 201, "status: %r" % r1)
        k = sim_key(key)
        check(k is not None and k["charges"] == 1 and k["charge"] == r1.json()["id"], "simulator %r" % k)
        r2 = charge(key)
        check(r2.status == 201 and r2.body == r1.body and r2.h("Idempotent-Replayed") == "true", "replay %r" % r2)

    @test("past the execute window the completer only reads: the provider's list has no charge for an unknown outcome (500s only): failed 502, nothing charged, nothing delivered after the window")
    def t_search_absent():
        key = new_key("absent")
        src = ERRORS + "|" + ERRORS + "|tok_visa|" + nonce()
        r1 = charge(key, source=src)
        check(r1.status == 504, "status: %r" % r1)
        st = wait_for(lambda: state(key) == "failed", 15)
        check(st, "record still %r after 15 s" % state(key))
        r2 = charge(key, source=src)
        check(r2.status == 502 and r2.h("Idempotent-Replayed") == "true", "replay %r" % r2)
        check("nothing was charged" in r2.json().get("detail", ""), "detail %r" % r2.body)
        k = sim_key(key)
        check(k["charges"] == 0, "simulator %r" % k)
        # the first call's attempts only (at most 3 within its 1.7 s): the
        # completer, past the 1 s window, never sent the charge again
        check(k["deliveries"] <= 3, "delivered again after the window: %r" % k)
        check(_redis("ZSCORE", PREFIX + "unknown", rkey(key)) is None, "still in the index")

    @test("past the execute window the completer only reads: the provider's list has the charge (a late answer): completed with it")
    def t_search_found():
        key = new_key("found")
        src = "tok_providerTimeout|" + nonce()
        r1 = charge(key, source=src)
        check(r1.status in (201, 504), "status: %r" % r1)
        st = wait_for(lambda: state(key) == "completed", 40)
        check(st, "record still %r after 40 s" % state(key))
        r2 = charge(key, source=src)
        k = sim_key(key)
        check(r2.status == 201 and k["charges"] == 1 and k["charge"] == r2.json()["id"], "replay %r, simulator %r" % (r2, k))

if PHASE == "tls-ca":
    del tap.TESTS[:]

    @test("HTTPS to a provider whose certificate a test CA signed, trusted through provider_ca_file: 201")
    def t_tls():
        key = new_key("tls")
        r = charge(key)
        check(r.status == 201, "status: %r" % r)
        k = sim_key(key)
        check(k is not None and k["charges"] == 1 and k["charge"] == r.json()["id"], "simulator %r" % k)

if PHASE == "tls-none":
    del tap.TESTS[:]

    @test("HTTPS to a certificate the system's store does not trust: refused, never delivered (504 outcome-unknown)")
    def t_tls_untrusted():
        key = new_key("untrusted")
        r = charge(key)
        check(r.status == 504 and r.json().get("type") == "/problems/outcome-unknown", "status: %r" % r)
        check(sim_key(key) is None, "the simulator saw the request: %r" % sim_key(key))
        check(r.elapsed < DEADLINE_S, "answered after %.2fs: a certificate we do not trust is not retried" % r.elapsed)

sys.exit(tap.run(only_env="PROVIDER_ONLY"))
