"""checker.py - the world test's checker: every rule one function over the
evidence of one seed (what every client was told, the records in Redis,
the provider's ledger), returning its violations as sentences.

The rules are the end-to-end promises of docs/API.md, stated from outside
(issue 36 B.3), never the responder's own beliefs:

  told_failed_but_charged   a client told 402/502 (or a record failed) while
                            the provider holds a succeeded charge of the request
  foreign_charge            a charge returned or recorded that is not the
                            request's own (its metadata, amount, currency)
  one_charge                more than one charge for one request
  ack_changed               an acknowledged 2xx later answered with other bytes
  charge_after_window       a charge created after the execute window of the
                            last send that could have caused it
  unsettled                 a record not completed/failed within the bound
                            after the faults stopped
"""
import collections
import json


class Evidence:
    def __init__(self, **kw):
        self.__dict__.update(kw)
        self.by_key = collections.defaultdict(list)
        for op in self.history:
            self.by_key[op.key].append(op)
        for ops in self.by_key.values():
            ops.sort(key=lambda o: o.t0)
        # the provider's charges that name a request of ours in metadata
        self.named = collections.defaultdict(list)
        for c in self.charges:
            md = c.get("metadata") or {}
            if md.get("charge_principal") == self.principal and md.get("charge_idempotency_key") in self.keys:
                self.named[md["charge_idempotency_key"]].append(c)

    def own(self, key):
        """The provider's charges that are the request's own."""
        r = self.keys[key]
        return [c for c in self.named[key] if c.get("amount") == r["amount"] and c.get("currency") == "usd"]

    def succeeded(self, key):
        return [c for c in self.own(key) if c.get("status") == "succeeded"]


def body_json(b):
    if b is None:
        return {}
    try:
        j = json.loads(b)
        return j if isinstance(j, dict) else {}
    except (ValueError, TypeError):
        return {}


def charge_of(status, body):
    """The charge id an answer (or a recorded body) names, or None: a 201's
    id, a 402's charge."""
    j = body_json(body)
    if status == 201 or status == b"201":
        return j.get("id")
    if status == 402 or status == b"402":
        return j.get("charge")
    return None


def hint(ev, key):
    """What the responders logged last about the request (for a reader)."""
    lines = ev.notes.get(key) or []
    return " [log: %s]" % lines[-1] if lines else ""


def short(op):
    return "%s %s (%s, +%.2fs)" % (op.status or op.err, (op.ptype or "").rsplit("/", 1)[-1],
                                   op.phase, op.t0)


# ------------------------------------------------------------------ the rules

def told_failed_but_charged(ev):
    out = []
    for key in ev.keys:
        won = ev.succeeded(key)
        if not won:
            continue
        # the responder's own 402 or 502 (problem+json); a web server's own
        # 502 page for a request in flight at a kill -9 is not an outcome
        told = [op for op in ev.by_key[key] if op.status in (402, 502) and op.ptype is not None]
        rec = ev.records.get(key, {})
        if told:
            op = told[0]
            out.append("%s: told %d %s (%s) while the provider holds succeeded %s%s" % (
                key, op.status, op.ptype or "", str(body_json(op.body).get("detail", ""))[:100],
                won[0]["id"], hint(ev, key)))
        elif rec.get("state") == b"failed":
            out.append("%s: recorded failed %s while the provider holds succeeded %s%s" % (
                key, rec.get("status", b"").decode(), won[0]["id"], hint(ev, key)))
    return out


def foreign_charge(ev):
    out = []
    for key in ev.keys:
        own = {c["id"] for c in ev.own(key)}
        for op in ev.by_key[key]:
            cid = charge_of(op.status, op.body)
            if cid is not None and cid not in own:
                out.append("%s: answered %d naming %s, not the request's (own: %s)%s" % (
                    key, op.status, cid, sorted(own) or "none", hint(ev, key)))
                break
        rec = ev.records.get(key, {})
        cid = charge_of(rec.get("status"), rec.get("body"))
        if cid is not None and cid not in own:
            out.append("%s: recorded %s naming %s, not the request's (own: %s)" % (
                key, rec.get("status", b"").decode(), cid, sorted(own) or "none"))
    return out


def one_charge(ev):
    out = []
    for key in ev.keys:
        if len(ev.named[key]) > 1:
            out.append("%s: %d charges at the provider: %s" % (
                key, len(ev.named[key]), [c["id"] for c in ev.named[key]]))
    for k in ev.sim_keys:
        if k.get("charges", 0) > 1:
            out.append("downstream key %s: %d charges" % (k["idempotency_key"], k["charges"]))
    return out


def ack_changed(ev):
    out = []
    for key, ops in ev.by_key.items():
        acks = [op for op in ops if op.status is not None and 200 <= op.status < 300]
        if not acks:
            continue
        first = acks[0]
        for op in ops:
            if op.t0 <= first.t0 or op.status not in (201, 402, 502, 504):
                continue
            if op.status in (502, 504) and (op.ptype is None or op.ptype.endswith("/outcome-unknown")):
                continue  # not an outcome: a web server's page, or unknown
            if op.status != first.status or op.body != first.body:
                out.append("%s: acknowledged %d %s, later answered %d %s" % (
                    key, first.status, first.body[:90].decode(errors="replace"), op.status,
                    (op.body or b"")[:90].decode(errors="replace")))
                break
    return out


# a charge lands at most this long after the send that causes it: the
# provider's latency (p99 <= 0.5 s), the granularity of created (1 s), 1 s
# of a loaded machine
LANDING_SLACK_S = 2.5


def charge_after_window(ev):
    out = []
    limit = ev.execute_window_s + ev.schedule.slow_ms / 1000.0 + LANDING_SLACK_S
    for key in ev.keys:
        sends = [op.t0 for op in ev.by_key[key]]
        for c in ev.named[key]:
            created = c["created"] - ev.schedule.clock_offset_s  # on our clock
            before = [t for t in sends if t <= created + 1.5]  # time(2) is a coarse clock
            if not before:
                out.append("%s: charge %s created at %d, before any send (sends at %s)" % (
                    key, c["id"], created, ["%.1f" % t for t in sends[:4]]))
            elif created - max(before) > limit:
                out.append("%s: charge %s created %.1fs after the last send before it (window %ds)" % (
                    key, c["id"], created - max(before), ev.execute_window_s))
    return out


def unsettled(ev):
    out = []
    for key in ev.keys:
        st, at = ev.states.get(key, ("?", None))
        if st is None:
            last = ev.by_key[key][-1] if ev.by_key[key] else None
            out.append("%s: no record after the faults stopped and a last send (%s)" % (
                key, short(last) if last else "none"))
        elif at is None:
            out.append("%s: still %s %.0fs after the faults stopped (the bound)" % (key, st, ev.bound_s))
    return out


RULES = [told_failed_but_charged, foreign_charge, one_charge, ack_changed, charge_after_window, unsettled]


def check(ev):
    """{seed, violations: {rule: [sentences]}, numbers}."""
    v = {}
    for rule in RULES:
        found = rule(ev)
        if found:
            v[rule.__name__] = found
    nums = collections.Counter()
    nums["requests"] = len(ev.keys)
    nums["answers"] = len(ev.history)
    nums["charges"] = sum(len(ev.named[k]) for k in ev.keys)
    nums["gave_up"] = len(ev.gave_up)
    for st, _ in ev.states.values():
        nums[st or "none"] += 1
    nums["faults"] = sum(1 for e in ev.schedule.nemesis if e.get("ran"))
    nums["provider_liberties"] = sum((ev.sim_stats.get("liberties") or {}).values())
    nums["provider_faults"] = sum((ev.sim_stats.get("faults") or {}).values())
    nums["violations"] = sum(len(x) for x in v.values())
    return {"seed": ev.seed, "violations": v, "numbers": dict(nums), "phases": ev.phases}
