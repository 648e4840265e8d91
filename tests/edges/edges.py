#!/usr/bin/env python3
"""The edges of a FastCGI connection's and a process's life, for
tests/edges/run.sh. Prints TAP lines without numbers (run.sh numbers them).
Python standard library only.

  edges.py BIN RUNDIR REDIS_URL [ONLY]

Each part starts its own responder (charge --listen on a unix socket) with
the configuration it needs, drives it with misbehaving FastCGI peers, and
stops it with SIGTERM: it must exit 0 and leave no sanitizer report. The
provider ledger tells what was executed; /proc tells memory (VmRSS) and
descriptors.
"""

import glob
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import uuid

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
sys.path.insert(0, os.path.join(HERE, "..", "fcgi_wire"))
import fcgi  # noqa: E402

BIN, RUN, REDIS_URL = sys.argv[1], sys.argv[2], sys.argv[3]
ONLY = sys.argv[4].split(",") if len(sys.argv) > 4 and sys.argv[4] else None
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
API_KEY = "sk_test_demo"
BODY = b'{"amount":1999,"currency":"usd","source":"tok_visa"}'
KEEP_CONN = 1
UNKNOWN_TYPE_IN = 42  # a management record type the responder does not know
MIB = 1024 * 1024
NEW_KEYS = ("conn_output_max_bytes", "keepalive_idle_timeout_ms", "body_memory_max_bytes")


def tap(ok, desc, why=None):
    print("%s - %s" % ("ok" if ok else "not ok", desc), flush=True)
    if not ok and why:
        for line in str(why).splitlines()[:15]:
            print("#   " + line, flush=True)
    return ok


def rec(rtype, content=b"", rid=1):
    pad = (8 - len(content) % 8) % 8
    return struct.pack(">BBHHBB", 1, rtype, rid, len(content), pad, 0) + content + b"\0" * pad


def begin(rid=1, keep=True):
    return rec(fcgi.BEGIN_REQUEST, struct.pack(">HB5x", fcgi.RESPONDER, KEEP_CONN if keep else 0), rid)


def params_recs(params, rid=1):
    p = fcgi.encode_params(params)
    out = b""
    for i in range(0, len(p), 65535):
        out += rec(fcgi.PARAMS, p[i:i + 65535], rid)
    return out + rec(fcgi.PARAMS, b"", rid)


def stdin_recs(body, rid=1):
    out = b""
    for i in range(0, len(body), 65535):
        out += rec(fcgi.STDIN, body[i:i + 65535], rid)
    return out


def charge_params(key, body=BODY, length=None, **extra):
    p = {"REQUEST_METHOD": "POST", "REQUEST_URI": "/charge", "SCRIPT_NAME": "/charge",
         "QUERY_STRING": "", "SERVER_PROTOCOL": "HTTP/1.1",
         "CONTENT_TYPE": "application/json",
         "CONTENT_LENGTH": str(len(body) if length is None else length),
         "HTTP_AUTHORIZATION": "Bearer " + API_KEY, "HTTP_IDEMPOTENCY_KEY": key}
    p.update(extra)
    return p


def request_bytes(key, rid=1, keep=True, body=BODY, **extra):
    return (begin(rid, keep) + params_recs(charge_params(key, body, **extra), rid)
            + stdin_recs(body, rid) + rec(fcgi.STDIN, b"", rid))


def get_bytes(uri, rid=1, keep=True):
    p = {"REQUEST_METHOD": "GET", "REQUEST_URI": uri, "SCRIPT_NAME": uri,
         "QUERY_STRING": "", "SERVER_PROTOCOL": "HTTP/1.1"}
    return begin(rid, keep) + params_recs(p, rid) + rec(fcgi.STDIN, b"", rid)


def new_key():
    return "edge-" + uuid.uuid4().hex


class Reader(fcgi.RecordReader):
    """Records from a socket: (type, id, content), None on EOF, "timeout"."""

    def response(self):
        """(stdout, protocol status) up to END_REQUEST; None on EOF,
        "timeout" when nothing came in time."""
        out = b""
        while True:
            r = self.record()
            if r is None or r == "timeout":
                return r
            rtype, _, content = r
            if rtype == fcgi.STDOUT:
                out += content
            elif rtype == fcgi.END_REQUEST:
                return out, struct.unpack(">IB3x", content[:8])[1]

    def closed_within(self, seconds):
        """True when the peer closed the connection within seconds
        (records arriving meanwhile are skipped)."""
        end = time.time() + seconds
        while time.time() < end:
            self.s.settimeout(max(0.05, end - time.time()))
            r = self.record()
            if r is None:
                return True
        return False


def status_of(out):
    return fcgi.status_of(out)


def header_of(out, name):
    for line in out.split(b"\r\n"):
        if not line:
            break
        if line.lower().startswith(name.lower().encode() + b":"):
            return line.split(b":", 1)[1].strip().decode()
    return None


# --- a responder of its own per part -------------------------------------------

def asan_dir():
    for part in os.environ.get("ASAN_OPTIONS", "").split(":"):
        if part.startswith("log_path="):
            return part[len("log_path="):]
    return None


class Responder:
    count = 0

    def __init__(self, name, tcp=False, **conf):
        Responder.count += 1
        self.name = name
        self.dir = os.path.join(RUN, "r%d" % Responder.count)
        os.makedirs(os.path.join(self.dir, "spill"))
        self.sock = os.path.join(self.dir, "charge.sock")
        self.tcp = None
        if tcp:
            # TCP connections linger after their last answer (shut for writing)
            probe = socket.socket()
            probe.bind(("127.0.0.1", 0))
            self.tcp = probe.getsockname()[1]
            probe.close()
        self.ledger = os.path.join(self.dir, "ledger.log")
        self.log = os.path.join(self.dir, "charge.log")
        env = {k: v for k, v in os.environ.items() if not k.startswith("CHARGE_")}
        env.update({
            "CHARGE_REDIS_URL": REDIS_URL, "CHARGE_SPILL_DIR": os.path.join(self.dir, "spill"),
            "CHARGE_API_KEYS_FILE": os.path.join(RUN, "api-keys"),
            "CHARGE_PROVIDER_LEDGER": self.ledger, "CHARGE_METRICS_FILE": "none",
            "CHARGE_LOG_LEVEL": "warn", "CHARGE_THREADS": "1",
            "CHARGE_PROVIDER_LATENCY_MS": "50", "CHARGE_REQUEST_TIMEOUT_MS": "3000",
            "CHARGE_DRAIN_TIMEOUT_MS": "3000",
        })
        asan = conf.pop("asan_extra", None)
        if asan and "ASAN_OPTIONS" in env:
            env["ASAN_OPTIONS"] += ":" + asan
        for k, v in conf.items():
            if os.environ.get("EDGES_OLD") and k in NEW_KEYS:
                continue  # showing the code before these keys existed
            env["CHARGE_" + k.upper()] = str(v)
        with open(self.log, "ab") as logf:
            self.p = subprocess.Popen(
                [BIN, "--listen", "127.0.0.1:%d" % self.tcp if self.tcp else self.sock], env=env,
                cwd=REPO, stdin=subprocess.DEVNULL, stdout=logf, stderr=logf)
        self.pid = self.p.pid
        end = time.time() + 10
        while time.time() < end and not self.listening() and self.p.poll() is None:
            time.sleep(0.05)
        self.ok = self.listening() and self.p.poll() is None
        if not self.ok:
            tap(False, "%s: the responder starts" % name, self.log_tail())

    def log_tail(self, n=10):
        try:
            with open(self.log, "rb") as f:
                return b"\n".join(f.read().splitlines()[-n:]).decode("utf-8", "replace")
        except OSError:
            return ""

    def listening(self):
        if not self.tcp:
            return os.path.exists(self.sock)
        try:
            socket.create_connection(("127.0.0.1", self.tcp), timeout=1).close()
            return True
        except OSError:
            return False

    def connect(self, timeout=10.0):
        if self.tcp:
            return socket.create_connection(("127.0.0.1", self.tcp), timeout=timeout)
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(timeout)
        s.connect(self.sock)
        return s

    def ask(self, data, timeout=10.0):
        """Sends data on a fresh connection, returns the first response."""
        s = self.connect(timeout)
        try:
            s.sendall(data)
            return Reader(s).response()
        finally:
            s.close()

    def rss_kib(self):
        with open("/proc/%d/status" % self.pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return -1

    def vmdata_kib(self):
        with open("/proc/%d/status" % self.pid) as f:
            for line in f:
                if line.startswith("VmData:"):
                    return int(line.split()[1])
        return -1

    def nfds(self):
        return len(os.listdir("/proc/%d/fd" % self.pid))

    def ledger_keys(self):
        try:
            with open(self.ledger) as f:
                return [line.split("\t")[2] for line in f if line.count("\t") >= 2]
        except OSError:
            return []

    def metrics(self):
        r = self.ask(get_bytes("/metrics", keep=False))
        out = {}
        if not isinstance(r, tuple):
            return out
        for line in r[0].split(b"\r\n\r\n", 1)[-1].decode().splitlines():
            if line and not line.startswith("#"):
                name, _, val = line.rpartition(" ")
                try:
                    out[name] = float(val)
                except ValueError:
                    pass
        return out

    def stop(self, wait=15.0, check=True):
        """SIGTERM; the exit status (None if it had to be killed). With
        check, reports exit 0 and no sanitizer report as one TAP line."""
        if self.p.poll() is None:
            os.kill(self.pid, signal.SIGTERM)
        try:
            rc = self.p.wait(wait)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
            rc = None
        reports = self.asan_reports()
        if check:
            tap(rc == 0 and not reports,
                "%s: SIGTERM: exits 0, no sanitizer report" % self.name,
                "exit status %s; %s\n%s" % (rc, " ".join(reports), self.log_tail()))
        return rc

    def asan_reports(self):
        d = asan_dir()
        return glob.glob("%s.%d*" % (d, self.pid)) if d else []


def only(name):
    return ONLY is None or name in ONLY


def wait_until(pred, seconds, step=0.05):
    end = time.time() + seconds
    while time.time() < end:
        if pred():
            return True
        time.sleep(step)
    return pred()


# --- 2. max_inflight counts work, not sockets ------------------------------------

def part_inflight():
    r = Responder("max_inflight", max_inflight=2, provider_latency_ms=2000)
    if not r.ok:
        return
    keys = []
    # five charges whose connection closes at once, one after the other
    for _ in range(5):
        k = new_key()
        keys.append(k)
        s = r.connect()
        s.sendall(request_bytes(k))
        time.sleep(0.15)
        s.close()
        time.sleep(0.1)
    # the two admitted ones are still at the provider: a sixth is refused
    resp = r.ask(request_bytes(new_key()))
    st = status_of(resp[0]) if isinstance(resp, tuple) else resp
    tap(st == 503, "max_inflight: charges whose connection closed keep their slot: a new one is refused 503",
        "status %r" % (st,))
    time.sleep(2.6)
    called = r.ledger_keys()
    tap(len(called) == 2 and set(called) <= set(keys),
        "max_inflight = 2: of five detached charges exactly two reached the provider",
        "provider calls: %d" % len(called))
    m = r.metrics()
    tap(m.get("charge_overloaded_total", 0) >= 4,
        "max_inflight: each refusal is counted in charge_overloaded_total",
        "charge_overloaded_total = %r" % m.get("charge_overloaded_total"))
    # once the work ended the slots are free again
    resp = r.ask(request_bytes(new_key()))
    st = status_of(resp[0]) if isinstance(resp, tuple) else resp
    tap(st == 201, "max_inflight: once the detached charges recorded, a new charge is admitted",
        "status %r" % (st,))
    r.stop()


# --- 3. a peer that never reads ----------------------------------------------------

def flood(r, name, first, unit, seconds=4.0, limit=96 * MIB):
    """Sends first, then unit again and again without ever reading, for
    seconds or limit bytes. Returns (bytes the responder took, of them in
    the last second, RSS growth in KiB, descriptors with this connection,
    socket)."""
    s = r.connect()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.sendall(first)
    time.sleep(0.3)
    rss0, fds = r.rss_kib(), r.nfds()
    s.setblocking(False)
    chunk = unit * max(1, 65536 // len(unit))
    sent, last, t0, pending = 0, 0, time.time(), b""
    end = t0 + seconds
    while sent < limit and time.time() < end:
        try:
            if not pending:
                pending = chunk
            n = s.send(pending)
            pending = pending[n:]
            sent += n
            if time.time() > end - 1.0:
                last += n
        except BlockingIOError:
            time.sleep(0.005)
        except OSError:
            break
    time.sleep(0.3)
    return sent, last, r.rss_kib() - rss0, fds, s


def part_noread():
    timeout_ms = 2000
    r = Responder("never reads", request_timeout_ms=timeout_ms, conn_output_max_bytes=65536)
    if not r.ok:
        return
    unknown = rec(UNKNOWN_TYPE_IN, b"", 0)
    cases = [
        ("FCGI_UNKNOWN_TYPE flood", b"", unknown),
        # answered at once (401: no API key), one after the other
        ("pipelined requests", b"", begin(1) + params_recs({
            "REQUEST_METHOD": "POST", "REQUEST_URI": "/charge", "SCRIPT_NAME": "/charge",
            "CONTENT_LENGTH": "0"}) + rec(fcgi.STDIN, b"")),
        # a request in progress, then second request ids refused
        ("refused second request ids", begin(1) + params_recs(charge_params(new_key(), length=len(BODY))),
         begin(2)),
    ]
    for name, first, unit in cases:
        sent, last, grew, fds, s = flood(r, name, first, unit)
        tap(sent < 16 * MIB and last == 0 and grew < 24 * 1024,
            "never reads, %s: the responder stops taking input (took %d KiB, %d B in the last second) and its memory stays bounded (RSS +%d KiB)"
            % (name, sent // 1024, last, grew),
            "took %d bytes, %d in the last second, RSS grew %d KiB" % (sent, last, grew))
        # nothing moves: closed within request_timeout_ms (+ slack)
        t0 = time.time()
        closed = wait_until(lambda: r.nfds() < fds, timeout_ms / 1000.0 + 3)
        tap(closed, "never reads, %s: closed after request_timeout_ms without progress (%.1f s)"
            % (name, time.time() - t0), "descriptors %d, with the connection %d" % (r.nfds(), fds))
        s.close()
    m = r.metrics()
    # the flood without a request is closed by the params deadline instead
    tap(m.get("charge_conn_output_full_total", 0) >= 3 and m.get("charge_conn_stalled_total", 0) >= 2,
        "never reads: counted in charge_conn_output_full_total and charge_conn_stalled_total",
        "%r" % {k: v for k, v in m.items() if k.startswith("charge_conn")})
    # at the edge: a reader that is merely slow is not cut off
    s = r.connect()
    s.sendall(unknown * 20000)   # 160 KB in, 320 KB out: over the bound
    got, rd = 0, Reader(s)
    s.settimeout(5)
    while got < 20000:
        time.sleep(0.002 if got % 2000 else 0.3)
        x = rd.record()
        if not isinstance(x, tuple):
            break
        got += 1
    tap(got == 20000, "never reads: a slow reader gets every answer (%d of 20000)" % got)
    s.close()
    r.stop()


# --- 4. never execute what cannot be answered ------------------------------------

def part_pipelined_shut():
    r = Responder("pipelined after shut", tcp=True, provider_latency_ms=300, drain_timeout_ms=5000)
    if not r.ok:
        return
    # without FCGI_KEEP_CONN: the connection ends with the first answer
    k1, k2 = new_key(), new_key()
    s = r.connect()
    s.sendall(request_bytes(k1, keep=False) + request_bytes(k2, rid=1, keep=False))
    rd = Reader(s)
    first = rd.response()
    rest = rd.response()
    s.close()
    time.sleep(1.0)
    keys = r.ledger_keys()
    tap(isinstance(first, tuple) and status_of(first[0]) == 201 and rest is None
        and k1 in keys and k2 not in keys,
        "no FCGI_KEEP_CONN: a request pipelined after the last one is never executed",
        "first %r, then %r; ledger has k1 %s, k2 %s" % (
            status_of(first[0]) if isinstance(first, tuple) else first, rest, k1 in keys, k2 in keys))
    # during a SIGTERM drain, on a kept connection
    k3, k4 = new_key(), new_key()
    s = r.connect()
    s.sendall(request_bytes(k3))
    time.sleep(0.1)
    os.kill(r.pid, signal.SIGTERM)
    time.sleep(0.05)
    s.sendall(request_bytes(k4))
    rd = Reader(s)
    first = rd.response()
    rest = rd.response()
    s.close()
    rc = r.stop()
    keys = r.ledger_keys()
    tap(isinstance(first, tuple) and status_of(first[0]) == 201 and not isinstance(rest, tuple)
        and k3 in keys and k4 not in keys,
        "SIGTERM drain: a request pipelined on a kept connection is never executed",
        "first %r, then %r; ledger has k3 %s, k4 %s; exit %r" % (
            status_of(first[0]) if isinstance(first, tuple) else first, rest, k3 in keys, k4 in keys, rc))


# --- 5. a half-closed peer --------------------------------------------------------

def part_half_close():
    r = Responder("half-close", provider_latency_ms=200)
    if not r.ok:
        return
    for keep in (False, True):
        k = new_key()
        s = r.connect()
        s.sendall(request_bytes(k, keep=keep))
        s.shutdown(socket.SHUT_WR)
        resp = Reader(s).response()
        s.close()
        st = status_of(resp[0]) if isinstance(resp, tuple) else resp
        tap(st == 201, "half-close after a whole request (%s): the answer still comes"
            % ("FCGI_KEEP_CONN" if keep else "no FCGI_KEEP_CONN"), "got %r" % (st,))
    # half-closed before the request is whole: closed, nothing executed
    k = new_key()
    s = r.connect()
    s.sendall(begin() + params_recs(charge_params(k)) + stdin_recs(BODY[:10]))
    s.shutdown(socket.SHUT_WR)
    resp = Reader(s).response()
    s.close()
    time.sleep(0.5)
    tap(k not in r.ledger_keys(), "half-close in the middle of the body: nothing executed",
        "response %r" % (resp,))
    r.stop()


# --- 6. idle kept connections -------------------------------------------------------

def part_idle():
    idle_ms, req_ms = 1500, 2500
    r = Responder("idle", keepalive_idle_timeout_ms=idle_ms, request_timeout_ms=req_ms)
    if not r.ok:
        return
    # silent after an answer
    s = r.connect()
    s.sendall(get_bytes("/healthz"))
    rd = Reader(s)
    first = rd.response()
    t0 = time.time()
    early = rd.closed_within(idle_ms / 1000.0 * 0.6)
    later = early or rd.closed_within(idle_ms / 1000.0 * 0.4 + 2)
    dt = time.time() - t0
    s.close()
    tap(isinstance(first, tuple) and not early and later,
        "idle kept connection: open before keepalive_idle_timeout_ms, closed after (%.1f s)" % dt,
        "answered %r, closed early %s, closed later %s" % (isinstance(first, tuple), early, later))
    # a partial record header after an answer: request_timeout_ms
    s = r.connect()
    s.sendall(get_bytes("/healthz"))
    rd = Reader(s)
    first = rd.response()
    s.sendall(b"\x01\x01\x00")
    t0 = time.time()
    early = rd.closed_within(req_ms / 1000.0 * 0.6)
    later = early or rd.closed_within(req_ms / 1000.0 * 0.4 + 2)
    dt = time.time() - t0
    s.close()
    tap(isinstance(first, tuple) and not early and later,
        "partial record header on a kept connection: closed after request_timeout_ms (%.1f s)" % dt,
        "answered %r, closed early %s, closed later %s" % (isinstance(first, tuple), early, later))
    # a kept connection used again just before its idle deadline is served
    s = r.connect()
    rd = Reader(s)
    ok = True
    for _ in range(3):
        s.sendall(get_bytes("/healthz"))
        ok = ok and isinstance(rd.response(), tuple)
        time.sleep(idle_ms / 1000.0 * 0.7)
    s.close()
    tap(ok, "a kept connection used within keepalive_idle_timeout_ms each time stays open")
    m = r.metrics()
    tap(m.get("charge_conn_idle_closed_total", 0) >= 1,
        "idle kept connections closed are counted in charge_conn_idle_closed_total",
        "%r" % {k: v for k, v in m.items() if k.startswith("charge_conn")})
    r.stop()


# --- 7. the drain answers a body still arriving ----------------------------------

def part_drain_body():
    r = Responder("drain with a body arriving", drain_timeout_ms=1000, request_timeout_ms=10000)
    if not r.ok:
        return
    k = new_key()
    s = r.connect()
    s.sendall(begin() + params_recs(charge_params(k)) + stdin_recs(BODY[:10]))
    time.sleep(0.2)
    os.kill(r.pid, signal.SIGTERM)
    s.settimeout(8)
    resp = Reader(s).response()
    s.close()
    st = status_of(resp[0]) if isinstance(resp, tuple) else resp
    ra = header_of(resp[0], "Retry-After") if isinstance(resp, tuple) else None
    rc = r.stop()
    tap(st == 503 and ra is not None and k not in r.ledger_keys(),
        "drain: a request whose body is still arriving is answered 503 with Retry-After, nothing charged",
        "status %r Retry-After %r exit %r" % (st, ra, rc))
    # params still arriving: 503 too
    r = Responder("drain with params arriving", drain_timeout_ms=1000, request_timeout_ms=10000)
    if not r.ok:
        return
    s = r.connect()
    s.sendall(begin() + rec(fcgi.PARAMS, fcgi.encode_params({"REQUEST_METHOD": "POST"})))
    time.sleep(0.2)
    os.kill(r.pid, signal.SIGTERM)
    s.settimeout(8)
    resp = Reader(s).response()
    s.close()
    st = status_of(resp[0]) if isinstance(resp, tuple) else resp
    r.stop()
    tap(st == 503, "drain: a request whose params are still arriving is answered 503", "got %r" % (st,))


# --- body memory -------------------------------------------------------------------

def padded_body(n):
    """A valid charge body of exactly n bytes (JSON whitespace)."""
    assert n >= len(BODY)
    return BODY[:-1] + b" " * (n - len(BODY)) + b"}"


def part_body_memory():
    # memory follows the bytes that arrived
    r = Responder("body memory", max_request_bytes=1048576, request_timeout_ms=20000)
    if not r.ok:
        return
    mem0 = r.vmdata_kib()
    socks = []
    for _ in range(100):
        s = r.connect()
        s.sendall(begin() + params_recs(charge_params(new_key(), length=1048576)) + stdin_recs(b"{"))
        socks.append(s)
    time.sleep(1.0)
    grew = r.vmdata_kib() - mem0
    tap(grew < 24 * 1024,
        "body memory follows the bytes that arrived: 100 requests announcing 1 MiB, 1 byte sent: VmData +%d KiB" % grew,
        "VmData grew %d KiB" % grew)
    for s in socks:
        s.close()
    r.stop()

    # the bodies in flight, at the edge of body_memory_max_bytes
    limit = 100000
    r = Responder("body memory limit", body_memory_max_bytes=limit, max_request_bytes=65536,
                  request_timeout_ms=20000)
    if not r.ok:
        return
    held = 59999
    a = r.connect()
    a.sendall(begin() + params_recs(charge_params(new_key(), length=60000)) + stdin_recs(b" " * held))
    time.sleep(0.3)
    kb = new_key()
    resp = r.ask(request_bytes(kb, body=padded_body(limit - held)))
    st = status_of(resp[0]) if isinstance(resp, tuple) else resp
    tap(st == 201, "body_memory_max_bytes: bodies holding exactly the limit are served", "got %r" % (st,))
    kc = new_key()
    resp = r.ask(request_bytes(kc, body=padded_body(limit - held + 1)))
    st = status_of(resp[0]) if isinstance(resp, tuple) else resp
    ra = header_of(resp[0], "Retry-After") if isinstance(resp, tuple) else None
    time.sleep(0.3)
    tap(st == 503 and ra is not None and kc not in r.ledger_keys(),
        "body_memory_max_bytes: one byte over the limit is refused 503 with Retry-After, nothing charged",
        "got %r Retry-After %r" % (st, ra))
    a.close()
    time.sleep(0.3)
    resp = r.ask(request_bytes(new_key(), body=padded_body(limit - held + 1)))
    st = status_of(resp[0]) if isinstance(resp, tuple) else resp
    tap(st == 201, "body_memory_max_bytes: the memory of a closed request's body is given back", "got %r" % (st,))
    m = r.metrics()
    tap(m.get("charge_body_memory_full_total", 0) == 1,
        "body_memory_max_bytes: the refusal is counted in charge_body_memory_full_total",
        "%r" % m.get("charge_body_memory_full_total"))
    r.stop()


# --- buffers that shrink ----------------------------------------------------------

def big_body():
    items = ",".join('{"description":"%s","quantity":1,"unit_amount":1}' % ("x" * 200)
                     for _ in range(1000))
    return ('{"amount":1000,"currency":"usd","source":"tok_visa","line_items":[%s]}' % items).encode()


def part_shrink():
    # freed memory leaves the process at once (a short ASan quarantine)
    r = Responder("buffers shrink", max_request_bytes=1048576, asan_extra="quarantine_size_mb=1")
    if not r.ok:
        return
    body = big_body()
    k = new_key()
    resp = r.ask(request_bytes(k, body=body), timeout=30)
    ok = isinstance(resp, tuple) and status_of(resp[0]) == 201
    socks = []
    n = 40
    for _ in range(n):
        s = r.connect(timeout=30)
        s.sendall(request_bytes(k, body=body))   # a spilled replay
        got = Reader(s).response()
        ok = ok and isinstance(got, tuple) and status_of(got[0]) == 201 and len(got[0]) > 200000
        socks.append(s)
    time.sleep(0.5)
    rss_open = r.rss_kib()
    for s in socks:
        s.close()
    time.sleep(1.0)
    rss_closed = r.rss_kib()
    held = rss_open - rss_closed
    tap(ok and held < 8 * 1024,
        "a kept connection's buffers shrink after a large answer: %d idle connections after a %d KiB replay hold %d KiB"
        % (n, len(body) // 1024, held), "replays ok %s; RSS open %d KiB, closed %d KiB" % (ok, rss_open, rss_closed))
    r.stop()


# --- churn and stop ---------------------------------------------------------------

STAGES = ["connect", "mid-header", "mid-params", "params", "mid-body", "request", "abort",
          "half-close", "read-part", "whole", "whole-kept"]


def churn_one(r, stop_at, counts):
    stage = random.choice(STAGES)
    k = new_key()
    data = request_bytes(k, keep=(stage == "whole-kept"))
    head = begin() + params_recs(charge_params(k))
    try:
        s = r.connect(timeout=3)
    except OSError:
        counts["refused"] += 1
        return
    try:
        if stage == "mid-header":
            s.sendall(data[:5])
        elif stage == "mid-params":
            s.sendall(head[:len(head) // 2])
        elif stage == "params":
            s.sendall(head)
        elif stage == "mid-body":
            s.sendall(head + stdin_recs(BODY[:7]))
        elif stage == "request":
            s.sendall(data)
        elif stage == "abort":
            s.sendall(data + rec(2))
            time.sleep(random.random() * 0.05)
        elif stage == "half-close":
            s.sendall(data)
            s.shutdown(socket.SHUT_WR)
            Reader(s).response()
        elif stage == "read-part":
            s.sendall(data)
            s.recv(8)
        elif stage in ("whole", "whole-kept"):
            s.sendall(data)
            Reader(s).response()
            if stage == "whole-kept":
                s.sendall(request_bytes(new_key()))
                time.sleep(random.random() * 0.05)
        if random.random() < 0.3:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # reset
        counts[stage] = counts.get(stage, 0) + 1
    except OSError:
        counts["errors"] += 1
    finally:
        s.close()


def part_soak(rounds=5):
    exits, reports = [], []
    t_start = time.time()
    for i in range(rounds):
        r = Responder("soak round %d" % (i + 1), threads=2, provider_latency_ms=80,
                      drain_timeout_ms=random.choice([0, 300, 1500]), max_inflight=64)
        if not r.ok:
            exits.append("no start")
            continue
        counts = {"refused": 0, "errors": 0}
        stop_at = time.time() + 1.5 + random.random()
        done = threading.Event()

        def worker():
            while not done.is_set():
                churn_one(r, stop_at, counts)

        threads = [threading.Thread(target=worker) for _ in range(24)]
        for t in threads:
            t.start()
        time.sleep(stop_at - time.time())
        rc = r.stop(wait=20, check=False)
        done.set()
        for t in threads:
            t.join(10)
        exits.append(rc)
        reports += r.asan_reports()
        if time.time() - t_start > 60:
            break
    tap(all(rc == 0 for rc in exits) and not reports,
        "churn and stop: %d rounds of short connections closing at every stage while SIGTERM arrives: exit statuses %r, %d sanitizer report(s)"
        % (len(exits), exits, len(reports)), "\n".join(reports))


PARTS = [("inflight", part_inflight), ("noread", part_noread), ("pipelined", part_pipelined_shut),
         ("halfclose", part_half_close), ("idle", part_idle), ("drain", part_drain_body),
         ("bodymem", part_body_memory), ("shrink", part_shrink), ("soak", part_soak)]

for pname, fn in PARTS:
    if only(pname):
        print("# part %s" % pname, flush=True)
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - any failure is a failed test
            tap(False, "part %s raised %s: %s" % (pname, type(e).__name__, e))
