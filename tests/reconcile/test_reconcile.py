#!/usr/bin/env python3
"""charge-reconcile on a seeded history (docs/reconcile.md).

The harness (tests/reconcile/run.sh) starts Redis, the simulator and the
responder behind lighttpd, and passes them through the environment:
BASE_URL, SIM_URL, SIM_API_KEY, E2E_REDIS_SOCKET, E2E_PRINCIPAL_A /
E2E_API_KEY_A, CHARGE_* (the configuration the responder and the
reconciler share), RECONCILE_BIN, RECONCILE_RUN (a scratch directory),
RECONCILE_SCHEMA. History: charges and declines through the responder, a
spilled record, 150 charges of someone else straight at the simulator;
then an orphan (a charge whose record is deleted), a phantom (a completed
record written by hand, for a charge the simulator never made) and a
duplicate (two more charges carrying one request's metadata). Python
standard library and python3-jsonschema; prints TAP.
"""

import glob
import hashlib
import hmac
import http.client
import json
import os
import pty
import re
import select
import subprocess
import sys
import time
import urllib.parse
import uuid

import jsonschema

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import resp  # noqa: E402  (tests/lib: the Redis client)
from tap import check, diag, run, test  # noqa: E402

BASE = urllib.parse.urlsplit(os.environ["BASE_URL"])
SIM = urllib.parse.urlsplit(os.environ["SIM_URL"])
SIM_KEY = os.environ["SIM_API_KEY"]
REDIS_SOCKET = os.environ["E2E_REDIS_SOCKET"]
PRINCIPAL = os.environ["E2E_PRINCIPAL_A"]
API_KEY = os.environ["E2E_API_KEY_A"]
PREFIX = os.environ["CHARGE_KEY_PREFIX"]
SECRET = os.environ["CHARGE_PROVIDER_SECRET"]
BIN = os.environ["RECONCILE_BIN"]
RUN_DIR = os.environ["RECONCILE_RUN"]
with open(os.environ["RECONCILE_SCHEMA"], encoding="utf-8") as _f:
    SCHEMA = json.load(_f)

T0 = int(time.time()) - 1          # before the history
TAG = uuid.uuid4().hex[:8]
SEEDED = {}                        # key -> the provider's charge id
PLANTED = {}


class Resp:
    def __init__(self, status, body):
        self.status, self.body = status, body

    def json(self):
        return json.loads(self.body)

    def __repr__(self):
        return "HTTP %d %r" % (self.status, self.body[:300])


def request(url, method, path, body=None, headers=None):
    c = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
    c.request(method, path, body=body, headers=headers or {})
    r = c.getresponse()
    out = Resp(r.status, r.read())
    c.close()
    return out


def charge(key, source="tok_visa", amount=1999, description=None):
    body = {"amount": amount, "currency": "usd", "source": source}
    if description is not None:
        body["description"] = description
    return request(BASE, "POST", "/charge", json.dumps(body).encode(), {
        "Authorization": "Bearer " + API_KEY, "Idempotency-Key": key,
        "Content-Type": "application/json"})


def sim_charge(idem, amount, metadata, source="tok_visa"):
    """A charge made straight at the simulator, as another client would."""
    form = [("amount", str(amount)), ("currency", "usd"), ("source", source)]
    form += [("metadata[%s]" % k, v) for k, v in metadata.items()]
    r = request(SIM, "POST", "/v1/charges", urllib.parse.urlencode(form).encode(), {
        "Authorization": "Bearer " + SIM_KEY, "Idempotency-Key": idem,
        "Content-Type": "application/x-www-form-urlencoded"})
    check(r.status == 200, "the simulator charges: %r" % r)
    return r.json()


def sim_stats():
    r = request(SIM, "GET", "/_sim/stats")
    check(r.status == 200, "GET /_sim/stats: %r" % r)
    s = r.json()
    return s["deliveries"], s["charges"]


def redis(*args, sock=REDIS_SOCKET):
    return resp.command(sock, *args)


def rkey(key):
    return PREFIX + "idem:" + PRINCIPAL + ":" + key


def downstream_key(key, fingerprint):
    msg = PRINCIPAL.encode() + b"\0" + key.encode() + b"\0" + fingerprint
    return "charge_" + hmac.new(SECRET.encode(), msg, hashlib.sha256).hexdigest()


def reconcile(*args, env=None, tty=False):
    """Runs charge-reconcile; (exit status, stdout, stderr)."""
    e = dict(os.environ) if env is None else env
    if not tty:
        p = subprocess.run([BIN] + list(args), env=e, capture_output=True, timeout=120)
        return p.returncode, p.stdout.decode(), p.stderr.decode()
    # stderr on a terminal: the progress line
    master, slave = pty.openpty()
    p = subprocess.Popen([BIN] + list(args), env=e, stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    err = b""
    while True:
        r, _, _ = select.select([master], [], [], 60)
        if not r:
            break
        try:
            chunk = os.read(master, 4096)
        except OSError:
            break
        if not chunk:
            break
        err += chunk
    out = p.stdout.read()
    p.wait(timeout=60)
    os.close(master)
    return p.returncode, out.decode(), err.decode(errors="replace")


def report(*args, env=None):
    rc, out, err = reconcile("--json", "--since", "@%d" % T0, *args, env=env)
    check(out.strip() != "", "a JSON report on stdout (exit %d, stderr %r)" % (rc, err))
    doc = json.loads(out)
    jsonschema.validate(doc, SCHEMA)
    return rc, doc, err


def counts_of(doc):
    return {k: doc["counts"][k] for k in ("orphans", "phantoms", "duplicates")}


PROM_LINE = re.compile(r'^[a-zA-Z_:][a-zA-Z0-9_:]*(\{[a-zA-Z_][a-zA-Z0-9_]*="[^"]*"'
                       r'(,[a-zA-Z_][a-zA-Z0-9_]*="[^"]*")*\})? -?[0-9.e+]+$')


def prometheus(path):
    """The textfile's samples {name{labels}: value}; every line checked."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    samples = {}
    for line in text.splitlines():
        if line.startswith("# HELP ") or line.startswith("# TYPE "):
            continue
        check(PROM_LINE.match(line), "a textfile sample line: %r" % line)
        name, value = line.rsplit(" ", 1)
        samples[name] = float(value)
    return samples


@test("seed: charges and declines through the responder, one spilled, 150 of someone else")
def t_seed():
    for i in range(12):
        key = "seed-%s-%d" % (TAG, i)
        r = charge(key, amount=1000 + i)
        check(r.status == 201, "%s: 201: %r" % (key, r))
        SEEDED[key] = r.json()["id"]
    for i in range(2):
        r = charge("decline-%s-%d" % (TAG, i), source="tok_chargeDeclined")
        check(r.status == 402, "a decline: 402: %r" % r)
    key = "spilled-%s" % TAG
    r = charge(key, amount=777, description="x" * 900)
    check(r.status == 201, "a large body: 201: %r" % r)
    SEEDED[key] = r.json()["id"]
    check(redis("HGET", rkey(key), "body_file") is not None,
          "the large body is spilled (spill_threshold_bytes 1024)")
    # charges without the responder's metadata: more than one page of them
    for i in range(150):
        sim_charge("other-%s-%d" % (TAG, i), 500 + i, {"order": str(i)})


@test("a clean history: exit 0, 0 orphans / 0 phantoms / 0 duplicates, every charge matched")
def t_clean():
    rc, doc, err = report()
    n = doc["counts"]
    diag("counts: %s" % json.dumps(n))
    check(rc == 0, "exit 0, got %d (stderr %r)" % (rc, err))
    check(doc["clean"] is True, "clean: true")
    check(counts_of(doc) == {"orphans": 0, "phantoms": 0, "duplicates": 0}, "0/0/0: %r" % n)
    check(n["charges"] == 13 + 2 + 150, "165 charges listed (several pages), got %d" % n["charges"])
    check(n["succeeded"] == 163 and n["declined"] == 2, "163 succeeded, 2 declined: %r" % n)
    check(n["matched"] == 13, "the 13 charges of the responder matched, got %d" % n["matched"])
    check(n["foreign"] == 150, "150 not the responder's, got %d" % n["foreign"])
    check(n["records_checked"] == 13 and n["records_matched"] == 13,
          "13 completed records checked and matched: %r" % n)
    check(n["charges_asked_by_id"] == 0, "no charge asked for by id: %r" % n)
    check(doc["orphans"] == [] and doc["phantoms"] == [] and doc["duplicates"] == [], "no findings listed")


@test("a clean history: the table says clean, exit 0")
def t_clean_text():
    rc, out, err = reconcile("--since", "@%d" % T0)
    check(rc == 0, "exit 0, got %d (stderr %r)" % (rc, err))
    check(re.search(r"^orphans\s+0$", out, re.M) and re.search(r"^phantoms\s+0$", out, re.M),
          "0 orphans, 0 phantoms in the table: %r" % out)
    check("clean: every charge has its record" in out, "the verdict: %r" % out[-200:])
    check(err == "", "nothing on stderr when it is no terminal: %r" % err)


@test("--prometheus writes the textfile atomically: success 1, findings 0")
def t_prom_clean():
    d = os.path.join(RUN_DIR, "textfile")
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "charge_reconcile.prom")
    rc, _, err = reconcile("--since", "@%d" % T0, "--prometheus", path, "--quiet")
    check(rc == 0, "exit 0, got %d (%r)" % (rc, err))
    s = prometheus(path)
    check(s.get("charge_reconcile_success") == 1, "success 1: %r" % s)
    for kind in ("orphan", "phantom", "duplicate"):
        check(s.get('charge_reconcile_findings{kind="%s"}' % kind) == 0, "%s 0: %r" % (kind, s))
    check(s.get("charge_reconcile_matched") == 13, "matched 13: %r" % s)
    check(abs(s.get("charge_reconcile_last_run_timestamp_seconds", 0) - time.time()) < 60, "a fresh timestamp")
    check(os.listdir(d) == ["charge_reconcile.prom"], "only the file, no temporary left: %r" % os.listdir(d))


@test("a progress line on a terminal, cleared at the end")
def t_progress():
    rc, out, err = reconcile("--since", "@%d" % T0, tty=True)
    check(rc == 0, "exit 0, got %d" % rc)
    check("charge-reconcile: charges:" in err, "the progress line on the terminal: %r" % err[:300])
    check(err.endswith("\r\x1b[K"), "the line cleared at the end: %r" % err[-40:])
    check("clean:" in out, "the report still on stdout")


@test("plant an orphan, a phantom and a duplicate")
def t_plant():
    # the orphan: the provider charged, the record is gone
    key = "orphan-%s" % TAG
    r = charge(key, amount=4100)
    check(r.status == 201, "%s: %r" % (key, r))
    PLANTED["orphan"] = r.json()["id"]
    check(redis("DEL", rkey(key)) == 1, "the record deleted")
    # the phantom: a completed record for a charge the provider never made
    key = "phantom-%s" % TAG
    now = int(time.time() * 1000)
    fake = "ch_" + uuid.uuid4().hex[:24]
    body = json.dumps({"id": fake, "object": "charge", "status": "succeeded", "amount": 4200,
                       "currency": "usd", "source": "tok_visa", "customer": None,
                       "description": None, "metadata": {}, "line_items": [],
                       "created": now // 1000, "idempotency_key": key}, separators=(",", ":"))
    redis("HSET", rkey(key), "state", "completed", "fingerprint", hashlib.sha256(key.encode()).hexdigest(),
          "param_digests", "x", "owner", uuid.uuid4().hex, "created_ms", now, "updated_ms", now,
          "expires_ms", now + 86400000, "status", 201, "content_type", "application/json", "body", body)
    redis("PEXPIRE", rkey(key), 86400000)
    PLANTED["phantom"] = (key, fake)
    # the duplicate: two more charges carrying the metadata of one request
    key = "dup-%s" % TAG
    r = charge(key, amount=4300)
    check(r.status == 201, "%s: %r" % (key, r))
    original = r.json()["id"]
    req = downstream_key(key, redis("HGET", rkey(key), "fingerprint"))
    md = {"charge_principal": PRINCIPAL, "charge_idempotency_key": key, "charge_request": req}
    a = sim_charge("plant-dup-a-" + TAG, 4300, md)["id"]
    b = sim_charge("plant-dup-b-" + TAG, 4300, md)["id"]
    PLANTED["duplicate"] = (req, original, a, b)


@test("planted: the report finds exactly those three and exits 1")
def t_planted():
    rc, doc, err = report()
    n = doc["counts"]
    diag("counts: %s" % json.dumps(n))
    check(rc == 1, "exit 1, got %d (stderr %r)" % (rc, err))
    check(doc["clean"] is False, "clean: false")
    check(counts_of(doc) == {"orphans": 1, "phantoms": 1, "duplicates": 1}, "1/1/1: %r" % n)
    o = doc["orphans"]
    check(len(o) == 1 and o[0]["charge"] == PLANTED["orphan"] and o[0]["reason"] == "no-record"
          and o[0]["idempotency_key"] == "orphan-%s" % TAG and o[0]["principal"] == PRINCIPAL,
          "the orphan is the charge whose record was deleted: %r" % o)
    p = doc["phantoms"]
    key, fake = PLANTED["phantom"]
    check(len(p) == 1 and p[0]["idempotency_key"] == key and p[0]["charge"] == fake
          and p[0]["reason"] == "no-such-charge" and p[0]["amount"] == 4200,
          "the phantom is the hand-written record: %r" % p)
    check(n["charges_asked_by_id"] == 1, "its charge asked for by id once: %r" % n)
    d = doc["duplicates"]
    req, original, a, b = PLANTED["duplicate"]
    check(len(d) == 1 and d[0]["request"] == req and d[0]["idempotency_key"] == "dup-%s" % TAG,
          "the duplicate is the request the two charges name: %r" % d)
    ids = set(d[0]["charges"])
    check({a, b} <= ids, "both planted charges listed: %r" % d[0])
    # the responder's own charge joins them: by its charge_request, or by
    # the request its record proves
    check(d[0]["count"] == len(ids) and d[0]["count"] in (2, 3) and ids <= {original, a, b},
          "count %d, charges %r" % (d[0]["count"], ids))
    diag("the duplicate holds %d charges: %s" % (d[0]["count"], " ".join(sorted(ids))))


@test("planted: the table lists them, exit 1")
def t_planted_text():
    rc, out, err = reconcile("--since", "@%d" % T0)
    check(rc == 1, "exit 1, got %d (%r)" % (rc, err))
    check(PLANTED["orphan"] in out and "no-record" in out, "the orphan listed")
    check(PLANTED["phantom"][1] in out and "no-such-charge" in out, "the phantom listed")
    check(PLANTED["duplicate"][0] in out, "the duplicate's request listed")
    check("NOT CLEAN" in out, "the verdict")


@test("planted: --prometheus counts 1 / 1 / 1")
def t_planted_prom():
    path = os.path.join(RUN_DIR, "textfile", "charge_reconcile.prom")
    rc, _, _ = reconcile("--since", "@%d" % T0, "--prometheus", path)
    check(rc == 1, "exit 1, got %d" % rc)
    s = prometheus(path)
    for kind in ("orphan", "phantom", "duplicate"):
        check(s.get('charge_reconcile_findings{kind="%s"}' % kind) == 1, "%s 1: %r" % (kind, s))
    check(s.get("charge_reconcile_success") == 1, "success 1")


@test("the window: before the history there is nothing (exit 0); its end bounds the records")
def t_window():
    rc, doc, _ = report("--until", "@%d" % (T0 - 1), "--since", "@%d" % (T0 - 3600))
    n = doc["counts"]
    check(rc == 0 and n["charges"] == 0 and n["records_checked"] == 0,
          "exit 0, nothing listed or checked: %d %r" % (rc, n))
    rc, _, err = reconcile("--since", "2d", "--until", "1d", "--json")
    check(rc == 0, "relative times: exit 0, got %d (%r)" % (rc, err))


@test("reads only: a Redis user that may only read, the provider's counts unchanged")
def t_read_only():
    port = None
    for cand in range(21000 + os.getpid() % 2000, 21000 + os.getpid() % 2000 + 50):
        try:
            redis("CONFIG", "SET", "port", str(cand))
            port = cand
            break
        except resp.RedisError:
            continue
    check(port is not None, "Redis listens on a TCP port too")
    try:
        redis("ACL", "SETUSER", "reader", "reset", "on", ">reader-pw", "~*", "-@all", "+@read",
              "+@connection")
        before = sim_stats()
        env = dict(os.environ)
        env["CHARGE_REDIS_URL"] = "redis://reader:reader-pw@127.0.0.1:%d" % port
        rc, doc, err = report(env=env)
        check(rc == 1 and counts_of(doc) == {"orphans": 1, "phantoms": 1, "duplicates": 1},
              "the same findings as a user that may only read: %d %r %r" % (rc, doc["counts"], err))
        check(sim_stats() == before, "the simulator's deliveries and charges unchanged")
        env["CHARGE_REDIS_URL"] = "redis://reader:wrong@127.0.0.1:%d" % port
        rc, _, err = reconcile("--since", "1h", env=env)
        check(rc == 2 and "AUTH" in err, "a wrong password: exit 2 naming AUTH: %d %r" % (rc, err))
    finally:
        redis("ACL", "DELUSER", "reader")
        redis("CONFIG", "SET", "port", "0")


def tcp_redis(port, *args):
    """One command to 127.0.0.1:port; an error reply is raised as
    resp.RedisError, its text ("MOVED 123 127.0.0.1:7001")."""
    return resp.command(port, *args, timeout=10)


def copy_records(ports):
    """Every record of the stack's Redis, DUMPed and RESTOREd (with its TTL)
    on the node of ports that takes it (MOVED followed)."""
    n, cursor = 0, b"0"
    while True:
        cursor, keys = redis("SCAN", cursor, "MATCH", PREFIX + "idem:*", "COUNT", 1000)
        for k in keys:
            dump, ttl = redis("DUMP", k), redis("PTTL", k)
            port = ports[0]
            for _ in range(3):
                try:
                    tcp_redis(port, "RESTORE", k, max(ttl, 0), dump, "REPLACE")
                    n += 1
                    break
                except resp.RedisError as e:
                    check(str(e).startswith("MOVED "), "RESTORE: %s" % e)
                    port = int(str(e).rsplit(":", 1)[1])
        if cursor == b"0":
            return n


@test("the same findings behind Redis Sentinel and on a Redis Cluster of 3 primaries")
def t_topologies():
    rc, single, _ = report()
    check(rc == 1, "the stack's Redis: exit 1")
    want = dict(single["counts"])
    n = copy_records([int(os.environ["RECONCILE_SENTINEL_PRIMARY"])])
    ports = [int(p) for p in os.environ["RECONCILE_CLUSTER_PORTS"].split(",")]
    check(copy_records(ports) == n and n == want["records_scanned"],
          "%d records copied to each, %d scanned" % (n, want["records_scanned"]))
    spread = [tcp_redis(p, "DBSIZE") for p in ports]
    check(all(x > 0 for x in spread), "the records spread over every primary: %r" % spread)
    diag("records per cluster primary: %r" % spread)
    for name in ("SENTINEL", "CLUSTER"):
        env = dict(os.environ)
        env["CHARGE_REDIS_URL"] = os.environ["RECONCILE_%s_URL" % name]
        rc, doc, err = report(env=env)
        got = dict(doc["counts"])
        check(rc == 1 and got == want,
              "%s: exit 1 and the same counts, got %d %r (stderr %r)" % (name, rc, got, err))
        check(doc["orphans"] == single["orphans"] and doc["phantoms"] == single["phantoms"]
              and doc["duplicates"] == single["duplicates"], "%s: the same findings" % name)


@test("-c FILE: the configuration from a file, as the responder reads it")
def t_conf_file():
    path = os.path.join(RUN_DIR, "reconcile.conf")
    keys = ("REDIS_URL", "KEY_PREFIX", "PROVIDER_URL", "PROVIDER_API_KEY", "PROVIDER_SECRET",
            "SPILL_DIR")
    with open(path, "w", encoding="utf-8") as f:
        for k in keys:
            f.write("%s = %s\n" % (k.lower(), os.environ["CHARGE_" + k]))
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHARGE_")}
    rc, doc, err = report("-c", path, env=env)
    check(rc == 1 and counts_of(doc) == {"orphans": 1, "phantoms": 1, "duplicates": 1},
          "the planted findings: %d %r %r" % (rc, doc["counts"], err))
    env["CHARGE_KEY_PREFIX"] = "elsewhere:"
    rc, doc, err = report("-c", path, env=env)
    check(doc["counts"]["records_scanned"] == 0 and doc["counts"]["orphans"] >= 14,
          "CHARGE_KEY_PREFIX overrides the file (no record found under it): %r" % doc["counts"])


@test("usage and unreadable sources exit 2; --prometheus then says success 0")
def t_errors():
    for args in (["--since", "yesterday-ish"], ["--bogus"], ["--since", "1h", "--until", "2h"],
                 ["--max-charges", "0"]):
        rc, _, err = reconcile(*args)
        check(rc == 2 and err != "", "%r: exit 2 with a message, got %d %r" % (args, rc, err))
    path = os.path.join(RUN_DIR, "textfile", "charge_reconcile.prom")
    env = dict(os.environ)
    env["CHARGE_REDIS_URL"] = "unix://%s/no-such.sock" % RUN_DIR
    rc, _, err = reconcile("--since", "1h", "--prometheus", path, env=env)
    check(rc == 2 and "Redis" in err, "Redis unreachable: exit 2: %d %r" % (rc, err))
    s = prometheus(path)
    check(s.get("charge_reconcile_success") == 0 and 'charge_reconcile_findings{kind="orphan"}' not in s,
          "the textfile says success 0 and no findings: %r" % s)
    env = dict(os.environ)
    env["CHARGE_PROVIDER_URL"] = "http://127.0.0.1:9"
    rc, _, err = reconcile("--since", "1h", env=env)
    check(rc == 2 and "provider" in err, "provider unreachable: exit 2: %d %r" % (rc, err))
    env["CHARGE_PROVIDER_URL"] = ""
    rc, _, err = reconcile("--since", "1h", env=env)
    check(rc == 2 and "provider_url is empty" in err, "no provider_url: exit 2: %d %r" % (rc, err))
    env = dict(os.environ)
    env["CHARGE_PROVIDER_API_KEY"] = "sk_test_wrong"
    rc, _, err = reconcile("--since", "1h", env=env)
    check(rc == 2 and "provider_api_key" in err, "a refused API key: exit 2: %d %r" % (rc, err))


@test("--help and --version")
def t_help():
    rc, out, _ = reconcile("--help")
    check(rc == 0 and "--prometheus FILE" in out and "--since WHEN" in out, "--help: %d" % rc)
    rc, out, _ = reconcile("--version")
    check(rc == 0 and re.match(r"^charge-reconcile \d+\.\d+\.\d+\n$", out), "--version: %r" % out)


if __name__ == "__main__":
    sys.exit(run(only_env="RECONCILE_ONLY", prefix="reconcile: "))
