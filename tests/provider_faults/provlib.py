"""provlib.py - what the suites of the responder against a real HTTP
provider share (standard library, plus Debian's python3-jsonschema and
python3-yaml through tests/lib/openapi_check.py):

  * Sim: the simulator charge-provider-sim started, killed (kill -9),
    restarted on the same port and data file, stopped (SIGTERM), and its
    introspection (/_sim/keys, /_sim/stats);
  * Stack: lighttpd + responders (tools/stack.sh) whose whole configuration
    is a file of this run (CHARGE_CONF), pointed at a provider_url;
  * HTTP to the stack (every answer kept, checked against docs/openapi.yaml);
  * the checker: from the provider's own counts, grouped by the metadata
    the responder sends (charge_principal, charge_idempotency_key), at most
    one charge per key; every key settles; every 2xx and 402 of a key is
    byte-identical; the settled outcome agrees with the provider.

The environment comes from the suite's run.sh: PROV_RUN (run directory),
PROV_REDIS_SOCK, PROV_SIM_BIN, CHARGE_BIN, PROV_PRINCIPAL, PROV_API_KEY.
"""
import collections
import http.client
import json
import os
import signal
import socket
import ssl
import subprocess
import sys
import threading
import time
import urllib.parse
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(REPO, "tests", "lib"))
import resp  # noqa: E402  (the Redis client)
import tap  # noqa: E402
from tap import Fail, check, diag, test  # noqa: E402,F401

RUN = os.environ.get("PROV_RUN", "")
REDIS_SOCK = os.environ.get("PROV_REDIS_SOCK", os.path.join(RUN, "redis.sock"))
BIN = os.environ.get("CHARGE_BIN", os.path.join(REPO, "build", "charge"))
SIM_BIN = os.environ.get("PROV_SIM_BIN") or os.path.join(os.path.dirname(BIN), "charge-provider-sim")
PRINCIPAL = os.environ.get("PROV_PRINCIPAL", "demo")
API_KEY = os.environ.get("PROV_API_KEY", "sk_test_demo")
STACK_SH = os.path.join(REPO, "tools", "stack.sh")
KEY_PREFIX = "charge:"
RUN_ID = uuid.uuid4().hex[:6]

# Final answers of POST /charge (an outcome the record holds): 201, 402,
# and a recorded failure (502/504 of a type other than outcome-unknown).
UNKNOWN_TYPE = "/problems/outcome-unknown"
SETTLED_STATES = ("completed", "failed")


def log(msg):
    print("# " + msg)
    sys.stdout.flush()


# ---------------------------------------------------------------- shell

def sh(script, *args, env=None, timeout=60):
    """bash with tools/stack.sh sourced; $1.. are args. Returns stdout."""
    p = subprocess.run(["bash", "-c", ". '%s' && %s" % (STACK_SH, script), "sh"] + [str(a) for a in args],
                       stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=timeout, env=env)
    if p.returncode != 0:
        raise Fail("shell step failed (rc %d): %s\n%s" % (p.returncode, script,
                                                          p.stderr.decode(errors="replace")[-1500:]))
    return p.stdout.decode()


def free_port():
    return int(sh("stack_port_pick").strip())


# ---------------------------------------------------------------- simulator

class Sim:
    """charge-provider-sim on 127.0.0.1:port with its data file in dir.
    args: extra command-line arguments (a list). Started by the constructor."""

    def __init__(self, name, args=(), port=None, secret_keys=("sk_test_sim",)):
        self.name = name
        self.dir = os.path.join(RUN, "sim-" + name)
        os.makedirs(self.dir, exist_ok=True)
        self.data = os.path.join(self.dir, "sim.data")
        self.log_path = os.path.join(self.dir, "sim.log")
        self.port = port or free_port()
        self.args = list(args)
        self.secret_keys = list(secret_keys)
        self.proc = None
        self.start()

    @property
    def url(self):
        return "http://127.0.0.1:%d" % self.port

    def start(self, args=None):
        """Starts it (again), on the same port and data file; waits (10 s)
        for its "listening on" line."""
        if args is not None:
            self.args = list(args)
        check(os.access(SIM_BIN, os.X_OK), "simulator %s not built" % SIM_BIN)
        cmd = [SIM_BIN, "--listen", "127.0.0.1:%d" % self.port, "--data", self.data]
        for k in self.secret_keys:
            cmd += ["--secret-key", k]
        cmd += self.args
        with open(self.log_path, "ab") as lf:
            start_at = lf.tell()
            lf.write(("# %s\n" % " ".join(cmd)).encode())
            lf.flush()
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=lf, stderr=lf,
                                         start_new_session=True)
        # for run.sh's cleanup: "<pid> <comm>" (comm: 15 bytes at most)
        with open(os.path.join(self.dir, "sim.pid"), "w") as f:
            f.write("%d %s\n" % (self.proc.pid, os.path.basename(SIM_BIN)[:15]))
        if self not in SIMS:
            SIMS.append(self)
        end = time.monotonic() + 10
        while time.monotonic() < end:
            with open(self.log_path, "rb") as f:
                f.seek(start_at)
                if b"listening on" in f.read():
                    return
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        raise Fail("simulator %s did not start: %s" % (self.name, self.log_tail()))

    def log_tail(self, n=1500):
        try:
            with open(self.log_path, "rb") as f:
                return f.read()[-n:].decode(errors="replace")
        except OSError:
            return ""

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def kill9(self):
        if self.alive():
            self.proc.kill()
            self.proc.wait(10)

    def stop(self):
        """SIGTERM (it flushes and exits 0); KILL after 10 s. Returns the
        exit status."""
        if not self.alive():
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
            return None

    def get(self, path, timeout=10):
        """GET of the introspection routes; a connection the `refuse` fault
        rate resets (it hits any new connection) is tried again."""
        for attempt in range(20):
            c = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
            try:
                c.request("GET", path)
                r = c.getresponse()
                body = r.read()
            except (ConnectionError, http.client.RemoteDisconnected):
                if attempt == 19:
                    raise
                time.sleep(0.05)
                continue
            finally:
                c.close()
            check(r.status == 200, "simulator %s GET %s: %d %r" % (self.name, path, r.status, body[:200]))
            return json.loads(body)

    def keys(self):
        return self.get("/_sim/keys")["keys"]

    def stats(self):
        return self.get("/_sim/stats")

    def by_metadata(self):
        """{(charge_principal, charge_idempotency_key): [sim key objects]}"""
        out = collections.defaultdict(list)
        for k in self.keys():
            md = k.get("metadata") or {}
            out[(md.get("charge_principal"), md.get("charge_idempotency_key"))].append(k)
        return out


SIMS = []


# ---------------------------------------------------------------- stacks

STACKS = []


def write_api_keys(path):
    import hashlib
    with open(path, "w") as f:
        f.write("# written by provlib.py for one run\n%s %s\n" % (
            PRINCIPAL, hashlib.sha256(API_KEY.encode()).hexdigest()))
    os.chmod(path, 0o600)


class Stack:
    """lighttpd + `procs` responders configured by a file of their own
    (CHARGE_CONF; no other CHARGE_* variable reaches them)."""

    BASE = collections.OrderedDict([
        ("redis_timeout_ms", 1000), ("key_prefix", KEY_PREFIX), ("lock_ttl_s", 6),
        ("completed_ttl_s", 86400), ("failed_ttl_s", 3600), ("max_request_bytes", 65536),
        ("max_wait_s", 10), ("spill_threshold_bytes", 16384), ("log_level", "info"), ("threads", 1),
    ])
    # with a provider_url: an attempt 800 ms, all attempts 2.5 s, the
    # completer looks again 1, 2 and 3 s after an unknown outcome; it sends
    # again within 6 s of the request, then only reads the list of charges.
    # The simulator executes within its own latency (below one attempt) and
    # sends no Date header: provider_execute_max_ms is one attempt and its
    # clock is taken for ours (provider_clock_skew_max_s 0)
    HTTP_PROVIDER = collections.OrderedDict([
        ("provider_timeout_ms", 800), ("provider_connect_timeout_ms", 300),
        ("provider_deadline_ms", 2500), ("completer_schedule_s", "1,2,3"),
        ("provider_execute_window_s", 6), ("provider_execute_max_ms", 800),
        ("provider_clock_skew_max_s", 0),
        # stripe-stateful-mock has no search (the simulator's lags not)
        ("provider_search_lag_s", 0 if os.environ.get("PROV_NEED_SIM") == "0" else 5),
    ])

    def __init__(self, name, procs=2, env_extra=None, **cfg):
        """env_extra: variables added to the responders' environment."""
        self.name = name
        self.dir = os.path.join(RUN, "lt-" + name)
        os.makedirs(os.path.join(self.dir, "spill"), exist_ok=True)
        os.chmod(os.path.join(self.dir, "spill"), 0o700)
        api_keys = os.path.join(RUN, "api-keys")
        if not os.path.exists(api_keys):
            write_api_keys(api_keys)
        conf = collections.OrderedDict(self.BASE)
        if "provider_url" in cfg:
            conf.update(self.HTTP_PROVIDER)
        conf.update(redis_url="unix://" + REDIS_SOCK, spill_dir=os.path.join(self.dir, "spill"),
                    api_keys_file=api_keys, provider_ledger=os.path.join(self.dir, "ledger.log"),
                    provider_secret="prov-secret-" + RUN_ID, metrics_file=os.path.join(self.dir, "metrics.shm"))
        conf.update(cfg)
        self.conf = conf
        self.conf_path = os.path.join(self.dir, "charge.conf")
        with open(self.conf_path, "w") as f:
            f.write("# written by provlib.py for stack %s\n" % name)
            for k, v in conf.items():
                f.write("%s = %s\n" % (k, v))
        env = {k: v for k, v in os.environ.items() if not k.startswith("CHARGE_")}
        env["CHARGE_CONF"] = self.conf_path
        env.update(env_extra or {})
        self.env = env
        p = subprocess.run([BIN, "--check-config"], env=env, stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=30)
        check(p.returncode == 0, "stack %s: charge --check-config rejects %s:\n%s" % (
            name, self.conf_path, p.stdout.decode(errors="replace")[-1500:]))
        out = sh('port=$(stack_port_pick) && stack_lighttpd_start "$1" "$1" "$port" "$2" "$3" '
                 '&& echo "$STACK_LIGHTTPD_PID $port"', self.dir, BIN, procs, env=env)
        pid, port = out.split()
        self.pid, self.port = int(pid), int(port)
        STACKS.append(self)
        log("stack %s: lighttpd %d on 127.0.0.1:%d, %d responder(s), provider_url=%s" % (
            name, self.pid, self.port, procs, conf.get("provider_url", "(in-process)")))

    @property
    def base(self):
        return "http://127.0.0.1:%d" % self.port

    def log_text(self):
        try:
            with open(os.path.join(self.dir, "lighttpd.stderr.log"), errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def stop(self):
        if self not in STACKS:
            return
        sh('stack_lighttpd_stop "$1"', self.dir)
        STACKS.remove(self)


def stop_all():
    for s in list(STACKS):
        try:
            s.stop()
        except Exception as e:  # noqa: BLE001 - cleanup goes on
            log("stopping stack %s: %s" % (s.name, e))
    for s in list(SIMS):
        try:
            s.stop()
        except Exception as e:  # noqa: BLE001
            log("stopping simulator %s: %s" % (s.name, e))


# ---------------------------------------------------------------- Redis

def redis(*args, timeout=5):
    return resp.command(REDIS_SOCK, *args, timeout=timeout)


def rkey(key, principal=PRINCIPAL):
    """docs/API.md §18.1: <key_prefix>idem:<principal>:<idempotency-key>"""
    return KEY_PREFIX + "idem:" + principal + ":" + key


# ---------------------------------------------------------------- HTTP

class Headers(dict):
    """{lower-case name: value} with a case-insensitive get()."""

    def get(self, name, default=None):
        return dict.get(self, name.lower(), default)


class Resp:
    __slots__ = ("method", "path", "key", "body_sent", "status", "headers", "body", "t0", "t1", "err", "tag")

    def h(self, name):
        return self.headers.get(name) if self.headers else None

    def json(self):
        try:
            return json.loads(self.body)
        except (ValueError, TypeError):
            return {}

    def ptype(self):
        if (self.h("content-type") or "").startswith("application/problem+json"):
            return self.json().get("type")
        return None

    def final(self):
        """An outcome the record holds: 201, 402, or a recorded failure."""
        if self.status in (201, 402):
            return True
        return self.status in (502, 504) and self.ptype() not in (UNKNOWN_TYPE, None)

    def __repr__(self):
        return "%s %s [%s] -> %s %r" % (self.method, self.path, self.key,
                                       self.err or self.status, (self.body or b"")[:240])


HISTORY = []
HISTORY_LOCK = threading.Lock()


def request(stack, method, path, body=None, headers=None, key=None, timeout=30, tag=""):
    r = Resp()
    r.method, r.path, r.key, r.body_sent, r.tag = method, path, key, body, tag
    r.status = r.headers = r.body = r.err = None
    conn = http.client.HTTPConnection("127.0.0.1", stack.port, timeout=timeout)
    r.t0 = time.monotonic()
    try:
        conn.request(method, path, body=body, headers=headers or {})
        x = conn.getresponse()
        r.body = x.read()
        r.status = x.status
        r.headers = Headers((k.lower(), v) for k, v in x.getheaders())
    except socket.timeout:
        r.err = "hang"
    except (OSError, http.client.HTTPException) as e:
        r.err = "no-answer (%s)" % type(e).__name__
    finally:
        r.t1 = time.monotonic()
        conn.close()
    with HISTORY_LOCK:
        HISTORY.append(r)
    return r


def charge_body(source="tok_visa", amount=1999, currency="usd", **extra):
    d = {"amount": amount, "currency": currency, "source": source}
    d.update(extra)
    return json.dumps(d, separators=(",", ":")).encode()


def post(stack, key, body, timeout=30, tag="", extra=None):
    hdrs = {"Authorization": "Bearer " + API_KEY, "Idempotency-Key": key, "Content-Type": "application/json"}
    hdrs.update(extra or {})
    return request(stack, "POST", "/charge", body, hdrs, key=key, timeout=timeout, tag=tag)


def key_state(stack, key):
    """GET /charge/keys/<key>: (status, json)."""
    r = request(stack, "GET", "/charge/keys/" + urllib.parse.quote(key, safe=""),
                headers={"Authorization": "Bearer " + API_KEY}, key=key, timeout=10, tag="keys")
    return r.status, r.json()


def new_key(tag):
    return "pf-%s-%s-%s" % (RUN_ID, tag, uuid.uuid4().hex[:8])


def retry_until_final(stack, key, body, deadline, tag=""):
    """Sends the same request until it gets a final answer or the deadline
    passes, honouring Retry-After (at most 1 s at a time). Returns the
    answers."""
    seen = []
    while True:
        r = post(stack, key, body, tag=tag)
        seen.append(r)
        if r.final() or time.monotonic() > deadline:
            return seen
        if r.status in (400, 401, 404, 405, 413, 415, 422):
            return seen
        ra = r.h("retry-after") if r.headers else None
        time.sleep(min(1.0, float(ra)) if ra and ra.isdigit() else 0.2)


def hammer(stack, jobs, threads_per_key=8, deadline_s=40.0, tag=""):
    """jobs: [(key, body)]. threads_per_key clients per key, all at once,
    each retrying until a final answer (bounded by deadline_s)."""
    deadline = time.monotonic() + deadline_s
    ts = []
    for key, body in jobs:
        for _ in range(threads_per_key):
            ts.append(threading.Thread(target=retry_until_final, args=(stack, key, body, deadline, tag),
                                       daemon=True))
    for t in ts:
        t.start()
    for t in ts:
        t.join(deadline_s + 40)


def wait_settled(stack, keys, deadline_s):
    """Polls GET /charge/keys/<key> until every key is completed or failed
    (bounded). Returns {key: last state json (or status)}."""
    end = time.monotonic() + deadline_s
    todo = list(keys)
    last = {}
    while todo:
        for k in list(todo):
            st, j = key_state(stack, k)
            last[k] = j if st == 200 else {"state": None, "http": st}
            if st == 200 and j.get("state") in SETTLED_STATES:
                todo.remove(k)
        if not todo or time.monotonic() > end:
            break
        time.sleep(0.3)
    return last


# ---------------------------------------------------------------- contract

_CONTRACT = None


def contract():
    global _CONTRACT
    if _CONTRACT is None:
        import openapi_check
        # PROV_OPENAPI: another tree's description (a responder built there)
        _CONTRACT = openapi_check.Contract(os.environ.get("PROV_OPENAPI") or openapi_check.DESCRIPTION_FILE)
    return _CONTRACT


def undocumented(rs):
    """Problems of answers that docs/openapi.yaml does not allow (a request
    without an answer counts too)."""
    out = []
    c = contract()
    for r in rs:
        if r.err:
            out.append("%s: no answer (%s)" % (r, r.err))
            continue
        for p in c.check(r.method, r.path.split("?")[0], r.status, r.headers, r.body):
            out.append("%s: %s" % (r, p))
    return out


# ---------------------------------------------------------------- checker

def check_keys(stack, sim, keys, settle_s=30.0, expect=None):
    """The checker over `keys` (client keys of PRINCIPAL): returns (numbers,
    problems). expect: {key: "completed"|"failed"|None} the outcome the
    provider's token implies (None: either)."""
    probs = []
    states = wait_settled(stack, keys, settle_s)
    unsettled = [k for k, j in states.items() if j.get("state") not in SETTLED_STATES]
    for k in unsettled[:8]:
        probs.append("key %s did not settle within %.0fs: %r" % (k, settle_s, states[k]))
    by_md = sim.by_metadata()
    with HISTORY_LOCK:
        hist = [r for r in HISTORY if r.key in set(keys) and r.method == "POST"]
    by_key = collections.defaultdict(list)
    for r in hist:
        by_key[r.key].append(r)
    nums = collections.Counter()
    for k in keys:
        sk = by_md.get((PRINCIPAL, k), [])
        charges = sum(x.get("charges", 0) for x in sk)
        nums["keys"] += 1
        nums["deliveries"] += sum(x.get("deliveries", 0) for x in sk)
        nums["charges"] += charges
        if len(sk) > 1:
            probs.append("key %s reached the provider under %d downstream keys: %s" % (
                k, len(sk), [x.get("idempotency_key") for x in sk]))
        for x in sk:
            if x.get("charges", 0) > 1:
                probs.append("downstream key %s (client key %s) has %d charges" % (
                    x.get("idempotency_key"), k, x["charges"]))
        if charges > 1:
            nums["double charged"] += 1
            probs.append("client key %s: %d charges at the provider" % (k, charges))
        # every 2xx and 402 answer of the key byte-identical
        acks = [r for r in by_key[k] if r.status is not None and (200 <= r.status < 300 or r.status == 402)]
        if acks:
            first = acks[0]
            diff = [r for r in acks if r.status != first.status or r.body != first.body]
            if diff:
                nums["differing 2xx/402"] += 1
                probs.append("key %s: %d answers differ from the first %d %r, e.g. %d %r" % (
                    k, len(diff), first.status, first.body[:200], diff[0].status, diff[0].body[:200]))
        # the settled outcome agrees with the provider
        st = states.get(k, {})
        stored = [x for x in sk if x.get("charge")]
        if st.get("state") == "completed":
            nums["completed"] += 1
            ids = {x.get("charge") for x in stored if x.get("status") == 200}
            body_ids = {r.json().get("id") for r in acks if r.status == 201}
            if not ids:
                probs.append("key %s completed but the provider has no succeeded charge: %r" % (k, sk))
            elif body_ids and body_ids != ids:
                probs.append("key %s answered charge %s, the provider has %s" % (k, body_ids, ids))
        elif st.get("state") == "failed":
            nums["failed"] += 1
            if any(x.get("status") == 200 for x in stored):
                probs.append("key %s recorded failed, but the provider charged it: %r" % (k, sk))
            declined = {x.get("charge") for x in stored if x.get("status") == 402}
            named = {r.json().get("charge") for r in acks if r.status == 402}
            if named and named != declined:
                probs.append("key %s: the 402 names charge %s, the provider declined %s" % (k, named, declined))
        if expect and expect.get(k) and st.get("state") in SETTLED_STATES and st.get("state") != expect[k]:
            probs.append("key %s settled %s, want %s (%r)" % (k, st.get("state"), expect[k], st))
    bad = undocumented(hist)
    nums["answers"] = len(hist)
    nums["undocumented"] = len(bad)
    probs += bad[:8]
    nums["unsettled"] = len(unsettled)
    return nums, probs


def final_replays(stack, keys, bodies):
    """Each key once more: a settled 201/402 replays byte for byte, marked
    Idempotent-Replayed: true. Returns problems."""
    probs = []
    with HISTORY_LOCK:
        hist = [r for r in HISTORY if r.key in set(keys) and r.method == "POST"]
    for k in keys:
        acks = [r for r in hist if r.key == k and r.status in (201, 402)]
        if not acks:
            continue
        r = post(stack, k, bodies[k], tag="final")
        if r.status != acks[0].status or r.body != acks[0].body:
            probs.append("key %s: replay %s %r differs from %d %r" % (
                k, r.status, (r.body or b"")[:160], acks[0].status, acks[0].body[:160]))
        elif r.h("idempotent-replayed") != "true":
            probs.append("key %s: replay without Idempotent-Replayed: true (%r)" % (k, r.h("idempotent-replayed")))
    return probs


def statuses(rs):
    c = collections.Counter()
    for r in rs:
        c[r.err or ("%d %s" % (r.status, (r.ptype() or "").rsplit("/", 1)[-1])).strip()] += 1
    return " ".join("%s:%d" % kv for kv in sorted(c.items()))


def https_get_ok(url, cafile):
    """For the TLS suite: a GET through Python's own TLS with cafile."""
    ctx = ssl.create_default_context(cafile=cafile)
    u = urllib.parse.urlsplit(url)
    c = http.client.HTTPSConnection(u.hostname, u.port, context=ctx, timeout=5)
    try:
        c.request("GET", u.path or "/")
        return c.getresponse().status
    finally:
        c.close()
