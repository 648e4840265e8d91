#!/usr/bin/env python3
"""Many requests at once for tests/concurrency/run.sh, over HTTP (through a
web server) or straight to the responder's FastCGI socket; asyncio and raw
sockets, Python standard library only. Prints TAP lines without numbers
("ok - ..." / "not ok - ..."); run.sh numbers them.

  client.py burst TARGET N PREFIX LABEL
      N fresh charges at once (keys PREFIX-0 .. PREFIX-N-1). Checks: every
      answer 201 within --within seconds of the first request's start; one
      ledger line per key (--ledger); while they run, the thread count of
      every responder process below --top PID (comm "charge") is sampled
      from /proc/<pid>/task and its maximum must stay <= --thread-limit.
  client.py overload TARGET N PREFIX BOUND
      N charges at once against max_inflight = BOUND: exactly N - BOUND get
      503 service-unavailable with Retry-After, BOUND get 201; each 503'd
      key is unclaimed (GET /charge/keys/<key>: 404 key-not-found) and
      uncharged (no ledger line); /metrics' charge_overloaded_total grows by
      the number of 503s.
  client.py drain TARGET N PREFIX PID
      N charges at once; once Redis holds all N claims (--redis SOCKET), or
      after 2 s, SIGTERM to PID: every charge is answered 201, one ledger
      line each. (run.sh checks how PID exits.)

TARGET: http://127.0.0.1:PORT (HTTP/1.1, a new connection per request) or
a unix socket path (FastCGI, a new connection per request).
"""

import argparse
import asyncio
import os
import re
import signal
import struct
import subprocess
import sys
import threading
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import fcgi  # noqa: E402

API_KEY = "sk_test_demo"
PRINCIPAL = "demo"
BODY = b'{"amount":1999,"currency":"usd","source":"tok_visa"}'


def tap(ok, desc, why=None):
    print("%s - %s" % ("ok" if ok else "not ok", desc), flush=True)
    if not ok and why:
        for line in str(why).splitlines()[:20]:
            print("#   " + line, flush=True)


class Answer:
    def __init__(self, status=None, headers=None, body=b"", error=None, t_end=0.0):
        self.status = status
        self.headers = headers or {}
        self.body = body
        self.error = error
        self.t_end = t_end

    def short(self):
        if self.error:
            return self.error
        return "%s %s" % (self.status, self.body[:160].decode(errors="replace"))


def parse_head(head):
    """Status line (HTTP) or Status: header (CGI) and headers, lower-cased."""
    lines = head.decode("latin-1").split("\r\n")
    status, headers = None, {}
    if lines and lines[0].startswith("HTTP/"):
        status = int(lines[0].split()[1])
        lines = lines[1:]
    for line in lines:
        if ":" in line:
            k, v = line.split(":", 1)
            headers[k.strip().lower()] = v.strip()
    if status is None and "status" in headers:
        status = int(headers["status"].split()[0])
    return status, headers


async def http_request(hostport, method, path, key=None, body=b"", timeout=30.0):
    host, port = hostport.rsplit(":", 1)
    w = None
    try:
        r, w = await asyncio.wait_for(asyncio.open_connection(host, int(port)), timeout)
        head = ["%s %s HTTP/1.1" % (method, path), "Host: 127.0.0.1",
                "Authorization: Bearer " + API_KEY, "Connection: close"]
        if key is not None:
            head.append("Idempotency-Key: " + key)
        if method == "POST":
            head += ["Content-Type: application/json", "Content-Length: %d" % len(body)]
        w.write(("\r\n".join(head) + "\r\n\r\n").encode() + body)
        data = await asyncio.wait_for(r.read(), timeout)
    except (OSError, asyncio.TimeoutError) as e:
        return Answer(error="%s: %s" % (e.__class__.__name__, e), t_end=time.monotonic())
    finally:
        if w is not None:
            w.close()
    t = time.monotonic()
    head, _, rest = data.partition(b"\r\n\r\n")
    if not head.startswith(b"HTTP/"):
        return Answer(error="no HTTP answer (%d bytes)" % len(data), t_end=t)
    status, headers = parse_head(head)
    return Answer(status, headers, rest, t_end=t)


def fcgi_params(method, path, key=None, body=b""):
    p = {"REQUEST_METHOD": method, "REQUEST_URI": path, "SCRIPT_NAME": path.split("?")[0],
         "QUERY_STRING": "", "SERVER_PROTOCOL": "HTTP/1.1",
         "HTTP_AUTHORIZATION": "Bearer " + API_KEY}
    if key is not None:
        p["HTTP_IDEMPOTENCY_KEY"] = key
    if method == "POST":
        p["CONTENT_TYPE"] = "application/json"
        p["CONTENT_LENGTH"] = str(len(body))
    return p


def fcgi_bytes(params, body, req_id=1, keep=False):
    out = fcgi._record(fcgi.BEGIN_REQUEST, struct.pack(">HB5x", fcgi.RESPONDER, 1 if keep else 0), req_id)
    p = fcgi.encode_params(params)
    for i in range(0, len(p), 65535):
        out += fcgi._record(fcgi.PARAMS, p[i:i + 65535], req_id)
    out += fcgi._record(fcgi.PARAMS, b"", req_id)
    if body:
        out += fcgi._record(fcgi.STDIN, body, req_id)
    return out + fcgi._record(fcgi.STDIN, b"", req_id)


async def fcgi_request(path_sock, method, path, key=None, body=b"", timeout=30.0):
    w = None
    try:
        r, w = await asyncio.wait_for(asyncio.open_unix_connection(path_sock), timeout)
        w.write(fcgi_bytes(fcgi_params(method, path, key, body), body))
        await w.drain()
        out = b""
        while True:
            hdr = await asyncio.wait_for(r.readexactly(8), timeout)
            _, rtype, _, clen, plen, _ = struct.unpack(">BBHHBB", hdr)
            content = await asyncio.wait_for(r.readexactly(clen + plen), timeout)
            if rtype == fcgi.STDOUT:
                out += content[:clen]
            elif rtype == fcgi.END_REQUEST:
                break
    except (OSError, asyncio.TimeoutError, asyncio.IncompleteReadError) as e:
        return Answer(error="%s: %s" % (e.__class__.__name__, e), t_end=time.monotonic())
    finally:
        if w is not None:
            w.close()
    t = time.monotonic()
    head, _, rest = out.partition(b"\r\n\r\n")
    status, headers = parse_head(head)
    if status is None:
        status = 200 if head else None
    return Answer(status, headers, rest, t_end=t)


def request(target, method, path, key=None, body=b"", **kw):
    if target.startswith("http://"):
        return http_request(target[len("http://"):], method, path, key, body, **kw)
    return fcgi_request(target, method, path, key, body, **kw)


def ledger_counts(path, keys):
    want = set(keys)
    counts = dict.fromkeys(keys, 0)
    try:
        with open(path, errors="replace") as f:
            for line in f:
                cols = line.rstrip("\n").split("\t")
                if len(cols) > 2 and cols[2] in want:
                    counts[cols[2]] += 1
    except OSError:
        pass
    return counts


# ------------------------------------------------------------- threads

def descendants(top, comm="charge"):
    """PIDs below top whose comm is comm."""
    parent, name = {}, {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                st = f.read()
        except OSError:
            continue
        rest = st.rsplit(")", 1)[1].split()
        parent[int(d)] = int(rest[1])
        name[int(d)] = st[st.index("(") + 1:st.rindex(")")]
    out = []
    for p, n in name.items():
        if n != comm:
            continue
        q = parent.get(p, 0)
        while q > 1:
            if q == top:
                out.append(p)
                break
            q = parent.get(q, 0)
    return sorted(out)


class ThreadSampler(threading.Thread):
    """Samples len(/proc/<pid>/task) of every responder process below top
    every 5 ms; the process list is refreshed every 250 ms."""

    def __init__(self, top):
        super().__init__(daemon=True)
        self.top = top
        self.stop = threading.Event()
        self.samples = 0
        self.max = 0
        self.max_pid = None
        self.pids = set()

    def run(self):
        pids, refreshed = [], 0.0
        while not self.stop.is_set():
            now = time.monotonic()
            if now - refreshed > 0.25:
                pids = descendants(self.top)
                self.pids.update(pids)
                refreshed = now
            for p in pids:
                try:
                    n = len(os.listdir("/proc/%d/task" % p))
                except OSError:
                    continue
                self.samples += 1
                if n > self.max:
                    self.max, self.max_pid = n, p
            time.sleep(0.005)


# ------------------------------------------------------------- commands

async def gather_charges(target, keys, timeout):
    """Starts one charge per key at once; returns (start time, tasks)."""
    t0 = time.monotonic()
    tasks = [asyncio.ensure_future(request(target, "POST", "/charge", k, BODY, timeout=timeout))
             for k in keys]
    return t0, tasks


def summary(answers):
    c = {}
    for a in answers:
        k = a.error.split(":")[0] if a.error else str(a.status)
        c[k] = c.get(k, 0) + 1
    return ", ".join("%d x %s" % (v, k) for k, v in sorted(c.items()))


def spill_body(items=300):
    """A charge whose echoed object is above spill_threshold_bytes (16 KiB)."""
    li = ",".join('{"description":"concurrency item %04d, a widget of a large order",'
                  '"quantity":1,"unit_amount":100}' % i for i in range(items))
    return ('{"amount":%d,"currency":"usd","source":"tok_visa","line_items":[%s]}'
            % (100 * items, li)).encode()


def cmd_burst(a):
    keys = ["%s-%d" % (a.prefix, i) for i in range(a.n)]
    # one spilled charge first: the io_threads pool starts with the first
    # spill, so the sampled threads include it
    sp = asyncio.run(request(a.target, "POST", "/charge", a.prefix + "-spill", spill_body(),
                             timeout=a.timeout))
    tap(sp.status == 201, "[%s] a charge whose answer is spilled to a file: 201" % a.label,
        sp.short())
    sampler = ThreadSampler(a.top) if a.top else None
    if sampler:
        sampler.start()

    async def main():
        t0, tasks = await gather_charges(a.target, keys, a.timeout)
        return t0, await asyncio.gather(*tasks)
    t0, answers = asyncio.run(main())
    if sampler:
        time.sleep(0.05)
        sampler.stop.set()
        sampler.join()
    bad = [(k, x) for k, x in zip(keys, answers) if x.status != 201]
    slowest = max(x.t_end for x in answers) - t0
    late = [(k, x) for k, x in zip(keys, answers) if x.status == 201 and x.t_end - t0 > a.within]
    tap(not bad and not late,
        "[%s] %d fresh charges at once: every answer 201 within %.1f s of the first "
        "request's start (slowest %.2f s)" % (a.label, a.n, a.within, slowest),
        "answers: %s; %d answered 201 after %.1f s; first bad: %s" % (
            summary(answers), len(late), a.within,
            "; ".join("%s: %s" % (k, x.short()) for k, x in bad[:3])))
    counts = ledger_counts(a.ledger, keys)
    wrong = {k: v for k, v in counts.items() if v != 1}
    tap(not wrong, "[%s] exactly one ledger line per key (%d keys)" % (a.label, a.n),
        "%d keys without exactly one line, e.g. %s" % (
            len(wrong), ", ".join("%s: %d" % kv for kv in list(wrong.items())[:5])))
    if sampler:
        ok = sampler.samples > 0 and sampler.pids and sampler.max <= a.thread_limit
        tap(ok, "[%s] responder threads: at most %d in any of %d process(es) over %d samples "
            "(limit %d = 1 + threads + io_threads)" % (
                a.label, sampler.max, len(sampler.pids), sampler.samples, a.thread_limit),
            "pid %s ran %d threads; processes %s" % (sampler.max_pid, sampler.max,
                                                     sorted(sampler.pids)))
    print("# [%s] %d charges: %s; slowest %.2f s" % (a.label, a.n, summary(answers), slowest))


def metric(text, name):
    m = re.search(r"^%s(?:\{[^}]*\})?\s+(\d+)" % re.escape(name), text, re.M)
    return int(m.group(1)) if m else None


def cmd_overload(a):
    keys = ["%s-%d" % (a.prefix, i) for i in range(a.n)]

    async def get(path):
        return await request(a.target, "GET", path, timeout=a.timeout)

    async def main():
        before = await get("/metrics")
        _, tasks = await gather_charges(a.target, keys, a.timeout)
        answers = await asyncio.gather(*tasks)
        after = await get("/metrics")
        refused = [k for k, x in zip(keys, answers) if x.status == 503]
        # one at a time: max_inflight is small
        looks = {}
        for k in refused:
            looks[k] = await get("/charge/keys/" + k)
        return before, answers, after, looks
    before, answers, after, looks = asyncio.run(main())
    n503 = sum(1 for x in answers if x.status == 503)
    n201 = sum(1 for x in answers if x.status == 201)
    want503 = a.n - a.bound
    tap(n503 == want503 and n201 == a.bound,
        "max_inflight %d, %d charges at once: %d answered 503, %d answered 201" % (
            a.bound, a.n, want503, a.bound),
        "answers: %s" % summary(answers))
    badform = []
    for k, x in zip(keys, answers):
        if x.status != 503:
            continue
        why = []
        if x.headers.get("retry-after") is None:
            why.append("no Retry-After")
        if not x.headers.get("content-type", "").startswith("application/problem+json"):
            why.append("Content-Type %r" % x.headers.get("content-type"))
        if b'"type":"/problems/service-unavailable"' not in x.body.replace(b" ", b""):
            why.append("body %r" % x.body[:200])
        if why:
            badform.append("%s: %s" % (k, ", ".join(why)))
    tap(n503 > 0 and not badform,
        "every 503 carries Retry-After and problem type service-unavailable (%d)" % n503,
        "no 503 at all" if n503 == 0 else "; ".join(badform[:3]))
    notfound = [k for k, x in looks.items()
                if x.status == 404 and b"key-not-found" in x.body]
    tap(n503 > 0 and len(notfound) == n503,
        "nothing claimed for a 503'd key: GET /charge/keys/<key> is 404 key-not-found (%d)" % n503,
        "no 503 at all" if n503 == 0 else "; ".join(
            "%s: %s" % (k, x.short()) for k, x in looks.items() if k not in notfound)[:600])
    counts = ledger_counts(a.ledger, keys)
    charged503 = [k for k, x in zip(keys, answers) if x.status == 503 and counts[k]]
    charged201 = [k for k, x in zip(keys, answers) if x.status == 201 and counts[k] != 1]
    tap(n503 > 0 and not charged503 and not charged201,
        "nothing charged for a 503'd key (no ledger line), one line for each 201",
        "no 503 at all" if n503 == 0 else
        "503'd keys charged: %s; 201 keys without one line: %s" % (charged503[:5], charged201[:5]))
    v0 = metric(before.body.decode(errors="replace"), "charge_overloaded_total")
    v1 = metric(after.body.decode(errors="replace"), "charge_overloaded_total")
    tap(v0 is not None and v1 is not None and v1 - v0 == n503 and n503 > 0,
        "/metrics: charge_overloaded_total grew by the number of 503s (%d)" % n503,
        "before %s, after %s (%s / %s)" % (v0, v1, before.short()[:80], after.short()[:80]))


def redis_count(sock, pattern):
    try:
        r = subprocess.run(["redis-cli", "-s", sock, "--scan", "--pattern", pattern],
                           stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, timeout=5, text=True)
        return len(r.stdout.split())
    except (OSError, subprocess.TimeoutExpired):
        return -1


def cmd_drain(a):
    keys = ["%s-%d" % (a.prefix, i) for i in range(a.n)]
    info = {}

    def terminator(t0):
        # every charge claimed, or at most 0.8 s: before the first provider
        # call (latency 1 s) can end
        n = 0
        while time.monotonic() < t0 + 0.8:
            n = redis_count(a.redis, "%sidem:%s:%s-*" % (a.key_prefix, PRINCIPAL, a.prefix))
            if n >= a.n:
                break
            time.sleep(0.02)
        info["claimed"] = n
        info["sent"] = time.monotonic()
        os.kill(a.pid, signal.SIGTERM)

    async def main():
        t0, tasks = await gather_charges(a.target, keys, a.timeout)
        th = threading.Thread(target=terminator, args=(t0,), daemon=True)
        th.start()
        answers = await asyncio.gather(*tasks)
        th.join()
        return t0, answers
    t0, answers = asyncio.run(main())
    n201 = sum(1 for x in answers if x.status == 201)
    first = min(x.t_end for x in answers)
    early = first < info["sent"]
    tap(n201 == a.n and not early,
        "SIGTERM while %d charges wait on the provider (%d claimed in Redis, %.2f s after "
        "the first request's start, %.2f s before the first answer): all answered 201"
        % (a.n, info["claimed"], info["sent"] - t0, first - info["sent"]),
        "answers: %s%s" % (summary(answers),
                           "; an answer came before SIGTERM" if early else ""))
    counts = ledger_counts(a.ledger, keys)
    wrong = {k: v for k, v in counts.items() if v != 1}
    tap(not wrong, "... one ledger line per key (%d keys)" % a.n,
        "%d keys without exactly one line, e.g. %s" % (
            len(wrong), ", ".join("%s: %d" % kv for kv in list(wrong.items())[:5])))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("cmd", choices=["burst", "overload", "drain"])
    p.add_argument("target")
    p.add_argument("n", type=int)
    p.add_argument("prefix")
    p.add_argument("extra", nargs="?")
    p.add_argument("--ledger", required=True)
    p.add_argument("--top", type=int, default=0)
    p.add_argument("--thread-limit", type=int, default=0)
    p.add_argument("--within", type=float, default=2.0)
    p.add_argument("--timeout", type=float, default=30.0)
    p.add_argument("--redis", default="")
    p.add_argument("--key-prefix", default="charge:")
    a = p.parse_args()
    if a.cmd == "burst":
        a.label = a.extra
        cmd_burst(a)
    elif a.cmd == "overload":
        a.bound = int(a.extra)
        cmd_overload(a)
    else:
        a.pid = int(a.extra)
        cmd_drain(a)


if __name__ == "__main__":
    main()
