#!/usr/bin/env python3
"""Network partitions in Jepsen's manner (run by tests/partitions/run.sh,
which makes the namespaces, the nodes and two lighttpd stacks, one with
redis_min_replicas = 1 and one with 0, sharing the three nodes).

Each nemesis runs under concurrent fresh charges on both stacks (bounded in
count and time), then the network heals, the topology converges (one
primary, two linked replicas, three sentinels naming it), and every key is
retried with its own key and body until it has an outcome, as a client
would. One checker reads each history:

  * at most one provider charge id per key (the provider ledger);
  * every key settles (201 or 402);
  * only documented answers: 201, 402, 409 and 503 with Retry-After, 503
    of type service-unavailable or outcome-not-durable;
  * every acknowledged outcome (201/402) replays byte-identically after the
    heal: a gate with redis_min_replicas = the number of replicas (2, every
    replica: PARTITIONS_GATE_MIN_REPLICAS), a count below it. WAIT 1 with
    two replicas loses outcomes when the network flaps (the old primary
    still reaches the replica that acknowledged, the other one is
    promoted), measured in every flapping run: docs/partitions.md;
  * availability: from the failover (a sentinel names the new primary) to
    the first charge the new primary served, in seconds; a gate (2 s) for
    the stack with redis_min_replicas 1 after split brain and the primary
    isolated (PARTITIONS_GATE_AVAILABILITY=0: none,
    =all: every stack and nemesis).

With the provider simulator (PART_PROVIDER=sim, run.sh's default when it
is built) every stack calls it over HTTP: the charges per key come from
its own counts (/_sim/keys, by the metadata the responder sends), and the
gate on lost outcomes holds at every redis_min_replicas: an outcome Redis
lost is asked again with the same downstream key, and the simulator
replays the same charge, so the answer is the same bytes (re-executed, so
not marked Idempotent-Replayed: counted and printed as "re-recorded").

Standard library only; nftables and tc through ip netns exec.
"""
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.request
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "ha"))
import halib as h  # noqa: E402
from halib import Fail, check, diag, test  # noqa: E402

NS = os.environ.get("PART_NS", "").split()
IPS = os.environ.get("PART_IPS", "").split()
VETHS = os.environ.get("PART_VETHS", "").split()
CLIENT_IP = os.environ.get("PART_CLIENT_IP", "")
MASTER = os.environ.get("PART_MASTER", "charge")
MRTW = int(os.environ.get("PART_MRTW", "0"))
RUN = os.environ.get("PART_RUN", "")
PROVIDER = os.environ.get("PART_PROVIDER", "inproc")
SIM_URL = os.environ.get("PART_SIM_URL", "")
# Availability is gated where the new primary can acknowledge: a stack
# whose redis_min_replicas its remaining replica can meet (1 of 2), after a
# clean cut (split brain, the primary isolated). While the link flaps, or
# without a majority, there is no stable new primary; over a slow lossy link
# the old primary still answers, slowly, until its commands time out
# (measured 0.25 s and 5.1 s in two runs): printed, not gated.
# PARTITIONS_GATE_AVAILABILITY=0 turns it off, =all gates every stack.
GATE_AVAIL = os.environ.get("PARTITIONS_GATE_AVAILABILITY", "1")
GATE_AVAIL_NEMESES = ("split", "isolated")
# redis_min_replicas from which no acknowledged outcome may be lost: every
# replica of the three-node topology
GATE_MIN_REPLICAS = int(os.environ.get("PARTITIONS_GATE_MIN_REPLICAS", "2"))
AVAIL_BOUND_S = 2.0

THREADS = 5            # clients per stack
THINK_S = 0.05         # pause between a client's requests
MAX_KEYS = 500         # fresh charges per stack and nemesis, at most
LEAD_S = 1.5           # load before the nemesis starts
TAIL_S = 3.0           # load after the heal
DECLINE_EVERY = 8
SETTLE_S = 60
CONVERGE_S = 45
STABLE_S = 2.0         # converged for this long before the retries
RUN_ID = uuid.uuid4().hex[:6]


class Stack:
    def __init__(self, spec):
        mr, self.url, self.ledger, self.log = spec.split("=", 3)
        self.mr = int(mr)

    @property
    def name(self):
        return "min_replicas=%d" % self.mr


STACKS = [Stack(s) for s in os.environ.get("PART_STACKS", "").split()]
RESULTS = []   # one dict per (nemesis, stack)


# ---------------------------------------------------------------- nodes

def sh(args, stdin=None, timeout=10):
    p = subprocess.run(args, input=stdin, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
    return p.returncode, p.stdout.decode(errors="replace")


def ncli(i, port, *args):
    """redis-cli inside node i's namespace, on its loopback (works whatever
    the partition)."""
    rc, out = sh(["ip", "netns", "exec", NS[i], "redis-cli", "--raw", "-h", "127.0.0.1", "-p", str(port)]
                 + [str(a) for a in args], timeout=6)
    return out if rc == 0 else ""


def role(i):
    return ncli(i, 6379, "ROLE").split()


def sentinel_master(i):
    out = ncli(i, 26379, "SENTINEL", "get-master-addr-by-name", MASTER).split()
    return out[0] if len(out) == 2 else None


def sentinel_flags(i):
    """The flags sentinel i holds for the primary ("master" when calm)."""
    out = ncli(i, 26379, "SENTINEL", "MASTER", MASTER).split("\n")
    for k, v in zip(out[0::2], out[1::2]):
        if k.strip() == "flags":
            return v.strip()
    return ""


def converged():
    """The index of the primary when the topology has converged, else None:
    one master, both others its replicas with the link up, every sentinel
    naming it and holding it neither down nor in a failover (a failover
    the sentinels decide just after a heal would otherwise come during the
    retries)."""
    roles = [role(i) for i in range(3)]
    masters = [i for i, r in enumerate(roles) if r and r[0] == "master"]
    if len(masters) != 1:
        return None
    m = masters[0]
    for i, r in enumerate(roles):
        if i != m and not (len(r) >= 4 and r[0] == "slave" and r[1] == IPS[m] and r[3] == "connected"):
            return None
    if any(sentinel_master(i) != IPS[m] for i in range(3)):
        return None
    if any(sentinel_flags(i) != "master" for i in range(3)):
        return None
    return m


def converge(secs=CONVERGE_S):
    """Waits until converged() names the same primary twice, STABLE_S
    apart; returns (its index, seconds waited)."""
    t0 = time.monotonic()
    first = None
    while time.monotonic() - t0 < secs:
        m = converged()
        if m is None:
            first = None
        elif first is None or first[0] != m:
            first = (m, time.monotonic())
        elif time.monotonic() - first[1] >= STABLE_S:
            return m, time.monotonic() - t0
        time.sleep(0.2)
    raise Fail("the topology did not converge within %ds: roles %r, sentinels %r"
               % (secs, [role(i) for i in range(3)], [sentinel_master(i) for i in range(3)]))


# ---------------------------------------------------------------- nemeses

NETEM = None  # whether tc netem exists here (probed once)


def nft(i, text):
    rc, out = sh(["ip", "netns", "exec", NS[i], "nft", "-f", "-"], stdin=text.encode())
    check(rc == 0, "nft in %s: %s\n%s" % (NS[i], out, text))


def drop_between(i, ips):
    """Node i drops every packet from or to ips (both directions, its own
    input and output hooks)."""
    s = ", ".join(ips)
    nft(i, "table inet part {\n"
           " chain in { type filter hook input priority 0; policy accept; ip saddr { %s } drop; }\n"
           " chain out { type filter hook output priority 0; policy accept; ip daddr { %s } drop; }\n"
           "}\n" % (s, s))


def heal():
    """Every rule and qdisc undone; checked."""
    for i in range(3):
        sh(["ip", "netns", "exec", NS[i], "nft", "flush", "ruleset"])
        sh(["ip", "netns", "exec", NS[i], "tc", "qdisc", "del", "dev", "eth0", "root"])
        sh(["tc", "qdisc", "del", "dev", VETHS[i], "root"])
    for i in range(3):
        rc, out = sh(["ip", "netns", "exec", NS[i], "nft", "list", "ruleset"])
        check(rc == 0 and out.strip() == "", "%s: rules left after the heal: %s" % (NS[i], out))
        for args in (["ip", "netns", "exec", NS[i], "tc", "qdisc", "show", "dev", "eth0"],
                     ["tc", "qdisc", "show", "dev", VETHS[i]]):
            rc, out = sh(args)
            check(not re.search(r"\b(netem|tbf)\b", out), "qdisc left after the heal: %s" % out)


def split_primary(p):
    """p keeps its clients but loses the other two nodes."""
    others = [IPS[i] for i in range(3) if i != p]
    drop_between(p, others)
    for i in range(3):
        if i != p:
            drop_between(i, [IPS[p]])


def isolate_primary(p):
    drop_between(p, [IPS[i] for i in range(3) if i != p] + [CLIENT_IP])
    for i in range(3):
        if i != p:
            drop_between(i, [IPS[p]])


def no_majority(p):
    for i in range(3):
        drop_between(i, [IPS[j] for j in range(3) if j != i])


def slow_lossy(p):
    """The primary's link: 100 ms +- 50 ms and 10 % loss with netem; where
    the kernel has no netem (this one), a 128 kbit/s token bucket with a
    400 ms queue both ways and 15 % of packets dropped by nftables."""
    global NETEM
    devs = [["ip", "netns", "exec", NS[p], "tc", "qdisc", "add", "dev", "eth0", "root"],
            ["tc", "qdisc", "add", "dev", VETHS[p], "root"]]
    if NETEM is None:
        rc, _ = sh(devs[0] + ["netem", "delay", "100ms", "50ms", "loss", "10%"])
        NETEM = rc == 0
        if NETEM:
            devs = devs[1:]
    for d in devs:
        if NETEM:
            rc, out = sh(d + ["netem", "delay", "100ms", "50ms", "loss", "10%"])
        else:
            rc, out = sh(d + ["tbf", "rate", "128kbit", "burst", "4kb", "latency", "400ms"])
        check(rc == 0, "tc: %s" % out)
    if not NETEM:
        nft(p, "table inet part {\n"
               " chain in { type filter hook input priority 0; policy accept; iifname \"eth0\" numgen random mod 100 < 15 drop; }\n"
               " chain out { type filter hook output priority 0; policy accept; oifname \"eth0\" numgen random mod 100 < 15 drop; }\n"
               "}\n")


# ---------------------------------------------------------------- history

class Monitor:
    """Watches the sentinels from the root namespace (through the bridge,
    so a sentinel cut off from the client is not heard) and notes when the
    first of them names a primary other than old."""

    def __init__(self, old_ip):
        self.old = old_ip
        self.t_switch = None
        self.new = None
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.watch, args=(ip,), daemon=True) for ip in IPS]
        for t in self.threads:
            t.start()

    def ask(self, ip):
        cmd = b"*3\r\n$8\r\nSENTINEL\r\n$23\r\nget-master-addr-by-name\r\n$%d\r\n%s\r\n" % (
            len(MASTER), MASTER.encode())
        with socket.create_connection((ip, 26379), timeout=0.3) as s:
            s.settimeout(0.3)
            s.sendall(cmd)
            data = b""
            while data.count(b"\r\n") < 5 and not data.startswith(b"*-1"):
                chunk = s.recv(4096)
                if not chunk:
                    break
                data += chunk
        parts = data.split(b"\r\n")
        return parts[2].decode() if len(parts) > 2 and parts[0] == b"*2" else None

    def watch(self, ip):
        while not self.stop.is_set():
            try:
                addr = self.ask(ip)
            except OSError:
                addr = None
            now = time.monotonic()
            if addr and addr != self.old:
                with self.lock:
                    if self.t_switch is None:
                        self.t_switch, self.new = now, addr
            time.sleep(0.05)

    def close(self):
        self.stop.set()
        for t in self.threads:
            t.join(2)


class Event:
    __slots__ = ("stack", "key", "body", "t0", "r", "phase")

    def __init__(self, stack, key, body, t0, r, phase):
        self.stack, self.key, self.body, self.t0, self.r, self.phase = stack, key, body, t0, r, phase


def load(stack, tag, t_stop, events, lock):
    """THREADS clients of fresh charges until t_stop or MAX_KEYS."""
    count = [0]

    def client(c):
        while time.monotonic() < t_stop:
            with lock:
                if count[0] >= MAX_KEYS:
                    return
                n = count[0]
                count[0] += 1
            key = "p-%s-%s-%d-%04d" % (RUN_ID, tag, stack.mr, n)
            body = h.charge_body(amount=100 + n, source="tok_chargeDeclined" if n % DECLINE_EVERY == 0 else "tok_visa")
            t0 = time.monotonic()
            r = h.post(stack.url, key, body, timeout=20)
            with lock:
                events.append(Event(stack, key, body, t0, r, "load"))
            time.sleep(THINK_S)

    ts = [threading.Thread(target=client, args=(c,)) for c in range(THREADS)]
    for t in ts:
        t.start()
    return ts


def documented(r):
    if r.status in (201, 402):
        return True
    if r.status == 409:
        return h.retry_after_ok(r)
    if r.status == 504 and PROVIDER == "sim":
        return h.retry_after_ok(r) and r.json().get("type") == "/problems/outcome-unknown"
    if r.status == 503:
        return h.retry_after_ok(r) and r.json().get("type") in h.UNAVAILABLE_TYPES
    return False


def sim_counts():
    """From the simulator's own counts: {key: [charge id] * charges} and
    {key: deliveries}, by the metadata the responder sends."""
    with urllib.request.urlopen(SIM_URL + "/_sim/keys", timeout=10) as f:
        keys = json.loads(f.read())["keys"]
    ids, deliveries = {}, {}
    for k in keys:
        md = k.get("metadata") or {}
        if md.get("charge_principal") != h.PRINCIPAL:
            continue
        ck = md.get("charge_idempotency_key")
        # one entry per charge: two charges under one key show as two ids
        ids.setdefault(ck, []).extend(["%s#%d" % (k.get("charge"), n) for n in range(k.get("charges", 0))])
        deliveries[ck] = deliveries.get(ck, 0) + k.get("deliveries", 0)
    return ids, deliveries


def ledger(path):
    """{key: [charge ids of its provider calls]}"""
    out = {}
    try:
        with open(path, "rb") as f:
            for ln in f:
                r = ln.rstrip(b"\n").decode().split("\t")
                if len(r) >= 4 and r[1] == h.PRINCIPAL:
                    out.setdefault(r[2], []).append(r[3])
    except FileNotFoundError:
        pass
    return out


def check_history(name, stack, events, t_nemesis, t_heal, mon):
    """Settles every key, replays it, and returns (numbers, problems)."""
    mine = [e for e in events if e.stack is stack]
    keys = {}
    for e in mine:
        keys.setdefault(e.key, e.body)
    deadline = time.monotonic() + SETTLE_S
    settled = h.run_parallel(lambda k: (k, h.settle(stack.url, k, keys[k], deadline)), list(keys), 12)
    final = {}
    for k, (r, seen) in settled:
        final[k] = r
        for x in seen:
            mine.append(Event(stack, k, keys[k], x.t_end - x.elapsed, x, "settle"))
    replay = dict(h.run_parallel(lambda k: (k, h.post(stack.url, k, keys[k])), list(keys), 12))
    probs = []
    undocumented = [e for e in mine if not documented(e.r)]
    for e in undocumented[:5]:
        probs.append("undocumented answer to %s (%s): %r" % (e.key, e.phase, e.r))
    unsettled = [k for k, r in final.items() if r.status not in (201, 402)]
    for k in unsettled[:5]:
        probs.append("key %s did not settle: %r" % (k, final[k]))
    if PROVIDER == "sim":
        ids, deliveries = sim_counts()
        two_ids = [k for k in keys if len(ids.get(k, [])) > 1]
        for k in two_ids[:5]:
            probs.append("simulator: key %s charged %d times" % (k, len(ids[k])))
        reexecuted = [k for k in keys if deliveries.get(k, 0) > 1]
    else:
        ids = ledger(stack.ledger)
        two_ids = [k for k in keys if len(set(ids.get(k, []))) > 1]
        for k in two_ids[:5]:
            probs.append("ledger: key %s has charge ids %r" % (k, sorted(set(ids[k]))))
        reexecuted = [k for k in keys if len(ids.get(k, [])) > 1]
    not_replayed = [k for k in keys if final[k].status in (201, 402) and not h.same_answer(final[k], replay[k])]
    for k in not_replayed[:5]:
        probs.append("key %s: the settled answer does not replay: %r then %r" % (k, final[k], replay[k]))
    # acknowledged: every 201/402 of the history. Lost: one that a later
    # answer for its key does not repeat as a replay, byte for byte (a
    # declined charge executed again has the same body, but is not marked
    # Idempotent-Replayed: so both are compared)
    for k in keys:
        mine.append(Event(stack, k, keys[k], replay[k].t_end - replay[k].elapsed, replay[k], "replay"))
    by_key = {}
    for e in sorted(mine, key=lambda x: x.r.t_end):
        by_key.setdefault(e.key, []).append(e)
    acked = [e for e in mine if e.r.status in (201, 402) and e.phase != "replay"]
    acked_keys = {e.key for e in acked}
    lost = set()
    rerecorded = set()   # the record lost, the answer the same bytes again
    for e in acked:
        later = [x for x in by_key[e.key] if x.r.t_end > e.r.t_end and x.r.status in (201, 402)]
        if PROVIDER == "sim":
            if any(not (x.r.status == e.r.status and x.r.body == e.r.body) for x in later):
                lost.add(e.key)
            elif any(not x.r.replayed for x in later):
                rerecorded.add(e.key)
        elif any(not (x.r.replayed and x.r.status == e.r.status and x.r.body == e.r.body) for x in later):
            lost.add(e.key)
    lost_keys = sorted(lost)
    lost_load = sorted({e.key for e in acked if e.phase == "load"} & lost)
    nums = {
        "keys": len(keys),
        "acked": len(acked_keys),
        "acked_in_load": len({e.key for e in acked if e.phase == "load"}),
        "lost": len(lost_keys),
        "lost_load": len(lost_load),  # of those acknowledged during the load
        "rerecorded": len(rerecorded),
        "duplicates": len(two_ids),
        "reexecuted": len(reexecuted),
        "undocumented": len(undocumented),
        "unsettled": len(unsettled),
        "statuses": h.statuses([e.r for e in mine if e.phase == "load"]),
    }
    if lost_load:
        e = next(x for x in acked if x.key == lost_load[0])
        diag(("%s: e.g. lost %s: acknowledged %d %r, replayed %d %r"
              % (stack.name, e.key, e.r.status, e.r.body[:160], replay[e.key].status, replay[e.key].body[:160])))
    # for availability (run_nemesis, once the monitor has stopped): when
    # each fresh charge that survived was answered
    nums["_kept"] = sorted(e.r.t_end for e in mine if e.r.status in (201, 402) and not e.r.replayed
                           and e.key not in lost_keys)
    # the longest time without an acknowledged, kept charge while clients sent
    ok_t = sorted(e.r.t_end for e in mine if e.phase == "load" and e.r.status in (201, 402)
                  and e.key not in lost_keys)
    load_ts = [e.t0 for e in mine if e.phase == "load"]
    gap = None
    if load_ts:
        pts = [min(load_ts)] + ok_t + [max(e.r.t_end for e in mine if e.phase == "load")]
        gap = max(b - a for a, b in zip(pts, pts[1:]))
    nums["max_gap_s"] = None if gap is None else round(gap, 2)
    return nums, probs


def run_nemesis(tag, title, start, flap=False, hold=8.0):
    p, _ = converge()
    events, lock = [], threading.Lock()
    mon = Monitor(IPS[p])
    t_load = time.monotonic()
    t_nem = t_load + LEAD_S
    t_heal = t_nem + hold
    t_stop = t_heal + TAIL_S
    threads = []
    for st in STACKS:
        threads += load(st, tag, t_stop, events, lock)
    err = None
    try:
        time.sleep(max(0, t_nem - time.monotonic()))
        if flap:
            cut = False
            while time.monotonic() < t_heal:
                if cut:
                    heal()
                else:
                    start(p)
                cut = not cut
                time.sleep(1.0)
        else:
            start(p)
            time.sleep(max(0, t_heal - time.monotonic()))
    except Fail as e:
        err = str(e)
    finally:
        heal()
    t_heal = time.monotonic()
    for t in threads:
        t.join(60)
    try:
        p2, conv_s = converge()
        diag("primary %s -> %s; converged (and calm for %.0fs) %.1fs after the heal" % (
            IPS[p], IPS[p2], STABLE_S, time.monotonic() - t_heal))
        if err:
            raise Fail(err)
        out = []
        for st in STACKS:
            nums, probs = check_history(title, st, events, t_nem, t_heal, mon)
            out.append((st, nums, probs))
    finally:
        mon.close()   # watched through the retries too
    diag("failover seen %s" % ("never" if mon.t_switch is None else "%.2fs after the nemesis began%s" % (
        mon.t_switch - t_nem, ", %.2fs after the heal" % (mon.t_switch - t_heal) if mon.t_switch > t_heal else "")))
    for st, nums, probs in out:
        # availability: the failover to the first charge the new primary
        # served (acknowledged after it and not lost)
        kept = [t for t in nums.pop("_kept") if mon.t_switch is not None and t > mon.t_switch]
        nums["availability_s"] = round(kept[0] - mon.t_switch, 2) if kept else None
        nums.update(nemesis=tag, title=title, mr=st.mr,
                    failover_s=None if mon.t_switch is None else round(mon.t_switch - t_nem, 2),
                    failover_after_heal=mon.t_switch is not None and mon.t_switch > t_heal)
        RESULTS.append(nums)
    bad = []
    for st, nums, probs in out:
        diag("%s: %d keys, load answers %s; acknowledged %d (%d during the load), lost %d (%d during the load), "
             "charge ids > 1: %d, keys called twice: %d, undocumented %d, unsettled %d; "
             "failover to first charge on the new primary: %s s; longest stretch without a kept charge: %s s"
             % (st.name, nums["keys"], nums["statuses"], nums["acked"], nums["acked_in_load"], nums["lost"],
                nums["lost_load"],
                nums["duplicates"], nums["reexecuted"], nums["undocumented"], nums["unsettled"],
                nums["availability_s"], nums["max_gap_s"]))
        for pr in probs:
            bad.append("%s: %s" % (st.name, pr))
        if PROVIDER == "sim" and nums["rerecorded"]:
            diag("%s: %d acknowledged outcomes lost by Redis and answered again with the same bytes "
                 "(the simulator replayed the charge)" % (st.name, nums["rerecorded"]))
        if (st.mr >= GATE_MIN_REPLICAS or PROVIDER == "sim") and nums["lost"]:
            bad.append("%s: %d acknowledged outcomes lost" % (st.name, nums["lost"]))
        elif nums["lost"]:
            diag("%s: %d acknowledged outcomes lost (reported, not gated below "
                 "redis_min_replicas %d)" % (st.name, nums["lost"], GATE_MIN_REPLICAS))
        gate_avail = GATE_AVAIL == "all" or (
            GATE_AVAIL == "1" and tag in GATE_AVAIL_NEMESES and 1 <= st.mr < GATE_MIN_REPLICAS)
        if gate_avail and nums["failover_s"] is not None and (
                nums["availability_s"] is None or nums["availability_s"] > AVAIL_BOUND_S):
            bad.append("%s: first charge on the new primary %s s after the failover (bound %.0f s)"
                       % (st.name, nums["availability_s"], AVAIL_BOUND_S))
    check(not bad, "\n".join(bad))


@test("(a) split brain: the primary cut off from the other nodes, its clients still reach it")
def t_split():
    run_nemesis("split", "split brain", split_primary)


@test("(b) the primary cut off from everyone")
def t_isolated():
    run_nemesis("isolated", "primary isolated", isolate_primary)


@test("(c) no majority anywhere: every node alone")
def t_no_majority():
    run_nemesis("nomajority", "no majority", no_majority, hold=6.0)


@test("(d) flapping: the primary cut off from the other nodes and healed every second for 10 s")
def t_flapping():
    run_nemesis("flapping", "flapping", split_primary, flap=True, hold=10.0)


@test("(e) a slow, lossy link to the primary")
def t_slow():
    run_nemesis("slow", "slow lossy link", slow_lossy)


def summary():
    print("# summary (provider %s, min-replicas-to-write %d on the nodes): nemesis | min_replicas | keys | "
          "acknowledged | lost | re-recorded | charge ids > 1 | called twice | failover s | "
          "failover -> first charge s | longest gap s" % (PROVIDER, MRTW))
    for n in RESULTS:
        print("#   %-16s | %d | %4d | %4d | %3d | %3d | %d | %3d | %5s | %5s | %5s" % (
            n["title"], n["mr"], n["keys"], n["acked"], n["lost"], n["rerecorded"], n["duplicates"],
            n["reexecuted"], n["failover_s"], n["availability_s"], n["max_gap_s"]))
    if RUN:
        with open(os.path.join(os.environ.get("PARTITIONS_RESULTS_DIR", RUN), "partitions-results.json"), "w") as f:
            json.dump({"provider": PROVIDER, "min_replicas_to_write": MRTW, "netem": NETEM, "results": RESULTS},
                      f, indent=1)


def main():
    if len(NS) != 3 or not STACKS:
        print("Bail out! PART_NS / PART_STACKS not set")
        return 2
    rc = h.tap.run("PARTITIONS_ONLY")
    summary()
    return rc


if __name__ == "__main__":
    sys.exit(main())
