"""harness.py - what the fault cases share (Python standard library only).

  * Stack: a lighttpd + responders started with tools/stack.sh, with its own
    CHARGE_* overrides, on the run's one Redis, spill directory and ledger;
  * Redis control (kill -9 and restart from the same AOF, STOP/CONT, CONFIG)
    and a small RESP client on the Redis unix socket;
  * send(): every HTTP exchange of the suite goes through it and is kept in
    HISTORY with its timing, status, headers and body;
  * fault windows: when a fault was active, and how much longer a request
    that overlapped it may take;
  * the gate over any set of exchanges, and the final replay of every
    acknowledged outcome.

The environment comes from tests/faults/run.sh (FAULTS_* and CHARGE_*).
"""

import collections
import http.client
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "tests", "lib"))
import fcgi  # noqa: E402  (tests/lib: the FastCGI client)
import resp  # noqa: E402  (tests/lib: the Redis client)

RUN = os.environ.get("FAULTS_RUN", "")
BIN = os.environ.get("FAULTS_BIN", "")
STACK_SH = os.path.join(REPO, "tools", "stack.sh")
REDIS_SOCK = os.path.join(RUN, "redis.sock")
LEDGER = os.environ.get("CHARGE_PROVIDER_LEDGER", "")
SPILL_DIR = os.environ.get("CHARGE_SPILL_DIR", "")
KEY_PREFIX = os.environ.get("CHARGE_KEY_PREFIX", "charge:")
SPILL_MODE = os.environ.get("FAULTS_SPILL_MODE", "none")   # tmpfs | fiu | none
PLAIN_BIN = os.environ.get("FAULTS_PLAIN_BIN", "")


def env_int(name, default):
    v = os.environ.get(name, "").strip()
    return int(v) if v else default


REDIS_TIMEOUT_S = env_int("CHARGE_REDIS_TIMEOUT_MS", 1000) / 1000.0
LATENCY_S = env_int("CHARGE_PROVIDER_LATENCY_MS", 100) / 1000.0
PROVIDER_TIMEOUT_S = env_int("CHARGE_PROVIDER_TIMEOUT_MS", 500) / 1000.0
LOCK_TTL_S = env_int("CHARGE_LOCK_TTL_S", 2)
FAILED_TTL_S = env_int("CHARGE_FAILED_TTL_S", 3600)
SPILL_THRESHOLD = env_int("CHARGE_SPILL_THRESHOLD_BYTES", 16384)
MAX_REQUEST_BYTES = env_int("CHARGE_MAX_REQUEST_BYTES", 262144)
REQUEST_TIMEOUT_S = env_int("FAULTS_REQUEST_TIMEOUT_MS", 1500) / 1000.0

PRINCIPALS = {
    "demo": "sk_test_demo",
    os.environ.get("FAULTS_PRINCIPAL_B", "acme"): os.environ.get("FAULTS_API_KEY_B", "sk_test_acme"),
}
RUN_ID = os.environ.get("FAULTS_RUN_ID", "%06x" % random.getrandbits(24))
SEED = env_int("FAULTS_SEED", random.getrandbits(32))

# acknowledged outcomes: recorded for good, replayable. A 504 outcome-unknown
# is not one: the record is unknown, and a retry settles it (a 502 from the
# in-process provider, which knows it never charged).
ACK = (201, 402, 502)


class Fail(Exception):
    """A failed expectation of a case."""


def check(cond, msg):
    if not cond:
        raise Fail(msg)


def log(msg):
    """A comment line, right away (the suite runs for minutes)."""
    print("# " + msg)
    sys.stdout.flush()


# ---------------------------------------------------------------- shell

def sh(script, *args, env=None, timeout=60):
    """Runs bash with tools/stack.sh sourced; $1.. are args. Returns stdout."""
    p = subprocess.run(["bash", "-c", ". '%s' && %s" % (STACK_SH, script), "sh"] + [str(a) for a in args],
                       stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=timeout, env=env)
    if p.returncode != 0:
        raise Fail("shell step failed (rc %d): %s\n%s" % (p.returncode, script,
                                                          p.stderr.decode(errors="replace")[-1500:]))
    return p.stdout.decode()


def proc_alive(pid, comm=None):
    try:
        with open("/proc/%d/stat" % pid) as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        if state in ("Z", "X"):
            return False
        if comm is not None:
            with open("/proc/%d/comm" % pid) as f:
                return f.read().strip() == comm
        return True
    except (OSError, IndexError):
        return False


def children(ppid, comm):
    """PIDs whose parent is ppid and whose /proc comm is comm."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                st = f.read()
        except OSError:
            continue
        name = st[st.find("(") + 1:st.rfind(")")]
        fields = st.rsplit(")", 1)[1].split()
        if name == comm and int(fields[1]) == ppid and fields[0] not in ("Z", "X"):
            out.append(int(d))
    return sorted(out)


# ---------------------------------------------------------------- stacks

STACKS = []


class Stack:
    """lighttpd + `procs` responder processes, started by stack.sh with this
    stack's CHARGE_* overrides (on top of run.sh's)."""

    def __init__(self, name, procs=3, fiu=False, **cfg):
        """fiu: the responders run the plain build under fiu-run (libfiu's
        POSIX preload, remote control through fiu-ctrl); the ASan build
        crashes under that preload."""
        self.name = name
        self.dir = os.path.join(RUN, "lt-" + name)
        os.makedirs(self.dir, exist_ok=True)
        self.cfg = cfg
        self.fiu = fiu
        bin_path = BIN
        if fiu:
            bin_path = os.path.join(self.dir, "charge-under-fiu")
            with open(bin_path, "w") as f:
                f.write("#!/bin/sh\n# lighttpd's bin-path for this stack: the responder under fiu-run\n"
                        "exec fiu-run -x -f '%s' '%s' \"$@\"\n" % (os.path.join(self.dir, "fiu"), PLAIN_BIN))
            os.chmod(bin_path, 0o755)
        env = dict(os.environ)
        for k, v in cfg.items():
            env["CHARGE_" + k.upper()] = str(v)
        self.latency_s = int(env.get("CHARGE_PROVIDER_LATENCY_MS", "100")) / 1000.0
        self.provider_timeout_s = int(env.get("CHARGE_PROVIDER_TIMEOUT_MS", "500")) / 1000.0
        self.lock_ttl_s = int(env.get("CHARGE_LOCK_TTL_S", "2"))
        self.procs = procs
        last = None
        for _ in range(3):
            try:
                out = sh('port=$(stack_port_pick) && stack_lighttpd_start "$1" "$1" "$port" "$2" "$3" '
                         '&& echo "$STACK_LIGHTTPD_PID $port"', self.dir, bin_path, procs, env=env)
                pid, port = out.split()
                break
            except Fail as e:
                last = e
        else:
            raise last
        self.pid, self.port = int(pid), int(port)
        self.seen_workers = set()
        STACKS.append(self)
        end = time.monotonic() + 10
        while len(self.workers()) < procs and time.monotonic() < end:
            time.sleep(0.05)
        self.check_sanitizer_env()
        log("stack %s: lighttpd %d on 127.0.0.1:%d, %d responder(s) %s%s, %s" % (
            name, self.pid, self.port, procs, self.workers(), " (plain build under fiu-run)" if fiu else "",
            " ".join("%s=%s" % kv for kv in sorted(cfg.items())) or "base configuration"))

    def check_sanitizer_env(self):
        """The responders report through the sanitizer options of this
        environment (test.sh's with_asan checks the report directory)."""
        want = {k: os.environ[k] for k in ("ASAN_OPTIONS", "UBSAN_OPTIONS") if k in os.environ}
        for w in self.workers():
            try:
                with open("/proc/%d/environ" % w, "rb") as f:
                    env = dict(kv.split(b"=", 1) for kv in f.read().split(b"\0") if b"=" in kv)
            except OSError:
                continue
            for k, v in want.items():
                check(env.get(k.encode()) == v.encode(),
                      "responder %d of stack %s has %s=%r, want %r" % (w, self.name, k, env.get(k.encode()), v))

    def workers(self):
        w = children(self.pid, "charge")
        self.seen_workers.update(w)
        return w

    def fiu_ctrl(self, command):
        """A libfiu remote control command to every responder of a fiu stack."""
        ws = self.workers()
        check(ws, "stack %s has no responder" % self.name)
        p = subprocess.run(["fiu-ctrl", "-f", os.path.join(self.dir, "fiu"), "-c", command] + [str(w) for w in ws],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=10)
        out = p.stdout.decode(errors="replace")
        check(p.returncode == 0 and "rror" not in out, "fiu-ctrl %r: %s" % (command, out))

    def sockets(self):
        return sorted(os.path.join(self.dir, f) for f in os.listdir(self.dir)
                      if f.startswith("charge.sock-"))

    def log_text(self):
        try:
            with open(os.path.join(self.dir, "lighttpd.stderr.log"), errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def stop(self):
        """Stops lighttpd (it TERMs its responders) and waits until every
        responder it ever had is gone, so their sanitizer reports are written."""
        if self not in STACKS:
            return
        ws = set(self.workers()) | self.seen_workers
        for w in ws:                 # a stopped responder would never see TERM
            if proc_alive(w, "charge"):
                try:
                    os.kill(w, signal.SIGCONT)
                except OSError:
                    pass
        sh('stack_lighttpd_stop "$1"', self.dir)
        end = time.monotonic() + 10
        while any(proc_alive(w, "charge") for w in ws) and time.monotonic() < end:
            time.sleep(0.05)
        STACKS.remove(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def stop_all_stacks():
    for s in list(STACKS):
        try:
            s.stop()
        except Exception as e:   # noqa: BLE001 - cleanup goes on
            log("stopping stack %s: %s" % (s.name, e))


# ---------------------------------------------------------------- Redis

RedisError = resp.RedisError


def redis(*args, timeout=5):
    """One command on the run's Redis (its unix socket)."""
    return resp.command(REDIS_SOCK, *args, timeout=timeout)


def rkey(principal, key):
    return KEY_PREFIX + "idem:" + principal + ":" + key


def record(principal, key):
    flat = redis("HGETALL", rkey(principal, key)) or []
    return {flat[i].decode(): flat[i + 1] for i in range(0, len(flat), 2)}


def redis_info_int(field):
    for line in redis("INFO", "memory").decode().splitlines():
        if line.startswith(field + ":"):
            return int(line.split(":", 1)[1])
    raise Fail("INFO memory has no %s" % field)


def redis_pid():
    try:
        with open(os.path.join(RUN, "redis.pid")) as f:
            pid = int(f.read().strip())
    except (OSError, ValueError):
        return None
    return pid if proc_alive(pid, "redis-server") else None


def redis_kill9():
    sh('stack_redis_stop "$1" KILL', RUN)


def redis_start():
    sh('stack_redis_start "$1" "$1/redis" "$1"', RUN)


def redis_signal(sig):
    pid = redis_pid()
    check(pid is not None, "no Redis process of this run to signal")
    os.kill(pid, sig)


def redis_ok():
    try:
        return redis("PING", timeout=1) == "PONG"
    except (OSError, RedisError):
        return False


# ---------------------------------------------------------------- faults

class Window:
    """A fault's active time. A request that overlaps it may take `allow`
    seconds longer; with lenient=True the web server's own 5xx or a dropped
    connection is an expected answer for it (the responder was killed)."""

    def __init__(self, kind, allow=0.0, lenient=False):
        self.kind, self.allow, self.lenient = kind, allow, lenient
        self.t0 = time.monotonic()
        self.t1 = None
        WINDOWS.append(self)

    def end(self, linger=0.0):
        self.t1 = time.monotonic() + linger

    def overlaps(self, a, b):
        return self.t0 <= b and (self.t1 is None or a <= self.t1)


WINDOWS = []


# ---------------------------------------------------------------- HTTP

HISTORY = []
HISTORY_LOCK = threading.Lock()


class Ex:
    """One exchange. kind: charge (a payment request: documented outcomes),
    bad (a malformed one: exactly `expect`), slow (a stalled body: 408)."""

    __slots__ = ("case", "principal", "key", "body", "hdrs", "kind", "expect", "t0", "t1",
                 "status", "rh", "rbody", "err", "bound", "origin", "via", "note", "raw_head",
                 "provider_s", "w0", "w1")

    def elapsed(self):
        return (self.t1 or self.t0) - self.t0

    def h(self, name):
        return self.rh.get(name.lower()) if self.rh else None

    def label(self):
        if self.err:
            return self.err
        if self.origin != "app":
            return "server-%d" % self.status
        return str(self.status)

    def slug(self):
        if self.origin != "app" or not self.rbody or not (self.h("content-type") or "").startswith("application/problem+json"):
            return None
        try:
            t = json.loads(self.rbody).get("type", "")
        except ValueError:
            return None
        return t.rsplit("/", 1)[-1]

    def replayed(self):
        return self.h("idempotent-replayed")

    def __repr__(self):
        return "%s %s/%s -> %s in %.2fs (bound %.1fs)%s %r" % (
            self.case, self.principal, self.key, self.label(), self.elapsed(), self.bound,
            " replayed=%s" % self.replayed() if self.rh else "", (self.rbody or b"")[:160])


def keep(ex):
    with HISTORY_LOCK:
        HISTORY.append(ex)
    return ex


def bound_for(body, stack, wait_s=0, extra=0.0):
    """How long a /charge request may take: redis_timeout_ms + 1 s, plus any
    Prefer wait, plus what the caller adds for the fault under test. The
    provider's time (provider_for) is added by the gate only when the ledger
    shows a provider call during the request, or when the outcome may be
    unknown (see unknown_path).

    A request whose outcome may be unknown (tok_providerTimeout) may also
    send one more Redis command than a plain charge, each bounded by
    redis_timeout_ms: the unknown index entry (docs/API.md section 18.2)."""
    more = REDIS_TIMEOUT_S if unknown_path(body) else 0.0
    return REDIS_TIMEOUT_S + 1.0 + more + wait_s + extra


def unknown_path(body):
    """True for a body whose outcome may be recorded unknown: its retry
    takes the record over and may wait up to provider_timeout_ms for the
    first attempt before it settles, without a ledger line (docs/API.md
    section 7.3)."""
    return bool(body) and b"tok_providerTimeout" in body


def provider_for(body, stack):
    """The provider's time for this body: its latency, or its timeout for
    tok_providerTimeout."""
    provider = stack.latency_s if stack else LATENCY_S
    if body and b"tok_providerTimeout" in body:
        provider = max(provider, stack.provider_timeout_s if stack else PROVIDER_TIMEOUT_S)
    return provider


def send(case, stack, principal, key, body, kind="charge", expect=None, extra_headers=None,
         ctype="application/json", method="POST", path="/charge", api_key=None, wait_s=0,
         bound_extra=0.0, note=None):
    """One HTTP request through stack's lighttpd, kept in HISTORY."""
    ex = Ex()
    ex.case, ex.principal, ex.key, ex.body, ex.kind = case, principal, key, body, kind
    ex.expect, ex.note, ex.via = expect, note, "http"
    ex.status = ex.rh = ex.rbody = ex.err = ex.origin = ex.raw_head = None
    hdrs = {}
    ak = api_key if api_key is not None else PRINCIPALS.get(principal, "")
    if ak:
        hdrs["Authorization"] = "Bearer " + ak
    if key is not None:
        hdrs["Idempotency-Key"] = key
    if ctype is not None:
        hdrs["Content-Type"] = ctype
    if wait_s:
        hdrs["Prefer"] = "wait=%d" % wait_s
    hdrs.update(extra_headers or {})
    ex.hdrs = hdrs
    ex.bound = bound_for(body, stack, wait_s, bound_extra)
    ex.provider_s = provider_for(body, stack) if kind == "charge" else 0.0
    conn = http.client.HTTPConnection("127.0.0.1", stack.port, timeout=ex.bound + ex.provider_s + 4)
    ex.w0 = time.time()
    ex.t0 = time.monotonic()
    try:
        conn.request(method, path, body=body, headers=hdrs)
        r = conn.getresponse()
        ex.rbody = r.read()
        ex.status = r.status
        ex.rh = {k.lower(): v for k, v in r.getheaders()}
        ex.origin = "app" if "x-request-id" in ex.rh else "server"
    except socket.timeout:
        ex.err = "hang"
    except (ConnectionError, http.client.HTTPException, OSError) as e:
        ex.err = "no-answer"
        ex.note = (note or "") + " (%s)" % type(e).__name__
    finally:
        ex.t1 = time.monotonic()
        ex.w1 = time.time()
        conn.close()
    return keep(ex)


def header_dict(lines):
    """{lower-case name: value} of "Name: value" header lines (bytes)."""
    out = {}
    for line in lines:
        k, _, v = line.partition(b":")
        out[k.strip().lower().decode(errors="replace")] = v.strip().decode(errors="replace")
    return out


def send_fcgi(case, sockpath, principal, key, body, params_extra=None, kind="bad", expect=None,
              bound=5.0, body_split=None, body_pause=0.0, note=None, raw_params=None):
    """One request straight to a responder's FastCGI socket (what lighttpd
    would send), kept in HISTORY. raw_params replaces the params entirely."""
    ex = Ex()
    ex.case, ex.principal, ex.key, ex.body, ex.kind = case, principal, key, body, kind
    ex.expect, ex.note, ex.via, ex.bound = expect, note, "fcgi", bound
    ex.status = ex.rh = ex.rbody = ex.err = ex.origin = ex.raw_head = None
    ex.provider_s = 0.0
    params = raw_params
    if params is None:
        params = fcgi.charge_params(key if key is not None else "", body,
                                    api_key=PRINCIPALS.get(principal, "x"))
        params.update(params_extra or {})
    ex.hdrs = params
    ex.w0 = time.time()
    ex.t0 = time.monotonic()
    s = None
    try:
        s = fcgi.connect(sockpath, timeout=bound + 4)
        fcgi.send_request(s, params, body, body_split=body_split, body_pause=body_pause)
        out, ended = fcgi.read_response(s)
        head, _, rbody = out.partition(b"\r\n\r\n")
        ex.raw_head = head
        ex.rbody = rbody
        ex.rh = header_dict(head.split(b"\r\n"))
        ex.status = fcgi.status_of(out)
        if ex.status is None:
            ex.err = "no-answer"
        ex.origin = "app"
    except socket.timeout:
        ex.err = "hang"
    except OSError as e:
        ex.err = "no-answer"
        ex.note = (note or "") + " (%s)" % type(e).__name__
    finally:
        ex.t1 = time.monotonic()
        ex.w1 = time.time()
        if s is not None:
            s.close()
    return keep(ex)


# ---------------------------------------------------------------- orders

TOKENS = [("tok_visa", 70), ("tok_chargeDeclined", 8), ("tok_insufficientFunds", 4),
          ("tok_providerError", 8), ("tok_providerTimeout", 3), ("tok_mastercard", 7)]


def pick_token(rng):
    total = sum(w for _, w in TOKENS)
    x = rng.uniform(0, total)
    for t, w in TOKENS:
        x -= w
        if x <= 0:
            return t
    return TOKENS[0][0]


def order(rng, items=0, source=None, amount=None, desc_len=24):
    """A valid /charge body; items > 0 adds that many line items (the
    amount is their sum). ~350 items make a response above 16 KiB."""
    d = {"currency": rng.choice(["usd", "eur", "gbp"]), "source": source or pick_token(rng)}
    if items:
        li = [{"description": ("item %d " % i + "x" * desc_len)[:200], "quantity": 1,
               "unit_amount": rng.randint(1, 99)} for i in range(items)]
        d["line_items"] = li
        d["amount"] = sum(x["unit_amount"] for x in li)
    else:
        d["amount"] = amount or rng.randint(100, 99999)
    if rng.random() < 0.3:
        d["metadata"] = {"order": "o-%d" % rng.randint(1, 10 ** 9)}
    return json.dumps(d, separators=(",", ":")).encode()


class Keys:
    """Unique Idempotency-Keys: f-<run>-<case>-<n>."""

    def __init__(self, case):
        self.case, self.n, self.lock = case, 0, threading.Lock()

    def new(self):
        with self.lock:
            self.n += 1
            return "f-%s-%s-%d" % (RUN_ID, self.case, self.n)


# ---------------------------------------------------------------- load

def of_case(case):
    with HISTORY_LOCK:
        return [e for e in HISTORY if e.case == case]


def latest_by_key(exs):
    """(principal, key, body) -> exchanges, charge kind only."""
    d = collections.OrderedDict()
    for e in exs:
        if e.kind == "charge" and e.key is not None:
            d.setdefault((e.principal, e.key, e.body), []).append(e)
    return d


def acked(es):
    return [e for e in es if e.origin == "app" and e.status in ACK]


class Load:
    """Closed-loop clients sending fresh charges, replays of their own
    acknowledged keys and retries of their unresolved ones, until stopped.
    big: share of large orders (spilled responses)."""

    def __init__(self, case, stack, threads=3, big=0.1, replay=0.15, bound_extra=0.0,
                 principals=None, huge_items=350):
        self.case, self.stack, self.big, self.replay = case, stack, big, replay
        self.bound_extra, self.huge_items = bound_extra, huge_items
        self.principals = principals or list(PRINCIPALS)
        self.keys = Keys(case)
        self.stop_evt = threading.Event()
        self.sent = 0
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(threads)]
        for t in self.threads:
            t.start()

    def _run(self, i):
        rng = random.Random("%s-%s-%d" % (SEED, self.case, i))
        mine = collections.OrderedDict()     # (principal, key) -> [body, acknowledged]
        while not self.stop_evt.is_set():
            r = rng.random()
            unresolved = [pk for pk, v in mine.items() if not v[1]]
            if mine and r < self.replay:
                p, k = rng.choice(list(mine))
            elif unresolved and r < self.replay + 0.25:
                p, k = rng.choice(unresolved)
            else:
                p, k = rng.choice(self.principals), self.keys.new()
                mine[(p, k)] = [order(rng, items=self.huge_items if rng.random() < self.big else 0), False]
            ex = send(self.case, self.stack, p, k, mine[(p, k)][0], bound_extra=self.bound_extra)
            with self.lock:
                self.sent += 1
            if ex.origin == "app" and ex.status in ACK:
                mine[(p, k)][1] = True
            elif ex.err or ex.origin != "app" or ex.status in (503, 409):
                time.sleep(0.05)

    def stop(self):
        self.stop_evt.set()
        for t in self.threads:
            t.join(60)


def converge(case, stack, rounds=8, threads=3, deadline_s=40):
    """Retries (same principal, key, body; Prefer: wait=3) every request of
    `case` that has no acknowledged outcome yet, until each has one. Returns
    the keys that never got one."""
    end = time.monotonic() + deadline_s
    for _ in range(rounds):
        todo = [k for k, es in latest_by_key(of_case(case)).items() if not acked(es)]
        if not todo or time.monotonic() > end:
            return todo
        lock = threading.Lock()

        def worker():
            while time.monotonic() < end:
                with lock:
                    if not todo:
                        return
                    p, k, b = todo.pop()
                send(case, stack, p, k, b, wait_s=3, note="converge")
        ts = [threading.Thread(target=worker, daemon=True) for _ in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(deadline_s + 10)
        time.sleep(0.3)
    return [k for k, es in latest_by_key(of_case(case)).items() if not acked(es)]


# ---------------------------------------------------------------- ledger

def ledger_rows():
    try:
        with open(LEDGER, "rb") as f:
            rows = [ln.rstrip(b"\n").decode(errors="replace").split("\t") for ln in f]
    except FileNotFoundError:
        return []
    return [r for r in rows if len(r) >= 7]


def ledger_for(principal, key):
    return [r for r in ledger_rows() if r[1] == principal and r[2] == key]


# ---------------------------------------------------------------- gate

def allowed(ex):
    """None when ex's answer is one it may get, else why not."""
    lenient = any(w.lenient and w.overlaps(ex.t0, ex.t1) for w in WINDOWS)
    if ex.err == "hang":
        return "no answer within %.1fs (hang)" % (ex.bound + ex.provider_s + 4)
    if ex.kind == "bad":       # expect: labels, "400" or "server-400"
        return None if ex.label() in ex.expect else "want %s, got %s" % (sorted(ex.expect), ex.label())
    if ex.err or ex.origin != "app":
        if lenient and (ex.err or ex.status in (500, 502, 503)):
            return None
        return "answer %s is not the responder's (web server error or dropped connection)" % ex.label()
    st, slug = ex.status, ex.slug()
    if ex.kind == "slow":
        return None if st == 408 and slug == "request-timeout" else "want 408, got %d" % st
    ok = {201, 402, 409, 502, 503, 504} | set(ex.expect or ())
    if st not in ok:
        return "undocumented status %d for a /charge under faults (%s)" % (st, slug)
    if st == 201:
        return None if (ex.h("content-type") or "").startswith("application/json") else "201 not JSON"
    want = {402: "payment-declined", 409: "request-in-progress", 422: "idempotency-key-reused",
            500: "stored-response-unavailable", 502: "provider-error", 503: "service-unavailable",
            504: "outcome-unknown"}.get(st)
    if want and slug != want:
        return "%d with problem type %r, want %s" % (st, slug, want)
    if st in (409, 502, 503, 504):
        ra = ex.h("retry-after") or ""
        if not ra.isdigit() or int(ra) < 1:
            return "%d without a usable Retry-After (%r)" % (st, ra)
    return None


def allowance(ex):
    return sum(w.allow for w in WINDOWS if w.overlaps(ex.t0, ex.t1))


def gate(exs, keyfilter=None):
    """The gate over exchanges `exs`. Returns (numbers, problems)."""
    problems = []
    by_key = collections.defaultdict(list)
    for e in exs:
        if e.kind == "charge" and e.key is not None:
            by_key[(e.principal, e.key)].append(e)
    keys = set(by_key)
    # 1. at most one charge id per (principal, key) in the ledger
    ids = collections.defaultdict(set)
    nlines = 0
    for r in ledger_rows():
        k = (r[1], r[2])
        if k in keys or (keyfilter and keyfilter(r[2])):
            ids[k].add(r[3])
            nlines += 1
    multi = {k: v for k, v in ids.items() if len(v) > 1}
    for k, v in sorted(multi.items()):
        problems.append("ledger: %d charge ids for %s/%s: %s" % (len(v), k[0], k[1], sorted(v)))
    # 2. acknowledged outcomes of a key identical; at most one fresh
    diff_bodies = fresh_dupes = wrong_id = 0
    for k, es in by_key.items():
        a = acked(es)
        if not a:
            continue
        first = a[0]
        for e in a[1:]:
            if e.status != first.status or e.rbody != first.rbody:
                diff_bodies += 1
                problems.append("%s/%s: outcome %d %r differs from the first %d %r" % (
                    k[0], k[1], e.status, e.rbody[:120], first.status, first.rbody[:120]))
        fresh = [e for e in a if e.replayed() == "false"]
        if len(fresh) > 1:
            fresh_dupes += 1
            problems.append("%s/%s: %d fresh (Idempotent-Replayed: false) outcomes" % (k[0], k[1], len(fresh)))
        if first.status in (201, 402):
            try:
                j = json.loads(first.rbody)
                cid = j.get("id") if first.status == 201 else j.get("charge")
            except ValueError:
                cid = None
            if cid not in ids.get(k, set()):
                wrong_id += 1
                problems.append("%s/%s: answered charge %r, ledger has %s" % (k[0], k[1], cid, sorted(ids.get(k, ()))))
    # 3. answers: documented, within the time bound (the provider's time
    #    counts when the ledger has a call for the key during the request)
    calls = collections.defaultdict(list)
    for r in ledger_rows():
        calls[(r[1], r[2])].append(int(r[0]) / 1000.0)
    hangs = bad = 0
    worst = 0.0
    for e in exs:
        why = allowed(e)
        if why:
            bad += 1
            problems.append("%s: %s" % (why, e))
        called = any(e.w0 - 0.05 <= t <= e.w1 + 0.05 for t in calls.get((e.principal, e.key), ()))
        limit = e.bound + allowance(e) + (e.provider_s if called or unknown_path(e.body) else 0.0)
        worst = max(worst, e.elapsed() - limit)
        if e.err != "hang" and e.elapsed() > limit:
            hangs += 1
            problems.append("took %.2fs > %.2fs allowed: %r" % (e.elapsed(), limit, e))
        elif e.err == "hang":
            hangs += 1
    hist = collections.Counter(e.label() for e in exs)
    nums = collections.OrderedDict([
        ("requests", len(exs)),
        ("keys", len(keys)),
        ("acknowledged keys", sum(1 for es in by_key.values() if acked(es))),
        ("ledger lines", nlines),
        ("keys charged", len(ids)),
        ("keys with >1 charge id", len(multi)),
        ("differing outcomes", diff_bodies),
        ("duplicate fresh outcomes", fresh_dupes),
        ("charge id not in ledger", wrong_id),
        ("undocumented answers", bad),
        ("over time bound", hangs),
        ("max elapsed over bound", "%.2fs" % worst),
    ])
    return nums, problems, hist


def histogram(hist):
    return " ".join("%s:%d" % (k, v) for k, v in sorted(hist.items(), key=lambda kv: (len(kv[0]), kv[0])))


def final_replays(stack, case="final", threads=3):
    """Sends every acknowledged request once more; each must replay: same
    status, body, Content-Type and Retry-After, Idempotent-Replayed: true."""
    with HISTORY_LOCK:
        exs = list(HISTORY)
    firsts = collections.OrderedDict()
    for e in exs:
        if e.kind == "charge" and e.origin == "app" and e.status in ACK:
            firsts.setdefault((e.principal, e.key), e)
    todo = list(firsts.values())
    problems = []
    lock = threading.Lock()

    def worker():
        while True:
            with lock:
                if not todo:
                    return
                e = todo.pop()
            r = send(case, stack, e.principal, e.key, e.body, extra_headers={
                k: v for k, v in e.hdrs.items() if k not in ("Authorization", "Idempotency-Key", "Content-Type", "Prefer")})
            why = None
            if r.origin != "app" or r.status != e.status:
                why = "status %s, recorded %d" % (r.label(), e.status)
            elif r.rbody != e.rbody:
                why = "body differs: %r vs recorded %r" % (r.rbody[:100], e.rbody[:100])
            elif r.replayed() != "true":
                why = "Idempotent-Replayed %r" % r.replayed()
            elif r.h("content-type") != e.h("content-type") or r.h("retry-after") != e.h("retry-after"):
                why = "headers differ: %r/%r vs %r/%r" % (r.h("content-type"), r.h("retry-after"),
                                                           e.h("content-type"), e.h("retry-after"))
            if why:
                with lock:
                    problems.append("%s %s/%s: %s" % (e.case, e.principal, e.key, why))
    ts = [threading.Thread(target=worker, daemon=True) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(180)
    return len(firsts), problems


def send_raw(case, stack, principal, key, parts, kind="bad", expect=None, bound=5.0, note=None,
             body=None, provider_s=0.0):
    """Raw bytes to lighttpd: parts is a list of (bytes, pause after). For
    what http.client will not send (NUL, bare CR, obs-fold) and for bodies
    trickled over time. The request must say Connection: close."""
    ex = Ex()
    ex.case, ex.principal, ex.key, ex.body, ex.kind = case, principal, key, body, kind
    ex.expect, ex.note, ex.via, ex.bound, ex.hdrs = expect, note, "raw", bound, {}
    ex.status = ex.rh = ex.rbody = ex.err = ex.origin = ex.raw_head = None
    ex.provider_s = provider_s
    ex.w0 = time.time()
    ex.t0 = time.monotonic()
    s = None
    try:
        s = socket.create_connection(("127.0.0.1", stack.port), timeout=bound + provider_s + 4)
        for data, pause in parts:
            s.sendall(data)
            if pause:
                time.sleep(pause)
        got = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            got += chunk
        head, _, rbody = got.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        ex.raw_head = head
        ex.status = int(lines[0].split()[1])
        ex.rh = header_dict(lines[1:])
        ex.rbody = rbody
        ex.origin = "app" if "x-request-id" in ex.rh else "server"
    except socket.timeout:
        ex.err = "hang"
    except (OSError, IndexError, ValueError) as e:
        ex.err = "no-answer"
        ex.note = (note or "") + " (%s)" % type(e).__name__
    finally:
        ex.t1 = time.monotonic()
        ex.w1 = time.time()
        if s is not None:
            s.close()
    return keep(ex)


def raw_request(stack, principal, key_header_value, body, ctype=b"application/json"):
    """The bytes of a POST /charge with a verbatim Idempotency-Key value."""
    head = (b"POST /charge HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nAuthorization: Bearer %s\r\n"
            b"Content-Type: %s\r\nIdempotency-Key: %s\r\nContent-Length: %d\r\n"
            b"Connection: close\r\n\r\n" % (stack.port, PRINCIPALS[principal].encode(), ctype,
                                            key_header_value, len(body)))
    return head
