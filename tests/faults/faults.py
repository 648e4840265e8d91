#!/usr/bin/env python3
"""The fault matrix of POST /charge, each fault its own TAP case, then one
gate over everything the suite sent (harness.gate, harness.final_replays):

  * at most one charge id per (principal, key) in the provider ledger;
  * the acknowledged outcomes (201/402/502; a 504 outcome-unknown is not
    final) of a key identical, status
    and body, and at most one of them fresh (Idempotent-Replayed: false);
    a 201/402 names the charge the ledger has for the key;
  * at the end every acknowledged request is sent again and replays: same
    status, body, Content-Type, Retry-After, Idempotent-Replayed: true;
  * only documented answers (the responder's 201, 402, 409, 502, 503 and
    504 with their problem types and Retry-After; 422, 408, 400, 401, 405,
    413, 415 where a case causes them; the web server's own answer only for
    a request in flight while its responder was killed, or for a request
    the web server itself rejects as malformed);
  * no request takes longer than redis_timeout_ms + 1 s plus the provider's
    time and any Prefer wait, plus what the fault under test adds (a
    stopped responder, descriptors exhausted, a stalled client ahead).

Run by tests/faults/run.sh, which starts Redis and sets FAULTS_* and
CHARGE_*. Each case prints "#" lines: requests sent, the status histogram
and the gate's numbers for that case. Python standard library only.
"""

import collections
import json
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness as H  # noqa: E402
from harness import Fail, check, log  # noqa: E402
from proxy import RedisProxy  # noqa: E402

CASES = []
NOTES = []


def case(tag, name):
    def deco(fn):
        CASES.append((tag, name, fn))
        return fn
    return deco


def note(msg):
    """A "#" line printed under the case's result."""
    NOTES.append(msg)


class Skip(Exception):
    pass


def hist_of(exs):
    return H.histogram(collections.Counter(e.label() for e in exs))


def slow_exs(exs, since):
    return [e for e in exs if e.t0 >= since]


def wait_for(pred, secs, step=0.01):
    end = time.monotonic() + secs
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(step)
    return pred()


def in_thread(fn, *a, **kw):
    box = {}

    def run():
        try:
            box["v"] = fn(*a, **kw)
        except Exception as e:   # noqa: BLE001 - reported by the caller
            box["e"] = e
    t = threading.Thread(target=run, daemon=True)
    t.start()

    def result(timeout=60):
        t.join(timeout)
        if "e" in box:
            raise box["e"]
        check(not t.is_alive(), "request thread still running after %ds" % timeout)
        return box["v"]
    return result


def state_of(principal, key):
    v = H.redis("HGET", H.rkey(principal, key), "state")
    return v.decode() if v else None


def expect_replay(r, orig, what):
    check(r.origin == "app" and r.status == orig.status,
          "%s: status %s, want the recorded %d: %r" % (what, r.label(), orig.status, r))
    check(r.rbody == orig.rbody, "%s: body differs from the recorded one:\n  %r\n  %r" % (what, r.rbody[:200], orig.rbody[:200]))
    check(r.replayed() == "true", "%s: Idempotent-Replayed %r" % (what, r.replayed()))


def expect_fresh(r, status, what):
    check(r.origin == "app" and r.status == status, "%s: want %d, got %r" % (what, status, r))
    check(r.replayed() == "false", "%s: Idempotent-Replayed %r, want false" % (what, r.replayed()))


def restore_everything():
    """After any case: Redis running, not stopped, no memory limit, the
    spill directory not full."""
    pid = H.redis_pid()
    if pid is not None:
        try:
            os.kill(pid, signal.SIGCONT)
        except OSError:
            pass
    if not H.redis_ok():
        if H.redis_pid() is None:
            H.redis_start()
        wait_for(H.redis_ok, 10, 0.1)
    try:
        H.redis("CONFIG", "SET", "maxmemory", "0")
    except (OSError, H.RedisError):
        pass
    spill_free()


# ---------------------------------------------------------------- spill fill

FILLER = os.path.join(H.SPILL_DIR, "filler") if H.SPILL_DIR else ""


def spill_fill():
    """Fills the spill tmpfs to the last byte with a file the responder's
    garbage collector does not touch (its name has no spill form)."""
    fd = os.open(FILLER, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for size in (1 << 20, 65536, 4096, 512, 1):
            buf = b"\0" * size
            for _ in range(64 * 1024 * 1024 // size):
                try:
                    if os.write(fd, buf) < size:
                        break
                except OSError:
                    break
    finally:
        os.close(fd)
    st = os.statvfs(H.SPILL_DIR)
    return st.f_bavail * st.f_frsize


def spill_free():
    if FILLER and os.path.exists(FILLER):
        os.unlink(FILLER)


# ================================================================= cases

@case("c1", "Redis kill -9 under load (appendfsync always), restarted from the same AOF, 3 cycles; "
            "what was acknowledged replays after each restart")
def c1():
    st = H.Stack("c1", procs=3)
    load = H.Load("c1", st, threads=3, big=0.1)
    verified = set()
    try:
        for cycle in range(1, 4):
            time.sleep(1.5)
            before = {k: H.acked(es)[0] for k, es in H.latest_by_key(H.of_case("c1")).items() if H.acked(es)}
            w = H.Window("redis-kill")
            H.redis_kill9()
            down = time.monotonic()
            time.sleep(0.8)
            H.redis_start()
            w.end()
            up = time.monotonic()
            # every outcome acknowledged before the crash survives it
            lost = []
            for (p, k, b), first in before.items():
                if (p, k) in verified and random.random() < 0.7:
                    continue
                r = H.send("c1", st, p, k, b, note="after restart %d" % cycle)
                if not (r.origin == "app" and r.status == first.status and r.rbody == first.rbody
                        and r.replayed() == "true"):
                    lost.append((k, first.label(), r.label()))
                verified.add((p, k))
            note("cycle %d: Redis down %.1fs; %d acknowledged outcome(s) before the crash, "
                 "re-sent after the restart: %d differ" % (cycle, up - down, len(before), len(lost)))
            check(not lost, "cycle %d: acknowledged outcomes not replayed after the restart: %r" % (cycle, lost[:5]))
        time.sleep(1.0)
    finally:
        load.stop()
    left = H.converge("c1", st)
    check(not left, "keys without an outcome after retries: %r" % left[:5])
    st.stop()


@case("c2", "Redis frozen (SIGSTOP 3 s) with claims and charges in flight, then SIGCONT; every key "
            "retried converges to one outcome")
def c2():
    rng = random.Random("%s-c2" % H.SEED)
    keys = H.Keys("c2a")
    st = H.Stack("c2", procs=3)
    # a) every responder idle on a live Redis connection: the next command
    #    each sends is a claim, into the frozen Redis
    warm = [in_thread(H.send, "c2", st, "demo", keys.new(), H.order(rng, source="tok_visa")) for _ in range(6)]
    check(all(f(10).status == 201 for f in warm), "warm-up charges failed")
    w = H.Window("redis-stop")
    H.redis_signal(signal.SIGSTOP)
    try:
        futs = [in_thread(H.send, "c2", st, "demo", keys.new(), H.order(rng, source="tok_visa"))
                for _ in range(3)]
        claims = [f(15) for f in futs]
    finally:
        H.redis_signal(signal.SIGCONT)
        w.end()
    note("a) claims sent into the frozen Redis: %s after %s s, Retry-After %s" % (
        hist_of(claims), "/".join("%.2f" % e.elapsed() for e in claims),
        "/".join(str(e.h("retry-after")) for e in claims)))
    for e in claims:
        check(e.status == 503, "a) claim into a frozen Redis: %r" % e)
    # b) load: most requests are inside the provider call when Redis stops
    load = H.Load("c2", st, threads=3, big=0.1)
    try:
        time.sleep(1.5)
        w = H.Window("redis-stop")
        H.redis_signal(signal.SIGSTOP)
        t_stop = time.monotonic()
        time.sleep(3.0)
        H.redis_signal(signal.SIGCONT)
        w.end()
        time.sleep(2.0)
    finally:
        load.stop()
    during = [e for e in H.of_case("c2") if e.t0 <= t_stop + 3.0 and e.t1 >= t_stop]
    note("b) requests overlapping the 3 s freeze under load: %d (%s); slowest %.2fs" % (
        len(during), hist_of(during), max([e.elapsed() for e in during] or [0])))
    left = H.converge("c2", st)
    check(not left, "keys without an outcome after retries: %r" % left[:5])
    retried = [k for k, es in H.latest_by_key(H.of_case("c2")).items() if len(es) > 1]
    note("%d key(s) sent more than once; all converged" % len(retried))
    st.stop()


@case("c3", "Redis out of memory (noeviction; maxmemory just above used_memory, then filled) at the "
            "claim and at the record: 503, nothing charged twice; maxmemory 0 again and every key converges")
def c3():
    rng = random.Random("%s-c3" % H.SEED)
    keys = H.Keys("c3")
    # --- at the claim: maxmemory just above used_memory, then Redis filled
    #     up to it (a filler value appended to until Redis refuses): every
    #     claim of a new key is refused, replays still read
    st = H.Stack("c3claim", procs=2)
    warm = H.send("c3", st, "demo", keys.new(), H.order(rng, items=150, source="tok_visa"))
    expect_fresh(warm, 201, "charge before the memory limit")
    used = H.redis_info_int("used_memory")
    H.redis("CONFIG", "SET", "maxmemory", str(used + 256 * 1024))
    w = H.Window("redis-oom")
    filler = "faults-filler-%s" % H.RUN_ID
    try:
        # smaller and smaller pieces, each until Redis refuses one: at the
        # end not even a 16-byte write fits
        for size in (8192, 1024, 128, 16):
            for _ in range(2000):
                try:
                    H.redis("APPEND", filler, b"x" * size)
                except H.RedisError as e:
                    check(str(e).startswith("OOM"), "APPEND: %s" % e)
                    break
            else:
                raise Fail("Redis never refused the filler (maxmemory %d)" % (used + 256 * 1024))
        # Redis trims idle clients' buffers, which frees a few KB now and
        # then: pin the limit below what is used, so no write fits
        H.redis("CONFIG", "SET", "maxmemory", str(H.redis_info_int("used_memory") - 64 * 1024))
        refused = []
        for i in range(8):
            p = rng.choice(list(H.PRINCIPALS))
            k = keys.new()
            r = H.send("c3", st, p, k, H.order(rng, items=rng.choice([0, 150]), source=H.pick_token(rng)))
            check(r.status == 503 and r.h("retry-after") == "1",
                  "a claim with Redis out of memory: want 503 Retry-After 1, got %r" % r)
            check(state_of(p, k) is None and not H.ledger_for(p, k),
                  "refused claim: key holds %r, ledger %r" % (state_of(p, k), H.ledger_for(p, k)))
            refused.append(r)
        replay_during = H.send("c3", st, warm.principal, warm.key, warm.body, note="replay while OOM")
    finally:
        H.redis("DEL", filler)
        H.redis("CONFIG", "SET", "maxmemory", "0")
        w.end()
    expect_replay(replay_during, warm, "a replay while Redis is out of memory")
    note("claim phase: maxmemory = used_memory + 256 KiB, Redis filled until it refused a 16-byte "
         "APPEND, the limit then pinned 64 KiB below used_memory; 8 new keys: %s (no provider "
         "call, no record); a replay meanwhile: %s, Idempotent-Replayed %s" % (
             hist_of(refused), replay_during.label(), replay_during.replayed()))
    # large inline records with the limit just above used_memory: Redis
    # takes the small claims and refuses the records (provider called)
    used = H.redis_info_int("used_memory")
    H.redis("CONFIG", "SET", "maxmemory", str(used + 64 * 1024))
    w = H.Window("redis-oom")
    big = []
    try:
        for i in range(12):
            big.append(H.send("c3", st, "demo", keys.new(), H.order(rng, items=190, source="tok_visa")))
    finally:
        H.redis("CONFIG", "SET", "maxmemory", "0")
        w.end()
    at_record = [e for e in big if e.status == 503 and H.ledger_for(e.principal, e.key)]
    note("limit used_memory + 64 KiB, 12 large orders (~14 KB inline records): %s; %d refused at the "
         "record after the provider ran" % (hist_of(big), len(at_record)))
    check(at_record, "no record was refused")
    st.stop()

    # --- at the record: the provider takes 700 ms; the limit comes after the claim
    st = H.Stack("c3record", procs=2, provider_latency_ms=700)
    rec_keys = []
    for i in range(3):
        k = keys.new()
        p = "demo" if i % 2 == 0 else list(H.PRINCIPALS)[1]
        body = H.order(rng, items=190, source="tok_visa")      # a ~14 KB inline record
        fut = in_thread(H.send, "c3", st, p, k, body)
        check(wait_for(lambda: state_of(p, k) == "in_progress", 3), "request never claimed its key")
        w = H.Window("redis-oom")
        # (below used_memory: a limit just above it lets the record through
        # whenever Redis has just trimmed some client buffer)
        H.redis("CONFIG", "SET", "maxmemory", str(H.redis_info_int("used_memory") - 64 * 1024))
        try:
            r = fut(10)
        finally:
            H.redis("CONFIG", "SET", "maxmemory", "0")
            w.end()
        check(r.status == 503, "record refused for lack of memory: want 503, got %r" % r)
        ra = int(r.h("retry-after") or 0)
        check(1 <= ra <= st.lock_ttl_s, "Retry-After %d, want the claim's remaining life (<= %d)" % (ra, st.lock_ttl_s))
        check(len(H.ledger_for(p, k)) == 1, "provider calls: %r" % H.ledger_for(p, k))
        check(state_of(p, k) == "in_progress", "after the refused record the key is %r, want in_progress" % state_of(p, k))
        rec_keys.append((p, k, body))
    note("record phase (provider 700 ms; maxmemory 64 KiB below used_memory once the key is claimed): "
         "3 charges whose record was refused: 503 with Retry-After <= lock_ttl_s, one ledger line, the claim held")
    left = H.converge("c3", st)
    check(not left, "keys without an outcome after maxmemory 0: %r" % left[:5])
    for p, k, body in rec_keys:
        lines = H.ledger_for(p, k)
        check(len({ln[3] for ln in lines}) == 1, "charge ids for %s: %r" % (k, lines))
    note("after maxmemory 0: every key converged; the refused records' keys were charged again with the same id")
    st.stop()


FIU_SPILL_WRITE = "enable_stack_by_name name=posix/io/rw/write,failinfo=28,func_name=spill_write"


@case("c4", "spill directory full (its own tmpfs filled to the last byte, else write() failing with "
            "ENOSPC inside spill_write through fiu-run): large orders record their body inline, replay "
            "byte-identical, one charge id; space freed, spilling resumes")
def c4():
    mode = H.SPILL_MODE
    if mode == "none":
        raise Skip("no tmpfs of its own for the spill directory (needs root) and no fiu-run (fiu-utils)")
    rng = random.Random("%s-c4" % H.SEED)
    keys = H.Keys("c4")
    st = H.Stack("c4", procs=2, fiu=(mode == "fiu"))
    full = []
    before = set(os.listdir(H.SPILL_DIR))
    w = H.Window("spill-full")
    try:
        if mode == "tmpfs":
            avail = spill_fill()
            note("spill tmpfs filled: %d bytes left" % avail)
            check(avail < 4096, "could not fill the spill directory: %d bytes left" % avail)
            h = H.send("c4", st, None, None, None, kind="bad", expect={"503"}, method="GET", path="/readyz",
                       ctype=None, api_key="")
            check(h.status == 503 and b"low on space" in h.rbody, "/readyz with a full spill dir: %r" % h)
        else:
            st.fiu_ctrl(FIU_SPILL_WRITE)
            note("fiu-run: write() fails with ENOSPC whenever spill_write is on the stack "
                 "(the plain build: the ASan build crashes under libfiu's preload)")
        for i in range(6):
            p = rng.choice(list(H.PRINCIPALS))
            k = keys.new()
            body = H.order(rng, items=350, source="tok_visa")
            r = H.send("c4", st, p, k, body)
            expect_fresh(r, 201, "large order with the spill directory full")
            check(len(r.rbody) > H.SPILL_THRESHOLD, "response of %d bytes would not spill" % len(r.rbody))
            rec = H.record(p, k)
            check(rec.get("state") == b"completed" and "body" in rec and "body_file" not in rec,
                  "record after a failed spill write: fields %r" % sorted(rec))
            full.append(r)
        for r in full:
            expect_replay(H.send("c4", st, r.principal, r.key, r.body), r, "replay of an inline-recorded large body")
        left = set(os.listdir(H.SPILL_DIR)) - before - {"filler"}
        check(not left, "files left behind in the full spill directory: %r" % sorted(left))
    finally:
        if mode == "tmpfs":
            spill_free()
        else:
            st.fiu_ctrl("disable name=posix/io/rw/write")
        w.end()
    spilled = []
    for i in range(4):
        p = rng.choice(list(H.PRINCIPALS))
        k = keys.new()
        r = H.send("c4", st, p, k, H.order(rng, items=350, source="tok_visa"))
        expect_fresh(r, 201, "large order after space was freed")
        rec = H.record(p, k)
        check("body_file" in rec and os.path.exists(os.path.join(H.SPILL_DIR, rec["body_file"].decode())),
              "record after space was freed: fields %r" % sorted(rec))
        spilled.append(r)
    for r in full + spilled:
        expect_replay(H.send("c4", st, r.principal, r.key, r.body), r, "replay after space was freed")
        check(len(H.ledger_for(r.principal, r.key)) == 1, "ledger lines for %s" % r.key)
    h = H.send("c4", st, None, None, None, kind="bad", expect={"200"}, method="GET", path="/readyz",
               ctype=None, api_key="")
    note("6 large orders while full: recorded inline (201, one ledger line each); 4 after freeing: "
         "spilled to files; all replay byte-identical; /readyz %s" % (
             "503 low on space, then " + h.label() if mode == "tmpfs" else h.label()))
    st.stop()


@case("c5", "a Redis reply lost (connection reset after the script ran, through a TCP proxy) at the "
            "claim and at the record: retried on a new connection, released, or Retry-After = claim life")
def c5():
    rng = random.Random("%s-c5" % H.SEED)
    keys = H.Keys("c5")
    proxy = RedisProxy(H.REDIS_SOCK)
    st = H.Stack("c5", procs=1, redis_url=proxy.url, lock_ttl_s=5)
    try:
        # a) one claim reply lost: the responder re-sends the claim on a new
        #    connection (the same owner's claim is still its own): 201
        k = keys.new()
        proxy.arm("claim")
        r = H.send("c5", st, "demo", k, H.order(rng, source="tok_visa"))
        check(proxy.pending() == 0, "the proxy saw no claim")
        expect_fresh(r, 201, "a) one claim reply lost")
        check(len(H.ledger_for("demo", k)) == 1, "a) ledger lines %r" % H.ledger_for("demo", k))
        expect_replay(H.send("c5", st, "demo", k, r.body), r, "a) replay")
        note("a) one lost claim reply: %s, fresh, 1 ledger line" % r.label())

        # b) the claim reply lost twice: 503, the claim released; a retry
        #    right away executes (not 409 for lock_ttl_s)
        k = keys.new()
        body = H.order(rng, source="tok_visa")
        proxy.arm("claim")
        proxy.arm("claim")
        r = H.send("c5", st, "demo", k, body)
        check(r.status == 503 and r.slug() == "service-unavailable", "b) two lost claim replies: %r" % r)
        check(r.h("retry-after") == "1", "b) Retry-After %r, want 1 (the claim was released)" % r.h("retry-after"))
        check(state_of("demo", k) is None, "b) the key holds %r after the release" % state_of("demo", k))
        check(not H.ledger_for("demo", k), "b) the provider was called")
        r2 = H.send("c5", st, "demo", k, body)
        expect_fresh(r2, 201, "b) retry right after the 503")
        note("b) two lost claim replies: 503 Retry-After 1, key released; retry at once: %s" % r2.label())

        # c) claim reply lost twice and the release never reaches Redis: 503
        #    with Retry-After = the claim's remaining life; 409 until it lapses
        k = keys.new()
        body = H.order(rng, source="tok_visa")
        proxy.arm("claim")
        proxy.arm("claim")
        proxy.arm("release", mode="before")
        r = H.send("c5", st, "demo", k, body)
        pttl = H.redis("PTTL", H.rkey("demo", k))
        check(r.status == 503, "c) lost claim and release replies: %r" % r)
        ra = int(r.h("retry-after") or 0)
        check(state_of("demo", k) == "in_progress", "c) key %r, want the claim still held" % state_of("demo", k))
        check(pttl > 0 and abs(ra - pttl / 1000.0) <= 1.5,
              "c) Retry-After %d, want the claim's remaining life (PTTL %d ms)" % (ra, pttl))
        r2 = H.send("c5", st, "demo", k, body)
        check(r2.status == 409, "c) retry while the claim is held: %r" % r2)
        time.sleep(pttl / 1000.0 + 0.2)
        r3 = H.send("c5", st, "demo", k, body)
        expect_fresh(r3, 201, "c) retry after Retry-After")
        note("c) claim replies lost, release never reached Redis: 503 Retry-After %d (PTTL %d ms), then 409, after it %s" % (
            ra, pttl, r3.label()))

        # d) one record reply lost (a spilled body): the record is re-sent on
        #    a new connection, idempotent for its owner: 201 fresh, file kept
        k = keys.new()
        body = H.order(rng, items=350, source="tok_visa")
        proxy.arm("record")
        r = H.send("c5", st, "demo", k, body)
        check(proxy.pending() == 0, "d) the proxy saw no record")
        expect_fresh(r, 201, "d) one record reply lost")
        rec = H.record("demo", k)
        check("body_file" in rec and os.path.exists(os.path.join(H.SPILL_DIR, rec["body_file"].decode())),
              "d) spill file of the record: fields %r" % sorted(rec))
        expect_replay(H.send("c5", st, "demo", k, body), r, "d) replay")
        check(len(H.ledger_for("demo", k)) == 1, "d) ledger lines %r" % H.ledger_for("demo", k))
        note("d) one lost record reply (spilled body): 201 Idempotent-Replayed false, spill file kept, replays")

        # e) the record reply lost twice: 503 (outcome unknown to the
        #    responder) though it was recorded; the retry replays it
        k = keys.new()
        body = H.order(rng, items=350, source="tok_visa")
        proxy.arm("record")
        proxy.arm("record")
        r = H.send("c5", st, "demo", k, body)
        check(r.status == 503, "e) two lost record replies: %r" % r)
        rec = H.record("demo", k)
        check(rec.get("state") == b"completed" and "body_file" in rec and
              os.path.exists(os.path.join(H.SPILL_DIR, rec["body_file"].decode())),
              "e) record after two lost replies: %r" % sorted(rec))
        r2 = H.send("c5", st, "demo", k, body)
        check(r2.status == 201 and r2.replayed() == "true", "e) retry: %r" % r2)
        check(len(H.ledger_for("demo", k)) == 1, "e) ledger lines %r" % H.ledger_for("demo", k))
        note("e) two lost record replies: 503 Retry-After %s; it was recorded: the retry replays it (%s)" % (
            r.h("retry-after"), r2.label()))

        # f) the 3rd claim from now: two requests pass, the third is retried
        ks = [keys.new() for _ in range(3)]
        proxy.arm("claim", nth=3)
        rs = [H.send("c5", st, "demo", kk, H.order(rng, source="tok_visa")) for kk in ks]
        check(proxy.pending() == 0 and all(x.status == 201 and x.replayed() == "false" for x in rs),
              "f) third claim's reply lost: %r" % rs)
        note("f) the 3rd claim's reply lost: 201 x 3; proxy: %d resets, %d connections, scripts seen %r" % (
            len(proxy.resets), proxy.conns, proxy.seen))
    finally:
        proxy.disarm()
        st.stop()
        proxy.close()


def stop_cont(pid, secs):
    os.kill(pid, signal.SIGSTOP)
    time.sleep(secs)
    os.kill(pid, signal.SIGCONT)


@case("c6", "a responder SIGSTOPped past lock_ttl_s mid-charge; a retry with different parameters "
            "takes over; after SIGCONT the late original gets 422, never the other's body")
def c6():
    rng = random.Random("%s-c6" % H.SEED)
    keys = H.Keys("c6")
    cfg = dict(lock_ttl_s=2, provider_latency_ms=1200, provider_timeout_ms=500)
    sx = H.Stack("c6x", procs=1, **cfg)       # the original's responder, to be stopped
    sy = H.Stack("c6y", procs=1, **cfg)       # the retries'
    try:
        for variant in ("different, CONT after the takeover recorded",
                        "different, CONT while the takeover runs",
                        "same parameters"):
            p = "demo"
            k = keys.new()
            amount = rng.randint(1000, 5000)
            a_body = H.order(rng, source="tok_visa", amount=amount)
            b_body = a_body if variant.startswith("same") else H.order(rng, source="tok_visa", amount=amount + 1)
            worker = sx.workers()[0]
            w = H.Window("responder-stop", allow=8.0)
            a_fut = in_thread(H.send, "c6", sx, p, k, a_body, expect={422}, note="original, stopped")
            check(wait_for(lambda: state_of(p, k) == "in_progress", 3), "original never claimed")
            time.sleep(0.3)                            # inside the 1.2 s provider call
            os.kill(worker, signal.SIGSTOP)
            t_stop = time.monotonic()
            check(wait_for(lambda: state_of(p, k) is None, sx.lock_ttl_s + 1.5, 0.02),
                  "the stopped original's claim did not lapse")
            if variant.endswith("while the takeover runs"):
                b_fut = in_thread(H.send, "c6", sy, p, k, b_body, note="takeover")
                check(wait_for(lambda: state_of(p, k) == "in_progress", 3), "takeover never claimed")
                os.kill(worker, signal.SIGCONT)
                b = b_fut(15)
            else:
                b = H.send("c6", sy, p, k, b_body, note="takeover")
                os.kill(worker, signal.SIGCONT)
            stopped = time.monotonic() - t_stop
            a = a_fut(15)
            w.end()
            expect_fresh(b, 201, "%s: the takeover" % variant)
            if variant.startswith("same"):
                expect_replay(a, b, "%s: the late original" % variant)
            else:
                check(a.status == 422 and a.slug() == "idempotency-key-reused",
                      "%s: the late original: want 422, got %r" % (variant, a))
                check(a.rbody != b.rbody and json.loads(b.rbody)["id"].encode() not in a.rbody,
                      "%s: the late original got the takeover's body" % variant)
            same = H.send("c6", sy, p, k, b_body, note="retry, takeover's parameters")
            expect_replay(same, b, "%s: retry with the takeover's parameters" % variant)
            if not variant.startswith("same"):
                old = H.send("c6", sy, p, k, a_body, expect={422}, note="retry, original parameters")
                check(old.status == 422, "%s: retry with the original parameters: %r" % (variant, old))
            lines = H.ledger_for(p, k)
            note("%s: stopped %.1fs; original %s, takeover %s, retry %s; ledger: %s" % (
                variant, stopped, a.label(), b.label(), same.label(),
                ", ".join("%s %s %s" % (ln[3], ln[4], ln[5]) for ln in lines)))
    finally:
        for s in (sx, sy):
            for pid in s.workers():
                try:
                    os.kill(pid, signal.SIGCONT)
                except OSError:
                    pass
        sx.stop()
        sy.stop()


@case("c7", "responders kill -9ed at random moments under load (lighttpd respawns them); retries "
            "after lock_ttl_s converge, one charge id per key")
def c7():
    rng = random.Random("%s-c7" % H.SEED)
    st = H.Stack("c7", procs=3, provider_latency_ms=200)
    load = H.Load("c7", st, threads=3, big=0.1)
    killed = []
    try:
        time.sleep(1.0)
        for _ in range(8):
            time.sleep(rng.uniform(0.3, 0.9))
            ws = st.workers()
            if not ws:
                continue
            pid = rng.choice(ws)
            w = H.Window("responder-kill", allow=3.0, lenient=True)
            os.kill(pid, signal.SIGKILL)
            w.end(linger=1.5)
            killed.append(pid)
        time.sleep(1.0)
    finally:
        load.stop()
    check(wait_for(lambda: len(st.workers()) == 3, 10, 0.1), "lighttpd did not respawn: %r" % st.workers())
    left = H.converge("c7", st)
    check(not left, "keys without an outcome after retries: %r" % left[:5])
    exs = H.of_case("c7")
    server = [e for e in exs if e.origin != "app"]
    note("%d responders killed (%s); the web server's own answers, each for a request in flight "
         "at a kill: %s; responders now %r" % (len(killed), killed, hist_of(server) or "none", st.workers()))
    st.stop()


@case("c8", "fd exhaustion of a responder (RLIMIT_NOFILE at its lowest free descriptor): it stays "
            "up, logs it, and serves every queued request once the limit is raised")
def c8():
    rng = random.Random("%s-c8" % H.SEED)
    keys = H.Keys("c8")
    st = H.Stack("c8", procs=1, provider_latency_ms=50)
    for _ in range(2):
        expect_fresh(H.send("c8", st, "demo", keys.new(), H.order(rng, source="tok_visa")), 201, "warm-up")
    pid = st.workers()[0]
    fds = set()
    for _ in range(20):      # until the last request's connection is closed
        time.sleep(0.1)
        now = {int(x) for x in os.listdir("/proc/%d/fd" % pid)}
        if now == fds:
            break
        fds = now
    free = min(set(range(len(fds) + 1)) - fds)
    out = subprocess.run(["prlimit", "--pid", str(pid), "--nofile", "--output", "SOFT,HARD", "--noheadings"],
                         stdout=subprocess.PIPE, check=True).stdout.decode().split()
    soft, hard = out[0], out[1]
    dur = 1.2
    w = H.Window("fd-exhaust", allow=dur + 0.5)
    subprocess.run(["prlimit", "--pid", str(pid), "--nofile=%d:%s" % (free, hard)], check=True)
    try:
        futs = [in_thread(H.send, "c8", st, "demo", keys.new(), H.order(rng, source="tok_visa"))
                for _ in range(6)]
        time.sleep(dur)
        answered_early = len(H.of_case("c8")) - 2      # kept once answered
        alive = H.proc_alive(pid, "charge")
    finally:
        subprocess.run(["prlimit", "--pid", str(pid), "--nofile=%s:%s" % (soft, hard)], check=True)
        w.end()
    rs = [f(20) for f in futs]
    check(alive, "the responder died while out of descriptors")
    check(all(r.status == 201 for r in rs), "queued requests after the limit was raised: %r" % rs)
    check(st.workers() == [pid], "the responder was replaced: %r -> %r" % (pid, st.workers()))
    after = H.send("c8", st, "demo", keys.new(), H.order(rng, source="tok_visa"))
    expect_fresh(after, 201, "a request after the limit was raised")
    logtxt = st.log_text()
    check("accept: Too many open files" in logtxt, "no 'accept: Too many open files' in the responder's log")
    check("accepting again" in logtxt, "no 'accepting again' in the responder's log")
    note("limit %d (lowest free fd, %d open) for %.1fs: %d of 6 requests answered meanwhile (the "
         "accept() already waiting held its descriptor), all 6 201 after the limit went back to %s; "
         "same pid %d; EMFILE and the recovery logged" % (
             free, len(fds), dur, answered_early, soft, pid))
    st.stop()


BAD_BODIES = [
    ("truncated JSON", b'{"amount":', "400", "invalid-request"),
    ("fractional amount", b'{"amount":10.5,"currency":"usd","source":"tok_visa"}', "400", "invalid-request"),
    ("raw NUL in a string", b'{"amount":100,"currency":"usd","source":"tok_vi\x00sa"}', "400", "invalid-request"),
    ("\\u0000 in a string", b'{"amount":100,"currency":"usd","source":"tok_visa","description":"a\\u0000b"}',
     "400", "invalid-request"),
    ("raw CR LF in a string", b'{"amount":100,"currency":"usd","source":"tok_visa","description":"a\r\nb"}',
     "400", "invalid-request"),
]


def bad_requests(case, st, keys, rng):
    """Every malformed, oversized and header-injecting request once; each
    must get its documented 4xx and leave its key unused. Returns the keys
    to check afterwards: (principal, key)."""
    good = lambda: H.order(rng, source="tok_visa")   # noqa: E731
    touched = []

    def expect_bad(ex, label, slug=None):
        labels = label if isinstance(label, set) else {label}
        check(ex.label() in labels, "%s: want %s, got %r" % (ex.note, "/".join(sorted(labels)), ex))
        if slug and ex.origin == "app":
            check(ex.slug() == slug, "%s: problem type %r, want %s" % (ex.note, ex.slug(), slug))
        for hdr in ("set-cookie", "x-evil"):
            check(hdr not in (ex.rh or {}), "%s: injected header %s in the answer: %r" % (ex.note, hdr, ex.raw_head or ex.rh))

    for what, body, label, slug in BAD_BODIES:
        k = keys.new()
        expect_bad(H.send(case, st, "demo", k, body, kind="bad", expect={label}, note=what), label, slug)
        touched.append(("demo", k))
    k = keys.new()
    expect_bad(H.send(case, st, "demo", None, good(), kind="bad", expect={"400"}, note="no Idempotency-Key"),
               "400", "missing-idempotency-key")
    for what, kv in (("256-byte key", "k" * 256), ("key with a space", "a b"), ("key with UTF-8", "kä"),
                     ("key with a tab", "a\tb")):
        expect_bad(H.send(case, st, "demo", kv, good(), kind="bad", expect={"400"}, note=what),
                   "400", "invalid-idempotency-key")
    k = keys.new()
    expect_bad(H.send(case, st, "demo", k, good(), kind="bad", expect={"415"}, ctype="text/plain",
                      note="text/plain"), "415", "unsupported-media-type")
    touched.append(("demo", k))
    k = keys.new()
    expect_bad(H.send(case, st, "demo", k, good(), kind="bad", expect={"401"}, api_key="sk_test_nope",
                      note="unknown API key"), "401", "unauthorized")
    touched.append(("demo", k))
    k = keys.new()
    expect_bad(H.send(case, st, "demo", k, None, kind="bad", expect={"405"}, method="GET", ctype=None,
                      note="GET /charge"), "405", "method-not-allowed")
    touched.append(("demo", k))
    k = keys.new()
    big = b'{"amount":100,"currency":"usd","source":"tok_visa","description":"' + \
        b"x" * H.MAX_REQUEST_BYTES + b'"}'
    expect_bad(H.send(case, st, "demo", k, big, kind="bad", expect={"413"}, note="body over max_request_bytes"),
               "413", "content-too-large")
    touched.append(("demo", k))
    # header bytes no HTTP parser may pass on: lighttpd answers 400 itself;
    # an obs-fold it joins to the value (RFC 9112 allows either), and the
    # responder rejects the key with a space in it
    for what, inj, labels in (("NUL in the key header", b"\x00evil", {"server-400"}),
                              ("bare CR in the key header", b"\rX-Evil: 1", {"server-400"}),
                              ("bare LF in the key header", b"\nX-Evil: 1", {"server-400"}),
                              ("obs-fold after the key header", b"\r\n\tX-Evil: 1", {"server-400", "400"})):
        k = keys.new()
        body = good()
        raw = H.raw_request(st, "demo", k.encode() + inj, body) + body
        expect_bad(H.send_raw(case, st, "demo", k, [(raw, 0)], expect=labels, note=what, body=body),
                   labels, "invalid-idempotency-key")
        touched.append(("demo", k))
    # CR/LF straight into the FastCGI params (a web server would not pass
    # them): the responder's own checks
    sock = st.sockets()[0]
    for what, name, value, label, slug in (
            ("CR LF in HTTP_IDEMPOTENCY_KEY", "HTTP_IDEMPOTENCY_KEY", "%s\r\nSet-Cookie: evil=1", "400",
             "invalid-idempotency-key"),
            ("CR LF in HTTP_AUTHORIZATION", "HTTP_AUTHORIZATION", "Bearer sk_test_demo\r\nX-Evil: 1", "401",
             "unauthorized"),
            ("CR LF in CONTENT_TYPE", "CONTENT_TYPE", "application/json\r\nX-Evil: 1", "415",
             "unsupported-media-type")):
        k = keys.new()
        body = good()
        ex = H.send_fcgi(case, sock, "demo", k, body, {name: value % k if "%s" in value else value},
                         expect={label}, note=what)
        expect_bad(ex, label, slug)
        touched.append(("demo", k))
    return touched


@case("c9", "malformed, oversized, slow (body stalled past request_timeout_ms on the FastCGI socket) "
            "and header-injecting requests mixed into normal load: each its documented 4xx, nothing changed")
def c9():
    rng = random.Random("%s-c9" % H.SEED)
    keys = H.Keys("c9b")
    st = H.Stack("c9", procs=2)
    load = H.Load("c9", st, threads=2, big=0.1)
    touched = []
    try:
        time.sleep(0.5)
        touched += bad_requests("c9", st, keys, rng)
        # bodies that stall: straight to both responders' sockets at once
        slow = []
        w = H.Window("slow-client", allow=H.REQUEST_TIMEOUT_S + 0.5)
        for sock in st.sockets():
            k = keys.new()
            body = H.order(rng, source="tok_visa")
            slow.append(in_thread(H.send_fcgi, "c9", sock, "demo", k, body, kind="slow", expect={"408"},
                                  bound=H.REQUEST_TIMEOUT_S + 1.5, body_split=len(body) // 2, body_pause=None,
                                  note="body stalled"))
            touched.append(("demo", k))
        # and one trickled through lighttpd, which buffers it: served
        k = keys.new()
        body = H.order(rng, source="tok_visa")
        head = H.raw_request(st, "demo", k.encode(), body)
        parts = [(head, 0.5)] + [(body[i:i + 16], 0.4) for i in range(0, 64, 16)] + [(body[64:], 0)]
        trickled = H.send_raw("c9", st, "demo", k, parts, kind="charge", bound=H.bound_for(body, st, extra=2.5),
                              body=body, note="body trickled through lighttpd",
                              provider_s=H.provider_for(body, st))
        slow = [f(10) for f in slow]
        w.end()
    finally:
        load.stop()
    for ex in slow:
        check(ex.status == 408 and ex.slug() == "request-timeout", "stalled body: want 408, got %r" % ex)
        check(H.REQUEST_TIMEOUT_S - 0.2 <= ex.elapsed() <= H.REQUEST_TIMEOUT_S + 1.0,
              "408 after %.2fs, request_timeout_ms is %d" % (ex.elapsed(), H.REQUEST_TIMEOUT_S * 1000))
    expect_fresh(trickled, 201, "a body trickled through lighttpd over 2 s")
    # nothing changed: no record, no provider call, and the key is still free
    for p, k in touched:
        check(H.redis("EXISTS", H.rkey(p, k)) == 0, "%s left a record" % k)
        check(not H.ledger_for(p, k), "%s reached the provider" % k)
    for p, k in touched:
        r = H.send("c9", st, p, k, H.order(rng, source="tok_visa"), note="key after a rejected request")
        expect_fresh(r, 201, "%s after its rejected request" % k)
    bad = [e for e in H.of_case("c9") if e.kind in ("bad", "slow")]
    note("%d rejected requests (%s) amid %d normal ones; stalled bodies: 408 after %s s; "
         "every rejected key was still free afterwards (%d fresh 201s)" % (
             len(bad), hist_of(bad), load.sent, "/".join("%.2f" % e.elapsed() for e in slow), len(touched)))
    st.stop()


# ---------------------------------------------------------------- soak

SOAK_S = H.env_int("FAULTS_SOAK_S", 75)


class Chaos:
    """One fault at a time, picked at random, on the soak's stack."""

    def __init__(self, st, proxy, rng):
        self.st, self.proxy, self.rng = st, proxy, rng
        self.done = collections.Counter()

    def redis_kill(self):
        w = H.Window("redis-kill")
        H.redis_kill9()
        time.sleep(self.rng.uniform(0.3, 1.0))
        H.redis_start()
        w.end()

    def redis_freeze(self):
        w = H.Window("redis-stop")
        H.redis_signal(signal.SIGSTOP)
        time.sleep(self.rng.uniform(1.0, 3.0))
        H.redis_signal(signal.SIGCONT)
        w.end()

    def redis_oom(self):
        w = H.Window("redis-oom")
        H.redis("CONFIG", "SET", "maxmemory", str(H.redis_info_int("used_memory") + 64 * 1024))
        time.sleep(self.rng.uniform(1.0, 2.5))
        H.redis("CONFIG", "SET", "maxmemory", "0")
        w.end()

    def spill_full(self):
        if H.SPILL_MODE != "tmpfs":
            return False
        w = H.Window("spill-full")
        spill_fill()
        time.sleep(self.rng.uniform(1.0, 2.5))
        spill_free()
        w.end()

    def responder_kill(self):
        ws = self.st.workers()
        if not ws:
            return False
        w = H.Window("responder-kill", allow=3.0, lenient=True)
        os.kill(self.rng.choice(ws), signal.SIGKILL)
        w.end(linger=1.5)

    def responder_stop(self):
        ws = self.st.workers()
        if not ws:
            return False
        d = self.rng.uniform(1.0, 2.8)
        w = H.Window("responder-stop", allow=d + 0.5)
        stop_cont(self.rng.choice(ws), d)
        w.end()

    def fd_exhaust(self):
        ws = self.st.workers()
        if not ws:
            return False
        pid = self.rng.choice(ws)
        try:
            fds = {int(x) for x in os.listdir("/proc/%d/fd" % pid)}
        except OSError:
            return False
        free = min(set(range(len(fds) + 1)) - fds)
        d = self.rng.uniform(0.5, 1.0)
        try:
            soft = subprocess.run(["prlimit", "--pid", str(pid), "--nofile", "--output", "SOFT", "--noheadings"],
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, check=True).stdout.split()[0]
            subprocess.run(["prlimit", "--pid", str(pid), "--nofile=%d:" % free], check=True,
                           stderr=subprocess.DEVNULL)
        except (subprocess.CalledProcessError, IndexError):
            return False                # the responder just went away
        w = H.Window("fd-exhaust", allow=d + 0.5)
        try:
            time.sleep(d)
        finally:
            subprocess.run(["prlimit", "--pid", str(pid), "--nofile=%s:" % soft.decode()], stderr=subprocess.DEVNULL)
            w.end()

    def reply_lost(self):
        """Case 5's patterns: a claim's or a record's reply lost once (the
        responder re-sends it), twice (503), or a claim's twice and then the
        release refused (503 with the claim's remaining life)."""
        pattern = self.rng.choice([["claim"], ["record"], ["claim", "claim"], ["record", "record"],
                                   ["claim", "claim", "release!"]])
        w = H.Window("reply-lost")
        nth = self.rng.randint(1, 3)
        for i, script in enumerate(pattern):
            self.proxy.arm(script.rstrip("!"), nth=nth if i == 0 else 1,
                           mode="before" if script.endswith("!") else "after")
        wait_for(lambda: self.proxy.pending() == 0, 4, 0.05)
        self.proxy.disarm()
        w.end()

    def run(self, deadline):
        faults = ["redis_kill", "redis_freeze", "redis_oom", "spill_full", "responder_kill",
                  "responder_stop", "fd_exhaust", "reply_lost"]
        while time.monotonic() < deadline - 3:
            time.sleep(self.rng.uniform(1.0, 2.5))
            f = self.rng.choice(faults)
            if getattr(self, f)() is not False:
                self.done[f] += 1
            time.sleep(0.5)


@case("c10", "soak (FAULTS_SOAK_S, default 75 s): load with every fault above at random, one at a "
             "time, plus malformed and stalled requests; then every key converges")
def c10():
    rng = random.Random("%s-c10" % H.SEED)
    keys = H.Keys("c10b")
    proxy = RedisProxy(H.REDIS_SOCK)
    st = H.Stack("c10", procs=3, redis_url=proxy.url)
    load = H.Load("c10", st, threads=2, big=0.1)
    chaos = Chaos(st, proxy, rng)
    stop = threading.Event()
    nbad = [0]

    def bad_loop():
        brng = random.Random("%s-c10-bad" % H.SEED)
        while not stop.is_set():
            time.sleep(brng.uniform(0.2, 0.6))
            if brng.random() < 0.1 and st.sockets():
                w = H.Window("slow-client", allow=H.REQUEST_TIMEOUT_S + 0.5)
                body = H.order(brng, source="tok_visa")
                H.send_fcgi("c10", brng.choice(st.sockets()), "demo", keys.new(), body, kind="slow",
                            expect={"408"}, bound=H.REQUEST_TIMEOUT_S + 1.5, body_split=10, body_pause=None,
                            note="body stalled")
                w.end()
            else:
                what, body, label, slug = brng.choice(BAD_BODIES)
                ex = H.send("c10", st, "demo", keys.new(), body, kind="bad", expect={label}, note=what)
                if ex.label() != label and any(w.lenient and w.overlaps(ex.t0, ex.t1) for w in H.WINDOWS):
                    ex.expect = {label, ex.label()}    # its responder was killed under it
            nbad[0] += 1
    bt = threading.Thread(target=bad_loop, daemon=True)
    bt.start()
    t0 = time.monotonic()
    try:
        chaos.run(t0 + SOAK_S)
        time.sleep(max(0, t0 + SOAK_S - time.monotonic()))
    finally:
        stop.set()
        load.stop()
        bt.join(10)
        proxy.disarm()
        restore_everything()
    check(wait_for(lambda: len(st.workers()) == 3, 10, 0.1), "responders: %r" % st.workers())
    left = H.converge("c10", st)
    check(not left, "keys without an outcome after the soak: %r" % left[:5])
    for e in [e for e in H.of_case("c10") if e.kind in ("bad", "slow") and e.key]:
        check(H.redis("EXISTS", H.rkey(e.principal, e.key)) == 0 and not H.ledger_for(e.principal, e.key),
              "rejected request %s changed something" % e.key)
    note("%.0f s; faults injected: %s; %d load requests, %d malformed/stalled ones; proxy: %d lost "
         "replies over %d connections" % (time.monotonic() - t0, dict(chaos.done), load.sent, nbad[0],
                                           len(proxy.resets), proxy.conns))
    st.stop()
    proxy.close()


# ================================================================= runner

def main():
    if not H.RUN:
        print("Bail out! FAULTS_RUN is not set (run tests/faults/run.sh)")
        return 2
    only = os.environ.get("FAULTS_ONLY", "")
    log("run id %s, seed %d (FAULTS_SEED=%d repeats the random choices)" % (H.RUN_ID, H.SEED, H.SEED))
    n = failed = 0
    t_all = time.monotonic()
    for tag, name, fn in CASES:
        if only and not re.search(only, tag + " " + name):
            continue
        n += 1
        t0 = time.monotonic()
        err = skip = None
        del NOTES[:]
        try:
            fn()
        except Skip as e:
            skip = str(e)
        except Fail as e:
            err = str(e)
        except Exception as e:   # noqa: BLE001 - a crash of a case fails it
            err = "%s: %s\n%s" % (type(e).__name__, e, traceback.format_exc())
        finally:
            H.stop_all_stacks()
            try:
                restore_everything()
            except Exception as e:   # noqa: BLE001
                err = (err or "") + "\ncannot restore Redis/spill after the case: %s" % e
        exs = H.of_case(tag)
        nums, probs, hist = H.gate(exs)
        if skip:
            print("ok %d - %s: %s # SKIP %s" % (n, tag, name, skip))
        elif err or probs:
            failed += 1
            print("not ok %d - %s: %s" % (n, tag, name))
        else:
            print("ok %d - %s: %s" % (n, tag, name))
        for line in (err or "").splitlines():
            print("#   " + line)
        for p in probs[:12]:
            print("#   gate: " + p)
        if len(probs) > 12:
            print("#   gate: ... %d more" % (len(probs) - 12))
        print("#   sent %d requests; statuses %s" % (len(exs), H.histogram(hist) or "-"))
        print("#   gate: " + ", ".join("%s %s" % (k, v) for k, v in nums.items()))
        for line in NOTES:
            print("#   " + line)
        print("#   (%.1fs)" % (time.monotonic() - t0))
        sys.stdout.flush()

    # ---- the gate over everything, after the final replays
    st = H.Stack("final", procs=3)
    n_acked, rproblems = H.final_replays(st)
    st.stop()
    with H.HISTORY_LOCK:
        everything = list(H.HISTORY)
    nums, probs, hist = H.gate(everything, keyfilter=lambda k: k.startswith("f-%s-" % H.RUN_ID))
    n += 1
    if rproblems:
        failed += 1
        print("not ok %d - gate: every acknowledged outcome (%d keys) replays at the end" % (n, n_acked))
        for p in rproblems[:15]:
            print("#   " + p)
    else:
        print("ok %d - gate: every acknowledged outcome (%d keys) replays at the end: same status, "
              "body, Retry-After, Idempotent-Replayed: true" % (n, n_acked))
    groups = [
        ("at most one charge id per (principal, key) in the provider ledger", lambda p: p.startswith("ledger:")),
        ("acknowledged outcomes of a key identical (status and body), one fresh, naming the ledger's charge",
         lambda p: "differs from the first" in p or "fresh (Idempotent" in p or "answered charge" in p),
        ("only documented answers, none over its time bound",
         lambda p: not (p.startswith("ledger:") or "differs from the first" in p or
                        "fresh (Idempotent" in p or "answered charge" in p)),
    ]
    for title, pred in groups:
        n += 1
        mine = [p for p in probs if pred(p)]
        if mine:
            failed += 1
            print("not ok %d - gate: %s" % (n, title))
            for p in mine[:12]:
                print("#   " + p)
            if len(mine) > 12:
                print("#   ... %d more" % (len(mine) - 12))
        else:
            print("ok %d - gate: %s" % (n, title))
    print("#   all cases: sent %d requests; statuses %s" % (len(everything), H.histogram(hist)))
    print("#   gate: " + ", ".join("%s %s" % (k, v) for k, v in nums.items()))
    print("# %d tests, %d failed, %.1fs" % (n, failed, time.monotonic() - t_all))
    print("1..%d" % n)
    return 1 if failed else 0


if __name__ == "__main__":
    try:
        rc = main()
    finally:
        H.stop_all_stacks()
    sys.exit(rc)
