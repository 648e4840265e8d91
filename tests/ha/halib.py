"""halib.py - what the scale-out suites share (standard library only):
HTTP to a stack, redis-cli, the provider ledger, the nodes tools/ha.sh
started, and the rules every answer must follow.

Environment (set by tests/ha/*.sh): HA_API_KEY, HA_PRINCIPAL, HA_LEDGER,
HA_SPILL_DIR, HA_DIR (the tools/ha.sh directory).
"""
import concurrent.futures
import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import tap  # noqa: E402
from tap import Fail, check, diag, test  # noqa: E402,F401

API_KEY = os.environ.get("HA_API_KEY", "")
PRINCIPAL = os.environ.get("HA_PRINCIPAL", "ha")
LEDGER = os.environ.get("HA_LEDGER", "")
SPILL_DIR = os.environ.get("HA_SPILL_DIR", "")
HA_DIR = os.environ.get("HA_DIR", "")
KEY_PREFIX = "charge:"
RUN_ID = uuid.uuid4().hex[:8]
HTTP_TIMEOUT = 30

# Problem types a 503 may carry.
UNAVAILABLE_TYPES = ("/problems/service-unavailable", "/problems/outcome-not-durable")


class Resp:
    def __init__(self, status, headers, body, elapsed, t_end):
        self.status = status          # 0: no HTTP answer
        self.headers = headers        # {lower-case name: value}
        self.body = body
        self.elapsed = elapsed
        self.t_end = t_end            # time.monotonic() when answered

    def h(self, name):
        return self.headers.get(name.lower())

    @property
    def replayed(self):
        return self.h("Idempotent-Replayed") == "true"

    def json(self):
        try:
            return json.loads(self.body)
        except ValueError:
            return {}

    def __repr__(self):
        return "HTTP %d %r %r" % (self.status, self.headers, self.body[:300])


def request(base, method, path, body=None, headers=None, timeout=HTTP_TIMEOUT):
    """One HTTP request; a connection error gives status 0, its text the body."""
    u = urllib.parse.urlsplit(base)
    t0 = time.monotonic()
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        data = r.read()
        t1 = time.monotonic()
        return Resp(r.status, {k.lower(): v for k, v in r.getheaders()}, data, t1 - t0, t1)
    except OSError as e:
        t1 = time.monotonic()
        return Resp(0, {}, str(e).encode(), t1 - t0, t1)
    finally:
        conn.close()


def post(base, key, body, extra=None, timeout=HTTP_TIMEOUT):
    hdrs = {"Authorization": "Bearer " + API_KEY, "Idempotency-Key": key,
            "Content-Type": "application/json"}
    hdrs.update(extra or {})
    return request(base, "POST", "/charge", body, hdrs, timeout)


def get(base, path, timeout=5):
    return request(base, "GET", path, timeout=timeout)


def eviction_refused(bin_path, policy):
    """Starts bin_path --listen on a free port while a primary has
    maxmemory-policy policy: it must refuse to start and name the policy."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    pr = subprocess.run([bin_path, "--listen", "127.0.0.1:%d" % port], stdin=subprocess.DEVNULL,
                        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=20)
    out = pr.stdout.decode(errors="replace")
    check(pr.returncode != 0, "charge --listen started (rc %d): %s" % (pr.returncode, out[-500:]))
    check("maxmemory-policy is %s" % policy in out, "no reason given: %s" % out[-500:])


def new_key(tag):
    return "ha-%s-%s-%s" % (RUN_ID, tag, uuid.uuid4().hex[:10])


def charge_body(amount=1999, source="tok_visa", **extra):
    d = {"amount": amount, "currency": "usd", "source": source}
    d.update(extra)
    return json.dumps(d).encode()


def big_order(n=1000):
    items = [{"description": "i", "quantity": 1, "unit_amount": 1} for _ in range(n)]
    return json.dumps({"amount": n, "currency": "usd", "source": "tok_visa",
                       "line_items": items}, separators=(",", ":")).encode()


def rkey(key):
    return KEY_PREFIX + "idem:" + PRINCIPAL + ":" + key


def wait_health(base, secs=20.0, want=200):
    end = time.monotonic() + secs
    r = None
    while time.monotonic() < end:
        r = get(base, "/readyz", timeout=3)
        if r.status == want:
            return r
        time.sleep(0.1)
    raise Fail("/readyz did not answer %d within %.0fs: %r" % (want, secs, r))


def metric(base, name):
    text = get(base, "/metrics").body.decode()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


# ---------------------------------------------------------------- Redis

def cli_tls():
    """redis-cli's TLS arguments when the nodes speak TLS (HA_TLS_DIR)."""
    d = os.environ.get("HA_TLS_DIR", "")
    if not d:
        return []
    return ["--tls", "--cacert", d + "/ca.crt", "--cert", d + "/client.crt", "--key", d + "/client.key"]


def cli(port, *args, check_rc=True, stdin=None):
    """redis-cli against 127.0.0.1:port; stdout as text (raw mode)."""
    p = subprocess.run(["redis-cli"] + cli_tls() + ["--raw", "-h", "127.0.0.1", "-p", str(port)]
                       + [str(a) for a in args],
                       input=stdin, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
    out = p.stdout.decode(errors="replace")
    if check_rc:
        check(p.returncode == 0, "redis-cli -p %s %s: rc %d: %s" % (port, " ".join(map(str, args)), p.returncode, out))
    return out


def info_field(port, section, field):
    for line in cli(port, "INFO", section).splitlines():
        if line.startswith(field + ":"):
            return line.split(":", 1)[1].strip()
    return None


def cmdstat_calls(port, cmd):
    """calls= of INFO commandstats for cmd (0 when never called)."""
    v = info_field(port, "commandstats", "cmdstat_" + cmd)
    if not v:
        return 0
    m = re.search(r"calls=(\d+)", v)
    return int(m.group(1)) if m else 0


def node_pid(port):
    with open(os.path.join(HA_DIR, "node-%d" % int(port), "pid")) as f:
        return int(f.read().strip())


def node_comm(pid):
    try:
        with open("/proc/%d/comm" % pid) as f:
            return f.read().strip()
    except OSError:
        return ""


def node_signal(port, sig):
    """Sends sig to the node tools/ha.sh started on port (checked by comm)."""
    pid = node_pid(port)
    check(node_comm(pid) in ("redis-server", "redis-sentinel"),
          "pid %d of port %s is %r, not a Redis node" % (pid, port, node_comm(pid)))
    os.kill(pid, sig)
    return pid


def node_kill9(port):
    pid = node_signal(port, signal.SIGKILL)
    end = time.monotonic() + 5
    while time.monotonic() < end and node_comm(pid) in ("redis-server",):
        try:
            with open("/proc/%d/stat" % pid) as f:
                if f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                    break
        except OSError:
            break  # reaped between the two reads: gone
        time.sleep(0.01)


def ha_sh(cmd, timeout=60):
    """A command with tools/ha.sh's functions loaded."""
    repo = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    p = subprocess.run(["bash", "-c", ". '%s/tools/ha.sh' && %s" % (repo, cmd)],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)
    check(p.returncode == 0, "%s: rc %d: %s" % (cmd, p.returncode, p.stdout.decode(errors="replace")))
    return p.stdout.decode()


# ---------------------------------------------------------------- ledger

def ledger_ids():
    """{idempotency key: [charge ids of its provider calls]} for PRINCIPAL."""
    out = {}
    try:
        with open(LEDGER, "rb") as f:
            for ln in f:
                r = ln.rstrip(b"\n").decode().split("\t")
                if len(r) >= 4 and r[1] == PRINCIPAL:
                    out.setdefault(r[2], []).append(r[3])
    except FileNotFoundError:
        pass
    return out


def check_one_charge_per_key(keys):
    """At most one charge id per key; returns (keys called, calls)."""
    ids = ledger_ids()
    bad = {k: v for k, v in ids.items() if k in keys and len(set(v)) > 1}
    check(not bad, "%d key(s) with more than one charge id: %r" % (len(bad), list(bad.items())[:3]))
    return sum(1 for k in keys if k in ids), sum(len(ids[k]) for k in keys if k in ids)


# ---------------------------------------------------------------- answers

def retry_after_ok(r):
    ra = r.h("Retry-After")
    return ra is not None and ra.isdigit() and int(ra) >= 1


def check_documented(r, what, allow=(201, 402, 409, 503)):
    """An answer is one of the documented ones: allowed statuses, 409 and
    503 with Retry-After, 503 with a known problem type."""
    check(r.status in allow, "%s: HTTP %d is not one of %r: %r" % (what, r.status, allow, r))
    if r.status in (409, 503):
        check(retry_after_ok(r), "%s: %d without Retry-After: %r" % (what, r.status, r))
    if r.status == 503:
        check(r.json().get("type") in UNAVAILABLE_TYPES, "%s: 503 of type %r" % (what, r.json().get("type")))


def same_answer(a, b):
    """b replays a: same status, Content-Type and body, marked as a replay."""
    return (b.status == a.status and b.replayed and b.body == a.body and
            b.h("Content-Type") == a.h("Content-Type"))


def settle(base, key, body, deadline, extra=None):
    """Sends key until it gets an outcome (201/402), honouring Retry-After
    (at most 1 s a time); 409, 503, no answer and 504 outcome-unknown are
    retried. Returns (the last answer, every answer)."""
    seen = []
    while True:
        r = post(base, key, body, extra=extra)
        seen.append(r)
        if r.status in (201, 402) or time.monotonic() > deadline:
            return r, seen
        if r.status in (409, 503, 0) or (r.status == 504 and r.json().get("type") == "/problems/outcome-unknown"):
            ra = r.h("Retry-After")
            time.sleep(min(1.0, float(ra)) if ra and ra.isdigit() else 0.2)
        else:
            return r, seen


def run_parallel(fn, items, workers):
    """fn(item) for every item on `workers` threads; results in order."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as ex:
        return list(ex.map(fn, items))


def statuses(rs):
    c = {}
    for r in rs:
        c[r.status] = c.get(r.status, 0) + 1
    return ", ".join("%d x %s" % (n, s) for s, n in sorted(c.items()))
