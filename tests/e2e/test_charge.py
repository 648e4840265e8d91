#!/usr/bin/env python3
"""End-to-end tests of POST /charge through a real web server (docs/API.md §2-§16).

Server-agnostic: the harness (tests/e2e/run.sh for lighttpd; later ones for
Apache and nginx) starts the stack and passes everything through the
environment:

  BASE_URL            http://127.0.0.1:PORT  (required)
  E2E_LEDGER          the provider ledger file (CHARGE_PROVIDER_LEDGER)
  E2E_SPILL_DIR       the spill directory (CHARGE_SPILL_DIR)
  E2E_REDIS_SOCKET    unix socket of the stack's private Redis
  E2E_REDIS_NODES     instead: a Redis Cluster, "host:port host:port ..."
                      (commands with a key go to the node owning it; the
                      others to every node)
  E2E_PRINCIPAL_A / E2E_API_KEY_A, E2E_PRINCIPAL_B / E2E_API_KEY_B
  E2E_REDIS_KILL      shell command: crash Redis (kill -9)
  E2E_REDIS_START     shell command: start Redis again (same socket and AOF)
  E2E_WORKER_PIDS     shell command printing the responder PIDs, one a line
  E2E_WWW_DIR         the document root (www/), optional
  E2E_ONLY            optional regular expression: run only matching tests
  CHARGE_*            the responder's configuration (TTLs, limits, latency)

Prints TAP ("ok N - name" / "not ok N - name" plus "# reason") and exits 1
when any test failed. Python standard library only.
"""

import concurrent.futures
import email.utils
import hashlib
import hmac
import http.client
import json
import os
import re
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import tap  # noqa: E402  (tests/lib: the shared runner)
from tap import Fail, check, diag, test  # noqa: E402,F401
import openapi_check  # noqa: E402  (tests/lib: answers against docs/openapi.yaml)
import resp  # noqa: E402  (tests/lib: the Redis client)


# ---------------------------------------------------------------- settings

BASE_URL = os.environ.get("BASE_URL", "")
_u = urllib.parse.urlsplit(BASE_URL)
HOST, PORT = _u.hostname or "127.0.0.1", _u.port or 80

LEDGER = os.environ.get("E2E_LEDGER", "")
SPILL_DIR = os.environ.get("E2E_SPILL_DIR", "")
METRICS_FILE = os.environ.get("E2E_METRICS_FILE", "")
REDIS_SOCKET = os.environ.get("E2E_REDIS_SOCKET", "")
REDIS_NODES = [(h, int(p)) for h, p in
               (n.rsplit(":", 1) for n in os.environ.get("E2E_REDIS_NODES", "").split())]
PRINCIPAL_A = os.environ.get("E2E_PRINCIPAL_A", "alice")
KEY_A = os.environ.get("E2E_API_KEY_A", "sk_test_alice")
PRINCIPAL_B = os.environ.get("E2E_PRINCIPAL_B", "bob")
KEY_B = os.environ.get("E2E_API_KEY_B", "sk_test_bob")
WWW_DIR = os.environ.get("E2E_WWW_DIR", "")


def cfg_int(name, default):
    v = os.environ.get("CHARGE_" + name.upper(), "")
    return int(v) if v.strip() else default


KEY_PREFIX = os.environ.get("CHARGE_KEY_PREFIX", "charge:")
LOCK_TTL_S = cfg_int("lock_ttl_s", 30)
COMPLETED_TTL_S = cfg_int("completed_ttl_s", 86400)
FAILED_TTL_S = cfg_int("failed_ttl_s", 300)
MAX_REQUEST_BYTES = cfg_int("max_request_bytes", 1048576)
MAX_WAIT_S = cfg_int("max_wait_s", 10)
SPILL_THRESHOLD = cfg_int("spill_threshold_bytes", 16384)
LATENCY_MS = cfg_int("provider_latency_ms", 200)
PROVIDER_TIMEOUT_MS = cfg_int("provider_timeout_ms", 5000)

RUN_ID = uuid.uuid4().hex[:10]
HTTP_TIMEOUT = 30




# ---------------------------------------------------------------- HTTP

class Resp:
    def __init__(self, status, headers, body, elapsed):
        self.status = status
        self.headers = headers          # http.client.HTTPMessage
        self.body = body
        self.elapsed = elapsed

    def h(self, name):
        return self.headers.get(name)

    def json(self):
        try:
            return json.loads(self.body)
        except ValueError as e:
            raise Fail("body is not JSON (%s): %r" % (e, self.body[:300]))

    def __repr__(self):
        return "HTTP %d, headers %s, body %r" % (
            self.status, dict(self.headers.items()), self.body[:400])


# Every answer request() receives is checked against docs/openapi.yaml: one
# the description does not allow fails the test it came from (and, should
# that test swallow the Fail, the last test, which also lists what no answer
# exercised).
CONTRACT = openapi_check.Contract()
VIOLATIONS = []


def is_static(path):
    """A file of www/ (the web server's, not in the API description)."""
    p = urllib.parse.unquote(path.split("?", 1)[0]).lstrip("/")
    www = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "www")
    return ".." not in p.split("/") and (p == "" or os.path.isfile(os.path.join(www, p)))


def contract_check(method, path, r, web_server_ok):
    """web_server_ok: the test provokes the web server's own answer (not the
    responder's, so without X-Request-Id), which the description leaves out."""
    if web_server_ok and r.h("X-Request-Id") is None:
        return
    if is_static(path):
        return
    problems = CONTRACT.check(method, path, r.status, r.headers, r.body)
    if problems:
        VIOLATIONS.extend(problems)
        raise Fail("answer not allowed by docs/openapi.yaml: %r\n%s" % (r, "\n".join(problems)))


def request(method, path, body=None, headers=None, timeout=HTTP_TIMEOUT, web_server_ok=False):
    conn = http.client.HTTPConnection(HOST, PORT, timeout=timeout)
    t0 = time.monotonic()
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        data = r.read()
        resp = Resp(r.status, r.headers, data, time.monotonic() - t0)
    finally:
        conn.close()
    contract_check(method, path, resp, web_server_ok)
    return resp


def new_key(tag):
    return "e2e-%s-%s-%s" % (RUN_ID, tag, uuid.uuid4().hex[:8])


def charge_body(amount=1999, currency="usd", source="tok_visa", **extra):
    d = {"amount": amount, "currency": currency, "source": source}
    d.update(extra)
    return json.dumps(d).encode()


def post_charge(key, body=None, api_key=None, ctype="application/json",
                extra=None, path="/charge", timeout=HTTP_TIMEOUT, web_server_ok=False):
    """POST /charge; key None = no Idempotency-Key, api_key "" = no auth."""
    hdrs = {}
    if api_key is None:
        api_key = KEY_A
    if api_key != "":
        hdrs["Authorization"] = "Bearer " + api_key
    if key is not None:
        hdrs["Idempotency-Key"] = key
    if ctype is not None:
        hdrs["Content-Type"] = ctype
    if extra:
        hdrs.update(extra)
    if body is None:
        body = charge_body()
    return request("POST", path, body=body, headers=hdrs, timeout=timeout,
                   web_server_ok=web_server_ok)


def std_headers(r, what="response"):
    """docs/API.md §9: Content-Type, Cache-Control: no-store, X-Request-Id."""
    check(r.h("Content-Type"), "%s without Content-Type: %r" % (what, r))
    cc = (r.h("Cache-Control") or "").lower()
    check("no-store" in cc, "%s: Cache-Control %r, want no-store: %r" % (what, r.h("Cache-Control"), r))
    check(r.h("X-Request-Id"), "%s without X-Request-Id: %r" % (what, r))


def expect_problem(r, status, slug, what="response"):
    """An RFC 9457 problem with the given status and /problems/<slug> type."""
    check(r.status == status, "%s: want %d %s, got %r" % (what, status, slug, r))
    std_headers(r, what)
    ct = (r.h("Content-Type") or "").split(";")[0].strip().lower()
    check(ct == "application/problem+json", "%s: Content-Type %r, want application/problem+json" % (what, r.h("Content-Type")))
    p = r.json()
    check(isinstance(p, dict), "%s: problem is not an object: %r" % (what, r.body))
    t = p.get("type", "")
    check(isinstance(t, str) and t.endswith("/problems/" + slug),
          "%s: type %r, want .../problems/%s" % (what, t, slug))
    check(p.get("status") == status, "%s: problem status member %r, want %d" % (what, p.get("status"), status))
    check(isinstance(p.get("title"), str) and p.get("title"), "%s: problem without title: %r" % (what, p))
    check(isinstance(p.get("detail"), str), "%s: problem without detail: %r" % (what, p))
    return p


def expect_fresh(r, status, what="fresh response"):
    check(r.status == status, "%s: want %d, got %r" % (what, status, r))
    std_headers(r, what)
    check(r.h("Idempotent-Replayed") == "false",
          "%s: Idempotent-Replayed %r, want 'false'" % (what, r.h("Idempotent-Replayed")))


def expect_replay_of(r, orig, what="replay"):
    """The recorded status, Content-Type, Retry-After and body byte for byte."""
    check(r.status == orig.status, "%s: status %d, want the recorded %d: %r" % (what, r.status, orig.status, r))
    std_headers(r, what)
    check(r.h("Idempotent-Replayed") == "true",
          "%s: Idempotent-Replayed %r, want 'true'" % (what, r.h("Idempotent-Replayed")))
    check(r.h("Content-Type") == orig.h("Content-Type"),
          "%s: Content-Type %r, want the recorded %r" % (what, r.h("Content-Type"), orig.h("Content-Type")))
    check(r.h("Retry-After") == orig.h("Retry-After"),
          "%s: Retry-After %r, want the recorded %r" % (what, r.h("Retry-After"), orig.h("Retry-After")))
    check(r.body == orig.body, "%s: body differs from the recorded one:\n#   recorded %r\n#   replayed %r"
          % (what, orig.body[:300], r.body[:300]))


def raw_oversized(path, content_length, api_key):
    """Announces a huge body; reads the answer as soon as one arrives."""
    s = socket.create_connection((HOST, PORT), timeout=10)
    try:
        head = ("POST %s HTTP/1.1\r\nHost: %s:%d\r\nAuthorization: Bearer %s\r\n"
                "Idempotency-Key: %s\r\nContent-Type: application/json\r\n"
                "Content-Length: %d\r\nConnection: close\r\n\r\n"
                % (path, HOST, PORT, api_key, new_key("huge"), content_length)).encode()
        s.sendall(head)
        chunk = b" " * 16384
        sent = 0
        got = b""
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            rd, _, _ = select.select([s], [], [], 0.3 if sent == 0 else 0)
            if rd:
                break
            if sent >= content_length:
                rd, _, _ = select.select([s], [], [], 10)
                break
            try:
                s.sendall(chunk[:min(len(chunk), content_length - sent)])
                sent += min(len(chunk), content_length - sent)
            except OSError:
                break
        try:
            while b"\r\n" not in got:
                b = s.recv(4096)
                if not b:
                    break
                got += b
        except OSError:
            pass
        m = re.match(rb"HTTP/1\.[01] (\d{3})", got)
        return (int(m.group(1)) if m else None), got[:200], sent
    finally:
        s.close()


# ---------------------------------------------------------------- Redis

RedisError = resp.RedisError


def _redis_at(addr, args):
    """One command on the Redis at addr: a unix socket path or (host, port)."""
    return resp.command(addr, *args)


# Commands whose second argument is the one key they touch.
KEY_COMMANDS = {"HGETALL", "HGET", "HSET", "PEXPIRE", "PTTL", "EXISTS", "DEL", "ZSCORE"}


def _cluster_key_command(args):
    """A one-key command on the node serving the key (MOVED followed)."""
    addr = REDIS_NODES[0]
    for _ in range(5):
        try:
            return _redis_at(addr, args)
        except RedisError as e:
            m = re.match(r"(MOVED|ASK) \d+ (.*):(\d+)$", str(e))
            if not m:
                raise
            addr = (m.group(2) or addr[0], int(m.group(3)))
            if m.group(1) == "ASK":
                return _redis_pipeline_ask(addr, args)
    raise RedisError("too many redirections for %r" % (args,))


def _redis_pipeline_ask(addr, args):
    return resp.pipeline(addr, [["ASKING"], args])[1]


def redis(*args):
    """One command on the stack's Redis (binary safe; bulk replies are bytes).
    Against a cluster: a command with keys goes to each key's node (EXISTS
    adds up), KEYS gathers every node's, and anything else runs on every
    node (the first node's answer is returned)."""
    if not REDIS_NODES:
        return _redis_at(REDIS_SOCKET, args)
    cmd = str(args[0]).upper()
    if cmd == "EXISTS":
        return sum(_cluster_key_command(("EXISTS", k)) for k in args[1:])
    if cmd in KEY_COMMANDS:
        return _cluster_key_command(args)
    if cmd == "KEYS":
        return [k for n in REDIS_NODES for k in (_redis_at(n, args) or [])]
    answers = [_redis_at(n, args) for n in REDIS_NODES]
    return answers[0]


def rkey(principal, key):
    return KEY_PREFIX + "idem:" + principal + ":" + key


def record(principal, key):
    """The record hash as {str: bytes}."""
    flat = redis("HGETALL", rkey(principal, key)) or []
    return {flat[i].decode(): flat[i + 1] for i in range(0, len(flat), 2)}


def redis_keys():
    return set(redis("KEYS", KEY_PREFIX + "*") or [])


def wait_state(principal, key, state, secs=5.0):
    end = time.monotonic() + secs
    while time.monotonic() < end:
        v = redis("HGET", rkey(principal, key), "state")
        if v == state.encode():
            return True
        time.sleep(0.005)
    return False


def run_cmd(envname, timeout=30):
    cmd = os.environ.get(envname, "")
    check(cmd, "harness did not set %s" % envname)
    p = subprocess.run(["bash", "-c", cmd], stdin=subprocess.DEVNULL,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       timeout=timeout)
    check(p.returncode == 0, "%s failed (rc %d): %s" % (envname, p.returncode, p.stdout.decode(errors="replace")))
    return p.stdout.decode()


def redis_client_ids():
    """Ids of the other clients connected to Redis (not this CLIENT LIST);
    in a cluster (node, id) of every node."""
    ids = set()
    for node in REDIS_NODES or [REDIS_SOCKET]:
        out = _redis_at(node, ("CLIENT", "LIST")).decode()
        for line in out.splitlines():
            f = dict(kv.split("=", 1) for kv in line.split() if "=" in kv)
            if f.get("cmd") != "client|list":
                ids.add((node, f.get("id")) if REDIS_NODES else f.get("id"))
    return ids


def pid_running(pid):
    """True while pid exists and is not a zombie."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def worker_pids():
    return sorted(int(x) for x in run_cmd("E2E_WORKER_PIDS").split())


# ---------------------------------------------------------------- ledger

def ledger_lines(principal, key):
    """Ledger entries for (principal, key) as lists of the 7 fields."""
    return tap.ledger_lines(LEDGER, principal, key)


def expect_ledger(principal, key, n, what=""):
    lines = ledger_lines(principal, key)
    check(len(lines) == n, "%sledger has %d line(s) for (%s, %s), want %d: %r"
          % (what + ": " if what else "", len(lines), principal, key, n, lines))
    return lines


def health_ok(secs=10.0):
    end = time.monotonic() + secs
    r = None
    while time.monotonic() < end:
        try:
            # while responders restart, the web server may answer itself
            r = request("GET", "/readyz", timeout=3, web_server_ok=True)
            if r.status == 200:
                return r
        except OSError:
            pass
        time.sleep(0.1)
    raise Fail("/readyz did not return 200 within %.0fs: %r" % (secs, r))


def in_thread(fn, *args, **kw):
    """Runs fn in a thread; returns a future."""
    ex = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    fut = ex.submit(fn, *args, **kw)
    ex.shutdown(wait=False)
    return fut


# ================================================================= tests



@test("GET /healthz: 200 JSON status ok (liveness) with the standard headers")
def t_healthz():
    r = request("GET", "/healthz")
    check(r.status == 200, "want 200, got %r" % r)
    std_headers(r)
    check((r.h("Content-Type") or "").startswith("application/json"), "Content-Type %r" % r.h("Content-Type"))
    check(r.json().get("status") == "ok", "status member %r" % r.json().get("status"))
    h = request("HEAD", "/healthz")
    check(h.status == 200 and h.body == b"", "HEAD /healthz: %r" % h)


@test("GET /readyz: 200 JSON, every check ok and not draining; HEAD the same")
def t_readyz():
    r = request("GET", "/readyz")
    check(r.status == 200, "want 200, got %r" % r)
    std_headers(r)
    check((r.h("Content-Type") or "").startswith("application/json"), "Content-Type %r" % r.h("Content-Type"))
    check(r.json() == {"status": "ok", "redis": "ok", "spill_dir": "ok", "draining": False},
          "body %r" % r.body)
    h = request("HEAD", "/readyz")
    check(h.status == 200 and h.body == b"", "HEAD /readyz: %r" % h)


@test("POST /charge fresh: 201, headers, charge object, one ledger line")
def t_fresh():
    key = new_key("fresh")
    body = charge_body(amount=2500, currency="USD", source="tok_visa")
    r = post_charge(key, body)
    expect_fresh(r, 201)
    check((r.h("Content-Type") or "").startswith("application/json"), "Content-Type %r" % r.h("Content-Type"))
    c = r.json()
    check(re.fullmatch(r"ch_[0-9a-f]{24}", str(c.get("id"))), "id %r" % c.get("id"))
    want = {"object": "charge", "status": "succeeded", "amount": 2500, "currency": "usd",
            "source": "tok_visa", "customer": None, "description": None, "metadata": {},
            "line_items": [], "idempotency_key": key}
    for k, v in want.items():
        check(k in c and c[k] == v, "field %s: got %r, want %r (object %r)" % (k, c.get(k, "<absent>"), v, c))
    check(isinstance(c.get("created"), int) and abs(c["created"] - time.time()) < 600,
          "created %r is not a current Unix time" % c.get("created"))
    lines = expect_ledger(PRINCIPAL_A, key, 1)
    f = lines[0]
    check(f[3] == c["id"], "ledger charge id %r, response id %r" % (f[3], c["id"]))
    check(f[4:7] == ["succeeded", "2500", "usd"], "ledger outcome/amount/currency %r" % f[4:7])
    rec = record(PRINCIPAL_A, key)
    check(rec.get("state") == b"completed", "record state %r" % rec.get("state"))
    check(rec.get("status") == b"201", "record status %r" % rec.get("status"))
    check(rec.get("body") == r.body, "record body differs from the response body")


@test("replay: same status, Content-Type, body byte for byte, Idempotent-Replayed: true, no new ledger line")
def t_replay():
    key = new_key("replay")
    body = charge_body(amount=777, description="replay me", metadata={"b": "2", "a": "1"})
    r1 = post_charge(key, body)
    expect_fresh(r1, 201)
    r2 = post_charge(key, body)
    expect_replay_of(r2, r1)
    r3 = post_charge(key, body)
    expect_replay_of(r3, r1, "second replay")
    ids = {r1.h("X-Request-Id"), r2.h("X-Request-Id"), r3.h("X-Request-Id")}
    check(len(ids) == 3, "X-Request-Id not unique per response: %r" % ids)
    expect_ledger(PRINCIPAL_A, key, 1)


@test("fingerprint ignores JSON formatting and member order")
def t_fingerprint_canonical():
    key = new_key("canon")
    b1 = b'{"amount":1500,"currency":"eur","source":"tok_visa","metadata":{"x":"1","y":"2"}}'
    b2 = b'{ "metadata" : { "y":"2", "x":"1" },\n  "source":"tok_visa", "currency":"eur",  "amount" : 1500 }'
    r1 = post_charge(key, b1)
    expect_fresh(r1, 201)
    r2 = post_charge(key, b2)
    expect_replay_of(r2, r1, "reformatted request")
    expect_ledger(PRINCIPAL_A, key, 1)


@test("Idempotency-Key bare and as a quoted Structured-Field string name the same record")
def t_key_quoted():
    key = new_key("quoted")
    r1 = post_charge(key)
    expect_fresh(r1, 201)
    check(redis("EXISTS", rkey(PRINCIPAL_A, key)) == 1, "record %r not found under the bare name" % rkey(PRINCIPAL_A, key))
    r2 = post_charge('"%s"' % key)
    expect_replay_of(r2, r1, "quoted-key request")
    key2 = new_key("quoted2")
    r3 = post_charge('"%s"' % key2)
    expect_fresh(r3, 201, "quoted first")
    check(redis("EXISTS", rkey(PRINCIPAL_A, key2)) == 1, "quoted key not stored under its bare name %r" % rkey(PRINCIPAL_A, key2))
    expect_replay_of(post_charge(key2), r3, "bare after quoted")
    expect_ledger(PRINCIPAL_A, key, 1)
    expect_ledger(PRINCIPAL_A, key2, 1)


@test("Idempotency-Key of 255 characters is accepted")
def t_key_255():
    key = new_key("k255")
    key = key + "x" * (255 - len(key))
    check(len(key) == 255, "test bug")
    r = post_charge(key)
    expect_fresh(r, 201)
    check(r.json().get("idempotency_key") == key, "idempotency_key echoed %r" % r.json().get("idempotency_key"))


def expect_rejected_nothing_stored(fn, status, slug, what):
    before = redis_keys()
    r = fn()
    expect_problem(r, status, slug, what)
    new = redis_keys() - before
    check(not new, "%s: rejected request stored Redis keys %r" % (what, new))
    return r


@test("Idempotency-Key of 256 characters: 400 invalid-idempotency-key, nothing stored")
def t_key_256():
    key = new_key("k256")
    key = key + "y" * (256 - len(key))
    expect_rejected_nothing_stored(lambda: post_charge(key), 400, "invalid-idempotency-key", "256-char key")
    expect_ledger(PRINCIPAL_A, key, 0)


@test("missing Idempotency-Key: 400 missing-idempotency-key, nothing stored")
def t_key_missing():
    expect_rejected_nothing_stored(lambda: post_charge(None), 400, "missing-idempotency-key", "no key")


@test("invalid Idempotency-Key values: 400 invalid-idempotency-key, nothing stored")
def t_key_invalid():
    base = new_key("inv")
    for bad in [base + " space", base + "\ttab", '"' + base, '"' + base + '\\q"', '"' + base + '"x', '""']:
        expect_rejected_nothing_stored(lambda: post_charge(bad), 400, "invalid-idempotency-key", "key %r" % bad)
    # A byte above 0x7E: some web servers reject the header themselves (400
    # without problem+json); either way it is a 400 that stores nothing.
    bad = base + "\u00e9"
    before = redis_keys()
    r = post_charge(bad, web_server_ok=True)
    check(r.status == 400, "key with byte 0xE9: want 400, got %r" % r)
    check(not (redis_keys() - before), "key with byte 0xE9 stored something")


@test("Idempotency-Key with a comma: bare is 400 invalid-idempotency-key (two joined fields), quoted is one key")
def t_key_comma():
    # A web server may join two Idempotency-Key fields as "a,b" (RFC 9110
    # 5.3), and a Structured-Field Item holds no bare comma.
    base = new_key("comma")
    bare = base + ",with,commas,longer-than-twenty-chars"
    for bad in [bare, "key,with,commas,longer-than-twenty-chars", base + ",", '"%s","%s"' % (base, base)]:
        r = expect_rejected_nothing_stored(lambda: post_charge(bad), 400, "invalid-idempotency-key", "key %r" % bad)
        check("Idempotency-Key" in r.json().get("detail", ""),
              "key %r: the detail does not name the field: %r" % (bad, r.json().get("detail")))
    expect_ledger(PRINCIPAL_A, bare, 0)
    # the quoted sf-string may hold a comma: one key, stored under its value
    r1 = post_charge('"%s"' % bare)
    expect_fresh(r1, 201, "quoted key with commas")
    check(r1.json().get("idempotency_key") == bare, "idempotency_key echoed %r" % r1.json().get("idempotency_key"))
    check(redis("EXISTS", rkey(PRINCIPAL_A, bare)) == 1, "quoted key not stored under %r" % rkey(PRINCIPAL_A, bare))
    expect_replay_of(post_charge('"%s"' % bare), r1, "quoted key with commas again")
    expect_ledger(PRINCIPAL_A, bare, 1)
    # introspection reads the path like the header: quoted finds it, bare is refused
    expect_key_info(get_key(quote_key('"%s"' % bare)), bare, "completed", 201, "quoted path key with commas")
    expect_problem(get_key(quote_key(bare)), 400, "invalid-idempotency-key", "bare path key with commas")


@test("a rejected request does not use up its key")
def t_rejected_keeps_key():
    key = new_key("reuse")
    expect_rejected_nothing_stored(lambda: post_charge(key, b'{"amount":"12","currency":"usd","source":"tok_visa"}'),
                                   400, "invalid-request", "invalid body")
    expect_rejected_nothing_stored(lambda: post_charge(key, api_key=""), 401, "unauthorized", "no auth")
    expect_rejected_nothing_stored(lambda: post_charge(key, ctype="text/plain"), 415, "unsupported-media-type", "text/plain")
    r = post_charge(key)
    expect_fresh(r, 201, "valid request after rejected ones")
    expect_ledger(PRINCIPAL_A, key, 1)


@test("401 without Authorization, with WWW-Authenticate: Bearer; nothing stored")
def t_401_missing():
    key = new_key("noauth")
    r = expect_rejected_nothing_stored(lambda: post_charge(key, api_key=""), 401, "unauthorized", "no Authorization")
    check((r.h("WWW-Authenticate") or "").startswith("Bearer"), "WWW-Authenticate %r" % r.h("WWW-Authenticate"))
    expect_ledger(PRINCIPAL_A, key, 0)


@test("401 for a wrong API key and for a non-Bearer scheme")
def t_401_wrong():
    key = new_key("badauth")
    r = expect_rejected_nothing_stored(lambda: post_charge(key, api_key="sk_test_wrong_" + RUN_ID), 401, "unauthorized", "wrong key")
    check((r.h("WWW-Authenticate") or "").startswith("Bearer"), "WWW-Authenticate %r" % r.h("WWW-Authenticate"))
    r = expect_rejected_nothing_stored(
        lambda: post_charge(key, api_key="", extra={"Authorization": "Basic YWxpY2U6eA=="}),
        401, "unauthorized", "Basic scheme")
    check((r.h("WWW-Authenticate") or "").startswith("Bearer"), "WWW-Authenticate %r" % r.h("WWW-Authenticate"))


@test("415 for text/plain and for a missing Content-Type; parameters are allowed")
def t_415():
    key = new_key("ctype")
    expect_rejected_nothing_stored(lambda: post_charge(key, ctype="text/plain"), 415, "unsupported-media-type", "text/plain")
    expect_rejected_nothing_stored(lambda: post_charge(key, ctype=None), 415, "unsupported-media-type", "no Content-Type")
    r = post_charge(key, ctype="application/json; charset=utf-8")
    expect_fresh(r, 201, "application/json; charset=utf-8")


def padded_body(size):
    """A valid charge body of exactly size bytes (whitespace padding)."""
    core = charge_body(amount=4242).decode()
    check(len(core) + 1 <= size, "test bug: limit too small")
    return ("{" + " " * (size - len(core)) + core[1:]).encode()


@test("413 at max_request_bytes+1, 201 at exactly max_request_bytes")
def t_413_limit():
    key = new_key("limit")
    big = padded_body(MAX_REQUEST_BYTES + 1)
    check(len(big) == MAX_REQUEST_BYTES + 1, "test bug")
    expect_rejected_nothing_stored(lambda: post_charge(key, big), 413, "content-too-large",
                                   "%d-byte body" % len(big))
    ok = padded_body(MAX_REQUEST_BYTES)
    r = post_charge(key, ok)
    expect_fresh(r, 201, "%d-byte body (exactly the limit)" % len(ok))
    expect_ledger(PRINCIPAL_A, key, 1)


@test("413 for a body far beyond every limit (web server or responder)")
def t_413_huge():
    n = MAX_REQUEST_BYTES * 4 + 8 * 1024 * 1024
    status, head, sent = raw_oversized("/charge", n, KEY_A)
    diag("Content-Length %d: %r after %d body bytes" % (n, status, sent))
    check(status == 413, "Content-Length %d: want 413, got %r (sent %d body bytes): %r" % (n, status, sent, head))


@test("405 with Allow for other methods on /charge, /healthz and /metrics")
def t_405():
    for m in ["GET", "PUT", "DELETE"]:
        r = request(m, "/charge", headers={"Authorization": "Bearer " + KEY_A})
        expect_problem(r, 405, "method-not-allowed", "%s /charge" % m)
        allow = [x.strip() for x in (r.h("Allow") or "").split(",")]
        check(allow == ["POST"], "%s /charge: Allow %r, want 'POST'" % (m, r.h("Allow")))
    for p in ["/healthz", "/metrics"]:
        r = request("POST", p, body=b"{}", headers={"Content-Type": "application/json"})
        expect_problem(r, 405, "method-not-allowed", "POST " + p)
        allow = sorted(x.strip() for x in (r.h("Allow") or "").split(","))
        check(allow == ["GET", "HEAD"], "POST %s: Allow %r, want 'GET, HEAD'" % (p, r.h("Allow")))


@test("404 for /nope, /charge/extra, /chargeX")
def t_404():
    for p in ["/nope", "/charge/extra", "/chargeX"]:
        r = post_charge(new_key("404"), path=p)
        check(r.status == 404, "POST %s: want 404, got %r" % (p, r))
        r = request("GET", p)
        check(r.status == 404, "GET %s: want 404, got %r" % (p, r))
    r = post_charge(new_key("404q"), path="/charge?x=1")
    check(r.status == 201, "POST /charge?x=1 (query string is not part of the route): want 201, got %r" % r)


@test("404 from the responder is a problem+json (routing on REQUEST_URI)")
def t_404_problem():
    r = request("GET", "/nope")
    expect_problem(r, 404, "not-found", "GET /nope")


@test("POST /webhooks/provider reaches the responder with Stripe-Signature: signed 200 ignored, a wrong signature 401, none 400")
def t_webhook_route():
    secret = os.environ.get("CHARGE_PROVIDER_WEBHOOK_SECRET", "")
    check(secret, "CHARGE_PROVIDER_WEBHOOK_SECRET is not set")
    body = json.dumps({"id": "evt_%s_%s" % (RUN_ID, uuid.uuid4().hex[:8]), "type": "customer.created",
                       "data": {"object": {"id": "cus_1", "object": "customer"}}}, separators=(",", ":")).encode()
    t = int(time.time())
    mac = hmac.new(secret.encode(), str(t).encode() + b"." + body, hashlib.sha256).hexdigest()
    hdr = {"Content-Type": "application/json"}
    r = request("POST", "/webhooks/provider", body, dict(hdr, **{"Stripe-Signature": "t=%d,v1=%s" % (t, mac)}))
    check(r.status == 200 and r.json() == {"received": True, "result": "ignored"}, "signed: %r" % r)
    r = request("POST", "/webhooks/provider", body, dict(hdr, **{"Stripe-Signature": "t=%d,v1=%s" % (t, "0" * 64)}))
    expect_problem(r, 401, "webhook-signature-rejected", "wrong signature")
    r = request("POST", "/webhooks/provider", body, hdr)
    expect_problem(r, 400, "invalid-webhook", "no Stripe-Signature")


@test("problem type pages /problems/<slug> are served as text/html")
def t_problem_pages():
    r = post_charge(None)
    t = r.json().get("type", "")
    path = urllib.parse.urlsplit(t).path
    p = request("GET", path)
    check(p.status == 200, "GET %s: want 200, got %r" % (path, p))
    ct = (p.h("Content-Type") or "").lower()
    check(ct.startswith("text/html"), "GET %s: Content-Type %r, want text/html" % (path, ct))
    if WWW_DIR:
        with open(os.path.join(WWW_DIR, "problems", "missing-idempotency-key"), "rb") as f:
            check(p.body == f.read(), "GET %s does not serve www/problems/missing-idempotency-key" % path)


@test("GET / serves www/index.html as text/html")
def t_index():
    r = request("GET", "/")
    check(r.status == 200, "GET /: want 200, got %r" % r)
    check((r.h("Content-Type") or "").lower().startswith("text/html"), "Content-Type %r" % r.h("Content-Type"))


BAD_BODIES = [
    ("amount as a string", b'{"amount":"100","currency":"usd","source":"tok_visa"}', "amount"),
    ("fractional amount", b'{"amount":10.5,"currency":"usd","source":"tok_visa"}', "amount"),
    ("exponent amount", b'{"amount":1e3,"currency":"usd","source":"tok_visa"}', "amount"),
    ("zero amount", b'{"amount":0,"currency":"usd","source":"tok_visa"}', "amount"),
    ("two-letter currency", b'{"amount":100,"currency":"us","source":"tok_visa"}', "currency"),
    ("source without tok_", b'{"amount":100,"currency":"usd","source":"visa"}', "source"),
    ("missing source", b'{"amount":100,"currency":"usd"}', "source"),
    ("unknown top-level field", b'{"amount":100,"currency":"usd","source":"tok_visa","foo":1}', "foo"),
    ("duplicate member", b'{"amount":100,"amount":100,"currency":"usd","source":"tok_visa"}', "amount"),
    ("metadata value not a string", b'{"amount":100,"currency":"usd","source":"tok_visa","metadata":{"k":1}}', "metadata.k"),
    ("line item quantity 0",
     b'{"amount":100,"currency":"usd","source":"tok_visa","line_items":['
     b'{"description":"a","quantity":1,"unit_amount":100},{"description":"b","quantity":0,"unit_amount":5}]}',
     "line_items[1].quantity"),
    ("malformed JSON", b'{"amount":100,"currency":', "body"),
    ("not an object", b'[1,2,3]', "body"),
    ("invalid UTF-8", b'{"amount":100,"currency":"usd","source":"tok_visa","description":"\xff\xfe"}', "description"),
]


def _bad_body_test(what, body, field):
    def fn():
        key = new_key("400")
        r = expect_rejected_nothing_stored(lambda: post_charge(key, body), 400, "invalid-request", what)
        errs = r.json().get("errors")
        check(isinstance(errs, list) and errs, "%s: no errors[] member: %r" % (what, r.body))
        fields = [e.get("field") for e in errs if isinstance(e, dict)]
        check(field in fields, "%s: errors name %r, want %r" % (what, fields, field))
        check(all(isinstance(e.get("message"), str) for e in errs), "%s: error without message: %r" % (what, errs))
        expect_ledger(PRINCIPAL_A, key, 0)
    return fn


for _what, _body, _field in BAD_BODIES:
    test("400 invalid-request names field %r: %s" % (_field, _what))(_bad_body_test(_what, _body, _field))


@test("scope: two principals with the same key get unrelated charges")
def t_scope():
    key = new_key("scope")
    body = charge_body(amount=3100)
    ra = post_charge(key, body, api_key=KEY_A)
    expect_fresh(ra, 201, "principal A")
    rb = post_charge(key, body, api_key=KEY_B)
    expect_fresh(rb, 201, "principal B (same key and body)")
    ida, idb = ra.json()["id"], rb.json()["id"]
    check(ida != idb, "both principals got charge %s" % ida)
    check(ida.encode() not in rb.body, "B's response contains A's charge id")
    check(rb.body != ra.body, "B received A's body")
    expect_replay_of(post_charge(key, body, api_key=KEY_B), rb, "B's replay")
    expect_replay_of(post_charge(key, body, api_key=KEY_A), ra, "A's replay")
    expect_ledger(PRINCIPAL_A, key, 1)
    expect_ledger(PRINCIPAL_B, key, 1)
    check(redis("EXISTS", rkey(PRINCIPAL_A, key), rkey(PRINCIPAL_B, key)) == 2, "want two records")


@test("scope: B's different request under A's key is not a 422 and never sees A's body")
def t_scope_mismatch():
    key = new_key("scope2")
    ra = post_charge(key, charge_body(amount=100), api_key=KEY_A)
    expect_fresh(ra, 201)
    rb = post_charge(key, charge_body(amount=999), api_key=KEY_B)
    expect_fresh(rb, 201, "B with another amount")
    check(rb.json()["amount"] == 999 and rb.json()["id"] != ra.json()["id"], "B got %r" % rb.body)


@test("422 idempotency-key-reused: same key, different amount after completion")
def t_422_completed():
    key = new_key("422c")
    r1 = post_charge(key, charge_body(amount=500))
    expect_fresh(r1, 201)
    rec1 = record(PRINCIPAL_A, key)
    r2 = post_charge(key, charge_body(amount=501))
    expect_problem(r2, 422, "idempotency-key-reused", "different amount")
    check(record(PRINCIPAL_A, key) == rec1, "the record changed after a 422")
    expect_replay_of(post_charge(key, charge_body(amount=500)), r1, "original request after the 422")
    expect_ledger(PRINCIPAL_A, key, 1)


@test("422 idempotency-key-reused: same key, different amount while in progress")
def t_422_in_progress():
    key = new_key("422p")
    fut = in_thread(post_charge, key, charge_body(amount=600))
    check(wait_state(PRINCIPAL_A, key, "in_progress"), "first request never became in_progress")
    r2 = post_charge(key, charge_body(amount=601))
    expect_problem(r2, 422, "idempotency-key-reused", "different amount while in progress")
    r1 = fut.result(HTTP_TIMEOUT)
    expect_fresh(r1, 201, "first request")
    expect_ledger(PRINCIPAL_A, key, 1)


def _decline_test(token, code):
    def fn():
        key = new_key("decl")
        r1 = post_charge(key, charge_body(source=token))
        expect_fresh(r1, 402)
        p = expect_problem(r1, 402, "payment-declined")
        check(p.get("decline_code") == code, "decline_code %r, want %r" % (p.get("decline_code"), code))
        r2 = post_charge(key, charge_body(source=token))
        expect_replay_of(r2, r1)
        lines = expect_ledger(PRINCIPAL_A, key, 1)
        check(lines[0][4] == "declined", "ledger outcome %r, want declined" % lines[0][4])
        check(record(PRINCIPAL_A, key).get("state") == b"failed", "record state is not failed")
    return fn


test("402 card_declined with decline_code, replayed")(_decline_test("tok_chargeDeclined", "card_declined"))
test("402 insufficient_funds with decline_code, replayed")(_decline_test("tok_insufficientFunds", "insufficient_funds"))


@test("502 provider-error with Retry-After, replayed with Retry-After")
def t_502():
    key = new_key("502")
    r1 = post_charge(key, charge_body(source="tok_providerError"))
    expect_fresh(r1, 502)
    expect_problem(r1, 502, "provider-error")
    check(r1.h("Retry-After") == str(FAILED_TTL_S), "Retry-After %r, want %d (failed_ttl_s)" % (r1.h("Retry-After"), FAILED_TTL_S))
    expect_replay_of(post_charge(key, charge_body(source="tok_providerError")), r1)
    lines = expect_ledger(PRINCIPAL_A, key, 1)
    check(lines[0][4] == "error", "ledger outcome %r, want error" % lines[0][4])


@test("504 outcome-unknown after provider_timeout_ms with Retry-After, recorded unknown; the retry settles it 502 (nothing charged), replayed")
def t_504():
    key = new_key("504")
    r1 = post_charge(key, charge_body(source="tok_providerTimeout"))
    expect_fresh(r1, 504)
    expect_problem(r1, 504, "outcome-unknown")
    check(r1.elapsed >= PROVIDER_TIMEOUT_MS / 1000.0 * 0.9, "answered after %.3fs, before provider_timeout_ms=%d" % (r1.elapsed, PROVIDER_TIMEOUT_MS))
    check(r1.h("Retry-After") == "1", "Retry-After %r, want 1 (the completer's first step)" % r1.h("Retry-After"))
    st = record(PRINCIPAL_A, key).get("state")
    # the completer of some process may already have settled it
    check(st in (b"unknown", b"failed"), "record state %r, want unknown" % st)
    r2 = post_charge(key, charge_body(source="tok_providerTimeout"))
    expect_problem(r2, 502, "provider-error")
    check(r2.elapsed < PROVIDER_TIMEOUT_MS / 1000.0, "retry took %.3fs (the simulation knows it never charged)" % r2.elapsed)
    r3 = post_charge(key, charge_body(source="tok_providerTimeout"))
    expect_replay_of(r3, r2)
    check(record(PRINCIPAL_A, key).get("state") == b"failed", "record state is not failed")
    lines = expect_ledger(PRINCIPAL_A, key, 1)
    check(lines[0][4] == "timeout", "ledger outcome %r, want timeout" % lines[0][4])


@test("504 outcome-unknown nobody retries: the completer settles it (failed: the in-process provider never charged), replayed 502")
def t_504_completer():
    if os.environ.get("E2E_SERVER") == "apache-cgi":
        diag("plain CGI: a process serves one request and exits, so no completer runs (docs/API.md §17.3)")
        return
    key = new_key("504c")
    r1 = post_charge(key, charge_body(source="tok_providerTimeout"))
    expect_problem(r1, 504, "outcome-unknown")
    end = time.monotonic() + 15
    while time.monotonic() < end and record(PRINCIPAL_A, key).get("state") != b"failed":
        time.sleep(0.2)
    check(record(PRINCIPAL_A, key).get("state") == b"failed", "record state %r after 15 s" % record(PRINCIPAL_A, key).get("state"))
    check(redis("ZSCORE", KEY_PREFIX + "unknown", rkey(PRINCIPAL_A, key)) is None, "still in the index of unknown outcomes")
    r2 = post_charge(key, charge_body(source="tok_providerTimeout"))
    expect_problem(r2, 502, "provider-error")
    check(r2.h("Idempotent-Replayed") == "true", "Idempotent-Replayed %r, want a replay of the completer's record" % r2.h("Idempotent-Replayed"))
    expect_ledger(PRINCIPAL_A, key, 1)


@test("FAILED records expire after failed_ttl_s, COMPLETED after completed_ttl_s (PTTL)")
def t_ttls():
    kf, kc = new_key("ttlf"), new_key("ttlc")
    expect_fresh(post_charge(kf, charge_body(source="tok_chargeDeclined")), 402)
    expect_fresh(post_charge(kc), 201)
    pf = redis("PTTL", rkey(PRINCIPAL_A, kf))
    pc = redis("PTTL", rkey(PRINCIPAL_A, kc))
    check(0 < pf <= FAILED_TTL_S * 1000, "failed record PTTL %r, want in (0, %d]" % (pf, FAILED_TTL_S * 1000))
    check(COMPLETED_TTL_S * 1000 - 60000 < pc <= COMPLETED_TTL_S * 1000,
          "completed record PTTL %r, want about %d" % (pc, COMPLETED_TTL_S * 1000))
    check(pf < pc, "failed PTTL %d not shorter than completed %d" % (pf, pc))


@test("after a FAILED record expires, a retry executes again (2 ledger lines)")
def t_failed_expiry():
    check(FAILED_TTL_S <= 5, "failed_ttl_s=%d too long for this test; the harness sets 2" % FAILED_TTL_S)
    key = new_key("fexp")
    body = charge_body(source="tok_providerError")
    r1 = post_charge(key, body)
    expect_fresh(r1, 502)
    end = time.monotonic() + FAILED_TTL_S + 3
    while redis("EXISTS", rkey(PRINCIPAL_A, key)) and time.monotonic() < end:
        time.sleep(0.05)
    check(redis("EXISTS", rkey(PRINCIPAL_A, key)) == 0, "failed record still there after %ds" % (FAILED_TTL_S + 3))
    r2 = post_charge(key, body)
    expect_fresh(r2, 502, "retry after expiry")
    expect_ledger(PRINCIPAL_A, key, 2)


# ---------------------------------------------------------------- retention, mismatch detail, introspection

def http_date(ms):
    """The IMF-fixdate of the second holding Unix milliseconds ms."""
    return email.utils.formatdate(int(ms) // 1000, usegmt=True)


def rfc3339(ms):
    ms = int(ms)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms // 1000)) + ".%03dZ" % (ms % 1000)


def no_expires(r, what):
    check(r.h("Idempotency-Key-Expires") is None,
          "%s carries Idempotency-Key-Expires %r" % (what, r.h("Idempotency-Key-Expires")))


def expect_expires_of_record(r, principal, key, ttl_s, what):
    """The header names the record's stored expires_ms = updated_ms + ttl."""
    rec = record(principal, key)
    exp, upd = int(rec.get("expires_ms", b"0")), int(rec.get("updated_ms", b"0"))
    check(exp == upd + ttl_s * 1000, "%s: expires_ms %d, want updated_ms %d + %d s" % (what, exp, upd, ttl_s))
    check(r.h("Idempotency-Key-Expires") == http_date(exp),
          "%s: Idempotency-Key-Expires %r, want %r" % (what, r.h("Idempotency-Key-Expires"), http_date(exp)))
    left = email.utils.parsedate_to_datetime(r.h("Idempotency-Key-Expires")).timestamp() - time.time()
    check(ttl_s - 120 < left <= ttl_s + 1, "%s: expires in %.0f s, want about %d" % (what, left, ttl_s))


@test("Idempotency-Key-Expires on a fresh 201 = the record's expires_ms, identical on every replay")
def t_expires_fresh_replay():
    key = new_key("exp201")
    r1 = post_charge(key)
    expect_fresh(r1, 201)
    expect_expires_of_record(r1, PRINCIPAL_A, key, COMPLETED_TTL_S, "fresh 201")
    time.sleep(1.1)     # a replay a second later names the same instant
    for i in range(2):
        r = post_charge(key)
        expect_replay_of(r, r1, "replay %d" % i)
        check(r.h("Idempotency-Key-Expires") == r1.h("Idempotency-Key-Expires"),
              "replay %d: Idempotency-Key-Expires %r, fresh said %r" % (i, r.h("Idempotency-Key-Expires"), r1.h("Idempotency-Key-Expires")))


@test("Idempotency-Key-Expires on 402 and 502 = updated + failed_ttl_s, identical on replay")
def t_expires_failed():
    for token, status in (("tok_chargeDeclined", 402), ("tok_providerError", 502)):
        key = new_key("expf")
        body = charge_body(source=token)
        r1 = post_charge(key, body)
        expect_fresh(r1, status)
        expect_expires_of_record(r1, PRINCIPAL_A, key, FAILED_TTL_S, "fresh %d" % status)
        r2 = post_charge(key, body)
        expect_replay_of(r2, r1)
        check(r2.h("Idempotency-Key-Expires") == r1.h("Idempotency-Key-Expires"),
              "%d replay: %r vs %r" % (status, r2.h("Idempotency-Key-Expires"), r1.h("Idempotency-Key-Expires")))


@test("Idempotency-Key-Expires on 409 = the claim's created_ms + lock_ttl_s")
def t_expires_409():
    key = new_key("exp409")
    fut = in_thread(post_charge, key)
    check(wait_state(PRINCIPAL_A, key, "in_progress"), "first request never became in_progress")
    created = int(record(PRINCIPAL_A, key)[u"created_ms"])
    r2 = post_charge(key)
    expect_problem(r2, 409, "request-in-progress")
    check(r2.h("Idempotency-Key-Expires") == http_date(created + LOCK_TTL_S * 1000),
          "409: Idempotency-Key-Expires %r, want %r (created_ms %d + lock_ttl_s %d)"
          % (r2.h("Idempotency-Key-Expires"), http_date(created + LOCK_TTL_S * 1000), created, LOCK_TTL_S))
    r1 = fut.result(HTTP_TIMEOUT)
    expect_fresh(r1, 201, "first request")


@test("after a FAILED record expires, the new outcome names a new, later expiry")
def t_expires_after_expiry():
    check(FAILED_TTL_S <= 5, "failed_ttl_s=%d too long for this test" % FAILED_TTL_S)
    key = new_key("expx")
    body = charge_body(source="tok_providerError")
    r1 = post_charge(key, body)
    expect_fresh(r1, 502)
    end = time.monotonic() + FAILED_TTL_S + 3
    while redis("EXISTS", rkey(PRINCIPAL_A, key)) and time.monotonic() < end:
        time.sleep(0.05)
    t1 = email.utils.parsedate_to_datetime(r1.h("Idempotency-Key-Expires")).timestamp()
    check(time.time() >= t1, "the record vanished before the instant its header named (%s)" % r1.h("Idempotency-Key-Expires"))
    r2 = post_charge(key, body)
    expect_fresh(r2, 502, "retry after expiry")
    expect_expires_of_record(r2, PRINCIPAL_A, key, FAILED_TTL_S, "retry after expiry")
    t2 = email.utils.parsedate_to_datetime(r2.h("Idempotency-Key-Expires")).timestamp()
    check(t2 > t1, "new expiry %s not after the first %s" % (r2.h("Idempotency-Key-Expires"), r1.h("Idempotency-Key-Expires")))


@test("no Idempotency-Key-Expires on 400, 401, 404, 405, 413, 415, 422")
def t_expires_absent():
    key = new_key("expn")
    no_expires(post_charge(None), "400 missing key")
    no_expires(post_charge(key, b'{"amount":1.5}'), "400 invalid body")
    no_expires(post_charge(key, api_key="nope"), "401")
    no_expires(request("GET", "/nope"), "404")
    no_expires(request("GET", "/charge"), "405")
    no_expires(post_charge(key, ctype="text/plain"), "415")
    no_expires(post_charge(key, b" " * (MAX_REQUEST_BYTES + 1)), "413")
    expect_fresh(post_charge(key, charge_body(amount=100)), 201)
    r = post_charge(key, charge_body(amount=101))
    expect_problem(r, 422, "idempotency-key-reused")
    no_expires(r, "422")


def expect_mismatched(r, names, what):
    p = expect_problem(r, 422, "idempotency-key-reused", what)
    check(p.get("mismatched_params") == names,
          "%s: mismatched_params %r, want %r" % (what, p.get("mismatched_params"), names))
    return p


@test("unit_amount written -0 is 0: echoed as 0, and the body written 0 replays it (not 422)")
def t_negative_zero():
    key = new_key("negz")
    body = (b'{"amount":5,"currency":"usd","source":"tok_visa","line_items":'
            b'[{"description":"a","quantity":1,"unit_amount":5},{"description":"b","quantity":1,"unit_amount":-0}]}')
    r = post_charge(key, body)
    expect_fresh(r, 201)
    check(b":-0" not in r.body, "the charge object echoes -0: %r" % r.body)
    items = r.json().get("line_items")
    check(items is None or items[1]["unit_amount"] == 0, "line_items echoed %r" % items)
    r2 = post_charge(key, body.replace(b":-0}", b":0}"))
    check(r2.status == 201 and r2.h("Idempotent-Replayed") == "true", "written 0: want the replay, got %r" % r2)
    expect_problem(post_charge(new_key("negza"), charge_body(amount=0).replace(b'"amount": 0', b'"amount": -0')),
                   400, "invalid-request", "amount -0")


@test("422 names exactly the changed parameters, in the fixed order")
def t_422_names():
    li = [{"description": "a", "quantity": 2, "unit_amount": 500}, {"description": "b", "quantity": 1, "unit_amount": 999}]
    base = dict(amount=1999, currency="usd", source="tok_visa", customer="cus_1",
                description="order", metadata={"order": "1", "x": "y"}, line_items=li)
    key = new_key("422n")
    expect_fresh(post_charge(key, charge_body(**base)), 201)
    rec = record(PRINCIPAL_A, key)
    check(re.fullmatch(rb"[0-9a-f]{56}", rec.get("param_digests", b"")), "stored param_digests %r: want 7 x 8 hex" % rec.get("param_digests"))
    for v in base.values():
        s = json.dumps(v).encode()
        check(s not in rec.get("param_digests", b""), "a parameter value is stored in param_digests")

    def variant(**kw):
        d = dict(base)
        d.update(kw)
        return charge_body(**d)
    li2 = [dict(li[0], description="A"), li[1]]
    cases = [
        (variant(amount=2999, line_items=[dict(li[0], unit_amount=1000), li[1]]), ["amount", "line_items"]),
        (variant(currency="eur"), ["currency"]),
        (variant(currency="EUR", source="tok_mastercard", customer=None, description="other"),
         ["currency", "source", "customer", "description"]),
        (variant(metadata={"order": "2", "x": "y"}), ["metadata"]),
        (variant(metadata={}), ["metadata"]),
        (variant(line_items=li2), ["line_items"]),
    ]
    for body, names in cases:
        expect_mismatched(post_charge(key, body), names, "changed %s" % ",".join(names))
    check(record(PRINCIPAL_A, key) == rec, "a 422 changed the record")
    # formatting and order only: a replay, not a 422
    r = post_charge(key, json.dumps(dict(reversed(list(base.items()))), indent=2).encode())
    check(r.status == 201 and r.h("Idempotent-Replayed") == "true", "reordered request: want the replay, got %r" % r)


@test("422 names the changed parameter while the first request is in progress")
def t_422_names_in_progress():
    key = new_key("422np")
    fut = in_thread(post_charge, key, charge_body(amount=600))
    check(wait_state(PRINCIPAL_A, key, "in_progress"), "first request never became in_progress")
    expect_mismatched(post_charge(key, charge_body(amount=600, description="x")), ["description"], "while in progress")
    expect_fresh(fut.result(HTTP_TIMEOUT), 201, "first request")


@test("late record: the claim lapsed, another request took the key -> 422 naming what differs")
def t_422_late_record():
    key = new_key("422late")
    fut = in_thread(post_charge, key, charge_body(amount=700))
    check(wait_state(PRINCIPAL_A, key, "in_progress"), "first request never became in_progress")
    redis("DEL", rkey(PRINCIPAL_A, key))           # as if its claim had lapsed
    fut2 = in_thread(post_charge, key, charge_body(amount=701, metadata={"k": "v"}))
    r1 = fut.result(HTTP_TIMEOUT)
    r2 = fut2.result(HTTP_TIMEOUT)
    expect_mismatched(r1, ["amount", "metadata"], "the late first request")
    expect_fresh(r2, 201, "the request that took the key")


def get_key(key_path, api_key=None, method="GET", web_server_ok=False):
    hdrs = {"Authorization": "Bearer " + (KEY_A if api_key is None else api_key)}
    return request(method, "/charge/keys/" + key_path, headers=hdrs, web_server_ok=web_server_ok)


def quote_key(key):
    return urllib.parse.quote(key, safe="")


def expect_key_info(r, key, state, status, what):
    check(r.status == 200, "%s: want 200, got %r" % (what, r))
    std_headers(r, what)
    check((r.h("Content-Type") or "").startswith("application/json"), "%s: Content-Type %r" % (what, r.h("Content-Type")))
    d = r.json()
    check(set(d) == {"key", "state", "created", "updated", "expires", "status"}, "%s: members %r" % (what, sorted(d)))
    check(d["key"] == key and d["state"] == state and d["status"] == status,
          "%s: key/state/status %r/%r/%r, want %r/%r/%r" % (what, d["key"], d["state"], d["status"], key, state, status))
    for m in ("created", "updated", "expires"):
        check(isinstance(d[m], str) and re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", d[m]),
              "%s: %s %r is not RFC 3339 UTC with milliseconds" % (what, m, d[m]))
    check(b"body" not in r.body and b"fingerprint" not in r.body and b"owner" not in r.body,
          "%s: introspection shows stored internals: %r" % (what, r.body))
    return d


@test("GET /charge/keys/<key>: in_progress, completed, failed; never the body")
def t_keys_states():
    key = new_key("kin")
    fut = in_thread(post_charge, key)
    check(wait_state(PRINCIPAL_A, key, "in_progress"), "first request never became in_progress")
    rec = record(PRINCIPAL_A, key)
    d = expect_key_info(get_key(key), key, "in_progress", None, "in progress")
    created = int(rec["created_ms"])
    check(d["created"] == rfc3339(created) and d["updated"] == d["created"],
          "in progress: created/updated %r/%r, want %r" % (d["created"], d["updated"], rfc3339(created)))
    check(d["expires"] == rfc3339(created + LOCK_TTL_S * 1000), "in progress: expires %r, want created + lock_ttl_s" % d["expires"])
    r1 = fut.result(HTTP_TIMEOUT)
    expect_fresh(r1, 201)
    rec = record(PRINCIPAL_A, key)
    d = expect_key_info(get_key(key), key, "completed", 201, "completed")
    check(d["created"] == rfc3339(rec["created_ms"]) and d["updated"] == rfc3339(rec["updated_ms"])
          and d["expires"] == rfc3339(rec["expires_ms"]), "completed: times %r, record %r" % (d, rec))
    check(d["expires"][:19] == time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(
          email.utils.parsedate_to_datetime(r1.h("Idempotency-Key-Expires")).timestamp())),
          "completed: expires %r is not the Idempotency-Key-Expires %r" % (d["expires"], r1.h("Idempotency-Key-Expires")))
    check(r1.json()["id"].encode() not in get_key(key).body, "introspection shows the stored body")
    kf = new_key("kfail")
    expect_fresh(post_charge(kf, charge_body(source="tok_insufficientFunds")), 402)
    expect_key_info(get_key(kf), kf, "failed", 402, "failed")
    h = get_key(kf, method="HEAD")
    check(h.status == 200 and h.body == b"", "HEAD: want 200 without a body, got %r" % h)


@test("GET /charge/keys/<key>: another principal's key and a missing key are 404 key-not-found, nothing created")
def t_keys_scope():
    key = new_key("kscope")
    expect_fresh(post_charge(key), 201)
    r = get_key(key, api_key=KEY_B)
    expect_problem(r, 404, "key-not-found", "principal B asks for A's key")
    check(key.encode() not in r.body, "the 404 echoes the key")
    missing = new_key("kmiss")
    expect_problem(get_key(missing), 404, "key-not-found", "a key never used")
    check(redis("EXISTS", rkey(PRINCIPAL_A, missing)) == 0, "introspection created a record")
    check(redis("EXISTS", rkey(PRINCIPAL_B, key)) == 0, "introspection created B's record")
    r = request("GET", "/charge/keys/" + key)
    expect_problem(r, 401, "unauthorized", "no Authorization")
    check(r.h("WWW-Authenticate") == "Bearer", "401 without WWW-Authenticate: Bearer")
    r = request("POST", "/charge/keys/" + key, body=b"{}", headers={"Authorization": "Bearer " + KEY_A})
    expect_problem(r, 405, "method-not-allowed", "POST /charge/keys/<key>")
    check(r.h("Allow") == "GET, HEAD", "Allow %r, want 'GET, HEAD'" % r.h("Allow"))


@test("GET /charge/keys/<key>: percent-encoded and quoted keys; malformed and empty keys are 400")
def t_keys_encoding():
    key = "e2e-%s-pct/a?b%%c#d\"e" % RUN_ID
    expect_fresh(post_charge(key), 201)
    expect_key_info(get_key(quote_key(key)), key, "completed", 201, "fully encoded key")
    plain = new_key("Abc")
    expect_fresh(post_charge(plain), 201)
    expect_key_info(get_key("%" + "%02X" % ord(plain[0]) + plain[1:]), plain, "completed", 201, "an encoded plain letter")
    # keys that decode to something that is not a key: the responder's 400
    # (encoded control bytes, %00-%1F and %7F, lighttpd refuses itself with
    # its own HTML 400, before the responder sees them)
    for bad in ("a%20b", "caf%C3%A9", "%22a%20b%22", "k" * 256, "%6B" * 256):
        expect_problem(get_key(bad), 400, "invalid-idempotency-key", "invalid key %r" % bad[:20])
    # malformed escapes: 400, from the responder or (Apache) the server itself
    for bad in ("%zz", "abc%", "abc%4", "%4g"):
        r = get_key(bad, web_server_ok=True)
        check(r.status == 400, "malformed escape %r: want 400, got %r" % (bad, r))
        if (r.h("Content-Type") or "").startswith("application/problem+json"):
            expect_problem(r, 400, "invalid-idempotency-key", "malformed escape %r" % bad)
    expect_problem(get_key(""), 400, "invalid-idempotency-key", "empty key")
    # the quoted Structured-Field form names the same key, as in the header
    expect_key_info(get_key("%22" + quote_key(plain) + "%22"), plain, "completed", 201, "quoted key")


@test("GET /charge/keys/<key>: a path past 1023 bytes is read whole; one too long for the responder is 400, never a shorter key")
def t_keys_long_path():
    # a path whose first 1023 bytes name a live key and whose whole is not
    # a key: cutting it would show that other key's record
    key = "\\" * 160 + "a" * 44
    redis("DEL", rkey(PRINCIPAL_A, key))
    expect_fresh(post_charge(key), 201)
    seg = "%22" + "%5C%5C" * 160 + "a" * 44 + "%22"
    check(len("/charge/keys/" + seg) == 1023, "path length %d" % len("/charge/keys/" + seg))
    expect_key_info(get_key(seg), key, "completed", 201, "the 1023-byte path")
    expect_problem(get_key(seg + "zz"), 400, "invalid-idempotency-key", "the same path and two bytes more")
    # a valid key whose quoted, fully encoded form is 1026 bytes (the path
    # 1039): every byte of it counts
    long_key = "\\" * 170
    redis("DEL", rkey(PRINCIPAL_A, long_key))
    expect_fresh(post_charge(long_key), 201)
    seg = "%22" + "%5C%5C" * 170 + "%22"
    check(len("/charge/keys/" + seg) == 1039, "path length %d" % len("/charge/keys/" + seg))
    expect_key_info(get_key(seg), long_key, "completed", 201, "a 1039-byte path naming a valid key")
    # longer than any encoded key can be, and longer than the responder
    # keeps: refused, under /charge/keys/ (400) as elsewhere (404)
    expect_problem(get_key(seg + "z" * 3000), 400, "invalid-idempotency-key", "a 4 KiB path")
    expect_problem(request("GET", "/charge" + "/x" * 1500), 404, "not-found", "a 3 KiB path elsewhere")


@test("the metrics file truncated while serving: charges and /metrics go on, the counters restart, the file is whole again")
def t_metrics_truncated():
    check(METRICS_FILE and os.path.isfile(METRICS_FILE), "no metrics file %r" % METRICS_FILE)
    size = os.path.getsize(METRICS_FILE)
    expect_fresh(post_charge(new_key("mtr0")), 201)
    os.truncate(METRICS_FILE, 0)
    # every responder process touches the lost pages (before: SIGBUS, and
    # the web server's 5xx for each request it was serving)
    with concurrent.futures.ThreadPoolExecutor(max_workers=6) as ex:
        rs = list(ex.map(lambda i: post_charge(new_key("mtr%d" % i)), range(12)))
    check(all(r.status == 201 for r in rs), "charges after the truncation: %r" % [r.status for r in rs])
    m = request("GET", "/metrics")
    check(m.status == 200 and b"charge_requests_total" in m.body, "/metrics after the truncation: %r" % m)
    created = re.search(rb'charge_requests_total\{outcome="created"\} (\d+)', m.body)
    check(created and 1 <= int(created.group(1)) <= 12, "created counter %r: want it restarted, 1..12"
          % (created and created.group(1)))
    check(os.path.getsize(METRICS_FILE) == size, "metrics file %d bytes, was %d" % (os.path.getsize(METRICS_FILE), size))


@test("GET /charge/keys/<key> never extends a TTL; counted as key-found in /metrics")
def t_keys_ttl_metrics():
    key = new_key("kttl")
    expect_fresh(post_charge(key, charge_body(source="tok_chargeDeclined")), 402)
    redis("PEXPIRE", rkey(PRINCIPAL_A, key), 50000)
    before = record(PRINCIPAL_A, key)

    def found():
        m = re.search(rb'charge_requests_total\{outcome="key-found"\} (\d+)', request("GET", "/metrics").body)
        return int(m.group(1)) if m else -1
    n0 = found()
    check(n0 >= 0, "/metrics has no outcome=\"key-found\" series")
    for _ in range(3):
        expect_key_info(get_key(key), key, "failed", 402, "failed")
    p = redis("PTTL", rkey(PRINCIPAL_A, key))
    check(0 < p <= 50000, "PTTL %r after introspection, want <= 50000 (not extended)" % p)
    check(record(PRINCIPAL_A, key) == before, "introspection changed the record")
    check(found() >= n0 + 3, "key-found counter %d, want >= %d" % (found(), n0 + 3))


@test("a completed record stays under 1 KiB of Redis memory (listpack)")
def t_record_memory():
    key = new_key("mem")
    expect_fresh(post_charge(key), 201)
    # (against a cluster: on the node that serves the key)
    at = _cluster_key_command if REDIS_NODES else (lambda a: redis(*a))
    enc = at(("OBJECT", "ENCODING", rkey(PRINCIPAL_A, key)))
    mem = at(("MEMORY", "USAGE", rkey(PRINCIPAL_A, key)))
    check(enc == b"listpack", "encoding %r, want listpack" % enc)
    check(mem < 1024, "MEMORY USAGE %d B, want < 1024" % mem)
    diag("MEMORY USAGE %d B" % mem)



@test("409 request-in-progress with Retry-After: 1 for a concurrent duplicate")
def t_409():
    key = new_key("409")
    fut = in_thread(post_charge, key)
    check(wait_state(PRINCIPAL_A, key, "in_progress"), "first request never became in_progress")
    r2 = post_charge(key)
    expect_problem(r2, 409, "request-in-progress", "duplicate while in progress")
    check(r2.h("Retry-After") == "1", "Retry-After %r, want 1" % r2.h("Retry-After"))
    r1 = fut.result(HTTP_TIMEOUT)
    expect_fresh(r1, 201, "first request")
    expect_replay_of(post_charge(key), r1, "after completion")
    expect_ledger(PRINCIPAL_A, key, 1)


@test("Prefer: wait=5 on an in-progress key returns the replay of the outcome")
def t_prefer_wait():
    key = new_key("wait")
    fut = in_thread(post_charge, key)
    check(wait_state(PRINCIPAL_A, key, "in_progress"), "first request never became in_progress")
    r2 = post_charge(key, extra={"Prefer": "wait=5"})
    r1 = fut.result(HTTP_TIMEOUT)
    expect_fresh(r1, 201, "first request")
    expect_replay_of(r2, r1, "waiting duplicate")
    check(r2.elapsed < 5, "waited %.2fs" % r2.elapsed)
    expect_ledger(PRINCIPAL_A, key, 1)


@test("Prefer: wait=0 on an in-progress key: immediate 409")
def t_prefer_wait0():
    key = new_key("wait0")
    fut = in_thread(post_charge, key)
    check(wait_state(PRINCIPAL_A, key, "in_progress"), "first request never became in_progress")
    r2 = post_charge(key, extra={"Prefer": "wait=0"})
    expect_problem(r2, 409, "request-in-progress", "Prefer: wait=0")
    check(r2.h("Retry-After") == "1", "Retry-After %r" % r2.h("Retry-After"))
    expect_fresh(fut.result(HTTP_TIMEOUT), 201, "first request")


@test("Prefer: wait=1 that ends before the outcome: 409 after about 1 s")
def t_prefer_wait_ends():
    key = new_key("waitend")
    r1 = post_charge(key)
    expect_fresh(r1, 201)
    # Turn the record back into a claim held by some other attempt for 4 s.
    rk = rkey(PRINCIPAL_A, key)
    redis("HSET", rk, "state", "in_progress", "owner", "e2e-foreign-owner")
    redis("PEXPIRE", rk, 4000)
    r2 = post_charge(key, extra={"Prefer": "wait=1"})
    expect_problem(r2, 409, "request-in-progress", "Prefer: wait=1 on a stuck claim")
    check(0.8 <= r2.elapsed < 3.5, "answered after %.2fs, want about 1 s" % r2.elapsed)
    expect_ledger(PRINCIPAL_A, key, 1)


N_THREADS = 32


def _burst(key, extra=None):
    barrier = threading.Barrier(N_THREADS)

    def one():
        barrier.wait(10)
        return post_charge(key, extra=extra)
    with concurrent.futures.ThreadPoolExecutor(max_workers=N_THREADS) as ex:
        futs = [ex.submit(one) for _ in range(N_THREADS)]
        return [f.result(60) for f in futs]


@test("concurrency: %d simultaneous requests, one key: one fresh 201, the rest 409 or replays" % N_THREADS)
def t_burst():
    key = new_key("burst")
    rs = _burst(key)
    fresh = [r for r in rs if r.status == 201 and r.h("Idempotent-Replayed") == "false"]
    diag("statuses: %d x 201 fresh, %d x 409, %d x replay, %d other" % (
        len(fresh), sum(r.status == 409 for r in rs),
        sum(r.h("Idempotent-Replayed") == "true" for r in rs),
        sum(r.status not in (201, 409) for r in rs)))
    check(len(fresh) == 1, "%d fresh 201s, want 1; statuses %r" % (len(fresh), sorted(r.status for r in rs)))
    for r in rs:
        if r is fresh[0]:
            continue
        if r.status == 409:
            expect_problem(r, 409, "request-in-progress", "concurrent duplicate")
        else:
            expect_replay_of(r, fresh[0], "late duplicate")
    expect_ledger(PRINCIPAL_A, key, 1)


@test("concurrency: %d simultaneous requests with Prefer: wait=10 all get the same 201" % N_THREADS)
def t_burst_wait():
    key = new_key("burstw")
    rs = _burst(key, extra={"Prefer": "wait=10"})
    check(all(r.status == 201 for r in rs), "statuses %r" % sorted(r.status for r in rs))
    fresh = [r for r in rs if r.h("Idempotent-Replayed") == "false"]
    check(len(fresh) == 1, "%d fresh responses, want 1" % len(fresh))
    for r in rs:
        if r is not fresh[0]:
            expect_replay_of(r, fresh[0], "waiting duplicate")
    expect_ledger(PRINCIPAL_A, key, 1)


def big_order(n=1000):
    items = [{"description": "i", "quantity": 1, "unit_amount": 1} for _ in range(n)]
    return json.dumps({"amount": n, "currency": "usd", "source": "tok_visa",
                       "line_items": items}, separators=(",", ":")).encode()


SPILL = {}


def spill_setup():
    """One spilled charge shared by the spill tests: (key, body, response)."""
    if not SPILL:
        key = new_key("spill")
        body = big_order()
        check(len(body) <= MAX_REQUEST_BYTES, "test bug: big order %d bytes > max_request_bytes" % len(body))
        r = post_charge(key, body)
        expect_fresh(r, 201, "1000 line items")
        check(len(r.body) > SPILL_THRESHOLD, "response of %d bytes is not above spill_threshold_bytes=%d" % (len(r.body), SPILL_THRESHOLD))
        SPILL.update(key=key, body=body, resp=r)
    return SPILL["key"], SPILL["body"], SPILL["resp"]


def spill_path(key):
    rec = record(PRINCIPAL_A, key)
    name = (rec.get("body_file") or b"").decode()
    check(name and "/" not in name, "record has no usable body_file: %r" % {k: v[:80] for k, v in rec.items()})
    return os.path.join(SPILL_DIR, name)


@test("spill: a response above spill_threshold_bytes goes to a file the record names")
def t_spill():
    key, body, r = spill_setup()
    rec = record(PRINCIPAL_A, key)
    check("body" not in rec, "record still has an inline body (%d bytes)" % len(rec.get("body") or b""))
    for f in ("body_file", "body_len", "body_sha256"):
        check(f in rec, "record lacks %s: fields %r" % (f, sorted(rec)))
    path = spill_path(key)
    check(key not in rec["body_file"].decode(), "spill file name contains the client's key")
    check(os.path.isfile(path), "spill file %s does not exist" % path)
    with open(path, "rb") as f:
        data = f.read()
    check(int(rec["body_len"]) == len(data) == len(r.body), "lengths: record %s, file %d, response %d" % (rec["body_len"], len(data), len(r.body)))
    check(rec["body_sha256"].decode() == hashlib.sha256(data).hexdigest(), "body_sha256 does not match the file")
    check(data == r.body, "spill file content differs from the response body")
    check(r.json()["line_items"] and len(r.json()["line_items"]) == 1000, "line_items not echoed in full")
    expect_replay_of(post_charge(key, body), r, "replay of a spilled response")
    expect_ledger(PRINCIPAL_A, key, 1)


def _spill_damage(what, damage):
    key, body, r = spill_setup()
    path = spill_path(key)
    with open(path, "rb") as f:
        orig = f.read()
    try:
        damage(path, orig)
        r2 = post_charge(key, body)
        expect_problem(r2, 500, "stored-response-unavailable", "replay with the spill file " + what)
        no_expires(r2, "500 stored-response-unavailable")
        check(r.json()["id"].encode() not in r2.body, "500 leaks the charge")
    finally:
        with open(path, "wb") as f:
            f.write(orig)
    expect_ledger(PRINCIPAL_A, key, 1, "after a replay with the file " + what)
    expect_replay_of(post_charge(key, body), r, "replay after the file was restored")


@test("spill: a corrupted file (one byte flipped) gives 500 stored-response-unavailable, no re-charge")
def t_spill_corrupt():
    def flip(path, orig):
        b = bytearray(orig)
        b[len(b) // 2] ^= 0x01
        with open(path, "wb") as f:
            f.write(bytes(b))
    _spill_damage("corrupted", flip)


@test("spill: a deleted file gives 500 stored-response-unavailable, no re-charge")
def t_spill_deleted():
    _spill_damage("deleted", lambda path, orig: os.unlink(path))


@test("spill: a truncated file gives 500 stored-response-unavailable, no re-charge")
def t_spill_truncated():
    def trunc(path, orig):
        with open(path, "wb") as f:
            f.write(orig[:len(orig) // 2])
    _spill_damage("truncated", trunc)


@test("NOSCRIPT: after SCRIPT FLUSH a fresh charge and its replay still work")
def t_noscript():
    check(redis("SCRIPT", "FLUSH") == "OK", "SCRIPT FLUSH failed")
    key = new_key("noscript")
    r1 = post_charge(key)
    expect_fresh(r1, 201, "first charge after SCRIPT FLUSH")
    redis("SCRIPT", "FLUSH")
    expect_replay_of(post_charge(key), r1, "replay after another SCRIPT FLUSH")
    expect_ledger(PRINCIPAL_A, key, 1)


def metric(text, name, outcome=None):
    total = None
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        m = re.match(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+([0-9.eE+-]+)', line)
        if not m or m.group(1) != name:
            continue
        if outcome is not None and ('outcome="%s"' % outcome) not in (m.group(2) or ""):
            continue
        total = (total or 0) + float(m.group(3))
    return total


@test("/metrics: Prometheus text with charge_requests_total; counters increase")
def t_metrics():
    m0 = request("GET", "/metrics")
    check(m0.status == 200, "GET /metrics: %r" % m0)
    std_headers(m0)
    check((m0.h("Content-Type") or "").startswith("text/plain"), "Content-Type %r" % m0.h("Content-Type"))
    t0 = m0.body.decode()
    for name in ("charge_requests_total", "charge_replays_total", "charge_conflicts_total",
                 "charge_mismatches_total", "charge_spills_total", "charge_redis_errors_total",
                 "charge_provider_calls_total", "charge_request_duration_seconds_bucket",
                 "charge_request_duration_seconds_count"):
        check(metric(t0, name) is not None, "metric %s missing" % name)
    created0 = metric(t0, "charge_requests_total", "created") or 0
    replayed0 = metric(t0, "charge_replays_total") or 0
    calls0 = metric(t0, "charge_provider_calls_total") or 0
    key = new_key("metrics")
    r1 = post_charge(key)
    expect_fresh(r1, 201)
    expect_replay_of(post_charge(key), r1, "first replay")
    expect_replay_of(post_charge(key), r1, "second replay")
    t1 = request("GET", "/metrics").body.decode()
    check((metric(t1, "charge_requests_total", "created") or 0) >= created0 + 1,
          'charge_requests_total{outcome="created"} %r -> %r' % (created0, metric(t1, "charge_requests_total", "created")))
    check((metric(t1, "charge_replays_total") or 0) >= replayed0 + 2,
          "charge_replays_total %r -> %r" % (replayed0, metric(t1, "charge_replays_total")))
    check((metric(t1, "charge_provider_calls_total") or 0) >= calls0 + 1,
          "charge_provider_calls_total %r -> %r" % (calls0, metric(t1, "charge_provider_calls_total")))


REDIS_STATE = {}


@test("Redis down (kill -9): POST 503 service-unavailable with Retry-After, no provider call; /readyz 503")
def t_redis_down():
    key_before = new_key("aof")
    r0 = post_charge(key_before)
    expect_fresh(r0, 201, "charge before the Redis crash")
    REDIS_STATE["before"] = (key_before, r0)
    REDIS_STATE["pids"] = worker_pids()
    run_cmd("E2E_REDIS_KILL")
    REDIS_STATE["killed"] = True
    key = new_key("down")
    REDIS_STATE["key"] = key
    r = post_charge(key)
    expect_problem(r, 503, "service-unavailable", "POST with Redis down")
    no_expires(r, "503")
    ra = r.h("Retry-After")
    check(ra is not None and ra.isdigit() and int(ra) >= 1, "Retry-After %r" % ra)
    expect_ledger(PRINCIPAL_A, key, 0, "no provider call without a claim")
    h = request("GET", "/readyz")
    check(h.status == 503, "/readyz with Redis down: want 503, got %r" % h)
    std_headers(h, "/readyz 503")
    r = post_charge(key_before)
    expect_problem(r, 503, "service-unavailable", "replay request with Redis down")


@test("Redis back (same socket, AOF): same workers serve 201 again, the old record still replays")
def t_redis_back():
    check(REDIS_STATE.get("killed"), "previous test did not stop Redis")
    run_cmd("E2E_REDIS_START")
    REDIS_STATE["killed"] = False
    health_ok(10)
    key_before, r0 = REDIS_STATE["before"]
    expect_replay_of(post_charge(key_before), r0, "record written before the crash")
    key = REDIS_STATE["key"]
    r = None
    for _ in range(8):
        r = post_charge(key)
        if r.status != 503:
            break
        time.sleep(0.2)
    expect_fresh(r, 201, "the key that got 503 while Redis was down")
    expect_ledger(PRINCIPAL_A, key, 1)
    pids = worker_pids()
    check(pids == REDIS_STATE["pids"], "responder processes changed: %r -> %r" % (REDIS_STATE["pids"], pids))


@test("Redis back: once /healthz is 200 no request gets 503 (stale connections are re-established)")
def t_redis_back_no_503():
    # Parallel requests (each one occupies a worker for provider_latency_ms)
    # reach every worker, so each holds a Redis connection; crash Redis, so
    # those connections are dead, bring it back, and send parallel requests
    # again.
    n = 3 * max(1, len(worker_pids()))

    def parallel(tag):
        with concurrent.futures.ThreadPoolExecutor(max_workers=n) as ex:
            futs = [ex.submit(post_charge, new_key(tag)) for _ in range(n)]
            return [f.result(60) for f in futs]
    before = parallel("warm")
    check(all(r.status == 201 for r in before), "before the crash: statuses %r" % [r.status for r in before])
    run_cmd("E2E_REDIS_KILL")
    run_cmd("E2E_REDIS_START")
    health_ok(10)
    after = parallel("stale")
    bad = [r.status for r in after if r.status != 201]
    diag("after the restart: %d of %d got 201" % (n - len(bad), n))
    check(not bad, "%d of %d parallel fresh charges after the restart failed: statuses %r" % (len(bad), n, bad))


@test("crash window: worker killed after the provider charged, before the record; retry after lock_ttl_s gets the same charge id")
def t_crash_window():
    check(LOCK_TTL_S <= 5, "lock_ttl_s=%d too long for this test; the harness sets 2" % LOCK_TTL_S)
    health_ok(10)
    key = new_key("crash")
    rk = rkey(PRINCIPAL_A, key)
    fut = in_thread(post_charge, key, web_server_ok=True)  # the web server answers for the killed worker
    check(wait_state(PRINCIPAL_A, key, "in_progress"), "request never became in_progress")
    # Hold back every write to Redis (the record script), let the provider
    # charge, then kill the worker while its record is postponed.
    # The postponed command must not run after all: unpause only when Redis
    # has dropped the dead worker's connection (os.kill returns before the
    # kernel closed the process's sockets).
    check(redis("CLIENT", "PAUSE", "10000", "WRITE") == "OK", "CLIENT PAUSE failed")
    try:
        end = time.monotonic() + LATENCY_MS / 1000.0 + 5
        while not ledger_lines(PRINCIPAL_A, key) and time.monotonic() < end:
            time.sleep(0.002)
        check(ledger_lines(PRINCIPAL_A, key), "provider was never called")
        conns = redis_client_ids()
        pids = worker_pids()
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        end = time.monotonic() + 5
        while time.monotonic() < end and (any(pid_running(p) for p in pids) or conns & redis_client_ids()):
            time.sleep(0.01)
        check(not conns & redis_client_ids(), "Redis still lists the killed workers' connections")
    finally:
        redis("CLIENT", "UNPAUSE")
    r1 = fut.result(HTTP_TIMEOUT)
    diag("client of the killed worker got HTTP %d" % r1.status)
    check(r1.status >= 500, "client of the killed worker got %r, want a 5xx" % r1)
    check(redis("HGET", rk, "state") == b"in_progress", "record state %r, want in_progress" % redis("HGET", rk, "state"))
    health_ok(10)
    r2 = post_charge(key, extra={"Prefer": "wait=1"})
    expect_problem(r2, 409, "request-in-progress", "retry while the dead worker's claim is held (Prefer: wait=1)")
    end = time.monotonic() + LOCK_TTL_S + 3
    while redis("EXISTS", rk) and time.monotonic() < end:
        time.sleep(0.05)
    check(redis("EXISTS", rk) == 0, "claim still held %ds after the crash" % (LOCK_TTL_S + 3))
    r3 = post_charge(key)
    expect_fresh(r3, 201, "retry after lock_ttl_s")
    lines = expect_ledger(PRINCIPAL_A, key, 2)
    check(lines[0][3] == lines[1][3], "provider returned different charge ids: %r" % [l[3] for l in lines])
    check(r3.json()["id"] == lines[0][3], "retry got %r, first provider call charged %r" % (r3.json()["id"], lines[0][3]))
    expect_replay_of(post_charge(key), r3, "replay after recovery")


@test("/metrics after every other test passes promtool check metrics (names, HELP, TYPE, units)")
def t_metrics_promtool():
    r = request("GET", "/metrics")
    check(r.status == 200, "GET /metrics: %r" % r)
    check(b'outcome="created"' in r.body, "no outcome=\"created\" series: %r" % r.body[:300])
    try:
        p = subprocess.run(["promtool", "check", "metrics"], input=r.body,
                           capture_output=True, timeout=30)
    except FileNotFoundError:
        raise Fail("promtool is not installed (Debian package prometheus)")
    out = (p.stdout + p.stderr).decode(errors="replace").strip()
    check(p.returncode == 0 and not out, "promtool check metrics: status %d\n%s"
          % (p.returncode, out))


# ================================================================= contract

# Documented answers the e2e stack cannot provoke, and where they are tested.
CONTRACT_EXEMPT = {
    "408": "needs a body that stalls inside the responder; web servers buffer "
           "bodies (tests/faults, tests/signals)",
    "request-timeout": "as 408",
    "internal-error": "only when memory runs out (unit tests)",
    "outcome-not-durable": "needs Redis replicas that do not acknowledge "
                           "(tests/ha/test_sentinel.py)",
}


@test("docs/openapi.yaml: every answer allowed; every documented status and problem type received")
def t_contract_coverage():
    check(not VIOLATIONS, "answers not allowed by docs/openapi.yaml:\n" + "\n".join(VIOLATIONS[:20]))
    statuses, types, pairs = CONTRACT.uncovered(CONTRACT_EXEMPT)
    for name, why in sorted(CONTRACT_EXEMPT.items()):
        diag("not required here: %s (%s)" % (name, why))
    if pairs:
        diag("documented, not received (not required per operation): " + "; ".join(pairs))
    check(not statuses and not types,
          "documented but never received: statuses %s, problem types %s" % (statuses, types))


# ================================================================= runner

def main():
    if not BASE_URL:
        print("Bail out! BASE_URL is not set")
        return 2
    return tap.run("E2E_ONLY")


if __name__ == "__main__":
    sys.exit(main())
