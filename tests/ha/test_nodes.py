#!/usr/bin/env python3
"""Two web nodes on one Redis, one spill_dir and one ledger (run by
tests/ha/nodes.sh).

Environment: HA_BASE_A, HA_BASE_B, HA_REDIS_PORT, HA_RUN, HA_RESTART (a
shell command restarting both stacks at once), plus halib's.
"""
import os
import re
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import halib as h  # noqa: E402
from halib import check, diag, test  # noqa: E402

A = os.environ.get("HA_BASE_A", "")
B = os.environ.get("HA_BASE_B", "")
REDIS = int(os.environ.get("HA_REDIS_PORT", "0"))
RUN = os.environ.get("HA_RUN", "")
N_DUP = 32
MAX_AGE_S = 35            # completed_ttl_s + lock_ttl_s (tests/ha/nodes.sh)
TMP_AGE_S = 5             # lock_ttl_s
SPILL = {}


def big():
    if not SPILL:
        key = h.new_key("big")
        body = h.big_order()
        r = h.post(A, key, body)
        check(r.status == 201 and not r.replayed, "large order through A: %r" % r)
        check(len(r.body) > 16384, "response of %d bytes did not spill" % len(r.body))
        SPILL.update(key=key, body=body, resp=r)
    return SPILL["key"], SPILL["body"], SPILL["resp"]


@test("a large order charged through node A replays byte-identically through node B (shared spill_dir)")
def t_spill_replay():
    key, body, r = big()
    name = h.cli(REDIS, "HGET", h.rkey(key), "body_file").strip()
    check(name and os.path.isfile(os.path.join(h.SPILL_DIR, name)), "no spill file %r in the shared dir" % name)
    rb = h.post(B, key, body)
    check(h.same_answer(r, rb), "replay through B: %r" % rb)
    check(h.same_answer(r, h.post(A, key, body)), "replay through A")
    small = h.new_key("small")
    r1 = h.post(B, small, h.charge_body(amount=77))
    check(r1.status == 201, "fresh through B: %r" % r1)
    check(h.same_answer(r1, h.post(A, small, h.charge_body(amount=77))), "B's record through A")
    check(len(h.ledger_ids().get(key, [])) == 1, "ledger lines for the large order")


def burst(key, extra=None):
    barrier = threading.Barrier(N_DUP)

    def one(i):
        barrier.wait(10)
        return h.post(A if i % 2 else B, key, h.charge_body(amount=4242), extra=extra)
    return h.run_parallel(one, range(N_DUP), N_DUP)


@test("%d concurrent duplicates split across both nodes: one provider call, one fresh 201, the rest 409 or replays" % N_DUP)
def t_duplicates():
    key = h.new_key("dup")
    rs = burst(key)
    fresh = [r for r in rs if r.status == 201 and not r.replayed]
    diag("%s (%d fresh)" % (h.statuses(rs), len(fresh)))
    check(len(fresh) == 1, "%d fresh answers" % len(fresh))
    for r in rs:
        if r is not fresh[0]:
            h.check_documented(r, "duplicate", allow=(201, 409))
            check(r.status == 409 or h.same_answer(fresh[0], r), "duplicate %r" % r)
    check(len(h.ledger_ids().get(key, [])) == 1, "ledger: %r" % h.ledger_ids().get(key))


@test("%d concurrent duplicates across both nodes with Prefer: wait=5: all the same 201" % N_DUP)
def t_duplicates_wait():
    key = h.new_key("dupw")
    rs = burst(key, extra={"Prefer": "wait=5"})
    fresh = [r for r in rs if r.status == 201 and not r.replayed]
    check(len(fresh) == 1 and all(r is fresh[0] or h.same_answer(fresh[0], r) for r in rs),
          "answers: %s" % h.statuses(rs))
    check(len(h.ledger_ids().get(key, [])) == 1, "ledger: %r" % h.ledger_ids().get(key))


def touch(path, age_s):
    t = time.time() - age_s
    with open(path, "wb") as f:
        f.write(b"x")
    os.utime(path, (t, t))


def log_sizes():
    return {n: os.path.getsize(os.path.join(RUN, n, "lighttpd.stderr.log")) for n in ("a", "b")}


def logs_since(sizes):
    out = ""
    for n, off in sizes.items():
        with open(os.path.join(RUN, n, "lighttpd.stderr.log"), errors="replace") as f:
            f.seek(off)
            out += f.read()
    return out


@test("both nodes' spill collectors race at start-up: every stale file removed once, live and fresh files kept")
def t_gc_race():
    key, body, r = big()
    live = h.cli(REDIS, "HGET", h.rkey(key), "body_file").strip()
    d = h.SPILL_DIR
    # the live record's file as if written 25 s ago (its record lives on)
    os.utime(os.path.join(d, live), (time.time() - 25, time.time() - 25))
    old, old_tmp, fresh, fresh_tmp, foreign = [], [], [], [], []
    for i in range(4000):
        old.append("%032x.body" % (0xa0000000 + i))
        touch(os.path.join(d, old[-1]), MAX_AGE_S + 60)
    for i in range(300):
        old_tmp.append("%032x.tmp" % (0xb0000000 + i))
        touch(os.path.join(d, old_tmp[-1]), TMP_AGE_S + 15)
    for i in range(200):
        fresh.append("%032x.body" % (0xc0000000 + i))
        touch(os.path.join(d, fresh[-1]), 25)
    for i in range(50):
        fresh_tmp.append("%032x.tmp" % (0xd0000000 + i))
        touch(os.path.join(d, fresh_tmp[-1]), 0)
    for name in ("README", "%032X.body" % 0xabcdef, "%032x.body.bak" % 2):
        foreign.append(name)
        touch(os.path.join(d, name), MAX_AGE_S + 600)
    sizes = log_sizes()
    t0 = time.monotonic()
    p = subprocess.run(["bash", "-c", os.environ["HA_RESTART"]], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=60)
    check(p.returncode == 0, "restart: %s" % p.stdout.decode(errors="replace"))
    diag("both stacks restarted in %.1fs" % (time.monotonic() - t0))
    h.wait_health(A, 10)
    h.wait_health(B, 10)
    left = set(os.listdir(d))
    gone_wrongly = [f for f in [live] + fresh + fresh_tmp + foreign if f not in left]
    check(not gone_wrongly, "%d live, fresh or foreign files removed: %r" % (len(gone_wrongly), gone_wrongly[:5]))
    stayed = [f for f in old + old_tmp if f in left]
    check(not stayed, "%d stale files left: %r" % (len(stayed), stayed[:5]))
    logs = logs_since(sizes)
    counts = [int(n) for n in re.findall(r"spill gc: removed (\d+) file", logs)]
    diag("collectors that removed files: %d, removing %r" % (len(counts), counts))
    check(sum(counts) == len(old) + len(old_tmp),
          "collectors report %d removals for %d stale files" % (sum(counts), len(old) + len(old_tmp)))
    check("spill gc: cannot read" not in logs, "a collector failed: %s" % logs[-500:])
    check(h.same_answer(r, h.post(A, key, body)), "replay through A after the collection")
    check(h.same_answer(r, h.post(B, key, body)), "replay through B after the collection")


def main():
    if not A or not B:
        print("Bail out! HA_BASE_A / HA_BASE_B are not set")
        return 2
    return h.tap.run("HA_ONLY")


if __name__ == "__main__":
    sys.exit(main())
