#!/usr/bin/python3 -B
"""bench/busy_settle.py - how long an unknown outcome takes to settle on a
busy provider account, and how many provider requests it costs (issue 36,
docs/API.md §17.3 "The bound and its cost"). Run through bench/busy-settle
(which makes the run directory and Redis); see its header.

Each request that needs the provider read (never_delivered, charged_then_late)
gets a simulator (charge-provider-sim --busy-per-s R --request-log FILE)
and a stack (lighttpd + 2 responders on the run's Redis) of its own, so
that every read in that simulator's request log is its own (the
completer's reads carry no request id); the requests that settle within
their POST share one. The responders are configured as shipped for the
provider (provider_timeout_ms, provider_deadline_ms,
provider_execute_window_s, provider_execute_max_ms,
provider_clock_skew_max_s, provider_search_lag_s, completer_schedule_s:
their defaults, and lock_ttl_s 30 and failed_ttl_s 300 as shipped; the
other keys are the stack's own of tests/provider_faults/provlib.py,
Stack.BASE: threads 1, its Redis, spill and ledger paths;
BUSY_CONF adds more). All the groups run at once: a warm-up that fills the
list's range with the account's background charges, then each request is
sent once (a client that never retries: the completer settles it):

  never_delivered    source tok_providerReset: every delivery is read and
                     reset, never executed -> `failed`
  charged_then_close / charged_then_reset
                     the first delivery charges and the connection is
                     closed / reset without an answer; a re-send gets the
                     stored 200 replayed -> `completed`
  charged_then_late  the charge at once, its answer after --late-ms
                     (75 s): every re-send within provider_execute_window_s
                     (60 s) gets 409, so only a read settles it -> `completed`

and GET /charge/keys/<key> is polled (every 0.5 s) until the record is
settled. Per request: the time from the POST to the first poll that saw
the record settled, and the provider requests spent on it: its deliveries
(/_sim/keys: the request log holds only answered requests, not the ones
reset or closed) and the list pages and searches of its simulator's
request log. Prints one line per request and the medians per case, and
writes them as JSON (BUSY_OUT).
"""
import json
import os
import statistics
import sys
import threading
import time
import urllib.parse
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "provider_faults"))
import provlib  # noqa: E402
from provlib import Sim, Stack, charge_body, key_state, post  # noqa: E402

RATE = int(os.environ.get("BUSY_RATE", "200"))
N = int(os.environ.get("BUSY_N", "3"))
# the list's range starts provider_search_lag_s + 60 s before the read that
# proves absence, itself about 102 s after the request here (the last
# re-send at the 30 s step, plus its deadline, plus provider_execute_max_ms;
# at most W + D + E = 132 s): 300 + 60 - 102 = 258 s of charges before the
# request fill it; 300 s leave room
WARM_S = float(os.environ.get("BUSY_WARM_S", "300"))
STAGGER_S = float(os.environ.get("BUSY_STAGGER_S", "2"))
LIMIT_S = float(os.environ.get("BUSY_LIMIT_S", "600"))
CASES = os.environ.get("BUSY_CASES",
                       "never_delivered,charged_then_close,charged_then_reset,charged_then_late").split(",")
# charged_then_late: the charge at once, its answer this late: every re-send
# within provider_execute_window_s (60 s) gets 409, so a read settles it
LATE_MS = int(os.environ.get("BUSY_LATE_MS", "75000"))
EXTRA_CONF = os.environ.get("BUSY_CONF", "")  # key=value;... (shorter timers for a quick try)
OUT = os.environ.get("BUSY_OUT", "")
SOURCES = {"never_delivered": "tok_providerReset", "charged_then_close": "tok_providerChargedThenClose",
           "charged_then_reset": "tok_providerChargedThenReset", "charged_then_late": "tok_providerChargedThenLate"}
WANT = {"never_delivered": "failed", "charged_then_close": "completed", "charged_then_reset": "completed",
        "charged_then_late": "completed"}


CONF = {}  # the first stack's configuration, for the JSON


def log(msg):
    print("# " + msg)
    sys.stdout.flush()


def one(stack, case, i, results):
    key = "busy-%s-%d-%s" % (case, i, uuid.uuid4().hex[:8])
    rid = "busy%s%d%s" % (case.replace("_", ""), i, uuid.uuid4().hex[:10])
    t0 = time.monotonic()
    r = post(stack, key, charge_body(source=SOURCES[case]), timeout=60, extra={"X-Request-Id": rid})
    t_answer = time.monotonic() - t0
    state, t_settled = None, None
    while time.monotonic() - t0 < LIMIT_S:
        st, j = key_state(stack, key)
        if st == 200 and j.get("state") in ("completed", "failed"):
            state, t_settled = j["state"], time.monotonic() - t0
            break
        time.sleep(0.5)
    res = {"case": case, "key": key, "rid": rid, "answer": r.err or r.status, "answer_s": round(t_answer, 2),
           "state": state, "settled_s": None if t_settled is None else round(t_settled, 1)}
    results.append(res)
    return res


def reads(reqlog):
    """The simulator's request log: GETs of /v1/ (the responder's reads;
    the log has only answered requests, so a delivery reset or closed
    without an answer is not in it: those are counted by /_sim/keys)."""
    out = {"list_pages": 0, "searches": 0}
    with open(reqlog) as f:
        for line in f:
            try:
                e = json.loads(line)
            except ValueError:
                continue
            if e.get("method") == "GET" and e.get("path") == "/v1/charges":
                out["list_pages"] += 1
            elif e.get("method") == "GET" and e.get("path") == "/v1/charges/search":
                out["searches"] += 1
    return out


def group(name, jobs, results, page_ms):
    """A simulator and a stack of their own for jobs [(case, i)]: the reads
    in its request log are theirs (the completer's reads carry no request
    id). Cases that read (never_delivered, charged_then_late) get a group
    each."""
    reqlog = os.path.join(provlib.RUN, "sim-%s-requests.jsonl" % name)
    sim = Sim(name, args=["--busy-per-s", str(RATE), "--request-log", reqlog, "--seed", "36",
                          "--late-ms", str(LATE_MS)])
    # the claim's life and a failed record's as shipped too (Stack.BASE
    # has the suites' short ones)
    # and a key_prefix of its own: the completers of every stack on the
    # run's Redis would otherwise take each other's records (one index of
    # unknown records per prefix) and read another simulator
    cfg = {"provider_url": sim.url, "lock_ttl_s": 30, "failed_ttl_s": 300, "key_prefix": "busy-%s:" % name}
    for kv in filter(None, EXTRA_CONF.split(";")):
        k, v = kv.split("=", 1)
        cfg[k.strip()] = v.strip()
    stack = Stack(name, procs=2, **cfg)
    CONF.setdefault("conf", dict(stack.conf))
    time.sleep(WARM_S)
    if page_ms is not None:
        page_ms.append(page_time(sim) * 1000)
    before = reads(reqlog)  # the pages page_time() read
    mine = []
    for case, i in jobs:
        mine.append(one(stack, case, i, results))
    keys = sim.by_metadata()
    rd = {k: v - before[k] for k, v in reads(reqlog).items()}
    for res in mine:
        ks = keys.get((provlib.PRINCIPAL, res["key"]), [])
        res["posts"] = sum(k.get("deliveries", 0) for k in ks)
        res["provider_charges"] = sum(k.get("charges", 0) for k in ks)
        res["group"] = name
    if len(mine) == 1:
        mine[0].update(rd)
    else:  # requests that settle within their POST: the group's reads, shared
        for res in mine:
            res["group_reads"] = rd
            res.update(list_pages=0, searches=0)
    for res in mine:
        res["provider_requests"] = res["posts"] + res["list_pages"] + res["searches"]
    stack.stop()
    sim.stop()


def page_time(sim, n=20):
    """The simulator's own time for one list page of 100 (from here, no
    responder): the t_p of the formula on this machine."""
    import http.client
    c = http.client.HTTPConnection("127.0.0.1", sim.port, timeout=30)
    ts, after = [], None
    for _ in range(n):
        q = "/v1/charges?limit=100" + ("&starting_after=" + after if after else "")
        t = time.monotonic()
        c.request("GET", q, headers={"Authorization": "Bearer sk_test_sim"})
        body = json.loads(c.getresponse().read())
        ts.append(time.monotonic() - t)
        if not body.get("data"):
            break
        after = body["data"][-1]["id"]
    c.close()
    return statistics.median(ts) if ts else None


def main():
    Stack.HTTP_PROVIDER = {}  # the shipped provider timers
    results, threads, page_ms = [], [], []
    groups = []
    quick = [(c, i) for i in range(N) for c in CASES if c in ("charged_then_close", "charged_then_reset")]
    if quick:
        groups.append(("answer-lost", quick))
    for i in range(N):
        for c in CASES:
            if c in ("never_delivered", "charged_then_late"):
                groups.append(("%s-%d" % (c.replace("_", "-"), i), [(c, i)]))
    log("simulator --busy-per-s %d, --late-ms %d; %d groups (a simulator and a stack each) at once; warm-up"
        " %.0f s (about %d charges)" % (RATE, LATE_MS, len(groups), WARM_S, RATE * WARM_S))
    for gi, (name, jobs) in enumerate(groups):
        t = threading.Thread(target=group, args=(name, jobs, results, page_ms if gi == 0 else None), daemon=True)
        t.start()
        threads.append(t)
        time.sleep(STAGGER_S)
    for t in threads:
        t.join(WARM_S + LIMIT_S + 300)
    conf = CONF.get("conf", {})
    log("a list page of 100 from the simulator alone (no responder): median %s ms" %
        ("%.1f" % page_ms[0] if page_ms else "?"))
    results.sort(key=lambda r: (r["case"], r["rid"]))
    ok = len(results) == N * len(CASES)
    for r in results:
        print("# %-18s answer %-4s after %5.1f s; %-9s at %6s s; provider requests %s (POST %s, list pages %s,"
              " searches %s)%s" % (r["case"], r["answer"], r["answer_s"], r["state"], r["settled_s"],
                                   r.get("provider_requests"), r.get("posts"), r.get("list_pages"),
                                   r.get("searches"),
                                   "; its group's reads %s" % r["group_reads"] if "group_reads" in r else ""))
        ok &= r["state"] == WANT[r["case"]]
    summary = {}
    for case in CASES:
        rs = [r for r in results if r["case"] == case and r["settled_s"] is not None and "provider_requests" in r]
        if rs:
            summary[case] = {"n": len(rs), "settled_s_median": statistics.median(r["settled_s"] for r in rs),
                             "provider_requests_median": statistics.median(r["provider_requests"] for r in rs),
                             "list_pages_median": statistics.median(r["list_pages"] for r in rs),
                             "searches_median": statistics.median(r["searches"] for r in rs),
                             "posts_median": statistics.median(r["posts"] for r in rs)}
            print("# %s: median settled %.1f s, %s provider requests (POST %s, list pages %s, searches %s), n=%d"
                  % (case, summary[case]["settled_s_median"], summary[case]["provider_requests_median"],
                     summary[case]["posts_median"], summary[case]["list_pages_median"],
                     summary[case]["searches_median"], len(rs)))
    print("# load average at the end: %.1f %.1f %.1f" % os.getloadavg())
    if OUT:
        with open(OUT, "w") as f:
            json.dump({"date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "rate": RATE, "warm_s": WARM_S,
                       "late_ms": LATE_MS, "page_ms": page_ms[0] if page_ms else None,
                       "conf": {k: v for k, v in conf.items()
                                if not any(x in k for x in ("secret", "_file", "_dir", "ledger", "_url"))},
                       "conf_note": "every key not named here at its default (the provider_* timers, "
                                    "completer_schedule_s)",
                       "requests": results, "summary": summary, "loadavg": os.getloadavg()},
                      f, indent=1, default=str)
        print("# written to %s" % OUT)
    print("ok 1 - busy account at %d/s: every request settled as its case wants" % RATE if ok else
          "not ok 1 - busy account at %d/s: a request did not settle as its case wants" % RATE)
    return 0 if ok else 1


if __name__ == "__main__":
    try:
        sys.exit(main())
    finally:
        provlib.stop_all()
