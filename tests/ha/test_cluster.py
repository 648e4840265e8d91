#!/usr/bin/env python3
"""The responders on a Redis Cluster of 3 primaries (run by
tests/ha/cluster.sh): slots as Redis computes them, each script on the node
owning its key, MOVED and ASK during slot migrations, 503 while the cluster
is down, the start-up eviction check on every primary.

Environment: HA_BASE_URL, HA_NODES (ports), HA_KEYSLOT_BIN, HA_BIN,
HA_PROCS (responder processes), plus halib's.
"""
import os
import random
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import halib as h  # noqa: E402  (it puts tests/lib on the path)
import resp  # noqa: E402  (tests/lib: the Redis client)
from halib import Fail, check, diag, test  # noqa: E402

BASE = os.environ.get("HA_BASE_URL", "")
NODES = [int(p) for p in os.environ.get("HA_NODES", "").split()]
KEYSLOT_BIN = os.environ.get("HA_KEYSLOT_BIN", "")
BIN = os.environ.get("HA_BIN", "")
PROCS = int(os.environ.get("HA_PROCS", "3"))


def resp_pipeline(port, commands):
    """Sends every command (lists of bytes) on one connection; the replies
    in order (bulk strings as bytes, arrays as lists, a status or an error
    as its bytes)."""
    return resp.pipeline(port, commands, timeout=30, raw=True)


def node_ids():
    """{port: node id}"""
    return {p: h.cli(p, "CLUSTER", "MYID").strip() for p in NODES}


def slot_owner(slot):
    """The port of the primary serving slot, from CLUSTER SLOTS."""
    for rng in resp_pipeline(NODES[0], [[b"CLUSTER", b"SLOTS"]])[0]:
        if rng[0] <= slot <= rng[1]:
            return rng[2][1]
    raise Fail("no owner for slot %d" % slot)


def keyslot(key):
    return int(h.cli(NODES[0], "CLUSTER", "KEYSLOT", key).strip())


def exists_on(port, key, asking=False):
    if asking:
        out = h.cli(port, stdin=("ASKING\nEXISTS %s\n" % key).encode()).split()
        return out[-1] == "1"
    return h.cli(port, "EXISTS", key).strip() == "1"


def cluster_ok(port):
    return "cluster_state:ok" in h.cli(port, "CLUSTER", "INFO", check_rc=False)


def wait_cluster(ok=True, secs=30):
    end = time.monotonic() + secs
    while time.monotonic() < end:
        if all(cluster_ok(p) == ok for p in NODES if h.node_comm(h.node_pid(p)) == "redis-server"):
            return
        time.sleep(0.1)
    raise Fail("cluster not %s after %ds" % ("ok" if ok else "down", secs))


def asking_calls():
    return sum(h.cmdstat_calls(p, "asking") for p in NODES)


@test("slots: cluster.c agrees with CLUSTER KEYSLOT on 3000 keys (hash tags, braces, binary)")
def t_keyslot_oracle():
    rnd = random.Random(7)
    keys = [b"charge:idem:demo:k1", b"{user1000}.following", b"{user1000}.followers",
            b"foo{}{bar}", b"foo{{bar}}zap", b"foo{bar}{zap}", b"123456789", b"", b"{", b"}", b"{}",
            b"}{", b"{a", b"a}", b"{{}}", b"a{b}c{d}"]
    alphabet = b"ab{}:xyz-_0123456789" + bytes(range(0x80, 0x90))
    while len(keys) < 3000:
        n = rnd.randint(0, 40)
        keys.append(bytes(rnd.choice(alphabet) for _ in range(n)).replace(b"\n", b""))
    want = resp_pipeline(NODES[0], [[b"CLUSTER", b"KEYSLOT", k] for k in keys])
    p = subprocess.run([KEYSLOT_BIN], input=b"".join(k + b"\n" for k in keys),
                       stdout=subprocess.PIPE, timeout=30)
    got = [int(x) for x in p.stdout.split()]
    check(len(got) == len(keys), "keyslot printed %d slots for %d keys" % (len(got), len(keys)))
    bad = [(k, g, w) for k, g, w in zip(keys, got, want) if g != w]
    check(not bad, "%d keys differ, e.g. %r" % (len(bad), bad[:5]))
    check(want[0] == 4281, "CLUSTER KEYSLOT charge:idem:demo:k1 = %r" % want[0])


@test("each record is on the node owning its slot; replays are byte-identical; one connection per node per responder")
def t_routing():
    h.wait_health(BASE, 20)
    keys = [h.new_key("route%02d" % i) for i in range(30)]
    first = {}
    for k in keys:
        r = h.post(BASE, k, h.charge_body(amount=300))
        check(r.status == 201 and not r.replayed, "fresh %s: %r" % (k, r))
        first[k] = r
    owners = {}
    for k in keys:
        owner = slot_owner(keyslot(h.rkey(k)))
        owners[owner] = owners.get(owner, 0) + 1
        check(exists_on(owner, h.rkey(k)), "%s is not on its owner %d" % (k, owner))
    diag("records per node: %r" % owners)
    check(len(owners) == 3, "30 keys on %d nodes" % len(owners))
    for k in keys:
        check(h.same_answer(first[k], h.post(BASE, k, h.charge_body(amount=300))), "replay of %s" % k)
    h.get(BASE, "/readyz")
    for p in NODES:
        conns = [ln for ln in h.cli(p, "CLIENT", "LIST").splitlines() if "cmd=client|list" not in ln]
        check(len(conns) <= PROCS, "node %d has %d client connections for %d responders" % (p, len(conns), PROCS))
    check(h.check_one_charge_per_key(set(keys))[1] == len(keys), "ledger")


@test("a slot in migration: ASK (ASKING + script in one round trip) then MOVED; replays stay byte-identical")
def t_ask_moved():
    ids = node_ids()
    tag = "{ask-%s}" % h.RUN_ID
    ka, kb, kc = tag + "-a", tag + "-b", tag + "-c"
    slot = keyslot(h.rkey(ka))
    check(slot == keyslot(h.rkey(kb)), "hash tag: different slots")
    src = slot_owner(slot)
    dst = [p for p in NODES if p != src][0]
    body = h.charge_body(amount=555)
    ra = h.post(BASE, ka, body)
    check(ra.status == 201, "fresh A: %r" % ra)
    check(exists_on(src, h.rkey(ka)), "A not on the slot's owner")
    h.cli(dst, "CLUSTER", "SETSLOT", slot, "IMPORTING", ids[src])
    h.cli(src, "CLUSTER", "SETSLOT", slot, "MIGRATING", ids[dst])
    a0 = h.cmdstat_calls(dst, "asking")
    check(h.same_answer(ra, h.post(BASE, ka, body)), "replay of A while its slot migrates (A still on the source)")
    rb = h.post(BASE, kb, body)
    check(rb.status == 201 and not rb.replayed, "fresh B in the migrating slot: %r" % rb)
    check(exists_on(dst, h.rkey(kb), asking=True) and not exists_on(src, h.rkey(kb)),
          "B was not claimed and recorded on the importing node")
    check(h.same_answer(rb, h.post(BASE, kb, body)), "replay of B (ASK)")
    h.cli(src, "MIGRATE", "127.0.0.1", dst, "", 0, 5000, "KEYS", h.rkey(ka))
    check(h.same_answer(ra, h.post(BASE, ka, body)), "replay of A after MIGRATE (ASK)")
    a1 = h.cmdstat_calls(dst, "asking")
    diag("ASKING calls on the importing node: %d" % (a1 - a0))
    # claim+record of B, replay of B, replay of A: 4 scripts
    check(a1 - a0 >= 4, "ASKING called %d times, want at least 4" % (a1 - a0))
    for p in NODES:
        h.cli(p, "CLUSTER", "SETSLOT", slot, "NODE", ids[dst])
    check(h.same_answer(ra, h.post(BASE, ka, body)), "replay of A after the move (MOVED)")
    check(h.same_answer(rb, h.post(BASE, kb, body)), "replay of B after the move (MOVED)")
    rc = h.post(BASE, kc, body)
    check(rc.status == 201 and exists_on(dst, h.rkey(kc)), "fresh C after the move: %r" % rc)
    check(h.cmdstat_calls(dst, "asking") == a1, "ASKING after the slot moved")
    ids = h.ledger_ids()
    check(all(len(ids.get(k, [])) == 1 for k in (ka, kb, kc)), "ledger %r" % [ids.get(k) for k in (ka, kb, kc)])


def crc16(b):
    crc = 0
    for x in b:
        crc ^= x << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else crc << 1
            crc &= 0xFFFF
    return crc


def tag_for_slot(slot, prefix):
    """A hash tag whose keys all fall into slot."""
    for i in range(1000000):
        t = "%s%d" % (prefix, i)
        if crc16(t.encode()) % 16384 == slot:
            return t
    raise Fail("no tag for slot %d" % slot)


@test("redis-cli --cluster reshard of slots holding live keys, under load: only 201/409/503+Retry-After, replays byte-identical")
def t_reshard_under_load():
    ids = node_ids()
    slots = resp_pipeline(NODES[0], [[b"CLUSTER", b"SLOTS"]])[0]
    src = min(slots, key=lambda r: r[0])[2][1]       # owner of the lowest slot
    dst = [p for p in NODES if p != src][0]
    # the reshard moves src's lowest slots first: load one of them heavily
    # (every key with this hash tag falls into it) so that requests meet it
    # while it migrates, and pad it so that its migration takes a while
    low = min(r[0] for r in slots if r[2][1] == src)
    tag = tag_for_slot(low, "hot-%s-" % h.RUN_ID)
    filler = [[b"SET", ("{%s}:filler:%d" % (tag, i)).encode(), b"x" * 64] for i in range(15000)]
    check(all(r == b"OK" for r in resp_pipeline(src, filler)), "filler keys")
    hot = ["{%s}-pre%03d" % (tag, i) for i in range(100)]
    spread = [h.new_key("pre%03d" % i) for i in range(100)]
    pre = hot + spread
    body = h.charge_body(amount=1234)
    first = dict(zip(pre, h.run_parallel(lambda k: h.post(BASE, k, body), pre, 8)))
    check(all(r.status == 201 for r in first.values()), "pre-charges: %s" % h.statuses(first.values()))
    check(keyslot(h.rkey(hot[0])) == low, "the hash tag misses slot %d" % low)
    a0 = asking_calls()
    stop = threading.Event()
    answers = []          # (kind, key, response)
    fresh = {}
    lock = threading.Lock()

    def worker(n):
        rnd = random.Random(n)
        i = 0
        while not stop.is_set():
            i += 1
            if i % 2:
                k = ("{%s}-rs%d-%d" % (tag, n, i)) if i % 4 == 1 else h.new_key("rs%d-%d" % (n, i))
                r = h.post(BASE, k, body)
                with lock:
                    answers.append(("fresh", k, r))
                    fresh.setdefault(k, r)
            else:
                k = rnd.choice(hot if i % 4 == 2 else spread)
                r = h.post(BASE, k, body)
                with lock:
                    answers.append(("replay", k, r))

    probe_seen = []      # when a key of the hot slot got ASK: it migrates

    def probe():
        n = 0
        while not stop.is_set():
            n += 1
            r = resp_pipeline(src, [[b"EXISTS", ("{%s}:nokey%d" % (tag, n)).encode()]])[0]
            if isinstance(r, bytes) and r.startswith(b"ASK"):
                probe_seen.append(time.monotonic())
            time.sleep(0.002)
    threads = [threading.Thread(target=worker, args=(n,)) for n in range(12)] + [threading.Thread(target=probe)]
    for t in threads:
        t.start()
    t0 = time.monotonic()
    try:
        time.sleep(0.3)
        p = subprocess.run(["redis-cli"] + h.cli_tls() + ["--cluster", "reshard", "127.0.0.1:%d" % src,
                            "--cluster-from", ids[src], "--cluster-to", ids[dst],
                            "--cluster-slots", "2000", "--cluster-pipeline", "5", "--cluster-yes"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=150)
        took = time.monotonic() - t0
        time.sleep(0.5)
    finally:
        stop.set()
        for t in threads:
            t.join()
    check(p.returncode == 0, "reshard failed: %s" % p.stdout.decode(errors="replace")[-800:])
    check(slot_owner(low) == dst, "slot %d did not move to %d" % (low, dst))
    moved = [k for k in pre if slot_owner(keyslot(h.rkey(k))) == dst]
    asks = asking_calls() - a0
    check(probe_seen, "slot %d was never seen migrating" % low)
    w0, w1 = min(probe_seen), max(probe_seen)
    during = [r for _, k, r in answers if tag in k and r.t_end - r.elapsed <= w1 and r.t_end >= w0]
    diag("slot %d migrated (ASK to a probe) for %.2fs; %d requests for its keys overlapped" % (low, w1 - w0, len(during)))
    diag("reshard: 2000 slots %d -> %d in %.1fs, %d pre-charged records moved with them" % (src, dst, took, len(moved)))
    diag("%d requests during the reshard: %s; ASKING calls %d" % (
        len(answers), h.statuses(r for _, _, r in answers), asks))
    check(len(moved) >= len(hot), "only %d live records were in the moved slots" % len(moved))
    check(asks > 0, "no request met the migration (no ASKING)")
    for kind, k, r in answers:
        h.check_documented(r, "%s %s" % (kind, k), allow=(201, 409, 503))
        if kind == "replay" and r.status == 201:
            check(h.same_answer(first[k], r), "replay of %s during the reshard differs: %r" % (k, r))
        if kind == "fresh" and r.status == 201:
            check(not r.replayed or h.same_answer(fresh[k], r), "fresh %s: %r" % (k, r))
    deadline = time.monotonic() + 60
    for k in list(fresh):
        if fresh[k].status != 201:
            fresh[k], _ = h.settle(BASE, k, body, deadline)
            check(fresh[k].status == 201, "fresh key %s never settled: %r" % (k, fresh[k]))
    for k in pre:
        check(h.same_answer(first[k], h.post(BASE, k, body)), "replay of %s after the reshard" % k)
    for k in fresh:
        check(h.same_answer(fresh[k], h.post(BASE, k, body)), "replay of %s after the reshard" % k)
    called, calls = h.check_one_charge_per_key(set(pre) | set(fresh))
    diag("ledger: %d provider calls for %d keys, one charge id each" % (calls, called))


@test("one primary down: /readyz 503, charges 503 with Retry-After (CLUSTERDOWN within redis_timeout_ms); back: 201")
def t_node_down():
    victim = NODES[-1]
    keys = [h.new_key("down%02d" % i) for i in range(12)]
    body = h.charge_body(amount=42)
    h.node_kill9(victim)
    try:
        r = h.get(BASE, "/readyz")
        check(r.status == 503, "/readyz with a primary down: %r" % r)
        wait_cluster(ok=False, secs=20)
        rs = [h.post(BASE, k, body) for k in keys]
        for k, r in zip(keys, rs):
            h.check_documented(r, "with the cluster down", allow=(503,))
        diag("cluster down: %d x 503 in %.2f-%.2fs each" % (len(rs), min(r.elapsed for r in rs), max(r.elapsed for r in rs)))
        check(max(r.elapsed for r in rs) < 5, "a 503 took %.1fs" % max(r.elapsed for r in rs))
        check(not any(k in h.ledger_ids() for k in keys), "the provider was called while the cluster was down")
    finally:
        h.ha_sh("ha_node_start '%s' %d" % (h.HA_DIR, victim))
    wait_cluster(ok=True, secs=30)
    h.wait_health(BASE, 20)
    deadline = time.monotonic() + 30
    for k in keys:
        r, _ = h.settle(BASE, k, body, deadline)
        check(r.status == 201, "%s after the cluster came back: %r" % (k, r))


@test("start-up: a primary that may evict records stops charge --listen (every primary is checked)")
def t_eviction_check():
    p = NODES[1]
    h.cli(p, "CONFIG", "SET", "maxmemory-policy", "volatile-lru")
    try:
        h.eviction_refused(BIN, "volatile-lru")
    finally:
        h.cli(p, "CONFIG", "SET", "maxmemory-policy", "noeviction")


def main():
    if not BASE:
        print("Bail out! HA_BASE_URL is not set")
        return 2
    return h.tap.run("HA_ONLY")


if __name__ == "__main__":
    sys.exit(main())
