#!/usr/bin/env python3
"""The provider fault matrix (run by tests/provider_faults/run.sh).

One lighttpd stack whose responders call the simulator over HTTP
(provider_url, a per-attempt timeout of 800 ms, a deadline of 2.5 s, the
completer's schedule 1,2,3 s), one simulator on a fixed port restarted with
other arguments per case. In every case many clients send the same request
at once per key and retry until they get an outcome; then the checker
(provlib.check_keys) reads the simulator's own counts, grouped by the
metadata the responder sends:

  * no key has more than one charge at the provider, and each client key
    maps to one downstream key;
  * every key settles: GET /charge/keys/<key> says completed or failed
    once the completer's schedule has run;
  * every 2xx and 402 answer of a key is byte-identical, and replays so;
  * the settled outcome agrees with the provider (completed: it has the
    charge, and the 201 names it; failed: it has no succeeded charge);
  * only answers docs/openapi.yaml documents (tests/lib/openapi_check.py).

Before the cases, a lost record is invisible: a charge, Redis flushed and
restarted, the retry gets the same bytes and the provider charged once; the
same after its Redis hash is deleted.

Last, charge-reconcile (the build's own, beside CHARGE_BIN) over the whole
run with the responders' configuration file: the simulator's list of
charges against every record the cases left in Redis must show 0 orphans,
0 phantoms and 0 duplicates (docs/reconcile.md).
"""
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid

import jsonschema  # Debian's python3-jsonschema (tests/lib/openapi_check.py uses it too)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import provlib as P  # noqa: E402
from provlib import check, diag, test  # noqa: E402

THREADS_PER_KEY = int(os.environ.get("PROV_THREADS_PER_KEY", "8"))
LATE_MS = 1500      # > provider_timeout_ms (800), < provider_deadline_ms (2500)
TRICKLE_MS = 2
SETTLE_S = 30.0
KEYS_PER_TOKEN = 2
HAMMER_S = 15.0     # a client retries for this long, then gives up

SIM = None
STACK = None
T_START = int(time.time())


def setup():
    global SIM, STACK
    SIM = P.Sim("main", ["--late-ms", str(LATE_MS), "--trickle-ms", str(TRICKLE_MS)])
    STACK = P.Stack("sim", procs=2, provider_url=SIM.url, provider_api_key="sk_test_sim")


def nonce():
    return "n" + uuid.uuid4().hex[:10]


def run_case(tag, jobs, expect=None, threads=THREADS_PER_KEY, during=None):
    """jobs: [(key, body)]; during: a function run while the clients send
    (faults on a timer). The checker's problems fail the case."""
    t0 = time.monotonic()
    th = None
    if during is not None:
        th = threading.Thread(target=during, daemon=True)
        th.start()
    P.hammer(STACK, jobs, threads_per_key=threads, deadline_s=HAMMER_S, tag=tag)
    if th is not None:
        th.join(60)
    keys = [k for k, _ in jobs]
    nums, probs = P.check_keys(STACK, SIM, keys, settle_s=SETTLE_S, expect=expect)
    probs += P.final_replays(STACK, keys, dict(jobs))
    with P.HISTORY_LOCK:
        rs = [r for r in P.HISTORY if r.key in set(keys) and r.method == "POST" and r.tag == tag]
    diag("%s: %d keys x %d clients in %.1fs; answers %s" % (tag, len(keys), threads, time.monotonic() - t0,
                                                            P.statuses(rs)))
    diag("%s: %s" % (tag, " ".join("%s=%d" % kv for kv in sorted(nums.items()))))
    check(not probs, "\n".join(probs[:25]))
    return nums


def one_charge(key):
    sk = SIM.by_metadata().get((P.PRINCIPAL, key), [])
    return sum(x.get("charges", 0) for x in sk), sum(x.get("deliveries", 0) for x in sk)


# The two lost-record cases run first, the FLUSHALL one before everything:
# FLUSHALL drops every record in Redis, and only this case's keys are sent
# again. Run after the matrix, it left the matrix's charges without their
# records and without a retry to write them again: 87 orphans (no-record)
# for the reconciliation that closes the suite (t_reconcile), which has to
# see the records the fault cases wrote. Here it destroys only its own.
@test("a lost record is invisible: Redis flushed (FLUSHALL) and restarted, the retry answers the same bytes, "
      "one charge at the provider")
def t_lost_flush():
    keys = [(P.new_key("flush"), P.charge_body(src, amount=880 + i))
            for i, src in enumerate(["tok_visa", "tok_mastercard", "tok_chargeDeclined"])]
    first = {}
    for k, b in keys:
        first[k] = P.post(STACK, k, b)
        check(first[k].status in (201, 402), "first answer %r" % first[k])
    check(P.redis("FLUSHALL") == "OK", "FLUSHALL failed")
    P.sh('stack_redis_stop "$1" && stack_redis_start "$1" "$1/redis" "$1"', P.RUN)
    check(P.redis("DBSIZE") == 0, "Redis is not empty after FLUSHALL and a restart")
    for k, b in keys:
        seen = P.retry_until_final(STACK, k, b, time.monotonic() + 15, tag="flush")
        r = seen[-1]
        check(r.status == first[k].status and r.body == first[k].body,
              "after FLUSHALL + restart: %r (answers %s), first %r" % (r, P.statuses(seen), first[k]))
        charges, deliveries = one_charge(k)
        check(charges == 1 and deliveries >= 2, "key %s: provider charges %d, deliveries %d" % (k, charges, deliveries))
    bad = P.undocumented([r for r in P.HISTORY if r.tag == "flush"])
    check(not bad, "\n".join(bad[:10]))


@test("a lost record is invisible: the Redis hash deleted (DEL), the retry answers the same bytes, "
      "one charge at the provider")
def t_lost_del():
    for src, want in (("tok_visa", 201), ("tok_chargeDeclined", 402)):
        k = P.new_key("del")
        body = P.charge_body(src, amount=777)
        r1 = P.post(STACK, k, body)
        check(r1.status == want, "first answer %r, want %d" % (r1, want))
        check(P.redis("EXISTS", P.rkey(k)) == 1, "no record %s in Redis" % P.rkey(k))
        check(P.redis("DEL", P.rkey(k)) == 1, "DEL %s did not delete it" % P.rkey(k))
        r2 = P.post(STACK, k, body)
        check(r2.status == r1.status and r2.body == r1.body,
              "after DEL: %r, first %r" % (r2, r1))
        charges, deliveries = one_charge(k)
        check(charges == 1 and deliveries >= 2,
              "%s: provider charges %d, deliveries %d (want 1 charge, >= 2 deliveries)" % (src, charges, deliveries))
        r3 = P.post(STACK, k, body)
        check(r3.status == r1.status and r3.body == r1.body and r3.h("idempotent-replayed") == "true",
              "the replay after the re-recording: %r" % r3)
        diag("%s: %d, re-executed after DEL with Idempotent-Replayed %s, then replayed; provider: "
             "%d charge, %d deliveries" % (src, r1.status, r2.h("idempotent-replayed"), charges, deliveries))
    bad = P.undocumented([r for r in P.HISTORY if r.tag == "" and r.method == "POST"])
    check(not bad, "\n".join(bad[:10]))


# Every fault token: what the key settles as (docs/provider-sim.md).
TOKENS = [
    ("tok_visa", "completed"),
    ("tok_chargeDeclined", "failed"),
    ("tok_chargeDeclinedInsufficientFunds", "failed"),
    ("tok_providerError", "failed"),
    ("tok_providerRateLimited", "failed"),
    ("tok_providerReset", "failed"),
    ("tok_providerChargedThen500", "completed"),
    ("tok_providerChargedThenClose", "completed"),
    ("tok_providerChargedThenReset", "completed"),
    ("tok_providerTimeout", "completed"),
    ("tok_providerChargedThenLate", "completed"),
    ("tok_providerSlow", "completed"),
]


@test("every fault token, %d clients per key at once: one charge per key, every key settles, "
      "2xx/402 byte-identical, documented answers" % THREADS_PER_KEY)
def t_tokens():
    jobs, expect = [], {}
    for tok, want in TOKENS:
        for i in range(KEYS_PER_TOKEN):
            k = P.new_key(tok[4:])
            jobs.append((k, P.charge_body(tok, amount=1000 + i)))
            expect[k] = want
    run_case("tokens", jobs, expect)


@test("token chains (fail twice, then succeed; charged then lost, then replayed), %d clients per key"
      % THREADS_PER_KEY)
def t_chains():
    chains = [
        ("tok_providerError|tok_providerError|tok_visa|%s", "completed"),
        ("tok_providerRateLimited|tok_providerReset|tok_visa|%s", "completed"),
        ("tok_providerChargedThenClose|tok_visa|%s", "completed"),
        ("tok_providerChargedThen500|tok_providerError|tok_visa|%s", "completed"),
        ("tok_providerReset|tok_chargeDeclined|%s", "failed"),
        ("tok_providerTimeout|tok_visa|%s", "completed"),
    ]
    jobs, expect = [], {}
    for c, want in chains:
        k = P.new_key("chain")
        jobs.append((k, P.charge_body(c % nonce())))
        expect[k] = want
    nums = run_case("chains", jobs, expect)
    check(nums["deliveries"] >= 2 * nums["keys"], "the chains were not walked: %r" % nums)


@test("fail, fail, then succeed under one key (the simulator answering 500 / charging then closing "
      "to every delivery, restarted well within the deadline without the fault), %d clients per key"
      % THREADS_PER_KEY)
def t_fail_then_succeed():
    # The same story as a chain, with faults that hit every delivery of an
    # ordinary token: a fault rate of 1, then a restart without it.
    for fault in ("error", "charged_then_close", "reset"):
        SIM.stop()
        SIM.start(["--fault-rate", "%s=1" % fault])

        def nemesis():
            time.sleep(1.2)
            SIM.stop()
            SIM.start(["--late-ms", str(LATE_MS), "--trickle-ms", str(TRICKLE_MS)])

        jobs = [(P.new_key("then-" + fault), P.charge_body("tok_visa", amount=500 + i)) for i in range(3)]
        nums = run_case("then-" + fault, jobs, {k: "completed" for k, _ in jobs}, during=nemesis)
        check(nums["deliveries"] > nums["keys"], "no key was delivered more than once: %r" % nums)


@test("fault rates with a seed (error, charged_then_*, reset, refuse, rate_limited, trickle): "
      "one charge per key, every key settles")
def t_rates():
    SIM.stop()
    SIM.start(["--late-ms", str(LATE_MS), "--trickle-ms", str(TRICKLE_MS), "--seed", "4242",
               "--fault-rate", "error=0.15", "--fault-rate", "charged_then_500=0.1",
               "--fault-rate", "charged_then_close=0.1", "--fault-rate", "charged_then_reset=0.05",
               "--fault-rate", "charged_then_late=0.05", "--fault-rate", "reset=0.1",
               "--fault-rate", "refuse=0.05", "--fault-rate", "rate_limited=0.1",
               "--fault-rate", "trickle=0.05"])
    try:
        jobs = []
        for i in range(40):
            src = "tok_chargeDeclined" if i % 6 == 0 else "tok_visa"
            jobs.append((P.new_key("rate"), P.charge_body(src, amount=100 + i)))
        run_case("rates", jobs, threads=4)
        st = SIM.stats()
        diag("simulator: %r" % st)
        check(sum((st.get("faults") or {}).values()) > 0, "no rate fault was drawn: %r" % st)
    finally:
        SIM.stop()
        SIM.start(["--late-ms", str(LATE_MS), "--trickle-ms", str(TRICKLE_MS)])


@test("the simulator killed (kill -9) mid-flight and restarted on its data file: "
      "one charge per key, every key settles")
def t_killed():
    # latency 600 ms (< the 800 ms attempt): every delivery is in flight
    # when the simulator dies at +0.3 s; tok_providerChargedThenLate keys
    # are charged (and fsynced) at once and answered 1.5 s later: their
    # answer dies with the process, the charge must not
    args = ["--latency-ms", "600", "--late-ms", str(LATE_MS)]
    SIM.stop()
    SIM.start(args)

    def nemesis():
        time.sleep(0.3)
        SIM.kill9()
        diag("killed the simulator (kill -9) at +0.3s")
        time.sleep(1.0)
        SIM.start(args)
        diag("restarted it at +1.3s")

    try:
        srcs = ["tok_visa", "tok_chargeDeclined", "tok_providerChargedThenLate", "tok_mastercard"]
        jobs = [(P.new_key("kill"), P.charge_body(srcs[i % len(srcs)], amount=200 + i)) for i in range(16)]
        nums = run_case("kill9", jobs, threads=4, during=nemesis)
        check(nums["deliveries"] > nums["keys"], "no key was delivered twice: the kill missed the flight (%r)" % nums)
    finally:
        SIM.stop()
        SIM.start(["--late-ms", str(LATE_MS), "--trickle-ms", str(TRICKLE_MS)])


@test("the simulator down (connection refused) for 4 s, then back: documented answers, "
      "no charge while down, every key settles")
def t_down():
    rc = SIM.stop()
    check(rc == 0, "the simulator exited with status %r on SIGTERM" % rc)

    def nemesis():
        time.sleep(4.0)
        SIM.start(["--late-ms", str(LATE_MS), "--trickle-ms", str(TRICKLE_MS)])
        diag("simulator back at +4s")

    jobs = [(P.new_key("down"), P.charge_body("tok_visa", amount=300 + i)) for i in range(8)]
    run_case("down", jobs, threads=4, during=nemesis)


def metric(name):
    r = P.request(STACK, "GET", "/metrics", tag="metrics")
    check(r.status == 200, "GET /metrics: %r" % r)
    for line in r.body.decode().splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise P.Fail("no %s in /metrics" % name)


@test("an unknown outcome nobody retries (500s only): the completer settles it failed (502), "
      "nothing charged (bounded: 20 s)")
def t_completer_alone():
    # a retry past the schedule's last step settles an unknown itself (the
    # settle step it shares with the completer): here nobody retries, so
    # only the completer can settle it
    k = P.new_key("alone")
    body = P.charge_body("tok_providerError|n" + uuid.uuid4().hex[:8], amount=991)
    r1 = P.post(STACK, k, body)
    check(r1.status == 504, "first answer %r, want 504" % r1)
    end = time.monotonic() + 20
    st = None
    while time.monotonic() < end:
        v = P.redis("HGET", P.rkey(k), "state")
        st = v.decode() if isinstance(v, bytes) else v
        if st != "unknown":
            break
        time.sleep(0.5)
    check(st == "failed", "record state %r after 20 s" % st)
    r2 = P.post(STACK, k, body)
    check(r2.status == 502 and r2.h("idempotent-replayed") == "true", "replay %r" % r2)
    charges, _ = one_charge(k)
    check(charges == 0, "provider charges %d" % charges)


@test("no unknown outcome left: the index <key_prefix>unknown empties and charge_unknown_outstanding "
      "falls to 0 once every key settled (bounded: 15 s)")
def t_none_unknown():
    end = time.monotonic() + 15
    while True:
        n = P.redis("ZCARD", P.KEY_PREFIX + "unknown")
        g = metric("charge_unknown_outstanding")
        if (n == 0 and g == 0) or time.monotonic() > end:
            break
        time.sleep(0.5)
    check(n == 0 and g == 0, "index %sunknown holds %d, charge_unknown_outstanding %s" % (P.KEY_PREFIX, n, g))
    settled = metric('charge_completer_settled_total{outcome="completed"}') + \
        metric('charge_completer_settled_total{outcome="failed"}')
    diag("the completer settled %d records in this run" % settled)
    check(settled > 0, "the completer settled nothing (every unknown was settled by a retry?)")


def reconcile_bin():
    """charge-reconcile of the same build as the responder (PROV_RECONCILE_BIN
    overrides): build-asan/charge-reconcile under ./test.sh."""
    return os.environ.get("PROV_RECONCILE_BIN") or os.path.join(os.path.dirname(P.BIN), "charge-reconcile")


@test("charge-reconcile after the fault matrix: 0 orphans, 0 phantoms, 0 duplicates")
def t_reconcile():
    # The simulator's list of charges (its data file kept every charge
    # through the restarts and the kill -9 above) against the records in
    # Redis, over the whole run, with the responders' own configuration
    # file (the same Redis, key_prefix, provider_url, provider_api_key,
    # provider_secret). Nothing is excluded: the cases that lose records
    # run first and retry them (see t_lost_flush), so every charge of the
    # run must have its record. A finding here is a bug of the responder,
    # the simulator or the reconciler: the findings are listed below.
    rbin = reconcile_bin()
    check(os.access(rbin, os.X_OK), "%s not built" % rbin)
    if not SIM.alive():
        SIM.start(["--late-ms", str(LATE_MS), "--trickle-ms", str(TRICKLE_MS)])
        diag("the simulator restarted on its data file")
    since = "@%d" % (T_START - 1)
    p = subprocess.run([rbin, "-c", STACK.conf_path, "--since", since, "--json", "--quiet"], env=STACK.env,
                       stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    out, err = p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")
    check(out.strip(), "no report on stdout (exit %d): %s" % (p.returncode, err[-1500:]))
    doc = json.loads(out)
    with open(os.path.join(P.REPO, "docs", "reconcile.schema.json"), encoding="utf-8") as f:
        jsonschema.validate(doc, json.load(f))
    n = doc["counts"]
    diag("charge-reconcile --since %s: exit %d; %s" % (since, p.returncode,
                                                       " ".join("%s=%d" % kv for kv in sorted(n.items()))))
    for kind in ("orphans", "phantoms", "duplicates"):
        for f in doc.get(kind, [])[:25]:
            diag("%s: %s" % (kind[:-1], json.dumps(f, sort_keys=True)))
    if err.strip():
        diag("stderr: %s" % err.strip()[-600:])
    check(n["orphans"] == 0 and n["phantoms"] == 0 and n["duplicates"] == 0,
          "orphans %d, phantoms %d, duplicates %d (listed above)" % (n["orphans"], n["phantoms"], n["duplicates"]))
    check(p.returncode == 0 and doc["clean"] is True, "exit %d, clean %r" % (p.returncode, doc["clean"]))
    check(n["matched"] > 0, "no charge matched its record: %r" % n)


def main():
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        setup()
    except Exception as e:  # noqa: BLE001
        print("not ok 1 - provider_faults: set-up: %s" % e)
        P.stop_all()
        return 1
    try:
        rc = P.tap.run("PROV_ONLY")
        try:
            diag_stats = SIM.stats()
            print("# simulator totals: %r" % diag_stats)
        except Exception as e:  # noqa: BLE001
            print("# simulator totals: %s" % e)
        return rc
    finally:
        rc_sim = SIM.stop() if SIM and SIM.alive() else 0
        P.stop_all()
        if rc_sim not in (0, None):
            print("not ok - the simulator exited with status %r on SIGTERM" % rc_sim)


if __name__ == "__main__":
    sys.exit(main())
