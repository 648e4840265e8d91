#!/usr/bin/env python3
"""Thousands of kept FastCGI connections, for tests/kept_conns/run.sh.
Prints TAP lines without numbers (run.sh numbers them). Python standard
library only.

  kept.py BIN RUNDIR REDIS_URL

One responder (charge --listen on a unix socket, two event loops, a short
keepalive_idle_timeout_ms) gets N connections at once (4 096 unless
KEPT_N says otherwise), each carrying one replayed charge with
FCGI_KEEP_CONN and then left idle, as nginx's upstream pool leaves them
after a burst. /proc tells the responder's descriptors and memory (VmRSS)
before, with the N idle connections and after keepalive_idle_timeout_ms
reaped them; the bounds are the ones docs/deploying-concurrency.md states.
"""

import os
import resource
import selectors
import signal
import socket
import struct
import subprocess
import sys
import time
import uuid

sys.dont_write_bytecode = True
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "lib"))
import fcgi  # noqa: E402

BIN, RUN, REDIS_URL = sys.argv[1], sys.argv[2], sys.argv[3]
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
N = int(os.environ.get("KEPT_N", "4096"))
IDLE_MS = 5000  # keepalive_idle_timeout_ms of this responder
LOOPS = 2
# What docs/deploying-concurrency.md states for an idle kept connection: one
# descriptor and at most this much of the responder's memory (RSS).
KIB_PER_IDLE_MAX = 12
WINDOW = 32  # requests in flight while the connections are opened
FDS_SLACK = 8  # descriptors the responder may open meanwhile (Redis, logs)
BODY = b'{"amount":1999,"currency":"usd","source":"tok_visa"}'
KEEP_CONN = 1


def tap(ok, desc, why=None):
    print("%s - %s" % ("ok" if ok else "not ok", desc), flush=True)
    if not ok and why:
        for line in str(why).splitlines()[:15]:
            print("#   " + line, flush=True)
    return ok


def rec(rtype, content=b"", rid=1):
    pad = (8 - len(content) % 8) % 8
    return struct.pack(">BBHHBB", 1, rtype, rid, len(content), pad, 0) + content + b"\0" * pad


def charge_bytes(key, keep=True):
    # the params nginx's fastcgi_params sends, roughly: a kept connection's
    # reader holds what its largest request needed
    p = fcgi.charge_params(
        key, BODY, REQUEST_URI="/charge", QUERY_STRING="", SERVER_PROTOCOL="HTTP/1.1",
        GATEWAY_INTERFACE="CGI/1.1", SERVER_SOFTWARE="nginx/1.22.1", REMOTE_ADDR="127.0.0.1",
        REMOTE_PORT="40000", SERVER_ADDR="127.0.0.1", SERVER_PORT="8080",
        SERVER_NAME="localhost", REQUEST_SCHEME="http", DOCUMENT_ROOT="/srv/www",
        DOCUMENT_URI="/charge", HTTP_HOST="127.0.0.1:8080", HTTP_USER_AGENT="kept/1",
        HTTP_ACCEPT="*/*", HTTP_CONTENT_LENGTH=str(len(BODY)),
        HTTP_CONTENT_TYPE="application/json")
    return (rec(fcgi.BEGIN_REQUEST, struct.pack(">HB5x", fcgi.RESPONDER, KEEP_CONN if keep else 0))
            + rec(fcgi.PARAMS, fcgi.encode_params(p)) + rec(fcgi.PARAMS)
            + rec(fcgi.STDIN, BODY) + rec(fcgi.STDIN))


def get_bytes(uri):
    p = {"REQUEST_METHOD": "GET", "REQUEST_URI": uri, "SCRIPT_NAME": uri,
         "QUERY_STRING": "", "SERVER_PROTOCOL": "HTTP/1.1"}
    return (rec(fcgi.BEGIN_REQUEST, struct.pack(">HB5x", fcgi.RESPONDER, 0))
            + rec(fcgi.PARAMS, fcgi.encode_params(p)) + rec(fcgi.PARAMS) + rec(fcgi.STDIN))


def answer_done(buf):
    """(stdout, rest) once buf holds a whole answer up to END_REQUEST; else None."""
    out, off = b"", 0
    while len(buf) - off >= 8:
        _, rtype, _, clen, plen, _ = struct.unpack(">BBHHBB", buf[off:off + 8])
        if len(buf) - off < 8 + clen + plen:
            return None
        if rtype == fcgi.STDOUT:
            out += buf[off + 8:off + 8 + clen]
        off += 8 + clen + plen
        if rtype == fcgi.END_REQUEST:
            return out, buf[off:]
    return None


class Responder:
    def __init__(self):
        self.dir = os.path.join(RUN, "kept")
        os.makedirs(os.path.join(self.dir, "spill"), exist_ok=True)
        self.sock = os.path.join(self.dir, "charge.sock")
        self.log = os.path.join(self.dir, "charge.log")
        env = {k: v for k, v in os.environ.items() if not k.startswith("CHARGE_")}
        env.update({
            "CHARGE_REDIS_URL": REDIS_URL, "CHARGE_SPILL_DIR": os.path.join(self.dir, "spill"),
            "CHARGE_API_KEYS_FILE": os.path.join(RUN, "api-keys"),
            "CHARGE_PROVIDER_LEDGER": os.path.join(self.dir, "ledger.log"),
            "CHARGE_METRICS_FILE": "none", "CHARGE_LOG_LEVEL": "warn",
            "CHARGE_THREADS": str(LOOPS), "CHARGE_PROVIDER_LATENCY_MS": "0",
            "CHARGE_KEEPALIVE_IDLE_TIMEOUT_MS": str(IDLE_MS),
            "CHARGE_REQUEST_TIMEOUT_MS": "5000", "CHARGE_DRAIN_TIMEOUT_MS": "3000",
        })
        with open(self.log, "ab") as logf:
            self.p = subprocess.Popen([BIN, "--listen", self.sock], env=env, cwd=REPO,
                                      stdin=subprocess.DEVNULL, stdout=logf, stderr=logf)
        self.pid = self.p.pid
        end = time.time() + 10
        while time.time() < end and not os.path.exists(self.sock) and self.p.poll() is None:
            time.sleep(0.05)
        self.ok = os.path.exists(self.sock) and self.p.poll() is None

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(10)
        s.connect(self.sock)
        return s

    def ask(self, data):
        s = self.connect()
        try:
            s.sendall(data)
            buf = b""
            while True:
                d = s.recv(65536)
                if not d:
                    return None
                buf += d
                done = answer_done(buf)
                if done:
                    return done[0]
        finally:
            s.close()

    def status(self, key):
        with open("/proc/%d/status" % self.pid) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1])
        return -1

    def nfds(self):
        return len(os.listdir("/proc/%d/fd" % self.pid))

    def metric(self, name):
        out = self.ask(get_bytes("/metrics")) or b""
        for line in out.split(b"\r\n\r\n", 1)[-1].decode().splitlines():
            if line.startswith(name + " "):
                return float(line.split()[1])
        return None

    def log_tail(self, n=10):
        try:
            with open(self.log, "rb") as f:
                return b"\n".join(f.read().splitlines()[-n:]).decode("utf-8", "replace")
        except OSError:
            return ""

    def stop(self):
        if self.p.poll() is None:
            os.kill(self.pid, signal.SIGTERM)
        try:
            return self.p.wait(15)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
            return None


def open_kept(r, n, key):
    """n connections, each with one replay answered and left open. Returns
    (sockets, answers that were replays, seconds); ANSWERED[fd] is when
    each answer was complete."""
    t0 = time.time()
    socks, replays = [], 0
    sel = selectors.DefaultSelector()
    req = charge_bytes(key)
    pending = {}
    end = time.time() + 60
    for i in range(n):
        while True:
            try:
                s = r.connect()
                break
            except BlockingIOError:
                # the listen backlog is full (a unix socket says EAGAIN):
                # the responder has not accepted yet; take answers meanwhile
                if time.time() > end:
                    raise
                for key_, _ in sel.select(0.05):
                    replays += take(key_.fileobj, pending, sel)
        s.sendall(req)
        s.setblocking(False)
        socks.append(s)
        pending[s.fileno()] = b""
        sel.register(s, selectors.EVENT_READ)
        # at most WINDOW requests in flight, as a web server's pool fills:
        # what grows is then the idle connections, not the requests' memory
        while len(pending) >= WINDOW and time.time() < end:
            for key_, _ in sel.select(0.05):
                replays += take(key_.fileobj, pending, sel)
    end = time.time() + 60
    while pending and time.time() < end:
        for key_, _ in sel.select(1):
            replays += take(key_.fileobj, pending, sel)
    sel.close()
    return socks, replays, time.time() - t0


def take(s, pending, sel):
    fd = s.fileno()
    if fd not in pending:
        return 0
    try:
        d = s.recv(65536)
    except BlockingIOError:
        return 0
    if not d:
        del pending[fd]
        sel.unregister(s)
        return 0
    pending[fd] += d
    done = answer_done(pending[fd])
    if not done:
        return 0
    del pending[fd]
    sel.unregister(s)
    ANSWERED[fd] = time.time()
    return 1 if b"Idempotent-Replayed: true" in done[0] else 0


ANSWERED = {}


def close_times(socks, seconds):
    """When the responder closed each of socks (EOF), watched for at most
    seconds: {fd: time}."""
    sel = selectors.DefaultSelector()
    for s in socks:
        sel.register(s, selectors.EVENT_READ)
    closed, end = {}, time.time() + seconds
    while time.time() < end and len(closed) < len(socks):
        for key_, _ in sel.select(max(0.01, end - time.time())):
            s = key_.fileobj
            try:
                d = s.recv(4096)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                d = b""
            if not d:
                closed[s.fileno()] = time.time()
                sel.unregister(s)
    sel.close()
    return closed


def main():
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = N + 256
    if soft < need:
        if hard != resource.RLIM_INFINITY and hard < need:
            tap(False, "descriptors: %d needed, the hard limit is %d" % (need, hard))
            return
        resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
    r = Responder()  # inherits the raised limit
    if not tap(r.ok, "the responder starts with %d event loops" % LOOPS, r.log_tail()):
        return
    try:
        run(r)
    finally:
        rc = r.stop()
        tap(rc == 0, "SIGTERM: the responder exits 0", "status %s\n%s" % (rc, r.log_tail()))


def run(r):
    key = "kept-" + uuid.uuid4().hex
    first = r.ask(charge_bytes(key, keep=False))
    tap(first is not None and b"Status: 201" in first, "a charge answers 201", repr(first)[:300])
    # warm: both loops have served, Redis connections are open
    for _ in range(64):
        r.ask(charge_bytes(key, keep=False))
    time.sleep(0.3)
    fds0, rss0 = r.nfds(), r.status("VmRSS")
    socks, replays, secs = open_kept(r, N, key)
    time.sleep(0.5)
    fds1, rss1 = r.nfds(), r.status("VmRSS")
    print("# %d kept connections opened and answered in %.1f s; responder: %d -> %d "
          "descriptors, VmRSS %d -> %d KiB (%.1f KiB per connection)" % (
              N, secs, fds0, fds1, rss0, rss1, (rss1 - rss0) / N), flush=True)
    tap(replays == N, "%d connections at once, each one replay with FCGI_KEEP_CONN: all answered"
        % N, "%d of %d answered as replays" % (replays, N))
    tap(N <= fds1 - fds0 <= N + FDS_SLACK,
        "one descriptor per idle kept connection (%d more for %d)" % (fds1 - fds0, N),
        "descriptors %d before, %d with %d kept connections" % (fds0, fds1, N))
    tap(rss1 - rss0 <= KIB_PER_IDLE_MAX * N,
        "memory per idle kept connection at most %d KiB (%.1f KiB)" % (
            KIB_PER_IDLE_MAX, (rss1 - rss0) / N),
        "VmRSS %d KiB before, %d KiB with %d kept connections" % (rss0, rss1, N))
    # each is closed keepalive_idle_timeout_ms after its answer: not before
    # (less a loop turn: libuv times from the start of the turn), not much after
    idle = IDLE_MS / 1000.0
    closed = close_times(socks, max(ANSWERED.values(), default=0) + idle + 5 - time.time())
    idle_for = sorted(closed[s.fileno()] - ANSWERED.get(s.fileno(), 0)
                      for s in socks if s.fileno() in closed)
    early = sum(1 for x in idle_for if x < idle - 0.25)
    late = sum(1 for x in idle_for if x > idle + 3)
    print("# idle for %.2f .. %.2f s before the responder closed them (timeout %.1f s)" % (
        idle_for[0] if idle_for else -1, idle_for[-1] if idle_for else -1, idle), flush=True)
    tap(len(closed) == N, "every idle kept connection is closed (%d of %d)" % (len(closed), N))
    tap(idle_for and early == 0 and late == 0,
        "each one keepalive_idle_timeout_ms after its answer, within 3 s",
        "%d closed early, %d late" % (early, late))
    for s in socks:
        s.close()
    end = time.time() + 5
    while time.time() < end and r.nfds() > fds0:
        time.sleep(0.1)
    fds2, rss2 = r.nfds(), r.status("VmRSS")
    print("# after the idle timeout: %d descriptors, VmRSS %d KiB" % (fds2, rss2), flush=True)
    tap(fds2 <= fds0, "the responder holds its descriptors of before again (%d, was %d)" % (
        fds2, fds0))
    closed = r.metric("charge_conn_idle_closed_total")
    tap(closed is not None and closed >= N,
        "charge_conn_idle_closed_total counts them (%s)" % closed)
    again = r.ask(charge_bytes(key, keep=False))
    tap(again is not None and b"Idempotent-Replayed: true" in again,
        "the responder serves after the reaping", repr(again)[:300])


main()
