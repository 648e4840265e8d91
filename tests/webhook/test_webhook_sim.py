#!/usr/bin/env python3
"""The simulator's own webhooks settle unknown outcomes (issue 29's "done
when"), and the completer-only time beside them.

tests/webhook/run.sh starts, per phase, charge-provider-sim, a private Redis
and lighttpd + the responder, and passes them through the environment:
WEBHOOK_PHASE (deliver, faults or completer), BASE_URL, SIM_URL,
E2E_REDIS_SOCKET, RESPONDER_LOG, E2E_PRINCIPAL_A / E2E_API_KEY_A,
WEBHOOK_RETRY_MS and the responder's CHARGE_* configuration;
WEBHOOK_SETTLE_N (default 12) charges are measured, WEBHOOK_RESULT_FILE
(optional) gets the measurements as one JSON line per phase.

  deliver    the simulator posts its signed events to /webhooks/provider
             through lighttpd; N tok_providerTimeout charges (charged at
             once, answered after --late-ms, long after the responder's
             provider_deadline_ms) are left unknown, the completer an hour
             out; each is completed with its own charge by its event. The
             median time from the charge (its event's first delivery
             attempt, right after the simulator committed it) to the record
             completed (its updated_ms; and as seen by polling Redis every
             10 ms) is under 1 s.
  faults     every delivery duplicated, half of them held back (reordered):
             each unknown record settled once with its own charge, the
             records unchanged once every delivery is over, the
             simulator's counts and the route's results as predicted.
  completer  no webhooks; completer_schedule_s 1,2,3 and
             provider_execute_window_s 2: the median time from the charge
             (the request sent: the simulator charges at once) to completed.

Python standard library only; prints TAP.
"""

import json
import os
import statistics
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

PHASE = os.environ["WEBHOOK_PHASE"]
BASE = urllib.parse.urlsplit(os.environ["BASE_URL"])
SIM = urllib.parse.urlsplit(os.environ["SIM_URL"])
REDIS_SOCKET = os.environ["E2E_REDIS_SOCKET"]
PRINCIPAL = os.environ["E2E_PRINCIPAL_A"]
API_KEY = os.environ["E2E_API_KEY_A"]
PREFIX = os.environ["CHARGE_KEY_PREFIX"]
N = int(os.environ.get("WEBHOOK_SETTLE_N", "12"))
RETRY_MS = int(os.environ.get("WEBHOOK_RETRY_MS", "100"))
RESULT_FILE = os.environ.get("WEBHOOK_RESULT_FILE", "")
STAGGER_S = 0.25        # between two charges of one run
POLL_S = 0.01           # Redis is polled every 10 ms
SETTLE_BOUND_S = 15.0   # a record not settled by then fails its test
WEBHOOK_BOUND_MS = 1000  # issue 29: the median under 1 s


def request(url, method, path, body=None, headers=None, timeout=30):
    return httpc.request(url, method, path, body, headers, timeout)


def charge(key, source, amount=1999):
    body = {"amount": amount, "currency": "usd", "source": source}
    return request(BASE, "POST", "/charge", json.dumps(body).encode(), {
        "Authorization": "Bearer " + API_KEY, "Idempotency-Key": key,
        "Content-Type": "application/json"})


def redis_conn():
    """One kept connection to the test's Redis (tests/lib/resp.py)."""
    return resp.Connection(REDIS_SOCKET, timeout=10)


R = redis_conn()
R_LOCK = threading.Lock()


def redis(*args):
    with R_LOCK:
        return R(*args)


def rkey(key):
    return PREFIX + "idem:" + PRINCIPAL + ":" + key


def record(key):
    flat = redis("HGETALL", rkey(key)) or []
    return {flat[i].decode(): flat[i + 1] for i in range(0, len(flat), 2)}


def new_key(tag):
    return "wh-%s-%s" % (tag, uuid.uuid4().hex[:12])


def nonce():
    return "n" + uuid.uuid4().hex[:8]


def sim_get(path):
    r = request(SIM, "GET", path)
    check(r.status == 200, "GET %s: %r" % (path, r))
    return r.json()


def sim_keys():
    """The simulator's keys by the client's idempotency key (ours only)."""
    out = {}
    for k in sim_get("/_sim/keys").get("keys", []):
        md = k.get("metadata") or {}
        if md.get("charge_principal") == PRINCIPAL:
            out[md.get("charge_idempotency_key")] = k
    return out


def sim_events(charge_id):
    return sim_get("/_sim/events?charge=" + urllib.parse.quote(charge_id)).get("events", [])


def metrics():
    r = request(BASE, "GET", "/metrics")
    check(r.status == 200, "/metrics: %r" % r)
    out = {}
    for line in r.body.decode().splitlines():
        if line.startswith("charge_webhook_events_total{"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def wh(m, etype, result):
    return m.get('charge_webhook_events_total{type="%s",result="%s"}' % (etype, result), 0.0)


def wait_for(fn, timeout_s, step=0.05):
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        v = fn()
        if v:
            return v
        time.sleep(step)
    return fn()


def drive(run):
    """Sends the charge, and polls the record's state every POLL_S until it
    is settled (or SETTLE_BOUND_S passed); times in run (unix seconds)."""
    conn = redis_conn()

    def send():
        run["t_send"] = time.time()
        try:
            run["resp"] = charge(run["key"], run["src"])
        except Exception as e:  # noqa: BLE001 - reported by the test
            run["error"] = repr(e)
        run["t_answer"] = time.time()
    th = threading.Thread(target=send)
    th.start()
    try:
        end = time.monotonic() + SETTLE_BOUND_S
        while time.monotonic() < end:
            s = conn("HGET", rkey(run["key"]), "state")
            if s in (b"completed", b"failed"):
                run["t_seen"] = time.time()
                break
            time.sleep(POLL_S)
    finally:
        conn.close()
    th.join(30)


def fire(runs):
    """drive() for every run, STAGGER_S apart, all at once."""
    threads = []
    for run in runs:
        th = threading.Thread(target=drive, args=(run,))
        th.start()
        threads.append(th)
        time.sleep(STAGGER_S)
    for th in threads:
        th.join(SETTLE_BOUND_S + 40)


def unknown_runs(tag, n):
    return [{"key": new_key(tag), "src": "tok_providerTimeout|" + nonce()} for _ in range(n)]


def check_unknown_then_completed(runs, keys):
    """Each run: answered 504 outcome-unknown, then completed 201 with the
    simulator's one charge for its key."""
    bad = []
    for run in runs:
        key, r = run["key"], run.get("resp")
        if r is None or r.status != 504 or r.json().get("type") != "/problems/outcome-unknown":
            bad.append("%s: the first answer %r (%s)" % (key, r, run.get("error")))
            continue
        rec = record(key)
        k = keys.get(key)
        if rec.get("state") != b"completed" or rec.get("status") != b"201" or "t_seen" not in run:
            bad.append("%s: record %r after %.0f s" % (key, {f: rec.get(f) for f in ("state", "status")},
                                                        SETTLE_BOUND_S))
            continue
        if not k or k.get("charges") != 1 or not k.get("charge"):
            bad.append("%s: the simulator's key %r" % (key, k))
            continue
        body = json.loads(rec["body"])
        if body.get("id") != k["charge"]:
            bad.append("%s: completed with %r, the simulator charged %r" % (key, body.get("id"), k["charge"]))
            continue
        run["charge"] = k["charge"]
        run["updated_ms"] = int(rec["updated_ms"])
    check(not bad, "\n".join(bad))


def ms(x):
    return "%.0f" % x


def summary(values):
    return {"median_ms": round(statistics.median(values), 1), "min_ms": round(min(values), 1),
            "max_ms": round(max(values), 1), "n": len(values)}


def write_result(doc):
    if RESULT_FILE:
        with open(RESULT_FILE, "a") as f:
            f.write(json.dumps(doc, sort_keys=True) + "\n")


def config():
    keys = ("CHARGE_PROVIDER_TIMEOUT_MS", "CHARGE_PROVIDER_DEADLINE_MS", "CHARGE_COMPLETER_SCHEDULE_S",
            "CHARGE_PROVIDER_EXECUTE_WINDOW_S", "CHARGE_THREADS")
    return {k[len("CHARGE_"):].lower(): os.environ.get(k) for k in keys}


# ---------------------------------------------------------------- deliver


if PHASE == "deliver":
    @test("the simulator's own signed events, through lighttpd, settle %d charges left unknown (the completer an hour out): each completed with its own charge; the median time from the charge to completed is under 1 s" % N)
    def t_deliver():
        check(N >= 1, "WEBHOOK_SETTLE_N %d" % N)
        m0 = metrics()
        runs = unknown_runs("deliver", N)
        fire(runs)
        keys = sim_keys()
        check_unknown_then_completed(runs, keys)
        bad = []
        for run in runs:
            evs = sim_events(run["charge"])
            if len(evs) != 1 or evs[0].get("type") != "charge.succeeded" or len(evs[0].get("deliveries", [])) != 1:
                bad.append("%s: events %r" % (run["key"], evs))
                continue
            d = evs[0]["deliveries"][0]
            atts = d.get("attempts") or []
            codes = [a.get("status") for a in atts]
            if d.get("state") != "delivered" or not codes or codes[-1] != 200 or any(c != 503 for c in codes[:-1]):
                bad.append("%s: delivery %s, attempts %r" % (run["key"], d.get("state"), codes))
                continue
            first, last = atts[0]["at_ms"], atts[-1]["at_ms"]
            run["from_charge"] = run["updated_ms"] - first
            run["seen"] = run["t_seen"] * 1000 - first
            run["after_504"] = run["updated_ms"] - run["t_answer"] * 1000
            run["route"] = run["updated_ms"] - last
            run["commit"] = first - run["t_send"] * 1000
            run["attempts"] = len(atts)
            diag("%s: 504 after %s ms; the event's first attempt %s ms after the POST; %d attempts (503 until the "
                 "record was unknown); completed %s ms after the charge (seen by the poll at %s ms), %s ms after "
                 "the 504, %s ms after the settling delivery started" % (
                     run["key"], ms((run["t_answer"] - run["t_send"]) * 1000), ms(run["commit"]),
                     run["attempts"], ms(run["from_charge"]), ms(run["seen"]), ms(run["after_504"]),
                     ms(run["route"])))
        check(not bad, "\n".join(bad))
        m1 = metrics()
        check(wh(m1, "charge.succeeded", "settled") - wh(m0, "charge.succeeded", "settled") == N,
              "charge_webhook_events_total{settled} grew by %r, want %d" % (
                  wh(m1, "charge.succeeded", "settled") - wh(m0, "charge.succeeded", "settled"), N))
        for res in ("mismatch", "error", "bad_signature"):
            check(wh(m1, "charge.succeeded", res) == wh(m0, "charge.succeeded", res), "%s events counted" % res)
        s = {f: summary([r[f] for r in runs]) for f in ("from_charge", "seen", "after_504", "route", "commit")}
        diag("webhook: median %s ms from the charge to completed (min %s, max %s; %d charges; seen by polling "
             "Redis every 10 ms: median %s ms); median %s ms after the 504; the route: median %s ms from the "
             "settling delivery; provider_deadline_ms %s, the simulator re-delivers a refused event every %d ms" % (
                 ms(s["from_charge"]["median_ms"]), ms(s["from_charge"]["min_ms"]), ms(s["from_charge"]["max_ms"]), N,
                 ms(s["seen"]["median_ms"]), ms(s["after_504"]["median_ms"]), ms(s["route"]["median_ms"]),
                 os.environ.get("CHARGE_PROVIDER_DEADLINE_MS"), RETRY_MS))
        write_result({"phase": "webhook", "config": dict(config(), webhook_retry_ms=RETRY_MS), **s})
        check(s["from_charge"]["median_ms"] < WEBHOOK_BOUND_MS,
              "median %s ms from the charge to completed, want < %d" % (ms(s["from_charge"]["median_ms"]),
                                                                        WEBHOOK_BOUND_MS))
        check(s["seen"]["median_ms"] < WEBHOOK_BOUND_MS,
              "median %s ms until the poll saw completed, want < %d" % (ms(s["seen"]["median_ms"]), WEBHOOK_BOUND_MS))

    @test("the retry of a webhook-settled key replays 201 with the charge; the simulator still counts one charge")
    def t_deliver_replay():
        runs = unknown_runs("replay", 1)
        fire(runs)
        keys = sim_keys()
        check_unknown_then_completed(runs, keys)
        run = runs[0]
        r = charge(run["key"], run["src"])
        check(r.status == 201 and r.h("Idempotent-Replayed") == "true", "retry: %r" % r)
        check(r.json().get("id") == run["charge"], "retry's charge %r, want %r" % (r.json().get("id"), run["charge"]))
        k = sim_keys()[run["key"]]
        check(k["charges"] == 1, "the simulator charged %r times" % k["charges"])


# ---------------------------------------------------------------- faults


if PHASE == "faults":
    @test("every delivery duplicated and half held back (out of order): each unknown record settled once with its own charge, declines and successes untouched; once every delivery is over nothing changed, the counts as predicted")
    def t_faults():
        K, V, D = max(N // 2, 4), 4, 2
        m0 = metrics()
        st0 = sim_get("/_sim/stats")["webhooks"]
        check(st0 is not None, "the simulator sends no webhooks")
        runs = unknown_runs("dup", K)
        others = [{"key": new_key("visa"), "src": "tok_visa|" + nonce()} for _ in range(V)] + \
                 [{"key": new_key("decl"), "src": "tok_chargeDeclined|" + nonce()} for _ in range(D)]
        # interleaved: the successes' and declines' events overtake and are
        # overtaken by the unknown ones'
        mixed = []
        for i in range(max(len(runs), len(others))):
            mixed += runs[i:i + 1] + others[i:i + 1]
        fire(mixed)
        keys = sim_keys()
        check_unknown_then_completed(runs, keys)
        for o in others:
            r = o.get("resp")
            want = 201 if o["src"].startswith("tok_visa") else 402
            check(r is not None and r.status == want, "%s: %r, want %d" % (o["key"], r, want))
            o["body"] = r.body
        every = runs + others
        names = [rkey(x["key"]) for x in every]

        def snapshot():
            return {n: redis("HGETALL", n) for n in names}, [redis("ZSCORE", PREFIX + "unknown", n) for n in names]
        s1 = snapshot()
        check(all(v is None for v in s1[1]), "still in the unknown index: %r" % s1[1])

        def quiet():
            w = sim_get("/_sim/stats")["webhooks"]
            return w if w["pending"] == 0 and w["in_flight"] == 0 else None
        st1 = wait_for(quiet, 20, 0.1)
        check(st1, "deliveries still pending after 20 s: %r" % sim_get("/_sim/stats")["webhooks"])
        s2 = snapshot()
        changed = [n for n in names if s1[0][n] != s2[0][n]]
        check(not changed, "records changed by the later deliveries: %r" % changed)
        # the simulator: one charge per key, one event per charge, two
        # deliveries of it, both delivered (200 last)
        keys = sim_keys()
        bad, firsts = [], []
        for x in every:
            k = keys.get(x["key"])
            if not k or k.get("charges") != 1:
                bad.append("%s: %r" % (x["key"], k))
                continue
            evs = sim_events(k["charge"])
            if len(evs) != 1:
                bad.append("%s: %d events" % (x["key"], len(evs)))
                continue
            ds = evs[0]["deliveries"]
            if len(ds) != 2 or sorted(d["duplicate"] for d in ds) != [False, True] or \
                    any(d["state"] != "delivered" or d["attempts"][-1]["status"] != 200 for d in ds):
                bad.append("%s: deliveries %r" % (x["key"], [(d["duplicate"], d["state"],
                                                             [a["status"] for a in d["attempts"]]) for d in ds]))
                continue
            for d in ds:
                firsts.append((d["attempts"][0]["at_ms"], mixed.index(x)))
        check(not bad, "\n".join(bad))
        n_ev = K + V + D
        dw = {f: st1[f] - st0[f] for f in ("events", "deliveries", "duplicated", "shuffled", "failed", "dropped")}
        check(dw["events"] == n_ev and dw["deliveries"] == 2 * n_ev and dw["duplicated"] == n_ev,
              "simulator's webhook counts %r, want %d events, each delivered twice" % (dw, n_ev))
        check(dw["failed"] == 0 and dw["dropped"] == 0, "failed or dropped deliveries: %r" % dw)
        check(dw["shuffled"] >= 1, "no delivery was held back: %r" % dw)
        # the events were created in the order of mixed (STAGGER_S apart):
        # deliveries that started before a delivery of an earlier event
        seq = [idx for _, idx in sorted(firsts)]
        overtaken = sum(1 for i in range(len(seq)) if any(seq[j] < seq[i] for j in range(i + 1, len(seq))))
        diag("%d events, %d deliveries (%d held back up to 400 ms); %d deliveries started before an earlier "
             "event's" % (n_ev, dw["deliveries"], dw["shuffled"], overtaken))
        # the route's answers: each unknown settled once; every other
        # delivery a duplicate; no mismatch
        m1 = metrics()

        def d(t, r):
            return wh(m1, t, r) - wh(m0, t, r)
        got = {"settled": d("charge.succeeded", "settled"), "dup": d("charge.succeeded", "duplicate"),
               "failed.dup": d("charge.failed", "duplicate"), "failed.settled": d("charge.failed", "settled"),
               "mismatch": d("charge.succeeded", "mismatch") + d("charge.failed", "mismatch"),
               "error": d("charge.succeeded", "error") + d("charge.failed", "error")}
        want = {"settled": K, "dup": 2 * (K + V) - K, "failed.dup": 2 * D, "failed.settled": 0, "mismatch": 0,
                "error": 0}
        check(got == want, "route results %r, want %r" % (got, want))
        diag("route results: %r (and %d answers 503 while a record was still in progress or an event's claim "
             "was held)" % (got, d("charge.succeeded", "retry") + d("charge.failed", "retry")))
        # every key's retry replays what it recorded
        for x in every:
            r = charge(x["key"], x["src"])
            check(r.h("Idempotent-Replayed") == "true", "%s: retry %r" % (x["key"], r))
            if "body" in x:
                check(r.body == x["body"], "%s: the replay differs from the first answer" % x["key"])
            else:
                check(r.status == 201 and r.json()["id"] == x["charge"], "%s: retry %r" % (x["key"], r))
        log = open(os.environ["RESPONDER_LOG"], errors="replace").read()
        check("provider-mismatch" not in log, "a provider-mismatch alert in the log")


# ---------------------------------------------------------------- completer


if PHASE == "completer":
    @test("without webhooks, %d charges left unknown are completed by the completer alone (schedule 1,2,3 s, provider_execute_window_s 2): the completer-only time" % N)
    def t_completer():
        st = sim_get("/_sim/stats")
        check(st.get("webhooks") is None, "the simulator sends webhooks: %r" % st.get("webhooks"))
        runs = unknown_runs("poll", N)
        fire(runs)
        keys = sim_keys()
        check_unknown_then_completed(runs, keys)
        for run in runs:
            run["from_send"] = run["updated_ms"] - run["t_send"] * 1000
            run["seen"] = (run["t_seen"] - run["t_send"]) * 1000
            run["after_504"] = run["updated_ms"] - run["t_answer"] * 1000
            diag("%s: 504 after %s ms; completed %s ms after the charge (seen by the poll at %s ms), %s ms after "
                 "the 504" % (run["key"], ms((run["t_answer"] - run["t_send"]) * 1000), ms(run["from_send"]),
                              ms(run["seen"]), ms(run["after_504"])))
        s = {f: summary([r[f] for r in runs]) for f in ("from_send", "seen", "after_504")}
        diag("completer only: median %s ms from the charge to completed (min %s, max %s; %d charges; seen by "
             "polling Redis every 10 ms: median %s ms); median %s ms after the 504; completer_schedule_s %s, "
             "provider_execute_window_s %s" % (
                 ms(s["from_send"]["median_ms"]), ms(s["from_send"]["min_ms"]), ms(s["from_send"]["max_ms"]), N,
                 ms(s["seen"]["median_ms"]), ms(s["after_504"]["median_ms"]),
                 os.environ.get("CHARGE_COMPLETER_SCHEDULE_S"), os.environ.get("CHARGE_PROVIDER_EXECUTE_WINDOW_S")))
        write_result({"phase": "completer", "config": config(), "from_charge": s["from_send"],
                      "seen": s["seen"], "after_504": s["after_504"]})


sys.exit(tap.run(only_env="WEBHOOK_ONLY", prefix="%s: " % PHASE))
