#!/usr/bin/env python3
"""The responder as a plain CGI program (RFC 3875), without a web server.

Every test runs `env -i <CGI variables> CHARGE_BIN` with stdin a pipe that
carries the body (fd 0 is no socket, so the binary serves one CGI request
and exits), then checks the raw output: "Status: NNN Reason" CRLF, header
lines CRLF, an empty line, the body; exit status 0; log lines only on
stderr. tests/cgi/run.sh starts the private Redis and sets:

  CGI_BIN            the responder binary
  CGI_RUN            scratch directory (api-keys, spill/, ledger)
  CGI_REDIS_SOCKET   unix socket of the private Redis
  CGI_ONLY           optional regular expression: run only matching tests

Prints TAP and exits 1 when a test failed. Python standard library only.
"""

import json
import os
import re
import subprocess
import sys
import threading
import time
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import tap  # noqa: E402  (tests/lib: the shared runner)
from tap import Fail, check, diag, test  # noqa: E402,F401

BIN = os.environ.get("CGI_BIN", "")
RUN = os.environ.get("CGI_RUN", "")
REDIS_SOCKET = os.environ.get("CGI_REDIS_SOCKET", "")

KEY_A = "sk_test_cgi_alice"
PRINCIPAL_A = "alice"
MAX_BODY = 65536            # max_request_bytes of these tests
DRAIN_BOUND = 4 * MAX_BODY  # a CGI responder discards at most this much
FAILED_TTL_S = 2
PROVIDER_TIMEOUT_MS = 300
RUN_ID = uuid.uuid4().hex[:8]

# The responder's configuration: nothing comes from the caller's environment.
CONFIG = {
    "CHARGE_REDIS_URL": "unix://" + REDIS_SOCKET,
    "CHARGE_API_KEYS_FILE": os.path.join(RUN, "api-keys"),
    "CHARGE_SPILL_DIR": os.path.join(RUN, "spill"),
    "CHARGE_PROVIDER_LEDGER": os.path.join(RUN, "ledger.log"),
    "CHARGE_METRICS_FILE": os.path.join(RUN, "metrics.shm"),
    "CHARGE_MAX_REQUEST_BYTES": str(MAX_BODY),
    "CHARGE_PROVIDER_LATENCY_MS": "0",
    "CHARGE_PROVIDER_TIMEOUT_MS": str(PROVIDER_TIMEOUT_MS),
    "CHARGE_LOCK_TTL_S": "3",
    "CHARGE_FAILED_TTL_S": str(FAILED_TTL_S),
    "CHARGE_SPILL_THRESHOLD_BYTES": "16384",
    "CHARGE_LOG_LEVEL": "info",
}

# What a web server passes for every request (RFC 3875 section 4.1).
SERVER_VARS = {
    "GATEWAY_INTERFACE": "CGI/1.1",
    "SERVER_PROTOCOL": "HTTP/1.1",
    "SERVER_SOFTWARE": "test_cgi.py",
    "SERVER_NAME": "127.0.0.1",
    "SERVER_PORT": "80",
    "REMOTE_ADDR": "127.0.0.1",
    "PATH": "/usr/bin:/bin",
}

AUTO = object()




# ---------------------------------------------------------------- running

class Result:
    def __init__(self, raw, err, rc, written, epipe, elapsed):
        self.raw, self.err, self.rc = raw, err, rc
        self.written, self.epipe, self.elapsed = written, epipe, elapsed
        self.status, self.reason, self.headers, self.body = None, None, [], b""
        self.parse_error = None
        try:
            self._parse()
        except Fail as e:
            self.parse_error = str(e)

    def _parse(self):
        i = self.raw.find(b"\r\n\r\n")
        check(i >= 0, "no CRLF CRLF after the headers")
        head, self.body = self.raw[:i], self.raw[i + 4:]
        lines = head.split(b"\r\n")
        for ln in lines:
            check(b"\n" not in ln and b"\r" not in ln, "bare CR or LF in header line %r" % ln)
        m = re.fullmatch(rb"Status: (\d{3}) ([A-Za-z][A-Za-z ]*)", lines[0])
        check(m, "first line %r is not 'Status: NNN Reason'" % lines[0])
        self.status, self.reason = int(m.group(1)), m.group(2).decode()
        for ln in lines[1:]:
            m = re.fullmatch(rb"([A-Za-z0-9-]+): (\S.*)", ln)
            check(m, "header line %r is not 'Name: value'" % ln)
            self.headers.append((m.group(1).decode(), m.group(2).decode()))

    def h(self, name):
        vals = [v for k, v in self.headers if k.lower() == name.lower()]
        return vals[0] if vals else None

    def json(self):
        try:
            return json.loads(self.body)
        except ValueError as e:
            raise Fail("body is not JSON (%s): %r" % (e, self.body[:300]))

    def __repr__(self):
        return "rc %s, status %s, headers %r, body %r%s" % (
            self.rc, self.status, self.headers, self.body[:300],
            (", stderr %r" % self.err[-300:]) if self.err else "")


def cgi(method, uri="/charge", headers=None, body=b"", clen=AUTO, env=None,
        chunk=16384, timeout=30):
    """Runs one CGI request; uri None leaves REQUEST_URI unset.

    clen AUTO: CONTENT_LENGTH = len(body) when there is a body; None: unset;
    a string: that value. env: extra variables (value None removes one).
    """
    e = dict(SERVER_VARS)
    e.update(CONFIG)
    e["REQUEST_METHOD"] = method
    if uri is not None:
        path, _, query = uri.partition("?")
        e["REQUEST_URI"] = uri
        e["SCRIPT_NAME"] = path
        e["QUERY_STRING"] = query
    for k, v in (headers or {}).items():
        if k.lower() == "content-type":
            e["CONTENT_TYPE"] = v
        else:
            e["HTTP_" + k.upper().replace("-", "_")] = v
    if clen is AUTO:
        if body:
            e["CONTENT_LENGTH"] = str(len(body))
    elif clen is not None:
        e["CONTENT_LENGTH"] = clen
    for k, v in (env or {}).items():
        if v is None:
            e.pop(k, None)
        else:
            e[k] = v
    argv = ["env", "-i"] + ["%s=%s" % kv for kv in e.items()] + [BIN]
    t0 = time.monotonic()
    p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    out, err, state = [], [], {"written": 0, "epipe": False}

    def writer():
        try:
            for i in range(0, len(body), chunk):
                p.stdin.write(body[i:i + chunk])
                p.stdin.flush()
                state["written"] += len(body[i:i + chunk])
        except (BrokenPipeError, OSError):
            state["epipe"] = True
        finally:
            try:
                p.stdin.close()
            except OSError:
                pass

    threads = [threading.Thread(target=writer),
               threading.Thread(target=lambda: out.append(p.stdout.read())),
               threading.Thread(target=lambda: err.append(p.stderr.read()))]
    for t in threads:
        t.start()
    try:
        rc = p.wait(timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        raise Fail("%s %s: the CGI process did not exit within %ds" % (method, uri, timeout))
    for t in threads:
        t.join(10)
    return Result(b"".join(out), b"".join(err).decode(errors="replace"), rc,
                  state["written"], state["epipe"], time.monotonic() - t0)


def std(r, what, status=None):
    """The raw CGI response is well formed and has the headers every
    response carries (docs/API.md §9)."""
    check(r.parse_error is None, "%s: malformed CGI output (%s): %r" % (what, r.parse_error, r.raw[:300]))
    check(r.rc == 0, "%s: exit status %s: %r" % (what, r.rc, r))
    if status is not None:
        check(r.status == status, "%s: want status %d, got %r" % (what, status, r))
    names = [k.lower() for k, _ in r.headers]
    dups = sorted({n for n in names if names.count(n) > 1})
    check(not dups, "%s: duplicate headers %r" % (what, dups))
    check(r.h("Content-Type"), "%s: no Content-Type: %r" % (what, r))
    check(r.h("Cache-Control") == "no-store", "%s: Cache-Control %r" % (what, r.h("Cache-Control")))
    check(re.fullmatch(r"[0-9a-f]{32}", r.h("X-Request-Id") or ""),
          "%s: X-Request-Id %r is not 32 hex digits" % (what, r.h("X-Request-Id")))
    check(r.h("Content-Length") == str(len(r.body)),
          "%s: Content-Length %r, body has %d bytes" % (what, r.h("Content-Length"), len(r.body)))
    check(r.reason, "%s: empty reason phrase" % what)


def problem(r, status, slug, what):
    std(r, what, status)
    check(r.h("Content-Type") == "application/problem+json",
          "%s: Content-Type %r" % (what, r.h("Content-Type")))
    p = r.json()
    check(p.get("type") == "/problems/" + slug, "%s: type %r, want /problems/%s" % (what, p.get("type"), slug))
    check(p.get("status") == status, "%s: status member %r" % (what, p.get("status")))
    check(isinstance(p.get("title"), str) and p["title"], "%s: no title" % what)
    return p


def auth_headers(key, extra=None, api_key=KEY_A, ctype="application/json"):
    h = {}
    if api_key:
        h["Authorization"] = "Bearer " + api_key
    if key is not None:
        h["Idempotency-Key"] = key
    if ctype:
        h["Content-Type"] = ctype
    h.update(extra or {})
    return h


def charge_body(amount=1999, source="tok_visa", **extra):
    d = {"amount": amount, "currency": "usd", "source": source}
    d.update(extra)
    return json.dumps(d).encode()


def post(key, body=None, extra=None, env=None, **kw):
    return cgi("POST", "/charge", auth_headers(key, extra),
               charge_body() if body is None else body, env=env, **kw)


def new_key(tag):
    return "cgi-%s-%s-%s" % (RUN_ID, tag, uuid.uuid4().hex[:8])


# ---------------------------------------------------------------- state

def redis(*args):
    p = subprocess.run(["redis-cli", "-s", REDIS_SOCKET] + [str(a) for a in args],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=10)
    check(p.returncode == 0, "redis-cli %r failed: %r" % (args, p.stderr))
    return p.stdout.decode(errors="replace").strip()


def rkey(key, principal=PRINCIPAL_A):
    return "charge:idem:%s:%s" % (principal, key)


def ledger_lines(key, principal=PRINCIPAL_A):
    return tap.ledger_lines(CONFIG["CHARGE_PROVIDER_LEDGER"], principal, key)


def nothing_stored(key, what):
    check(redis("EXISTS", rkey(key)) == "0", "%s: a record exists for %s" % (what, key))
    check(not ledger_lines(key), "%s: the provider was called" % what)


def wait_state(key, state, secs=5.0):
    end = time.monotonic() + secs
    while time.monotonic() < end:
        if redis("HGET", rkey(key), "state") == state:
            return True
        time.sleep(0.01)
    return False


# ---------------------------------------------------------------- tests



@test("GET /healthz: 'Status: 200 OK', CRLF headers, Content-Length, JSON body, exit 0")
def t_healthz():
    r = cgi("GET", "/healthz")
    std(r, "GET /healthz", 200)
    check(r.raw.startswith(b"Status: 200 OK\r\n"), "first line: %r" % r.raw[:40])
    check(r.h("Content-Type").startswith("application/json"), "Content-Type %r" % r.h("Content-Type"))
    check(r.json().get("status") == "ok", "body %r" % r.body)


@test("HEAD /healthz: the same headers, Content-Length of the GET body, no body")
def t_head():
    g = cgi("GET", "/healthz")
    r = cgi("HEAD", "/healthz")
    check(r.parse_error is None and r.rc == 0, "HEAD: %r" % r)
    check(r.status == 200 and r.body == b"", "HEAD /healthz: %r" % r)
    check(r.h("Content-Length") == str(len(g.body)), "HEAD Content-Length %r, GET body %d bytes"
          % (r.h("Content-Length"), len(g.body)))
    check(r.h("Cache-Control") == "no-store" and r.h("X-Request-Id"), "HEAD headers %r" % r.headers)


@test("stdout holds only the response, the log goes to stderr; X-Request-Id differs per request")
def t_streams():
    a, b = cgi("GET", "/healthz"), cgi("GET", "/healthz")
    check(a.h("X-Request-Id") != b.h("X-Request-Id"), "same X-Request-Id twice")
    check(len(a.raw) == a.raw.find(b"\r\n\r\n") + 4 + len(a.body), "extra bytes on stdout")
    check(a.h("X-Request-Id") in a.err, "stderr has no log line with the request id: %r" % a.err)
    check(b"X-Request-Id" not in a.err.encode() and a.h("X-Request-Id").encode() not in a.body,
          "response and log are mixed")


@test("POST /charge fresh: 201 Created, Idempotent-Replayed: false, charge object, one ledger line")
def t_fresh():
    key = new_key("fresh")
    r = post(key, charge_body(amount=2500))
    std(r, "fresh charge", 201)
    check(r.reason == "Created", "reason %r" % r.reason)
    check(r.h("Idempotent-Replayed") == "false", "Idempotent-Replayed %r" % r.h("Idempotent-Replayed"))
    check(r.h("Content-Type").startswith("application/json"), "Content-Type %r" % r.h("Content-Type"))
    check(r.h("Retry-After") is None, "a 201 with Retry-After")
    c = r.json()
    check(re.fullmatch(r"ch_[0-9a-f]{24}", c.get("id", "")) and c.get("amount") == 2500
          and c.get("idempotency_key") == key, "charge object %r" % c)
    lines = ledger_lines(key)
    check(len(lines) == 1 and lines[0][3] == c["id"], "ledger %r" % lines)


@test("replay: recorded status, Content-Type and body byte for byte, Idempotent-Replayed: true")
def t_replay():
    key = new_key("replay")
    r1 = post(key)
    std(r1, "first", 201)
    for hk in (key, '"%s"' % key):      # bare and Structured-Field string
        r2 = post(hk)
        std(r2, "replay with key %s" % hk, 201)
        check(r2.h("Idempotent-Replayed") == "true", "Idempotent-Replayed %r" % r2.h("Idempotent-Replayed"))
        check(r2.body == r1.body, "replayed body differs:\n#   %r\n#   %r" % (r1.body, r2.body))
        check(r2.h("Content-Type") == r1.h("Content-Type"), "Content-Type differs")
        check(r2.h("X-Request-Id") != r1.h("X-Request-Id"), "X-Request-Id replayed")
    check(len(ledger_lines(key)) == 1, "ledger %r" % ledger_lines(key))


@test("422 idempotency-key-reused: same key, different amount; the record is unchanged")
def t_422():
    key = new_key("422")
    r1 = post(key, charge_body(amount=500))
    std(r1, "first", 201)
    before = redis("HGETALL", rkey(key))
    r = post(key, charge_body(amount=501))
    problem(r, 422, "idempotency-key-reused", "different amount")
    check(redis("HGETALL", rkey(key)) == before, "record changed")
    check(len(ledger_lines(key)) == 1, "ledger %r" % ledger_lines(key))


@test("409 request-in-progress with Retry-After: 1; Prefer: wait=5 replays the outcome")
def t_409():
    key = new_key("409")
    slow = {"CHARGE_PROVIDER_LATENCY_MS": "800"}
    res = {}
    t = threading.Thread(target=lambda: res.update(first=post(key, env=slow)))
    t.start()
    try:
        check(wait_state(key, "in_progress"), "first request never became in_progress")
        r = post(key)
        p = problem(r, 409, "request-in-progress", "duplicate while in progress")
        check(r.h("Retry-After") == "1", "Retry-After %r" % r.h("Retry-After"))
        check(p.get("detail"), "no detail")
        w = post(key, extra={"Prefer": "wait=5"})
    finally:
        t.join(30)
    first = res.get("first")
    check(first is not None, "first request did not finish")
    std(first, "first request", 201)
    std(w, "waiting duplicate", 201)
    check(w.h("Idempotent-Replayed") == "true" and w.body == first.body, "waiting duplicate %r" % w)
    check(len(ledger_lines(key)) == 1, "ledger %r" % ledger_lines(key))


@test("401 unauthorized with WWW-Authenticate: Bearer (no, wrong and malformed API key)")
def t_401():
    key = new_key("401")
    for what, h in [("no Authorization", auth_headers(key, api_key="")),
                    ("unknown key", auth_headers(key, api_key="sk_test_nope")),
                    ("Basic scheme", dict(auth_headers(key, api_key=""), Authorization="Basic YTpi"))]:
        r = cgi("POST", "/charge", h, charge_body())
        problem(r, 401, "unauthorized", what)
        check((r.h("WWW-Authenticate") or "").startswith("Bearer"), "%s: WWW-Authenticate %r" % (what, r.h("WWW-Authenticate")))
    nothing_stored(key, "401")


@test("405 with Allow: POST on /charge, Allow: GET, HEAD on /healthz and /metrics")
def t_405():
    for m in ("GET", "PUT", "DELETE"):
        r = cgi(m, "/charge", auth_headers(None, ctype=None))
        problem(r, 405, "method-not-allowed", "%s /charge" % m)
        check(r.h("Allow") == "POST", "%s /charge: Allow %r" % (m, r.h("Allow")))
    for path in ("/healthz", "/metrics"):
        r = cgi("POST", path, {"Content-Type": "application/json"}, b"{}")
        problem(r, 405, "method-not-allowed", "POST " + path)
        check(r.h("Allow") == "GET, HEAD", "POST %s: Allow %r" % (path, r.h("Allow")))


@test("404 not-found for /nope, /charge/extra, /chargeX; routing on the path of REQUEST_URI")
def t_404():
    for path in ("/nope", "/charge/extra", "/chargeX", "/charge/", "/CHARGE"):
        r = post(new_key("404"), env={"REQUEST_URI": path, "SCRIPT_NAME": path})
        problem(r, 404, "not-found", "POST " + path)
    # a web server mapping /charge as a script: SCRIPT_NAME=/charge, PATH_INFO=/extra
    r = post(new_key("404pi"), env={"REQUEST_URI": "/charge/extra", "PATH_INFO": "/extra"})
    problem(r, 404, "not-found", "SCRIPT_NAME /charge + PATH_INFO /extra")
    key = new_key("query")
    r = post(key, env={"REQUEST_URI": "/charge?x=1", "QUERY_STRING": "x=1"})
    std(r, "POST /charge?x=1", 201)


@test("without REQUEST_URI the route is SCRIPT_NAME + PATH_INFO")
def t_script_name():
    r = cgi("GET", None, env={"SCRIPT_NAME": "/healthz"})
    std(r, "SCRIPT_NAME=/healthz", 200)
    r = cgi("GET", None, env={"SCRIPT_NAME": "/charge", "PATH_INFO": "/extra"})
    problem(r, 404, "not-found", "SCRIPT_NAME=/charge PATH_INFO=/extra")
    key = new_key("sn")
    r = post(key, env={"REQUEST_URI": None, "SCRIPT_NAME": "/charge"})
    std(r, "POST with SCRIPT_NAME=/charge only", 201)


@test("400 missing / invalid Idempotency-Key, 415 for text/plain: nothing stored")
def t_400_415():
    r = cgi("POST", "/charge", auth_headers(None), charge_body())
    problem(r, 400, "missing-idempotency-key", "no Idempotency-Key")
    r = cgi("POST", "/charge", auth_headers("bad key with spaces"), charge_body())
    problem(r, 400, "invalid-idempotency-key", "key with spaces")
    key = new_key("415")
    r = cgi("POST", "/charge", auth_headers(key, ctype="text/plain"), charge_body())
    problem(r, 415, "unsupported-media-type", "text/plain")
    nothing_stored(key, "415")


@test("400 invalid-request names the field and stores nothing")
def t_400_body():
    key = new_key("400")
    r = post(key, b'{"amount":10.5,"currency":"usd","source":"tok_visa"}')
    p = problem(r, 400, "invalid-request", "fractional amount")
    check(any(e.get("field") == "amount" for e in p.get("errors", [])), "errors %r" % p.get("errors"))
    nothing_stored(key, "400")


@test("402 payment-declined: decline_code, no Retry-After, Idempotent-Replayed: false, then replayed")
def t_402():
    key = new_key("402")
    r = post(key, charge_body(source="tok_chargeDeclined"))
    p = problem(r, 402, "payment-declined", "declined")
    check(p.get("decline_code") == "card_declined", "decline_code %r" % p.get("decline_code"))
    check(r.h("Idempotent-Replayed") == "false", "Idempotent-Replayed %r" % r.h("Idempotent-Replayed"))
    check(r.h("Retry-After") is None, "402 with Retry-After %r" % r.h("Retry-After"))
    r2 = post(key, charge_body(source="tok_chargeDeclined"))
    problem(r2, 402, "payment-declined", "replayed decline")
    check(r2.h("Idempotent-Replayed") == "true" and r2.body == r.body, "replay %r" % r2)


@test("502 provider-error carries Retry-After: failed_ttl_s, replayed with it")
def t_502():
    key = new_key("502")
    r = post(key, charge_body(source="tok_providerError"))
    problem(r, 502, "provider-error", "tok_providerError")
    check(r.h("Retry-After") == str(FAILED_TTL_S), "Retry-After %r" % r.h("Retry-After"))
    check(r.h("Idempotent-Replayed") == "false", "Idempotent-Replayed %r" % r.h("Idempotent-Replayed"))
    r2 = post(key, charge_body(source="tok_providerError"))
    problem(r2, 502, "provider-error", "replay")
    check(r2.h("Retry-After") == str(FAILED_TTL_S) and r2.h("Idempotent-Replayed") == "true"
          and r2.body == r.body, "replay %r" % r2)
    check(len(ledger_lines(key)) == 1, "ledger %r" % ledger_lines(key))


@test("504 outcome-unknown after provider_timeout_ms with Retry-After; the retry settles it 502, replayed")
def t_504_unknown():
    key = new_key("504")
    r = post(key, charge_body(source="tok_providerTimeout"))
    problem(r, 504, "outcome-unknown", "tok_providerTimeout")
    check(r.h("Retry-After") == "1", "Retry-After %r" % r.h("Retry-After"))
    check(r.h("Idempotent-Replayed") == "false", "Idempotent-Replayed %r" % r.h("Idempotent-Replayed"))
    check(r.elapsed >= PROVIDER_TIMEOUT_MS / 1000.0 * 0.9, "504 after %.3fs" % r.elapsed)
    r2 = post(key, charge_body(source="tok_providerTimeout"))
    problem(r2, 502, "provider-error", "the retry of an unknown outcome")
    check(r2.h("Idempotent-Replayed") == "false", "Idempotent-Replayed %r" % r2.h("Idempotent-Replayed"))
    r3 = post(key, charge_body(source="tok_providerTimeout"))
    check(r3.h("Idempotent-Replayed") == "true" and r3.body == r2.body and r3.status == 502, "replay %r" % r3)
    check(len(ledger_lines(key)) == 1, "ledger %r" % ledger_lines(key))


@test("413 at max_request_bytes+1: nothing stored, and the body is read to the end (drained)")
def t_413_drained():
    key = new_key("413")
    for size in (MAX_BODY + 1, DRAIN_BOUND - 1000):
        body = b"{" + b" " * (size - 2) + b"}"
        r = post(key, body)
        problem(r, 413, "content-too-large", "%d-byte body" % size)
        check(not r.epipe and r.written == size,
              "%d-byte body: the responder read only part of it (written %d, EPIPE %s)" % (size, r.written, r.epipe))
    nothing_stored(key, "413")
    body = charge_body(amount=4242)
    exact = body[:1] + b" " * (MAX_BODY - len(body)) + body[1:]
    check(len(exact) == MAX_BODY, "test bug")
    r = post(key, exact)
    std(r, "exactly max_request_bytes", 201)


@test("413 for a body beyond the drain bound (4 x max_request_bytes): answered at once, process exits")
def t_413_bound():
    key = new_key("413b")
    size = 4 * DRAIN_BOUND
    r = post(key, b" " * size)
    problem(r, 413, "content-too-large", "%d-byte body" % size)
    check(r.elapsed < 10, "took %.1fs" % r.elapsed)
    check(r.written < size, "the responder read all %d bytes; want it to stop at about %d" % (size, DRAIN_BOUND))
    nothing_stored(key, "413 beyond the bound")


@test("no CONTENT_LENGTH (a chunked body under Apache mod_cgid): the body is read to EOF within max_request_bytes")
def t_no_content_length():
    key = new_key("chunked")
    body = charge_body()
    r = post(key, body, clen=None)
    std(r, "no CONTENT_LENGTH", 201)
    check(not r.epipe and r.written == len(body), "stdin not read (written %d, EPIPE %s)" % (r.written, r.epipe))
    big = b" " * (3 * MAX_BODY)
    r = post(new_key("chunked-big"), big, clen=None)
    problem(r, 413, "content-too-large", "no CONTENT_LENGTH, %d bytes on stdin" % len(big))
    check(not r.epipe and r.written == len(big), "stdin not drained (written %d, EPIPE %s)" % (r.written, r.epipe))
    k2 = new_key("chunked-empty")
    r = post(k2, body, clen="")
    problem(r, 400, "invalid-request", "empty CONTENT_LENGTH")
    nothing_stored(k2, "empty CONTENT_LENGTH")


@test("invalid or short CONTENT_LENGTH: 400, nothing stored")
def t_bad_content_length():
    key = new_key("clen")
    body = charge_body()
    for clen in ("12abc", "-5", " 52", "0x34"):
        r = post(key, body, clen=clen)
        check(r.parse_error is None and r.rc == 0 and r.status == 400, "CONTENT_LENGTH %r: %r" % (clen, r))
        check(not r.epipe, "CONTENT_LENGTH %r: stdin not drained" % clen)
    r = post(key, body, clen=str(len(body) + 10))
    problem(r, 400, "invalid-request", "CONTENT_LENGTH 10 bytes longer than the body")
    nothing_stored(key, "bad CONTENT_LENGTH")


@test("Redis unreachable: 503 service-unavailable with Retry-After, no provider call; /readyz 503")
def t_503():
    key = new_key("503")
    down = {"CHARGE_REDIS_URL": "unix://" + os.path.join(RUN, "no-such.sock")}
    r = post(key, env=down)
    problem(r, 503, "service-unavailable", "POST with Redis down")
    ra = r.h("Retry-After") or ""
    check(ra.isdigit() and int(ra) >= 1, "Retry-After %r" % ra)
    check(not ledger_lines(key), "the provider was called without a claim")
    h = cgi("GET", "/readyz", env=down)
    std(h, "/readyz with Redis down", 503)


@test("spill: a 1000-line-item order is spilled to a file and replayed byte for byte")
def t_spill():
    key = new_key("spill")
    items = [{"description": "i", "quantity": 1, "unit_amount": 1}] * 1000
    body = json.dumps({"amount": 1000, "currency": "usd", "source": "tok_visa", "line_items": items},
                      separators=(",", ":")).encode()
    r = post(key, body)
    std(r, "big order", 201)
    check(len(r.body) > 16384, "response only %d bytes" % len(r.body))
    name = redis("HGET", rkey(key), "body_file")
    check(name and os.path.isfile(os.path.join(CONFIG["CHARGE_SPILL_DIR"], name)), "spill file %r" % name)
    r2 = post(key, body)
    std(r2, "replay of the big order", 201)
    check(r2.body == r.body and r2.h("Idempotent-Replayed") == "true", "replay differs")


@test("GET /metrics: Prometheus text counting CGI requests across processes (metrics_file)")
def t_metrics():
    r = cgi("GET", "/metrics")
    std(r, "GET /metrics", 200)
    check(r.h("Content-Type").startswith("text/plain"), "Content-Type %r" % r.h("Content-Type"))
    text = r.body.decode()
    m = re.search(r'^charge_requests_total\{outcome="created"\} (\d+)', text, re.M)
    check(m and int(m.group(1)) >= 1, "no created requests counted: %r" % text[:400])


def main():
    if not (BIN and RUN and REDIS_SOCKET):
        print("Bail out! CGI_BIN, CGI_RUN and CGI_REDIS_SOCKET must be set (use tests/cgi/run.sh)")
        return 2
    return tap.run("CGI_ONLY", prefix="cgi: ")


if __name__ == "__main__":
    sys.exit(main())
