#!/usr/bin/env python3
"""Scale-out behind Redis Sentinel (run by tests/ha/sentinel.sh, once per
redis_min_replicas value): the responders find the primary through the
sentinels, follow a failover, and with redis_min_replicas > 0 answer a
record only once a replica acknowledged it (WAIT in the same round trip).

Environment: HA_BASE_URL, HA_MIN_REPLICAS, HA_SENTINELS, HA_REPLICAS (ports,
space-separated), HA_MASTER, HA_BIN, HA_STACK_LOG, plus halib's.
"""
import math
import os
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import halib as h  # noqa: E402
from halib import Fail, check, diag, test  # noqa: E402

BASE = os.environ.get("HA_BASE_URL", "")
MIN_REPLICAS = int(os.environ.get("HA_MIN_REPLICAS", "0"))
SENTINELS = [int(p) for p in os.environ.get("HA_SENTINELS", "").split()]
REPLICAS = [int(p) for p in os.environ.get("HA_REPLICAS", "").split()]
MASTER = os.environ.get("HA_MASTER", "charge")
BIN = os.environ.get("HA_BIN", "")
STACK_LOG = os.environ.get("HA_STACK_LOG", "")
LOAD_KEYS = int(os.environ.get("HA_LOAD_KEYS", "256"))
LOAD_THREADS = 48
KILL_AFTER = 64          # answers before the primary is killed
DECLINE_EVERY = 8        # one key in 8 is declined (402)


def primary_port():
    """The primary the sentinels name now (the first that answers)."""
    for s in SENTINELS:
        out = h.cli(s, "SENTINEL", "get-master-addr-by-name", MASTER, check_rc=False).split()
        if len(out) == 2 and out[1].isdigit():
            return int(out[1])
    raise Fail("no sentinel names a primary")


def role(port):
    out = h.cli(port, "ROLE", check_rc=False).split()
    return out[0] if out else ""


def stack_log():
    try:
        with open(STACK_LOG, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def wait_replicas_synced(primary, secs=20):
    end = time.monotonic() + secs
    while time.monotonic() < end:
        if h.info_field(primary, "replication", "connected_slaves") == "2":
            offs = h.cli(primary, "INFO", "replication")
            if offs.count("state=online") == 2:
                return
        time.sleep(0.1)
    raise Fail("replicas of %d not in sync within %ds" % (primary, secs))


@test("via the sentinels: /readyz 200; a fresh charge and its byte-identical replay")
def t_basic():
    h.wait_health(BASE, 20)
    key = h.new_key("basic")
    body = h.charge_body(amount=4100)
    r1 = h.post(BASE, key, body)
    check(r1.status == 201 and not r1.replayed, "fresh: %r" % r1)
    r2 = h.post(BASE, key, body)
    check(h.same_answer(r1, r2), "replay %r of %r" % (r2, r1))
    p = primary_port()
    check(h.cli(p, "HGET", h.rkey(key), "state").strip() == "completed", "record not on the primary %d" % p)
    check(("Redis primary of '%s' is 127.0.0.1:%d" % (MASTER, p)) in stack_log(),
          "the responders did not log the primary they found")


if MIN_REPLICAS > 0:
    @test("min_replicas=%d: records go with WAIT; the replicas hold them when answered" % MIN_REPLICAS)
    def t_wait_sent():
        p = primary_port()
        wait_replicas_synced(p)
        # the completers poll their index (one EVALSHA a second per
        # responder process): counted idle first, then allowed for
        i0 = h.cmdstat_calls(p, "evalsha")
        time.sleep(1.0)
        idle = h.cmdstat_calls(p, "evalsha") - i0
        t0 = time.monotonic()
        w0, e0 = h.cmdstat_calls(p, "wait"), h.cmdstat_calls(p, "evalsha")
        keys = [h.new_key("wait") for _ in range(6)]
        for k in keys:
            r = h.post(BASE, k, h.charge_body(amount=700))
            check(r.status == 201, "fresh: %r" % r)
            # answered: every replica that acknowledged has it; at least one did
            have = [rp for rp in REPLICAS if h.cli(rp, "HGET", h.rkey(k), "state").strip() == "completed"]
            check(have, "no replica holds %s when the 201 arrives" % k)
        w1, e1 = h.cmdstat_calls(p, "wait"), h.cmdstat_calls(p, "evalsha")
        polls = idle * (math.ceil(time.monotonic() - t0) + 1)
        diag("WAIT calls +%d, EVALSHA calls +%d for %d fresh charges (completers' polls: %d a second idle)"
             % (w1 - w0, e1 - e0, len(keys), idle))
        check(w1 - w0 == len(keys), "WAIT sent %d times for %d records" % (w1 - w0, len(keys)))
        check(2 * len(keys) <= e1 - e0 <= 2 * len(keys) + polls,
              "EVALSHA sent %d times, want 2 per charge (+ at most %d completer polls)" % (e1 - e0, polls))

    @test("replicas frozen: 503 outcome-not-durable with Retry-After; the spill file stays; the retry replays")
    def t_not_durable():
        p = primary_port()
        wait_replicas_synced(p)
        n0 = h.metric(BASE, "charge_not_durable_total") or 0
        small, big = h.new_key("nd-inline"), h.new_key("nd-spill")
        bodies = {small: h.charge_body(amount=800), big: h.big_order()}
        pids = []
        try:
            for rp in REPLICAS:
                pids.append(h.node_signal(rp, signal.SIGSTOP))
            for k, b in bodies.items():
                r = h.post(BASE, k, b)
                check(r.status == 503 and r.json().get("type") == "/problems/outcome-not-durable",
                      "%s with frozen replicas: %r" % (k, r))
                check(h.retry_after_ok(r), "no Retry-After: %r" % r)
            rec = h.cli(p, "HGET", h.rkey(big), "body_file").strip()
            check(rec and os.path.isfile(os.path.join(h.SPILL_DIR, rec)),
                  "the spill file %r named by the record is gone" % rec)
        finally:
            for pid in pids:
                os.kill(pid, signal.SIGCONT)
        n1 = h.metric(BASE, "charge_not_durable_total") or 0
        check(n1 - n0 == 2, "charge_not_durable_total %r -> %r" % (n0, n1))
        for k, b in bodies.items():
            r, _ = h.settle(BASE, k, b, time.monotonic() + 15)
            check(r.status == 201 and r.replayed, "retry of %s: %r" % (k, r))
            again = h.post(BASE, k, b)
            check(h.same_answer(r, again), "second replay differs: %r" % again)
        check(len(h.post(BASE, big, bodies[big]).body) > 16384, "the large order did not replay in full")
        ids = h.ledger_ids()
        check(all(len(ids.get(k, [])) == 1 for k in bodies), "ledger %r" % {k: ids.get(k) for k in bodies})
else:
    @test("min_replicas=0: no WAIT is ever sent")
    def t_no_wait():
        p = primary_port()
        for _ in range(3):
            check(h.post(BASE, h.new_key("nowait"), h.charge_body()).status == 201, "fresh charge")
        check(h.cmdstat_calls(p, "wait") == 0, "WAIT was sent %d times" % h.cmdstat_calls(p, "wait"))


@test("SENTINEL FAILOVER: the demoted primary's connections are replaced; fresh charges and replays succeed")
def t_manual_failover():
    old = primary_port()
    wait_replicas_synced(old)
    key = h.new_key("mf")
    body = h.charge_body(amount=900)
    r1 = h.post(BASE, key, body)
    check(r1.status == 201, "before: %r" % r1)
    t0 = time.monotonic()
    h.cli(SENTINELS[0], "SENTINEL", "FAILOVER", MASTER)
    end = time.monotonic() + 20
    while time.monotonic() < end and (primary_port() == old or role(old) != "slave"):
        time.sleep(0.05)
    new = primary_port()
    check(new != old and role(new) == "master" and role(old) == "slave",
          "failover did not happen: primary %d (%s), old %d (%s)" % (new, role(new), old, role(old)))
    diag("SENTINEL FAILOVER: %d -> %d in %.2fs" % (old, new, time.monotonic() - t0))
    # every responder still holds a connection to the old primary
    rs = h.run_parallel(lambda i: h.post(BASE, h.new_key("mf%d" % i), h.charge_body(amount=901 + i)),
                        range(16), 16)
    diag("16 fresh charges right after: %s" % h.statuses(rs))
    check(all(r.status == 201 for r in rs), "fresh charges after the failover: %s" % h.statuses(rs))
    check(h.same_answer(r1, h.post(BASE, key, body)), "replay after the failover")
    log = stack_log()
    check(("Redis primary of '%s' is 127.0.0.1:%d" % (MASTER, new)) in log, "no log of the new primary")
    diag("READONLY answers seen: %d" % log.count("READONLY"))


@test("kill -9 of the primary under load: documented answers only, every key settles, one charge id per key")
def t_kill_under_load():
    old = primary_port()
    wait_replicas_synced(old)
    keys = [h.new_key("load%03d" % i) for i in range(LOAD_KEYS)]
    bodies = {k: h.charge_body(amount=1000 + i, source="tok_chargeDeclined" if i % DECLINE_EVERY == 0 else "tok_visa")
              for i, k in enumerate(keys)}
    answered = [0]
    lock = threading.Lock()
    killed = threading.Event()
    state = {}

    def one(k):
        r = h.post(BASE, k, bodies[k])
        with lock:
            answered[0] += 1
        return r

    def killer():
        while True:
            with lock:
                if answered[0] >= KILL_AFTER:
                    break
            time.sleep(0.001)
        state["t_kill"] = time.monotonic()
        h.node_kill9(old)
        killed.set()
        end = time.monotonic() + 30
        while time.monotonic() < end:
            try:
                if primary_port() != old:
                    state["t_new"] = time.monotonic()
                    return
            except Fail:
                pass
            time.sleep(0.02)

    kt = threading.Thread(target=killer)
    kt.start()
    t0 = time.monotonic()
    first = dict(zip(keys, h.run_parallel(one, keys, LOAD_THREADS)))
    kt.join()
    check(killed.is_set(), "the primary was never killed")
    check("t_new" in state, "no new primary within 30 s of the kill")
    new = primary_port()
    in_flight = sum(1 for r in first.values() if r.t_end > state["t_kill"])
    diag("%d fresh charges (%d threads, %d in flight or queued when the primary was killed): %s"
         % (len(keys), LOAD_THREADS, in_flight, h.statuses(first.values())))
    diag("failover: sentinels named %d instead of %d %.2fs after kill -9" % (new, old, state["t_new"] - state["t_kill"]))
    for k, r in first.items():
        h.check_documented(r, "load " + k, allow=(201, 402, 503))
    late_503 = [r.t_end for r in first.values() if r.status == 503]
    if late_503:
        diag("503s answered between %.2fs and %.2fs after the kill (%d not durable)" % (
            min(late_503) - state["t_kill"], max(late_503) - state["t_kill"],
            sum(1 for r in first.values() if r.json().get("type") == "/problems/outcome-not-durable")))
    h.wait_health(BASE, 20)
    good = [r.t_end for r in first.values() if r.status == 201 and r.t_end > state["t_new"]]
    if good:
        diag("first 201 %.2fs after the kill" % (min(good) - state["t_kill"]))

    deadline = time.monotonic() + 60
    final = dict(zip(keys, h.run_parallel(lambda k: h.settle(BASE, k, bodies[k], deadline)[0], keys, 16)))
    diag("after the failover, every key retried: %s (%.1fs in all)" % (h.statuses(final.values()), time.monotonic() - t0))
    unsettled = [k for k, r in final.items() if r.status not in (201, 402)]
    check(not unsettled, "%d keys without an outcome: %r" % (len(unsettled), [(k, final[k]) for k in unsettled[:3]]))
    acked = [k for k, r in first.items() if r.status in (201, 402)]
    lost = [k for k in acked if not h.same_answer(first[k], final[k])]
    diag("acknowledged records (201/402): %d; lost by the failover (retry executed again): %d" % (len(acked), len(lost)))
    called, calls = h.check_one_charge_per_key(set(keys))
    diag("ledger: %d provider calls for %d keys, one charge id each" % (calls, called))
    check(called == len(keys), "%d of %d keys reached the provider" % (called, len(keys)))
    if MIN_REPLICAS > 0:
        check(not lost, "with min_replicas=%d, %d acknowledged answers did not replay byte-identically: %r"
              % (MIN_REPLICAS, len(lost), [(first[k], final[k]) for k in lost[:2]]))
    for k in keys:
        if first[k].status == 503:
            check(final[k].status in (201, 402), "key %s: %r" % (k, final[k]))


@test("after the failover: /readyz 200 and the new primary holds new records")
def t_after():
    h.wait_health(BASE, 20)
    key = h.new_key("after")
    # Until a replica has attached to the new primary, WAIT cannot be
    # satisfied: the documented answer is 503 outcome-not-durable, and the
    # client retries with the same key (bounded: 20 s).
    deadline = time.monotonic() + 20
    while True:
        r = h.post(BASE, key, h.charge_body(amount=321))
        if not (r.status == 503 and r.json().get("type") == "/problems/outcome-not-durable"
                and time.monotonic() < deadline):
            break
        time.sleep(0.5)
    check(r.status == 201, "fresh: %r" % r)
    p = primary_port()
    check(h.cli(p, "HGET", h.rkey(key), "state").strip() == "completed", "record not on the new primary %d" % p)


if MIN_REPLICAS > 0:
    @test("start-up: a primary that may evict records stops charge --listen (found through the sentinels)")
    def t_eviction_check():
        p = primary_port()
        h.cli(p, "CONFIG", "SET", "maxmemory-policy", "allkeys-lru")
        try:
            h.eviction_refused(BIN, "allkeys-lru")
        finally:
            h.cli(p, "CONFIG", "SET", "maxmemory-policy", "noeviction")


def main():
    if not BASE:
        print("Bail out! HA_BASE_URL is not set")
        return 2
    return h.tap.run("HA_ONLY", prefix="[min_replicas=%d] " % MIN_REPLICAS)


if __name__ == "__main__":
    sys.exit(main())
