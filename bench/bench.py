#!/usr/bin/env python3
"""bench.py - the driver behind bench/run (see bench/README.md).

Builds with optimisation (the responder with meson --buildtype=release into
bench/build/meson, the baseline and floor responders with gcc -O3 into
bench/build/bin), starts a private Redis (unix socket, no persistence,
noeviction) and one lighttpd on loopback with every responder behind
mod_fastcgi bin-path (the same processes x threads each: --procs, --threads,
by default those of the deployment in conf/ and run.sh), then measures with
wrk:

  fresh     POST /charge, a new Idempotency-Key on every request
  replay    POST /charge, one key, primed once
  baseline  bench/baseline.c: read the body, answer 201 (transport ceiling)
  floor1    bench/floor.c with one EVALSHA round trip per request
  floor2    bench/floor.c with two EVALSHA round trips per request
  fresh_http  fresh, the responder calling the provider simulator
            (charge-provider-sim) over HTTP on loopback (provider_url)

Runs are interleaved (fresh fresh_http replay baseline floor1 floor2,
repeated for --rounds) for each connection count. Around every run it reads
CPU time of the responder processes, Redis and lighttpd from /proc, the
machine's busy time from /proc/stat, INFO commandstats and INFO cpu, the
provider ledger and the responders' RSS, and for fresh_http the simulator's
CPU and counts (GET /_sim/stats), then what the simulator answers alone. It
also measures Redis memory per completed record (inline and spilled) and,
with valgrind --tool=callgrind, instructions per request inside the
responder (per function, compared with an earlier result with --compare).
--sweep measures fresh and replay for several processes x threads instead;
--concurrency measures many connections at a provider latency, in-process
and through the simulator over HTTP (TCP and a unix socket). Results go to
<out>/<date>.json (<date>-sweep.json) and report.py turns them into .md and
.svg.

Python standard library only. Every child process is started here, tracked
by PID and stopped by PID; every run is bounded in time.
"""
import argparse
import hashlib
import http.client
import json
import os
import platform
import resource
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import uuid

sys.dont_write_bytecode = True     # no __pycache__ in the tree

BENCH = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(BENCH)
BUILD = os.path.join(BENCH, 'build')

API_KEY = 'sk_test_demo'
PRINCIPAL = 'demo'
DEFAULT_BODY = '{"amount":1999,"currency":"usd","source":"tok_visa"}'
SPILL_ITEMS = 300          # line items: the echoed charge object is > 16 KiB
CLK_TCK = os.sysconf('SC_CLK_TCK')

# name -> (path, backend). The order is the interleaving order. Backends
# whose name ends in _http are served on lighttpd's second port (the path is
# /charge for both: the responder routes by REQUEST_URI).
SCENARIOS = {
    'fresh': ('/charge', 'charge'),
    'fresh_http': ('/charge', 'charge_http'),
    'replay': ('/charge', 'charge'),
    'baseline': ('/baseline', 'baseline'),
    'floor1': ('/floor1', 'floor1'),
    'floor2': ('/floor2', 'floor2'),
}
# Commands the harness itself sends; not counted per request.
OWN_COMMANDS = {'info', 'dbsize', 'ping', 'flushall', 'memory|usage',
                'memory|purge', 'scan', 'config|get', 'script|exists',
                'shutdown'}

# The provider simulator (sim/): its accepted secret key, and the line it
# prints on stderr when it listens.
SIM_API_KEY = 'sk_test_sim'
SIM_READY = 'charge-provider-sim: listening on'
SIM_BINARY = 'charge-provider-sim'

FLOOR_SCRIPT_DOC = ("redis.call('HSET', KEYS[1], 'state', ARGV[1]); "
                    "redis.call('PEXPIRE', KEYS[1], ARGV[2]); return 1")


class BenchError(Exception):
    """Something failed to run (not a missed target)."""


def shipped_nginx(directive):
    """The number of the first `directive N;` line conf/nginx.conf ships
    (`auto`: the cores)."""
    with open(os.path.join(BENCH, '..', 'conf', 'nginx.conf')) as f:
        for line in f:
            m = re.match(r'\s*%s\s+(\d+|auto)\s*;' % re.escape(directive), line)
            if m:
                return os.cpu_count() or 1 if m.group(1) == 'auto' else int(m.group(1))
    raise BenchError('conf/nginx.conf: no `%s` line' % directive)


def shipped_keepalive():
    """The upstream keepalive pool conf/nginx.conf ships."""
    return shipped_nginx('keepalive')


def deployment_defaults():
    """Processes and threads of the default deployment, read from the tree.

    threads: the `threads` key of conf/charge.conf (0: one event loop per
    core across the processes, as run.sh sets CHARGE_THREADS; the
    responder's built-in default when the key is absent: 1). procs: the MAX_PROCS default of
    run.sh (`${MAX_PROCS:-N}`), else the max-procs default of
    tools/stack.sh (`procs=${5:-N}`), else 2.
    """
    out = {'threads': 1, 'threads_from': 'built-in default',
           'procs': 2, 'procs_from': 'built-in default'}
    try:
        with open(os.path.join(ROOT, 'conf', 'charge.conf')) as f:
            for line in f:
                m = re.match(r'^\s*threads\s*=\s*(\d+)\s*(?:#.*)?$', line)
                if m:
                    out['threads'] = int(m.group(1))
                    out['threads_from'] = 'conf/charge.conf'
    except OSError:
        pass
    for rel, pat in (('run.sh', r'\$\{MAX_PROCS:-(\d+)\}'),
                     (os.path.join('tools', 'stack.sh'), r'procs=\$\{5:-(\d+)\}')):
        try:
            with open(os.path.join(ROOT, rel)) as f:
                m = re.search(pat, f.read())
        except OSError:
            m = None
        if m:
            out['procs'] = int(m.group(1))
            out['procs_from'] = rel
            break
    if out['threads'] == 0:
        # 0: one event loop per core across the processes, as run.sh sets
        out['threads'] = max(1, (os.cpu_count() or 1) // out['procs'])
        out['threads_from'] = 'conf/charge.conf (0) and run.sh: cores / processes'
    return out


def parse_sweep(spec):
    """"1x1 2x1 2x2" -> [(1, 1), (2, 1), (2, 2)] (processes x threads)."""
    out = []
    for item in spec.replace(',', ' ').split():
        m = re.match(r'^(\d+)[xX](\d+)$', item)
        if not m or not 1 <= int(m.group(1)) <= 64 or not 1 <= int(m.group(2)) <= 64:
            raise ValueError(item)
        out.append((int(m.group(1)), int(m.group(2))))
    if not out:
        raise ValueError(spec)
    return out


def log(msg):
    print('# ' + msg, flush=True)


def eff_threads(n):
    """Threads a process runs for the setting n (0: one per core, as the
    responder's threads = 0 means)."""
    return n if n > 0 else (os.cpu_count() or 1)


# ---------------------------------------------------------------- processes

class Procs:
    """Every process we start, stopped by PID in reverse order."""

    def __init__(self):
        self.items = []     # (name, Popen)

    def start(self, name, argv, **kw):
        p = subprocess.Popen(argv, **kw)
        self.items.append((name, p))
        return p

    def stop(self, p, sig=signal.SIGTERM, timeout=10.0):
        if p.poll() is not None:
            return p.returncode
        try:
            p.send_signal(sig)
            return p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            return p.wait(5)

    def stop_all(self):
        for _, p in reversed(self.items):
            self.stop(p)
        self.items = []


def proc_children(pid):
    kids = []
    try:
        for t in os.listdir(f'/proc/{pid}/task'):
            with open(f'/proc/{pid}/task/{t}/children') as f:
                kids += [int(x) for x in f.read().split()]
    except OSError:
        pass
    return kids


def proc_argv0(pid):
    try:
        with open(f'/proc/{pid}/cmdline', 'rb') as f:
            return f.read().split(b'\0')[0].decode(errors='replace')
    except OSError:
        return ''


def nginx_workers():
    """nginx worker processes of the --concurrency nginxes: NGINX_WORKERS
    from the environment, else what conf/nginx.conf ships."""
    return int(os.environ.get('NGINX_WORKERS') or shipped_nginx('worker_processes'))


def proc_cpu_split(pid):
    """(utime, stime) of the whole process from /proc/<pid>/stat, in ticks."""
    with open(f'/proc/{pid}/stat') as f:
        rest = f.read().rsplit(')', 1)[1].split()
    return int(rest[11]), int(rest[12])


def proc_cpu_ticks(pid):
    """utime + stime of the whole process, in ticks."""
    return sum(proc_cpu_split(pid))


def sys_ticks(pids):
    """The stime of the processes pids, summed, in ticks."""
    return sum(proc_cpu_split(p)[1] for p in pids)


def proc_sched_ns(pid):
    """Sum of sum_exec_runtime over the threads (ns), from schedstat."""
    total = 0
    for t in os.listdir(f'/proc/{pid}/task'):
        try:
            with open(f'/proc/{pid}/task/{t}/schedstat') as f:
                total += int(f.read().split()[0])
        except OSError:
            pass
    return total


def machine_busy_ticks():
    """(busy, steal, total) ticks over all CPUs from /proc/stat."""
    with open('/proc/stat') as f:
        v = [int(x) for x in f.readline().split()[1:]]
    # user nice system idle iowait irq softirq steal guest guest_nice
    busy = v[0] + v[1] + v[2] + v[5] + v[6]
    return busy, v[7], sum(v[:8])


def machine_other_pct(seconds):
    """Share of all cores busy over the next seconds (nothing of ours runs)."""
    a = machine_busy_ticks()
    time.sleep(seconds)
    b = machine_busy_ticks()
    total = b[2] - a[2]
    return 100.0 * (b[0] - a[0]) / total if total else 0.0


def wait_quiet(limit_s, threshold_pct=10.0):
    """Waits up to limit_s for a quiet machine; returns the last busy %."""
    end = time.monotonic() + limit_s
    while True:
        busy = machine_other_pct(2.0)
        if busy <= threshold_pct or time.monotonic() >= end:
            return busy
        log('machine busy %.0f %% (other processes); waiting to start' % busy)
        time.sleep(3.0)


def proc_threads(pid):
    try:
        return len(os.listdir(f'/proc/{pid}/task'))
    except OSError:
        return 0


def proc_rss_kb(pid):
    with open(f'/proc/{pid}/status') as f:
        for line in f:
            if line.startswith('VmRSS:'):
                return int(line.split()[1])
    return 0


def port_free():
    s = socket.socket()
    s.bind(('127.0.0.1', 0))
    port = s.getsockname()[1]
    s.close()
    return port


def tcp_listening(port):
    """True when 127.0.0.1:port is in LISTEN state (no connect needed)."""
    want = '0100007F:%04X' % port
    try:
        with open('/proc/net/tcp') as f:
            for line in f.readlines()[1:]:
                cols = line.split()
                if cols[1] == want and cols[3] == '0A':
                    return True
    except OSError:
        pass
    return False


def wait_for(pred, timeout, what):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return
        time.sleep(0.05)
    raise BenchError(f'timed out after {timeout:.0f} s waiting for {what}')


# -------------------------------------------------------------------- redis

class Redis:
    """A minimal RESP client over the unix socket."""

    def __init__(self, path, timeout=10.0):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(path)
        self.f = self.sock.makefile('rb')

    def close(self):
        self.f.close()
        self.sock.close()

    def cmd(self, *args):
        out = [b'*%d\r\n' % len(args)]
        for a in args:
            b = a if isinstance(a, bytes) else str(a).encode()
            out.append(b'$%d\r\n%s\r\n' % (len(b), b))
        self.sock.sendall(b''.join(out))
        return self._read()

    def _read(self):
        line = self.f.readline()
        if not line:
            raise BenchError('redis closed the connection')
        t, rest = line[:1], line[1:-2]
        if t == b'+':
            return rest.decode()
        if t == b'-':
            raise BenchError('redis error: ' + rest.decode())
        if t == b':':
            return int(rest)
        if t == b'$':
            n = int(rest)
            if n < 0:
                return None
            data = self.f.read(n + 2)
            return data[:-2]
        if t == b'*':
            n = int(rest)
            return None if n < 0 else [self._read() for _ in range(n)]
        raise BenchError('bad RESP reply %r' % line)

    def info(self, section):
        out = {}
        for line in self.cmd('INFO', section).decode().splitlines():
            if ':' in line and not line.startswith('#'):
                k, v = line.split(':', 1)
                out[k] = v
        return out

    def commandstats(self):
        """{command: (calls, usec)} from INFO commandstats."""
        out = {}
        for k, v in self.info('commandstats').items():
            if k.startswith('cmdstat_'):
                m = re.search(r'(?:^|,)calls=(\d+)', v)
                u = re.search(r'(?:^|,)usec=(\d+)', v)
                out[k[len('cmdstat_'):]] = (int(m.group(1)) if m else 0,
                                            int(u.group(1)) if u else 0)
        return out

    def cpu_s(self):
        """used_cpu_user + used_cpu_sys from INFO cpu (getrusage), seconds."""
        i = self.info('cpu')
        return float(i.get('used_cpu_user', 0)) + float(i.get('used_cpu_sys', 0))


# ----------------------------------------------------------------- fastcgi

def fcgi_pairs(params):
    out = []
    for k, v in params.items():
        kb, vb = k.encode(), v.encode()
        for n in (len(kb), len(vb)):
            out.append(bytes([n]) if n < 128 else struct.pack('!I', n | 0x80000000))
        out += [kb, vb]
    return b''.join(out)


def fcgi_record(rtype, content, rid=1):
    pad = (8 - len(content) % 8) % 8
    return struct.pack('!BBHHBx', 1, rtype, rid, len(content), pad) + content + b'\0' * pad


def fcgi_message(params, body, keep):
    """One request's records: BEGIN_REQUEST (FCGI_KEEP_CONN when keep),
    PARAMS, STDIN, each stream ended by an empty record."""
    msg = [fcgi_record(1, struct.pack('!HB5x', 1, 1 if keep else 0))]
    p = fcgi_pairs(params)
    for i in range(0, len(p), 65535):
        msg.append(fcgi_record(4, p[i:i + 65535]))
    msg.append(fcgi_record(4, b''))
    for i in range(0, len(body), 65535):
        msg.append(fcgi_record(5, body[i:i + 65535]))
    msg.append(fcgi_record(5, b''))
    return b''.join(msg)


def fcgi_read_stdout(f):
    """The STDOUT bytes of one answer read from f, up to END_REQUEST."""
    out = []
    while True:
        hdr = f.read(8)
        if len(hdr) < 8:
            raise BenchError('fastcgi: connection closed early')
        _, rtype, _, clen, plen = struct.unpack('!BBHHBx', hdr)
        content = f.read(clen)
        f.read(plen)
        if rtype == 6:
            out.append(content)
        elif rtype == 3:
            return b''.join(out)


def fcgi_request(port, params, body, timeout=30.0):
    """One FastCGI request on a new connection; returns the STDOUT bytes."""
    s = socket.create_connection(('127.0.0.1', port), timeout=timeout)
    try:
        s.sendall(fcgi_message(params, body, False))
        return fcgi_read_stdout(s.makefile('rb'))
    finally:
        s.close()


class FcgiKept:
    """FastCGI requests one after another on one connection kept open
    (FCGI_KEEP_CONN), as nginx's upstream keepalive sends them."""

    def __init__(self, port, timeout=30.0):
        self.s = socket.create_connection(('127.0.0.1', port), timeout=timeout)
        self.f = self.s.makefile('rb')

    def request(self, params, body):
        self.s.sendall(fcgi_message(params, body, True))
        return fcgi_read_stdout(self.f)

    def close(self):
        self.f.close()
        self.s.close()


def fcgi_charge_params(port, key, body):
    return {
        'GATEWAY_INTERFACE': 'CGI/1.1', 'SERVER_SOFTWARE': 'bench',
        'SERVER_PROTOCOL': 'HTTP/1.1', 'SERVER_NAME': '127.0.0.1',
        'SERVER_ADDR': '127.0.0.1', 'SERVER_PORT': str(port),
        'REMOTE_ADDR': '127.0.0.1', 'REMOTE_PORT': '40000',
        'REQUEST_METHOD': 'POST', 'REQUEST_URI': '/charge',
        'SCRIPT_NAME': '/charge', 'QUERY_STRING': '',
        'DOCUMENT_ROOT': '/nonexistent', 'REDIRECT_STATUS': '200',
        'CONTENT_TYPE': 'application/json',
        'CONTENT_LENGTH': str(len(body)),
        'HTTP_HOST': '127.0.0.1', 'HTTP_AUTHORIZATION': 'Bearer ' + API_KEY,
        'HTTP_IDEMPOTENCY_KEY': key, 'HTTP_USER_AGENT': 'bench',
    }


# --------------------------------------------------------------------- http

def http_post(port, path, key, body, timeout=10.0, conn=None):
    own = conn is None
    if own:
        conn = http.client.HTTPConnection('127.0.0.1', port, timeout=timeout)
    try:
        conn.request('POST', path, body=body.encode(), headers={
            'Authorization': 'Bearer ' + API_KEY,
            'Content-Type': 'application/json',
            'Idempotency-Key': key})
        r = conn.getresponse()
        data = r.read()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, data
    finally:
        if own:
            conn.close()


class UnixHTTPConnection(http.client.HTTPConnection):
    """HTTP/1.1 over a unix stream socket (the simulator's unix: listener)."""

    def __init__(self, path, timeout=10.0):
        super().__init__('localhost', timeout=timeout)
        self.unix_path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self.unix_path)
        self.sock = s


def http_get_json(listen, path, timeout=10.0):
    """GET path from a --listen address (127.0.0.1:PORT or unix:/path):
    (status, decoded JSON body)."""
    if listen.startswith('unix:'):
        conn = UnixHTTPConnection(listen[len('unix:'):], timeout=timeout)
    else:
        host, port = listen.rsplit(':', 1)
        conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        conn.request('GET', path)
        r = conn.getresponse()
        data = r.read()
    except OSError as e:
        raise BenchError('simulator %s: GET %s: %s' % (listen, path, e))
    finally:
        conn.close()
    try:
        return r.status, json.loads(data)
    except ValueError:
        raise BenchError('simulator %s: GET %s answered %d, not JSON: %r' % (
            listen, path, r.status, data[:200]))


def spill_body():
    items = ['{"description":"bench item %04d, a widget of the large order",'
             '"quantity":1,"unit_amount":100}' % i for i in range(SPILL_ITEMS)]
    return ('{"amount":%d,"currency":"usd","source":"tok_visa",'
            '"line_items":[%s]}' % (100 * SPILL_ITEMS, ','.join(items)))


# -------------------------------------------------------------------- build

def run_checked(argv, what, **kw):
    r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, **kw)
    if r.returncode != 0:
        sys.stderr.write(r.stdout)
        raise BenchError(f'{what} failed (exit {r.returncode})')
    return r.stdout


def build(args, need_charge, need_sim=False):
    bindir = os.path.join(BUILD, 'bin')
    os.makedirs(bindir, exist_ok=True)
    cflags = ['-std=c11', '-D_GNU_SOURCE', '-O3', '-DNDEBUG', '-pthread',
              '-Wall', '-Wextra', '-Wpedantic', '-Werror']
    hi = run_checked(['pkg-config', '--cflags', 'hiredis'], 'pkg-config').split()
    bins = {}
    for name, libs in (('baseline', ['-lfcgi']),
                       ('floor', ['-lfcgi', '-lhiredis'])):
        out = os.path.join(bindir, 'bench-' + name)
        run_checked(['gcc'] + cflags + hi + ['-o', out,
                     os.path.join(BENCH, name + '.c')] + libs, 'gcc ' + name)
        bins[name] = out
    if need_charge:
        if args.charge:
            bins['charge'] = os.path.abspath(args.charge)
        else:
            mdir = os.path.join(BUILD, 'meson')
            if not os.path.exists(os.path.join(mdir, 'build.ninja')):
                log('meson setup --buildtype=release ' + mdir)
                run_checked(['meson', 'setup', '--buildtype=release',
                             '-Dtests=disabled', mdir, ROOT], 'meson setup')
            run_checked(['ninja', '-C', mdir, 'charge'], 'ninja')
            bins['charge'] = os.path.join(mdir, 'charge')
        if not os.access(bins['charge'], os.X_OK):
            raise BenchError('no responder binary at ' + bins['charge'])
    if need_sim:
        # Never skipped: a run that needs the HTTP provider fails without it.
        if args.sim:
            bins['sim'] = os.path.abspath(args.sim)
        else:
            mdir = os.path.join(BUILD, 'meson')
            if not os.path.exists(os.path.join(mdir, 'build.ninja')):
                log('meson setup --buildtype=release ' + mdir)
                run_checked(['meson', 'setup', '--buildtype=release',
                             '-Dtests=disabled', mdir, ROOT], 'meson setup')
            r = subprocess.run(['ninja', '-C', mdir, SIM_BINARY],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True)
            if r.returncode != 0:
                sys.stderr.write(r.stdout)
                raise BenchError(
                    'the provider simulator %s could not be built (ninja -C %s %s '
                    'exited %d%s); the HTTP provider scenarios (fresh_http, '
                    '--concurrency) need it: build it, pass --sim PATH, or leave '
                    'fresh_http out of --scenarios' % (
                        SIM_BINARY, mdir, SIM_BINARY, r.returncode,
                        ': unknown target' if 'unknown target' in r.stdout else ''))
            bins['sim'] = os.path.join(mdir, SIM_BINARY)
        if not os.access(bins['sim'], os.X_OK):
            raise BenchError('no provider simulator binary at %s (%s is needed by '
                             'fresh_http and --concurrency)' % (bins['sim'], SIM_BINARY))
    return bins


# ------------------------------------------------------------------ servers

class Bench:
    def __init__(self, args, bins, run):
        self.args = args
        self.bins = bins
        self.run = run
        self.procs = Procs()
        self.redis_proc = None
        self.lighttpd = None
        self.port = None
        self.backends = {}      # backend -> [pid, ...]
        self.ledger = os.path.join(run, 'provider-ledger.log')
        self.ledger_off = 0
        self.ledger_lines = 0
        self.redis_sock = os.path.join(run, 'redis.sock')
        self.redis_url = 'unix://' + self.redis_sock  # BENCH_REDIS: the responders'
        self.redis_tls_ca = None
        self.rc = None
        self.charge_requests = 0    # served by the responder, cumulative
        self.replay_key = None
        self.procs_n = args.procs   # processes x threads of every backend
        self.threads_n = args.threads
        self.latency_ms = 0         # the responder's provider_latency_ms
        self.nginx = None           # --concurrency: nginx + charge --listen
        self.nginx_charge = None
        self.nginx_port = None
        self.nginxes = []           # every nginx started (start_nginx)
        self.sim = None             # the simulator charge_http calls (a dict)
        self.sim_n = 0              # simulators started (names sim1, sim2, ...)
        self.sim_exits = []         # (name, exit status) of stopped simulators
        self.http_port = None       # lighttpd's second port: the _http backends
        self.charge_http_env = None

    # -- redis
    def redis_listen_args(self):
        """BENCH_REDIS=tcp or tls: the responders reach Redis on a loopback
        port, in plain text or TLS only (a test CA made here with openssl,
        tools/stack.sh's stack_tls_certs), to compare redis:// with
        rediss:// on the same machine; unset: the unix socket alone. The
        bench's own connection stays on the unix socket either way."""
        mode = os.environ.get('BENCH_REDIS', '')
        self.redis_url = 'unix://' + self.redis_sock
        if mode not in ('tcp', 'tls'):
            return ['--port', '0']
        port = port_free()
        if mode == 'tcp':
            self.redis_url = 'redis://127.0.0.1:%d' % port
            return ['--port', str(port), '--bind', '127.0.0.1']
        certs = os.path.join(self.run, 'tls')
        run_checked(['bash', '-c', '. "$1/tools/stack.sh" && stack_tls_certs "$2"',
                     'bench', ROOT, certs], 'stack_tls_certs')
        args = run_checked(['bash', '-c', '. "$1/tools/stack.sh" && stack_redis_tls_args "$2"',
                            'bench', ROOT, certs], 'stack_redis_tls_args').split()
        self.redis_url = 'rediss://localhost:%d' % port
        self.redis_tls_ca = os.path.join(certs, 'ca.crt')
        return ['--port', '0', '--tls-port', str(port), '--bind', '127.0.0.1'] + args

    def start_redis(self):
        # The project's conf/redis.conf (its memory settings matter for the
        # per-record numbers), minus persistence, plus our socket and dir.
        conf = os.path.join(ROOT, 'conf', 'redis.conf')
        argv = ['redis-server'] + ([conf] if os.path.exists(conf) else []) + \
            self.redis_listen_args() + [
                '--unixsocket', self.redis_sock, '--unixsocketperm', '700',
                '--save', '', '--appendonly', 'no', '--appendfsync', 'no',
                '--maxmemory-policy', 'noeviction',
                '--dir', self.run, '--logfile',
                os.path.join(self.run, 'redis.log'), '--daemonize', 'no']
        self.redis_proc = self.procs.start('redis', argv,
                                           stdout=subprocess.DEVNULL,
                                           stderr=subprocess.DEVNULL)
        wait_for(lambda: os.path.exists(self.redis_sock) or
                 self.redis_proc.poll() is not None, 10, 'redis socket')
        if self.redis_proc.poll() is not None:
            raise BenchError('redis-server exited; see redis.log')
        self.rc = Redis(self.redis_sock)
        if self.rc.cmd('PING') != 'PONG':
            raise BenchError('redis did not answer PING')

    # -- responder configuration
    def write_charge_conf(self):
        """The responder's configuration for the current threads_n."""
        keys = os.path.join(self.run, 'api-keys')
        with open(keys, 'w') as f:
            f.write('# bench: the demo key\n%s %s\n' % (
                PRINCIPAL, hashlib.sha256(API_KEY.encode()).hexdigest()))
        os.makedirs(os.path.join(self.run, 'spill'), exist_ok=True)
        self.charge_env = {
            'CHARGE_CONF': os.path.join(self.run, 'charge.conf'),
            'CHARGE_REDIS_URL': self.redis_url,
            'CHARGE_SPILL_DIR': os.path.join(self.run, 'spill'),
            'CHARGE_PROVIDER_LEDGER': self.ledger,
            'CHARGE_API_KEYS_FILE': keys,
            'CHARGE_PROVIDER_LATENCY_MS': str(self.latency_ms),
            'CHARGE_METRICS_FILE': 'none',
            'CHARGE_LOG_LEVEL': 'warn',
            'CHARGE_THREADS': str(self.threads_n),
        }
        if self.redis_tls_ca is not None:
            self.charge_env['CHARGE_REDIS_TLS_CA_FILE'] = self.redis_tls_ca
        self.charge_http_env = None
        if self.sim is not None:
            # the same responder, its provider the simulator over HTTP
            self.charge_http_env = dict(
                self.charge_env,
                CHARGE_CONF=os.path.join(self.run, 'charge-http.conf'),
                CHARGE_PROVIDER_URL=self.sim['url'],
                CHARGE_PROVIDER_API_KEY=SIM_API_KEY)
        for env in (self.charge_env, self.charge_http_env):
            if env is None:
                continue
            with open(env['CHARGE_CONF'], 'w') as f:
                f.write('# bench/run: written per run; CHARGE_* env repeats it\n')
                for k, v in env.items():
                    if k != 'CHARGE_CONF':
                        f.write('%s = %s\n' % (k[len('CHARGE_'):].lower(), v))

    # -- the provider simulator
    def start_sim(self, latency_ms, fsync, unix=False, max_keys=None):
        """charge-provider-sim on a free 127.0.0.1 port (unix: on a socket in
        the run directory) with its data file in the run directory, at a
        fixed latency and fsync policy; it becomes self.sim, the provider
        of the charge_http backend (started after it). max_keys: its
        --max-keys, for a run that charges more than its default million
        (a full simulator refuses new keys, and a fresh charge then waits
        out the provider deadline)."""
        self.stop_sim()
        self.sim_n += 1
        name = 'sim%d' % self.sim_n
        os.makedirs(os.path.join(self.run, 'sock'), exist_ok=True)
        if unix:
            listen = 'unix:' + os.path.join(self.run, 'sock', name + '.sock')
            url = listen
        else:
            listen = '127.0.0.1:%d' % port_free()
            url = 'http://' + listen
        data = os.path.join(self.run, name + '.data')
        argv = [self.bins['sim'], '--listen', listen, '--data', data,
                '--fsync', fsync, '--latency-ms', str(latency_ms),
                '--secret-key', SIM_API_KEY]
        if max_keys:
            argv += ['--max-keys', str(max_keys)]
        logpath = os.path.join(self.run, name + '.log')
        with open(logpath, 'w') as out:
            p = self.procs.start('sim', argv, stdout=out, stderr=subprocess.STDOUT,
                                 env=self.base_env(), cwd=self.run)

        def ready():
            with open(logpath, errors='replace') as f:
                return SIM_READY in f.read()
        wait_for(lambda: ready() or p.poll() is not None, 20,
                 '"%s" from %s' % (SIM_READY, ' '.join(argv)))
        if p.poll() is not None:
            with open(logpath, errors='replace') as f:
                tail = f.read().strip()[-400:]
            raise BenchError('%s exited with status %s at start: %s' % (
                SIM_BINARY, p.returncode, tail))
        self.sim = {'name': name, 'proc': p, 'pid': p.pid, 'listen': listen,
                    'url': url, 'data': data, 'argv': argv, 'log': logpath,
                    'latency_ms': latency_ms, 'fsync': fsync,
                    'transport': 'unix' if unix else 'tcp'}
        self.sim_stats()
        log('%s: %s' % (name, ' '.join(argv)))
        return self.sim

    def sim_stats(self):
        """GET /_sim/stats of self.sim."""
        st, stats = http_get_json(self.sim['listen'], '/_sim/stats')
        if st != 200 or not isinstance(stats, dict) or 'deliveries' not in stats:
            raise BenchError('%s: GET /_sim/stats answered %d %r' % (
                SIM_BINARY, st, stats))
        return stats

    def sim_capacity(self, conns, duration):
        """wrk straight at the simulator (bench/sim_post.lua: fresh charges,
        --wrk-threads threads): what it answers alone on its one thread
        (a lower bound: wrk shares the cores), and its CPU per request."""
        if self.sim['transport'] != 'tcp':
            raise BenchError('sim_capacity: wrk needs a TCP simulator')
        argv = ['wrk', '-t', str(max(1, min(self.args.wrk_threads, conns))),
                '-c', str(conns), '-d', '%gs' % duration,
                '--timeout', '10s', '-s', os.path.join(BENCH, 'sim_post.lua'),
                'http://%s/' % self.sim['listen']]
        s0, c0, t0 = self.sim_stats(), proc_cpu_ticks(self.sim['pid']), time.monotonic()
        r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=duration + 60)
        time.sleep(0.3)
        ticks = proc_cpu_ticks(self.sim['pid']) - c0
        wall = time.monotonic() - t0
        d = sim_delta(s0, self.sim_stats())
        m = re.search(r'^\s*(\d+) requests in ([\d.]+)(m?s)', r.stdout, re.M)
        if r.returncode != 0 or not m:
            raise BenchError('wrk at the simulator failed: ' + r.stdout.strip()[-400:])
        n = int(m.group(1))
        secs = float(m.group(2)) * (1e-3 if m.group(3) == 'ms' else 1)
        bad = re.search(r'Non-2xx or 3xx responses: (\d+)', r.stdout)
        bad = int(bad.group(1)) if bad else 0
        res = {'conns': conns, 'duration_s': duration, 'wrk_argv': argv,
               'requests': n, 'rps': n / secs if secs else 0, 'non_2xx': bad,
               'deliveries': d['deliveries'], 'charges': d['charges'],
               'cpu_us': ticks * 1e6 / CLK_TCK / n if n else None,
               'core_pct': 100.0 * ticks / CLK_TCK / wall if wall else None}
        log('simulator alone (wrk -c%d, bench/sim_post.lua): %.0f req/s, %.1f us CPU '
            'per request, %.0f %% of a core, %d non-2xx' % (
                conns, res['rps'], res['cpu_us'] or 0, res['core_pct'] or 0, bad))
        if bad or n == 0:
            raise BenchError('the simulator alone: %d requests, %d non-2xx' % (n, bad))
        return res

    def stop_sim(self):
        """SIGTERM the simulator (it flushes its store and exits 0)."""
        if self.sim is None:
            return
        p = self.sim['proc']
        rc = self.procs.stop(p)
        self.procs.items = [(n, q) for n, q in self.procs.items if q is not p]
        self.sim_exits.append((self.sim['name'], rc))
        if rc != 0:
            log('%s %s exited with status %s on SIGTERM (want 0); see %s' % (
                SIM_BINARY, self.sim['name'], rc, self.sim['log']))
        self.sim = None

    def base_env(self):
        return {'PATH': os.environ.get('PATH', '/usr/bin:/bin'),
                'LANG': 'C'}

    # -- lighttpd
    def start_lighttpd(self, backends, procs=None, threads=None):
        """lighttpd with every backend at procs processes x threads each."""
        if procs is not None:
            self.procs_n, self.threads_n = procs, threads
        self.write_charge_conf()
        bindir = os.path.join(self.run, 'bin')
        os.makedirs(bindir, exist_ok=True)
        os.makedirs(os.path.join(self.run, 'www'), exist_ok=True)
        os.makedirs(os.path.join(self.run, 'sock'), exist_ok=True)
        entries, http_entries = [], []
        if any(b.endswith('_http') for b in backends) and self.charge_http_env is None:
            raise BenchError('the HTTP provider backends need a running simulator')
        for b in backends:
            binary = self.bins['floor' if b.startswith('floor') else
                               'charge' if b == 'charge_http' else b]
            link = os.path.join(bindir, b)
            if not os.path.exists(link):
                os.symlink(binary, link)
            env = {}
            if b == 'charge':
                env = dict(self.charge_env)
            elif b == 'charge_http':
                env = dict(self.charge_http_env)
            elif b.startswith('floor'):
                env = {'FLOOR_REDIS_SOCKET': self.redis_sock,
                       'FLOOR_ROUNDTRIPS': b[len('floor'):],
                       'FLOOR_THREADS': str(eff_threads(self.threads_n))}
            elif b == 'baseline':
                env = {'BASELINE_THREADS': str(eff_threads(self.threads_n))}
            env['BENCH_BACKEND'] = b     # never empty: lighttpd needs one
            envs = ', '.join('"%s" => "%s"' % kv for kv in env.items())
            (http_entries if b.endswith('_http') else entries).append(
                '  "/%s" => (( "bin-path" => "%s", "socket" => "%s",\n'
                '    "max-procs" => %d, "check-local" => "disable",\n'
                '    "listen-backlog" => 8192,\n'
                '    "bin-environment" => ( %s ),\n'
                '    "bin-copy-environment" => ( "PATH" ) ))' % (
                    'charge' if b in ('charge', 'charge_http') else b, link,
                    os.path.join(self.run, 'sock', b + '.sock'),
                    self.procs_n, envs))
        with open(os.path.join(BENCH, 'lighttpd.conf')) as f:
            tpl = ''.join(x for x in f if not x.startswith('#'))
        self.port = self.args.port or port_free()
        conf = (tpl.replace('@RUN@', self.run)
                .replace('@PORT@', str(self.port))
                .replace('@BACKENDS@', ',\n'.join(entries)))
        self.http_port = None
        if http_entries:
            # the responder routes by REQUEST_URI: the HTTP-provider one serves
            # /charge too, on a second port of the same lighttpd
            self.http_port = port_free()
            conf += ('\n$SERVER["socket"] == "127.0.0.1:%d" {\n'
                     'fastcgi.server = (\n%s\n)\n}\n' % (
                         self.http_port, ',\n'.join(http_entries)))
        path = os.path.join(self.run, 'lighttpd.conf')
        with open(path, 'w') as f:
            f.write(conf)
        run_checked(['lighttpd', '-tt', '-f', path], 'lighttpd -tt')
        out = open(os.path.join(self.run, 'lighttpd.out'), 'w')
        self.lighttpd = self.procs.start(
            'lighttpd', ['lighttpd', '-D', '-f', path], stdout=out,
            stderr=subprocess.STDOUT, env=self.base_env(),
            cwd=self.run)
        want = len(backends) * self.procs_n
        wait_for(lambda: tcp_listening(self.port) and
                 (self.http_port is None or tcp_listening(self.http_port)) and
                 len(proc_children(self.lighttpd.pid)) >= want or
                 self.lighttpd.poll() is not None, 20, 'lighttpd and responders')
        if self.lighttpd.poll() is not None:
            raise BenchError('lighttpd exited')
        time.sleep(0.3)
        self.backends = self.scan_backends()
        for b in backends:
            if len(self.backends.get(b, [])) != self.procs_n:
                raise BenchError('backend %s: %d processes running, want %d' % (
                    b, len(self.backends.get(b, [])), self.procs_n))
        # every worker thread up: a thread count short of T means a backend
        # that failed to start a worker (or to connect to Redis)
        wait_for(lambda: all(proc_threads(p) >= eff_threads(self.threads_n)
                             for pids in self.backends.values() for p in pids),
                 10, 'worker threads of every backend')

    def scan_backends(self):
        bindir = os.path.join(self.run, 'bin')
        out = {}
        for pid in proc_children(self.lighttpd.pid):
            a0 = proc_argv0(pid)
            if os.path.dirname(a0) == bindir:
                out.setdefault(os.path.basename(a0), []).append(pid)
        for v in out.values():
            v.sort()
        return out

    def stop_lighttpd(self):
        if self.lighttpd is None:
            return
        kids = [(pid, proc_argv0(pid)) for pid in proc_children(self.lighttpd.pid)]
        self.procs.stop(self.lighttpd)
        end = time.monotonic() + 5
        for pid, a0 in kids:
            while time.monotonic() < end and proc_argv0(pid) == a0:
                time.sleep(0.05)
            if a0 and proc_argv0(pid) == a0:
                os.kill(pid, signal.SIGKILL)
        self.lighttpd = None

    # -- measurements
    def read_ledger(self):
        try:
            with open(self.ledger, 'rb') as f:
                f.seek(self.ledger_off)
                data = f.read()
        except FileNotFoundError:
            return self.ledger_lines
        self.ledger_off += len(data)
        self.ledger_lines += data.count(b'\n')
        return self.ledger_lines

    def snapshot(self):
        s = {'t': time.monotonic(), 'cpu': {}, 'sched': {}}
        for b, pids in self.backends.items():
            s['cpu'][b] = sum(proc_cpu_ticks(p) for p in pids)
            s['sched'][b] = sum(proc_sched_ns(p) for p in pids)
        for name, pid in (('redis', self.redis_proc.pid),
                          ('lighttpd', self.lighttpd.pid)) + (
                (('sim', self.sim['pid']),) if self.sim else ()):
            s['cpu'][name] = proc_cpu_ticks(pid)
            s['sched'][name] = proc_sched_ns(pid)
        if self.sim:
            s['sim_stats'] = self.sim_stats()
        ru = resource.getrusage(resource.RUSAGE_CHILDREN)
        s['children_s'] = ru.ru_utime + ru.ru_stime     # reaped: wrk
        s['machine'] = machine_busy_ticks()
        s['cmds'] = self.rc.commandstats()
        s['redis_info_cpu_s'] = self.rc.cpu_s()
        s['ledger'] = self.read_ledger()
        return s

    def rss(self, backend):
        return [proc_rss_kb(p) for p in self.backends.get(backend, [])]

    def check_backends(self):
        now = self.scan_backends()
        for b, pids in self.backends.items():
            if now.get(b) != pids:
                raise BenchError('backend %s restarted: pids %s -> %s '
                                 '(a responder died)' % (b, pids, now.get(b)))

    # -- one wrk run
    def wrk(self, scenario, conns, duration, run_id, port=None, key=None):
        path, _ = SCENARIOS[scenario]
        env = dict(os.environ, BENCH_PATH=path, BENCH_RUN=run_id)
        env.pop('BENCH_KEY', None)
        if scenario == 'replay':
            env['BENCH_KEY'] = key or self.replay_key
        threads = max(1, min(self.args.wrk_threads, conns))
        argv = ['wrk', '-t', str(threads), '-c', str(conns),
                '-d', '%gs' % duration, '--timeout', '10s', '--latency',
                '-s', os.path.join(BENCH, 'charge.lua'),
                'http://127.0.0.1:%d/' % (port or self.port)]
        # the machine's busy share is taken over wrk's lifetime only
        m0 = machine_busy_ticks()
        p = self.procs.start('wrk', argv, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, env=env)
        try:
            out, _ = p.communicate(timeout=duration + 60)
            m1 = machine_busy_ticks()
        except subprocess.TimeoutExpired:
            self.procs.stop(p, signal.SIGKILL)
            raise BenchError('wrk did not finish in time')
        finally:
            self.procs.items = [(n, q) for n, q in self.procs.items if q is not p]
        if p.returncode != 0:
            raise BenchError('wrk failed: ' + out.strip()[-400:])
        m = re.search(r'^BENCH (\{.*\})$', out, re.M)
        if not m:
            raise BenchError('wrk printed no result: ' + out.strip()[-400:])
        w = json.loads(m.group(1))
        w['latency_distribution_us'] = wrk_latency_distribution(out)
        w['machine_window'] = (m0, m1)
        return w, argv

    def measure(self, scenario, conns, rnd, duration):
        _, backend = SCENARIOS[scenario]
        run_id = 'b%s' % uuid.uuid4().hex[:10]
        before = self.snapshot()
        w, argv = self.wrk(scenario, conns, duration, run_id,
                           port=self.http_port if backend.endswith('_http') else None)
        time.sleep(0.3)     # let requests in flight at the end complete
        after = self.snapshot()
        self.check_backends()
        n = w['requests']
        if backend == 'charge':
            self.charge_requests += n
        wall = after['t'] - before['t']
        m0, m1 = w.pop('machine_window')
        res = {'scenario': scenario, 'conns': conns, 'round': rnd,
               'procs': self.procs_n, 'threads': self.threads_n,
               'duration_s': duration, 'wrk': w, 'wrk_argv': argv,
               'rps': n / (w['duration_us'] / 1e6) if w['duration_us'] else 0}
        cpu = {}
        for name in (backend, 'redis', 'lighttpd'):
            ticks = after['cpu'][name] - before['cpu'][name]
            ns = after['sched'][name] - before['sched'][name]
            key = 'responder' if name == backend else name
            cpu[key] = ticks * 1e6 / CLK_TCK / n if n else None
            cpu[key + '_sched'] = ns / 1e3 / n if n else None
        if 'sim' in after['cpu'] and 'sim' in before['cpu']:
            # the simulator: CPU per request of this run (~0 when the scenario
            # does not call it) and its share of one core over the window
            ticks = after['cpu']['sim'] - before['cpu']['sim']
            cpu['sim'] = ticks * 1e6 / CLK_TCK / n if n else None
            cpu['sim_sched'] = (after['sched']['sim'] - before['sched']['sim']) / 1e3 / n \
                if n else None
            res['sim'] = sim_delta(before['sim_stats'], after['sim_stats'])
            res['sim']['core_pct'] = 100.0 * ticks / CLK_TCK / wall if wall else None
            res['sim']['rss_kb'] = proc_rss_kb(self.sim['pid'])
        cpu['wrk'] = (after['children_s'] - before['children_s']) * 1e6 / n if n else None
        # Redis once more, from its own getrusage (INFO cpu) ...
        cpu['redis_info'] = (after['redis_info_cpu_s'] -
                             before['redis_info_cpu_s']) * 1e6 / n if n else None
        res['cpu_us_per_req'] = cpu
        # Noise: machine CPU not used by the processes measured above.
        busy = after['machine'][0] - before['machine'][0]
        total = after['machine'][2] - before['machine'][2]
        ours = sum(after['cpu'][k] - before['cpu'][k] for k in after['cpu'])
        ours += (after['children_s'] - before['children_s']) * CLK_TCK
        wt = m1[2] - m0[2]
        res['machine'] = {
            # share of all cores busy while wrk ran (the target's measure)
            'busy_pct': 100.0 * (m1[0] - m0[0]) / wt if wt else None,
            # the same over the whole measurement window (+0.3 s tail)
            'busy_window_pct': 100.0 * busy / total if total else None,
            'other_pct': 100.0 * max(0, busy - ours) / total if total else None,
            'steal_pct': 100.0 * (after['machine'][1] - before['machine'][1]) / total
            if total else None,
            'loadavg': open('/proc/loadavg').read().split()[:3]}
        deltas, usec = {}, {}
        for k, (calls, us) in after['cmds'].items():
            c0, u0 = before['cmds'].get(k, (0, 0))
            if calls - c0 and k not in OWN_COMMANDS:
                deltas[k] = calls - c0
                usec[k] = us - u0
        res['cmd_deltas'] = deltas
        res['cmd_usec'] = usec      # time Redis spent executing them
        # ... and from commandstats: usec (= usec_per_call x calls) of the
        # top-level script calls (the commands inside scripts are in them)
        top = sum(usec.get(k, 0) for k in ('evalsha', 'eval'))
        cpu['redis_cmdstat'] = top / n if n else None
        res['ledger_delta'] = after['ledger'] - before['ledger']
        res['rss_kb'] = self.rss(backend)
        res['charge_requests_so_far'] = self.charge_requests
        e = w
        res['errors'] = (e['err_connect'] + e['err_read'] + e['err_write'] +
                         e['err_status'] + e['err_timeout'])
        log('%-10s c=%-3d %dx%d round %d: %7.0f req/s  p50 %.2f ms  p99 %.2f ms  '
            'cpu us resp %.1f lt %.1f redis %.1f%s  busy %.0f%%  evalsha/req %.3f  '
            'errors %d' % (
                scenario, conns, self.procs_n, self.threads_n, rnd, res['rps'],
                w['p50_us'] / 1e3, w['p99_us'] / 1e3, cpu['responder'] or 0,
                cpu['lighttpd'] or 0, cpu['redis'] or 0,
                ' sim %.1f (deliveries/req %.3f)' % (
                    cpu['sim'] or 0, res['sim']['deliveries'] / n if n else 0)
                if backend.endswith('_http') else '',
                res['machine']['busy_pct'] or 0,
                deltas.get('evalsha', 0) / n if n else 0, res['errors']))
        if w['err_status'] or w['err_connect']:
            raise BenchError('%s: %d non-2xx responses, %d connect errors' % (
                scenario, w['err_status'], w['err_connect']))
        if n == 0:
            raise BenchError(scenario + ': no request completed')
        if backend.endswith('_http') and res['sim']['deliveries'] < n:
            raise BenchError('%s: %d requests but %d deliveries at the simulator: '
                             'the responder does not call it' % (
                                 scenario, n, res['sim']['deliveries']))
        return res

    # -- nginx with kept-alive FastCGI connections (--concurrency)
    def start_nginx(self, keepalive=None, name='nginx', threads=None, charge_bin=None):
        """charge --listen on a unix socket (threads_n event loops) behind
        an nginx of its own (bench/nginx.conf): upstream keepalive
        `keepalive` (None: NGINX_KEEPALIVE from the environment, else the
        pool conf/nginx.conf ships) + fastcgi_keep_conn on; 0: no kept
        connections (a FastCGI connection per request). threads: the
        responder's event loops (None: threads_n; 0: one per core). charge_bin:
        the responder binary (None: the one built or given by --charge). The first one
        started is also self.nginx / nginx_charge / nginx_port. Returns
        {'name', 'keepalive', 'port', 'nginx', 'charge'}."""
        if keepalive is None:
            keepalive = int(os.environ.get('NGINX_KEEPALIVE', shipped_keepalive()))
        self.write_charge_conf()
        ndir = os.path.join(self.run, name)
        sock = os.path.join(self.run, 'sock', 'charge-%s.sock' % name)
        os.makedirs(os.path.dirname(sock), exist_ok=True)
        for d in ('body', 'fastcgi', 'proxy', 'uwsgi', 'scgi'):
            os.makedirs(os.path.join(ndir, 'nginx-tmp', d), exist_ok=True)
        if os.path.exists(sock):
            os.unlink(sock)
        inst = {'name': name, 'keepalive': keepalive, 'port': None, 'nginx': None,
                'charge': None}
        self.nginxes.append(inst)
        env = dict(self.base_env(), **self.charge_env)
        if threads is not None:
            env['CHARGE_THREADS'] = str(threads)
        out = open(os.path.join(self.run, 'charge-%s.log' % name), 'a')
        inst['charge'] = self.procs.start(
            'charge', [charge_bin or self.bins['charge'], '--listen', sock], stdout=out,
            stderr=subprocess.STDOUT, env=env, cwd=self.run)
        wait_for(lambda: os.path.exists(sock) or inst['charge'].poll() is not None,
                 10, 'charge --listen ' + sock)
        if inst['charge'].poll() is not None:
            raise BenchError('charge --listen exited; see charge-%s.log' % name)
        with open(os.path.join(BENCH, 'nginx.conf')) as f:
            tpl = ''.join(x for x in f if not x.startswith('#'))
        inst['port'] = port_free()
        ka = ('keepalive %d; keepalive_timeout 60s; keepalive_requests 100000;' % keepalive
              if keepalive > 0 else '')
        conf = (tpl.replace('@RUN@', ndir).replace('@SOCK@', sock)
                .replace('@PORT@', str(inst['port']))
                .replace('@KEEPALIVE@', ka)
                .replace('@KEEP_CONN@', 'on' if keepalive > 0 else 'off')
                .replace('worker_processes 1;', 'worker_processes %d;' % nginx_workers())
                .replace('@USER@', 'user root root;' if os.geteuid() == 0 else ''))
        path = os.path.join(ndir, 'nginx.conf')
        with open(path, 'w') as f:
            f.write(conf)
        elog = os.path.join(ndir, 'nginx-error.log')
        run_checked(['nginx', '-t', '-q', '-p', ndir, '-c', path, '-e', elog],
                    'nginx -t')
        nout = open(os.path.join(ndir, 'nginx.out'), 'w')
        inst['nginx'] = self.procs.start(
            'nginx', ['nginx', '-p', ndir, '-c', path, '-e', elog],
            stdout=nout, stderr=subprocess.STDOUT, env=self.base_env(), cwd=ndir)
        wait_for(lambda: tcp_listening(inst['port']) or inst['nginx'].poll() is not None,
                 10, 'nginx')
        if inst['nginx'].poll() is not None:
            raise BenchError('nginx exited; see %s' % elog)
        if self.nginx is None:
            self.nginx, self.nginx_charge = inst['nginx'], inst['charge']
            self.nginx_port = inst['port']
        key = 'bench-sanity-nginx-' + uuid.uuid4().hex
        st, h, b = http_post(inst['port'], '/charge', key, DEFAULT_BODY)
        if st != 201:
            raise BenchError('fresh /charge through nginx answered %d: %r' % (st, b[:300]))
        return inst

    def stop_nginx(self):
        for inst in self.nginxes:
            if inst['nginx'] is not None:
                self.procs.stop(inst['nginx'], signal.SIGQUIT)
                inst['nginx'] = None
            if inst['charge'] is not None:
                rc = self.procs.stop(inst['charge'])
                inst['charge'] = None
                if rc not in (0, None):
                    log('charge --listen behind %s exited with status %s' % (
                        inst['name'], rc))
        self.nginxes = []
        self.nginx = self.nginx_charge = self.nginx_port = None

    def log_files(self):
        """The logs of the servers and responders of this run directory."""
        return [os.path.join(self.run, x) for x in
                ('lighttpd.out', 'lighttpd-error.log')] + [
            os.path.join(self.run, x) for inst in self.nginxes for x in (
                'charge-%s.log' % inst['name'],
                os.path.join(inst['name'], 'nginx-error.log'))] + (
            [self.sim['log']] if self.sim else [])

    def log_offsets(self):
        out = {}
        for path in self.log_files():
            try:
                out[path] = os.path.getsize(path)
            except OSError:
                out[path] = 0
        return out

    def log_summary(self, offsets, top=8):
        """The lines the logs got since offsets, counted by message (dates,
        pids, request ids and numbers blanked): what a run's errors were."""
        count = {}
        for path, off in offsets.items():
            try:
                with open(path, 'rb') as f:
                    f.seek(off)
                    data = f.read(4 << 20).decode(errors='replace')
            except OSError:
                continue
            for line in data.splitlines():
                msg = re.sub(r'^\S+ (\S+ )?', '', line.strip())
                msg = re.sub(r'\[[0-9a-f-]{6,}\]|\b\d+\b', '#', msg)
                if msg:
                    key = '%s: %s' % (os.path.basename(path), msg[:160])
                    count[key] = count.get(key, 0) + 1
        return sorted(count.items(), key=lambda kv: -kv[1])[:top]

    def measure_plain(self, label, scenario, conns, duration, port, pids, rnd=1,
                      web_pids=None, key=None):
        """One wrk run on port without the CPU accounting of measure():
        throughput, latency, errors, requests in flight, RSS and threads of
        the responder processes pids, and what the logs got meanwhile; for
        a scenario of the HTTP provider the simulator's counts (/_sim/stats),
        CPU and RSS too. key: the replayed key (default self.replay_key).
        Errors are reported, not fatal."""
        run_id = 'b%s' % uuid.uuid4().hex[:10]
        offsets = self.log_offsets()
        l0 = self.read_ledger()
        use_sim = SCENARIOS[scenario][1].endswith('_http')
        if use_sim:
            s0, c0, t0 = self.sim_stats(), proc_cpu_ticks(self.sim['pid']), time.monotonic()
        r0 = sum(proc_cpu_ticks(p) for p in pids)
        g0 = sum(proc_cpu_ticks(p) for p in web_pids or [])
        rs0, gs0 = sys_ticks(pids), sys_ticks(web_pids or [])
        w, argv = self.wrk(scenario, conns, duration, run_id, port=port, key=key)
        w.pop('machine_window', None)
        # requests wrk left in flight complete (at a provider latency too)
        time.sleep(0.3 + 2.0 * (self.sim['latency_ms'] if use_sim else self.latency_ms) / 1e3)
        n = w['requests']
        r1 = sum(proc_cpu_ticks(p) for p in pids)
        g1 = sum(proc_cpu_ticks(p) for p in web_pids or [])
        rs1, gs1 = sys_ticks(pids), sys_ticks(web_pids or [])
        secs = w['duration_us'] / 1e6 if w['duration_us'] else 0
        if scenario == 'fresh' or scenario == 'replay':
            self.charge_requests += n
        errors = (w['err_connect'] + w['err_read'] + w['err_write'] +
                  w['err_status'] + w['err_timeout'])
        res = {'label': label, 'scenario': scenario, 'conns': conns, 'round': rnd,
               'latency_ms': self.latency_ms, 'duration_s': duration, 'wrk': w,
               'wrk_argv': argv, 'rps': n / secs if secs else 0,
               # Little's law: requests in flight on average
               'in_flight': n * w['lat_mean_us'] / 1e6 / secs if secs else 0,
               'errors': errors, 'ledger_delta': self.read_ledger() - l0,
               'rss_kb': [proc_rss_kb(p) for p in pids],
               'threads': [proc_threads(p) for p in pids],
               'responder_cpu_us': (r1 - r0) * 1e6 / CLK_TCK / n if n else None,
               'web_cpu_us': (g1 - g0) * 1e6 / CLK_TCK / n if n and web_pids else None,
               # the kernel's part of them (stime)
               'responder_sys_us': (rs1 - rs0) * 1e6 / CLK_TCK / n if n else None,
               'web_sys_us': (gs1 - gs0) * 1e6 / CLK_TCK / n if n and web_pids else None,
               'logs': self.log_summary(offsets)}
        if use_sim:
            ticks = proc_cpu_ticks(self.sim['pid']) - c0
            wall = time.monotonic() - t0
            res['sim'] = sim_delta(s0, self.sim_stats())
            res['sim'].update(
                cpu_us=ticks * 1e6 / CLK_TCK / n if n else None,
                core_pct=100.0 * ticks / CLK_TCK / wall if wall else None,
                rss_kb=proc_rss_kb(self.sim['pid']), transport=self.sim['transport'],
                latency_ms=self.sim['latency_ms'], fsync=self.sim['fsync'])
            res['latency_ms'] = self.sim['latency_ms']
        log('%-22s c=%-5d round %d: %8.1f req/s  p50 %8.2f ms  p99 %8.2f ms  in flight '
            '%7.1f  errors %d  RSS %s KiB  threads %s%s' % (
                label, conns, rnd, res['rps'], w['p50_us'] / 1e3, w['p99_us'] / 1e3,
                res['in_flight'], errors, res['rss_kb'], res['threads'],
                '  simulator: %d deliveries %d charges, %.0f %% of a core, RSS %d KiB' % (
                    res['sim']['deliveries'], res['sim']['charges'],
                    res['sim']['core_pct'] or 0, res['sim']['rss_kb'])
                if use_sim else ''))
        if errors:
            for msg, k in res['logs']:
                log('    %5d x %s' % (k, msg))
        if n == 0:
            raise BenchError('%s: no request completed' % label)
        if web_pids and not pids:
            res['responder_cpu_us'] = 0.0   # a peer: all of it is the web server's
        return res

    # -- sanity checks and priming
    def sanity(self, scenarios):
        for sc in scenarios:
            path, backend = SCENARIOS[sc]
            if backend == 'charge_http':
                self.sanity_http()
            if backend.startswith('charge'):
                continue
            st, _, body = http_post(self.port, path, 'sanity', DEFAULT_BODY)
            if st != 201:
                raise BenchError('%s answered %d: %r' % (path, st, body[:200]))
        if 'charge' not in self.backends:
            return
        key = 'bench-sanity-' + uuid.uuid4().hex
        st, h, b1 = http_post(self.port, '/charge', key, DEFAULT_BODY)
        if st != 201 or h.get('idempotent-replayed') != 'false':
            raise BenchError('fresh /charge answered %d %s: %r' % (
                st, h.get('idempotent-replayed'), b1[:300]))
        st, h, b2 = http_post(self.port, '/charge', key, DEFAULT_BODY)
        if st != 201 or h.get('idempotent-replayed') != 'true' or b1 != b2:
            raise BenchError('replayed /charge answered %d %s: %r' % (
                st, h.get('idempotent-replayed'), b2[:300]))
        self.charge_requests += 2

    def sanity_http(self):
        """A fresh charge through the HTTP-provider responder is one delivery
        and one charge at the simulator; its replay is none, byte-identical."""
        key = 'bench-sanity-http-' + uuid.uuid4().hex
        s0 = self.sim_stats()
        st, h, b1 = http_post(self.http_port, '/charge', key, DEFAULT_BODY)
        if st != 201 or h.get('idempotent-replayed') != 'false':
            raise BenchError('fresh /charge (HTTP provider) answered %d %s: %r' % (
                st, h.get('idempotent-replayed'), b1[:300]))
        st, h, b2 = http_post(self.http_port, '/charge', key, DEFAULT_BODY)
        if st != 201 or h.get('idempotent-replayed') != 'true' or b1 != b2:
            raise BenchError('replayed /charge (HTTP provider) answered %d %s: %r' % (
                st, h.get('idempotent-replayed'), b2[:300]))
        d = sim_delta(s0, self.sim_stats())
        if d['deliveries'] != 1 or d['charges'] != 1:
            raise BenchError('a fresh charge and its replay through the HTTP provider: '
                             '%d deliveries and %d charges at the simulator, want 1 and 1 '
                             '(is provider_url supported by this responder?)' % (
                                 d['deliveries'], d['charges']))

    def prime_replay(self):
        self.replay_key = 'bench-replay-' + uuid.uuid4().hex
        st, h, b = http_post(self.port, '/charge', self.replay_key, DEFAULT_BODY)
        if st != 201 or h.get('idempotent-replayed') != 'false':
            raise BenchError('priming the replay key: %d %r' % (st, b[:300]))
        self.charge_requests += 1

    # -- Redis memory per record
    def memory(self, n_inline, n_spilled):
        out = {}
        self.rc.cmd('FLUSHALL', 'SYNC')
        spill_dir = self.charge_env['CHARGE_SPILL_DIR']
        for kind, n, body in (('inline', n_inline, DEFAULT_BODY),
                              ('spilled', n_spilled, spill_body())):
            if n <= 0:
                continue
            conn = http.client.HTTPConnection('127.0.0.1', self.port, timeout=10)
            du0 = dir_bytes(spill_dir)
            m0 = int(self.rc.info('memory')['used_memory'])
            k0 = self.rc.cmd('DBSIZE')
            keys = []
            resp_len = 0
            for i in range(n):
                key = str(uuid.uuid4())
                st, h, b = http_post(self.port, '/charge', key, body, conn=conn)
                if st != 201:
                    raise BenchError('memory phase (%s): %d %r' % (kind, st, b[:200]))
                resp_len = len(b)
                if i < 5:
                    keys.append(key)
            conn.close()
            self.charge_requests += n
            m1 = int(self.rc.info('memory')['used_memory'])
            k1 = self.rc.cmd('DBSIZE')
            du1 = dir_bytes(spill_dir)
            usage = [self.rc.cmd('MEMORY', 'USAGE', 'charge:idem:%s:%s' % (
                PRINCIPAL, k), 'SAMPLES', '0') for k in keys]
            fields = self.rc.cmd('HGETALL', 'charge:idem:%s:%s' % (
                PRINCIPAL, keys[0])) if keys else []
            names = [f.decode() for f in (fields or [])[0::2]]
            records = k1 - k0
            out[kind] = {
                'requests': n, 'records': records,
                'request_bytes': len(body), 'response_bytes': resp_len,
                'used_memory_before': m0, 'used_memory_after': m1,
                'bytes_per_record': (m1 - m0) / records if records else None,
                'memory_usage_samples': usage, 'fields': names,
                'spill_bytes_per_record': (du1 - du0) / records if records else 0,
            }
            log('memory %s: %d records, %.0f B/record in Redis (MEMORY USAGE %s), '
                'fields %s, %.0f B/record on disk' % (
                    kind, records, out[kind]['bytes_per_record'] or 0, usage,
                    names, out[kind]['spill_bytes_per_record']))
        return out

    # -- callgrind
    def callgrind(self, n1, n2):
        out = {}
        cgdir = os.path.join(self.run, 'callgrind')
        os.makedirs(cgdir, exist_ok=True)
        cases = []
        if 'charge' in self.bins:
            cases += [('fresh', 'charge'), ('replay', 'charge')]
        if 'sim' in self.bins and 'charge' in self.bins:
            # the HTTP provider: the same responder calling a simulator at
            # latency 0 (started again if --concurrency replaced it)
            if self.sim is None or self.sim['latency_ms'] != 0 or \
                    self.sim['transport'] != 'tcp':
                self.start_sim(0, 'never')
                self.write_charge_conf()
            cases += [('fresh_http', 'charge')]
        if self.args.callgrind_kept and 'charge' in self.bins:
            cases += [('fresh_kept', 'charge'), ('replay_kept', 'charge')]
        cases += [('baseline', 'baseline'), ('floor1', 'floor'), ('floor2', 'floor')]
        for case, binname in cases:
            totals = {}
            for n in (n1, n2):
                totals[n] = self.callgrind_one(case, binname, n, cgdir)
            per = (totals[n2][0] - totals[n1][0]) / (n2 - n1)
            out[case] = {'n1': n1, 'n2': n2, 'ir_n1': totals[n1][0],
                         'ir_n2': totals[n2][0], 'ir_per_request': per}
            log('callgrind %-8s %.0f instructions per request' % (case, per))
            if case in ('fresh', 'fresh_http', 'replay'):
                # every function (not a top list): --compare needs them all
                out[case]['profile'] = profile_per_request(
                    totals[n1][1], totals[n2][1], n1, n2, None)
                out[case]['profile_complete'] = True
                if self.args.keep_callgrind:
                    for n in (n1, n2):
                        shutil.copy(totals[n][1], self.args.keep_callgrind)
        return out

    def callgrind_one(self, case, binname, n, cgdir):
        port = port_free()
        outfile = os.path.join(cgdir, '%s-%d.out' % (case, n))
        env = self.base_env()
        # one worker thread: instructions per request do not depend on it
        if case == 'fresh_http':
            env.update(self.charge_http_env, CHARGE_THREADS='1')
        elif binname == 'charge':
            env.update(self.charge_env, CHARGE_THREADS='1')
        elif binname == 'floor':
            env.update(FLOOR_REDIS_SOCKET=self.redis_sock,
                       FLOOR_ROUNDTRIPS=case[len('floor'):], FLOOR_THREADS='1')
        else:
            env.update(BASELINE_THREADS='1')
        argv = ['valgrind', '--tool=callgrind', '--callgrind-out-file=' + outfile,
                self.bins[binname], '--listen', '127.0.0.1:%d' % port]
        logf = open(os.path.join(cgdir, '%s-%d.log' % (case, n)), 'w')
        p = self.procs.start('callgrind', argv, stdout=logf,
                             stderr=subprocess.STDOUT, env=env, cwd=self.run)
        try:
            wait_for(lambda: tcp_listening(port) or p.poll() is not None, 60,
                     'callgrind ' + case)
            if p.poll() is not None:
                raise BenchError('callgrind %s exited early; see %s' % (case, logf.name))
            body = DEFAULT_BODY.encode()
            prefix = 'cg-%s-%d-%s-' % (case, n, uuid.uuid4().hex[:8])
            # fresh_kept, replay_kept: every request on one kept connection
            kept = FcgiKept(port) if case.endswith('_kept') else None
            replay = case.startswith('replay')
            try:
                if replay:
                    # the priming request is the same in both runs: it cancels out
                    self.fcgi_expect(port, prefix + 'r', body, 'false', kept)
                for i in range(n):
                    key = prefix + ('r' if replay else str(i))
                    self.fcgi_expect(port, key, body, 'true' if replay else None, kept)
            finally:
                if kept is not None:
                    kept.close()
        finally:
            rc = self.stop_fcgi(p, port)
            self.procs.items = [(x, q) for x, q in self.procs.items if q is not p]
            logf.close()
        if rc != 0:
            raise BenchError('callgrind %s exited %s; see %s' % (case, rc, logf.name))
        return callgrind_total(outfile), outfile

    def stop_fcgi(self, p, port):
        """SIGTERM a libfcgi process; poke its socket if it sleeps in accept.

        libfcgi checks its shutdown flag just before accept() (os_unix.c:
        "There's a window here"); a signal landing in that window, which is
        wide under valgrind, leaves it blocked until the next connection.
        """
        if p.poll() is not None:
            return p.returncode
        p.send_signal(signal.SIGTERM)
        for _ in range(6):
            try:
                return p.wait(10)
            except subprocess.TimeoutExpired:
                try:
                    socket.create_connection(('127.0.0.1', port), timeout=2).close()
                except OSError:
                    pass
        p.kill()
        return p.wait(10)

    def fcgi_expect(self, port, key, body, replayed, kept=None):
        params = fcgi_charge_params(port, key, body)
        out = kept.request(params, body) if kept else fcgi_request(port, params, body)
        head = out.split(b'\r\n\r\n', 1)[0].decode(errors='replace')
        if not re.search(r'^Status: 201', head, re.M | re.I):
            raise BenchError('callgrind request: unexpected answer %r' % out[:300])
        if replayed and not re.search(r'^Idempotent-Replayed: ' + replayed,
                                      head, re.M | re.I):
            raise BenchError('callgrind request: not replayed=%s: %r' % (
                replayed, head))

    def close(self):
        self.stop_nginx()
        self.stop_lighttpd()
        self.stop_sim()
        if self.rc is not None:
            try:
                self.rc.close()
            except OSError:
                pass
            self.rc = None
        self.procs.stop_all()


def sim_delta(a, b):
    """What the simulator counted between two /_sim/stats answers."""
    out = {k: (b.get(k) or 0) - (a.get(k) or 0)
           for k in ('deliveries', 'charges', 'keys', 'replays')}
    out['in_use'] = b.get('in_use')
    fa, fb = a.get('faults') or {}, b.get('faults') or {}
    out['faults'] = {k: v - fa.get(k, 0) for k, v in fb.items()
                     if isinstance(v, int) and v - fa.get(k, 0)}
    return out


def wrk_latency_distribution(out):
    """{"50": µs, "75": ..., "90": ..., "99": ...} from wrk --latency."""
    dist = {}
    block = out.split('Latency Distribution', 1)
    if len(block) < 2:
        return dist
    for line in block[1].splitlines()[1:]:
        m = re.match(r'^\s*([\d.]+)%\s+([\d.]+)(us|ms|s|m)\s*$', line)
        if not m:
            break
        scale = {'us': 1, 'ms': 1e3, 's': 1e6, 'm': 60e6}[m.group(3)]
        pct = m.group(1)
        if '.' in pct:
            pct = pct.rstrip('0').rstrip('.')
        dist[pct] = float(m.group(2)) * scale
    return dist


def dir_bytes(path):
    total = 0
    for dp, _, files in os.walk(path):
        for f in files:
            try:
                total += os.stat(os.path.join(dp, f)).st_size
            except OSError:
                pass
    return total


def callgrind_total(path):
    with open(path) as f:
        for line in f:
            if line.startswith('totals:') or line.startswith('summary:'):
                return int(line.split()[1])
    raise BenchError('no totals in ' + path)


def annotate(path, inclusive):
    """{function: instructions} from callgrind_annotate (all functions)."""
    r = subprocess.run(['callgrind_annotate', '--threshold=100',
                        '--inclusive=' + ('yes' if inclusive else 'no'), path],
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                       text=True, timeout=300)
    out = {}
    for line in r.stdout.splitlines():
        m = re.match(r'^\s*([\d,]+)\s+(?:\(\s*[\d.]+%\)\s+)?(\S.*)$', line)
        if not m or ':' not in m.group(2) or m.group(2).startswith('PROGRAM'):
            continue
        fn = m.group(2).strip()
        # "./malloc/./malloc/malloc.c:_int_malloc [/usr/lib/.../libc.so.6]"
        mm = re.match(r'^(.*?):(.*?)(?:\s+\[(.*)\])?$', fn)
        if mm:
            fn = mm.group(2) + (' [%s]' % os.path.basename(mm.group(3))
                                if mm.group(3) else '')
        out[fn] = out.get(fn, 0) + int(m.group(1).replace(',', ''))
    return out


def profile_per_request(file1, file2, n1, n2, top):
    """Per-request instructions per function: (N2 run - N1 run) / (N2 - N1).

    top: keep that many functions (None: every function with >= 0.5)."""
    prof = {}
    for inclusive in (False, True):
        a, b = annotate(file1, inclusive), annotate(file2, inclusive)
        rows = [{'fn': fn, 'ir': round((b.get(fn, 0) - a.get(fn, 0)) / (n2 - n1), 1)}
                for fn in set(a) | set(b)]
        rows = [r for r in rows if abs(r['ir']) >= 0.5]
        rows.sort(key=lambda x: (-x['ir'], x['fn']))
        prof['inclusive' if inclusive else 'exclusive'] = rows[:top] if top else rows
    return prof


# --------------------------------------------------------------------- main

def machine_info():
    def first(cmd):
        try:
            return subprocess.run(cmd, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True,
                                  timeout=10).stdout.strip().splitlines()[0]
        except (OSError, IndexError, subprocess.SubprocessError):
            return 'unknown'
    cpu = 'unknown'
    with open('/proc/cpuinfo') as f:
        for line in f:
            if line.startswith('model name'):
                cpu = line.split(':', 1)[1].strip()
                break
    commit = first(['git', '-C', ROOT, 'rev-parse', '--short', 'HEAD'])
    if not re.match(r'^[0-9a-f]+$', commit):
        commit = 'none (no commit yet)'
    return {'cpu': cpu, 'cores': os.cpu_count(),
            'kernel': platform.release(),
            'lighttpd': first(['lighttpd', '-v']),
            'redis': first(['redis-server', '--version']),
            'wrk': first(['wrk', '--version']),
            'valgrind': first(['valgrind', '--version']),
            'gcc': first(['gcc', '--version']),
            'commit': commit}


def parse_args(argv):
    dep = deployment_defaults()
    ap = argparse.ArgumentParser(
        prog='bench/run', description=__doc__.split('\n')[0],
        epilog='Modes: the default full run (throughput at every connection '
               'count, Redis memory, callgrind); --sweep (fresh and replay at '
               '32 connections for each processes x threads, short rounds); '
               '--callgrind-only; --smoke (every code path, ~1 s per scenario). '
               'See bench/README.md.')
    ap.add_argument('--duration', type=float,
                    help='seconds per run (5; --sweep 3; --smoke 1)')
    ap.add_argument('--rounds', type=int,
                    help='interleaved rounds (3; --sweep 2; --smoke 1)')
    ap.add_argument('--connections',
                    help='wrk connection counts ("1 8 32 64"; --sweep "32")')
    ap.add_argument('--scenarios',
                    help='comma list, in interleaving order (%s; --sweep '
                         'fresh,replay)' % ','.join(SCENARIOS))
    ap.add_argument('--procs', type=int, default=dep['procs'],
                    help='responder processes (lighttpd max-procs) of every '
                         'backend (%d, from %s)' % (dep['procs'], dep['procs_from']))
    ap.add_argument('--threads', type=int, default=dep['threads'],
                    help='threads per process of every backend: the '
                         'responder\'s threads (event loops; 0: one per core), '
                         'FLOOR_THREADS, BASELINE_THREADS (0: one per core) '
                         '(%d, from %s)' % (dep['threads'], dep['threads_from']))
    ap.add_argument('--sweep', metavar='"PxT ..."',
                    help='measure each processes x threads combination, e.g. '
                         '"1x1 2x1 2x2 2x4 4x2 4x4", instead of the full run')
    ap.add_argument('--wrk-threads', type=int, default=2,
                    help='wrk threads, at most the connections (2)')
    ap.add_argument('--warmup', type=float,
                    help='seconds of unrecorded warm-up per scenario (2; '
                         '--sweep 1; --smoke 0)')
    ap.add_argument('--mem-records', default=None,
                    help='records for the Redis memory phase: "INLINE SPILLED" '
                         '("10000 1000"; --smoke "200 20"; "0 0" skips it)')
    ap.add_argument('--callgrind-n', default=None,
                    help='request counts N1 N2 for callgrind ("200 1200"; '
                         '--smoke "3 8")')
    ap.add_argument('--no-callgrind', action='store_true')
    ap.add_argument('--callgrind-kept', action='store_true',
                    help='callgrind also fresh_kept and replay_kept: the requests on one '
                         'connection kept open (FCGI_KEEP_CONN), not one each')
    ap.add_argument('--callgrind-only', action='store_true',
                    help='only the instruction counts (no lighttpd, no wrk)')
    ap.add_argument('--keep-callgrind', metavar='DIR',
                    help='copy the callgrind output files of fresh/replay to DIR')
    ap.add_argument('--compare', metavar='OLD.json',
                    help='show instruction counts per function against this '
                         'earlier result (--smoke: the newest in bench/results)')
    ap.add_argument('--smoke', action='store_true',
                    help='every code path in ~1 s per scenario: 1 round, 8 '
                         'and 32 connections, a one-point sweep (1x2, every '
                         'scenario), callgrind with 3 and 8 requests, report '
                         'in a temporary directory; fails only if something '
                         'failed to run')
    ap.add_argument('--wait-quiet', type=float, default=0, metavar='S',
                    help='before the runs and before every round, wait up to '
                         'S s for other processes to use < 10 %% of the '
                         'machine (0: do not wait)')
    ap.add_argument('--concurrency', action='store_true',
                    help='instead of the full run: fresh charges at provider '
                         'latency --latency-ms through lighttpd at '
                         '--latency-connections, the same through the HTTP '
                         'provider (charge-provider-sim at --latency-ms) at '
                         '--http-connections, then at latency 0 fresh and '
                         'replay through lighttpd and through nginx with '
                         'kept-alive FastCGI connections against the libfcgi '
                         'baseline at --keepalive-connections (--smoke: a '
                         'short one)')
    ap.add_argument('--latency-ms', type=int, default=200,
                    help='--concurrency: provider_latency_ms of the first part (200)')
    ap.add_argument('--latency-connections', default=None,
                    help='--concurrency: connection counts at --latency-ms '
                         '("64 1024 4096"; --smoke "64")')
    ap.add_argument('--keepalive-connections', default=None,
                    help='--concurrency: connection counts at latency 0 '
                         '("32 64"; --smoke "32")')
    ap.add_argument('--http-connections', default=None,
                    help='--concurrency: connection counts through the HTTP '
                         'provider (the simulator) at --latency-ms ("64 1024"; '
                         '--smoke "64"; "" skips that part)')
    ap.add_argument('--pool-connections', default=None,
                    help='--concurrency: replays through nginx with the pool '
                         'conf/nginx.conf ships, the pool of 64, no kept '
                         'connections, and lighttpd, at these connection counts '
                         '("32 1024"; --smoke "32"; "" skips that part)')
    ap.add_argument('--pool-only', action='store_true',
                    help='--concurrency: only the pool part (--pool-connections)')
    ap.add_argument('--http-fsync', default='batch', choices=('always', 'batch', 'never'),
                    help='--concurrency: the simulator\'s --fsync (batch, its default)')
    ap.add_argument('--no-http-unix', action='store_true',
                    help='--concurrency: the HTTP provider over TCP only (not '
                         'also over a unix socket)')
    ap.add_argument('--vs', metavar='CHARGE',
                    help='--concurrency: instead of its parts, this responder binary '
                         '(another tree\'s build, e.g. another transport) '
                         'against this tree\'s: fresh and replay through nginx with kept '
                         'FastCGI connections and with a connection per request, '
                         'interleaved rounds at --keepalive-connections')
    ap.add_argument('--vs-strace', type=float, default=0, metavar='S',
                    help='--vs: after the rounds, a wrk run of S s per case with strace -c '
                         'on the responder: system calls per request (0: none)')
    ap.add_argument('--vs-labels', default='A,B', metavar='A,B',
                    help='--vs: the names of the two binaries in the report: A this '
                         'tree\'s build (or --charge), B the --vs binary (A,B)')
    ap.add_argument('--charge', help='use this responder binary (no meson build)')
    ap.add_argument('--sim', help='use this %s binary (no meson build)' % SIM_BINARY)
    ap.add_argument('--port', type=int, default=0, help='lighttpd port (free one)')
    ap.add_argument('--out', help='report directory (bench/results)')
    ap.add_argument('--keep', action='store_true', help='keep the run directory')
    a = ap.parse_args(argv)
    a.deployment = dep
    if sum(bool(x) for x in (a.sweep, a.callgrind_only, a.concurrency)) > 1 and not a.smoke:
        ap.error('--sweep, --callgrind-only and --concurrency are separate modes')
    if a.smoke:
        dflt = dict(duration=1.0, rounds=1, connections='8 32', warmup=0.0,
                    mem_records='200 20', callgrind_n='3 8',
                    scenarios=','.join(SCENARIOS))
        a.sweep_spec = a.sweep or '1x2'
        a.sweep_scen = list(SCENARIOS)
        a.sweep_conns = [32]
        a.main_runs = not a.callgrind_only
    elif a.concurrency:
        dflt = dict(duration=5.0, rounds=2, connections='32', warmup=1.0,
                    mem_records='0 0', callgrind_n='200 1200',
                    scenarios='fresh')
        a.sweep_spec = None
        a.main_runs = False
        a.no_callgrind = True
    elif a.sweep:
        dflt = dict(duration=3.0, rounds=2, connections='32', warmup=1.0,
                    mem_records='0 0', callgrind_n='200 1200',
                    scenarios='fresh,replay')
        a.sweep_spec = a.sweep
        a.main_runs = False
    else:
        dflt = dict(duration=5.0, rounds=3, connections='1 8 32 64', warmup=2.0,
                    mem_records='10000 1000', callgrind_n='200 1200',
                    scenarios=','.join(SCENARIOS))
        a.sweep_spec = None
        a.main_runs = not a.callgrind_only
    for k, v in dflt.items():
        if getattr(a, k) is None:
            setattr(a, k, v)
    if a.sweep and not a.smoke:
        a.no_callgrind = True
    if a.callgrind_only:
        a.no_callgrind = False
        a.mem_records = '0 0'
    if a.smoke and not a.compare:
        a.compare = newest_result()
    if a.smoke:
        a.concurrency = True
    a.lat_conns = [int(x) for x in (a.latency_connections or
                                    ('64' if a.smoke else '64 1024 4096')).split()]
    a.ka_conns = [int(x) for x in (a.keepalive_connections or
                                   ('32' if a.smoke else '32 64')).split()]
    a.http_conns = [int(x) for x in (a.http_connections if a.http_connections is not None
                                     else '64' if a.smoke else '64 1024').split()]
    a.pool_conns = [int(x) for x in (a.pool_connections if a.pool_connections is not None
                                     else '32' if a.smoke else '32 1024').split()]
    if a.pool_only:
        a.lat_conns, a.http_conns = [], []
    a.vs_labels = a.vs_labels.split(',')
    if a.vs:
        if not a.concurrency or len(a.vs_labels) != 2:
            ap.error('--vs goes with --concurrency; --vs-labels takes A,B')
        a.vs = os.path.abspath(a.vs)
        a.lat_conns, a.http_conns, a.pool_conns = [], [], []
    # runs at a provider latency last at least 10 s (4 096 connections need
    # a while to reach a steady state); --smoke: --duration
    a.lat_duration = a.duration if a.smoke else max(a.duration, 10.0)
    a.conc_rounds = a.rounds
    try:
        a.sweep_points = parse_sweep(a.sweep_spec) if a.sweep_spec else []
    except ValueError as e:
        ap.error('--sweep takes PROCSxTHREADS items (1..64 each), not %s' % e)
    a.conns = [int(x) for x in a.connections.split()]
    a.scen = [x for x in a.scenarios.split(',') if x]
    for x in a.scen:
        if x not in SCENARIOS:
            ap.error('unknown scenario ' + x)
    if a.sweep and not a.smoke:
        a.sweep_scen, a.sweep_conns = a.scen, a.conns
    a.mem = [int(x) for x in a.mem_records.split()]
    a.cgn = [int(x) for x in a.callgrind_n.split()]
    if len(a.mem) != 2 or len(a.cgn) != 2 or a.cgn[1] <= a.cgn[0]:
        ap.error('--mem-records and --callgrind-n take two numbers (N2 > N1)')
    if a.duration <= 0 or a.rounds < 1 or not a.conns or a.procs < 1 or \
            not 0 <= a.threads <= 64:
        ap.error('duration, rounds, connections and procs must be positive, '
                 'threads 0..64 (0: one per core)')
    if a.duration != int(a.duration) or a.warmup != int(a.warmup) or a.warmup < 0:
        ap.error('--duration and --warmup are whole seconds (wrk -d)')
    if a.compare and not os.path.exists(a.compare):
        ap.error('--compare: no such file ' + a.compare)
    return a


def newest_result():
    """The newest bench/results/<date>.json (a full run), or None."""
    d = os.path.join(BENCH, 'results')
    try:
        names = sorted(x for x in os.listdir(d)
                       if re.match(r'^\d{4}-\d{2}-\d{2}\.json$', x))
    except OSError:
        return None
    return os.path.join(d, names[-1]) if names else None


def compare_data(path):
    """What the report compares against: the callgrind part of OLD.json."""
    with open(path) as f:
        old = json.load(f)
    return {'path': os.path.relpath(os.path.abspath(path), ROOT)
            if os.path.abspath(path).startswith(ROOT + os.sep) else path,
            'date': old.get('date'),
            'commit': (old.get('machine') or {}).get('commit'),
            'cpu': (old.get('machine') or {}).get('cpu'),
            'callgrind': old.get('callgrind') or {}}


def backends_of(scenarios):
    out = []
    for x in scenarios:
        if SCENARIOS[x][1] not in out:
            out.append(SCENARIOS[x][1])
    return out


def rounds(bench, args, scenarios, conns, rss, label):
    """Warm-up, then interleaved rounds of scenarios at each connection
    count; appends the responder's RSS to rss after each step."""
    def note(when):
        if 'charge' in bench.backends:
            rss.append({'when': when, 'procs': bench.procs_n,
                        'threads': bench.threads_n,
                        'charge_requests': bench.charge_requests,
                        'rss_kb': bench.rss('charge')})
    runs = []
    if args.warmup > 0:
        for x in scenarios:
            log('warm-up %s (%s)' % (x, label))
            bench.measure(x, max(conns), 0, args.warmup)
    note('after warm-up')
    for c in conns:
        for r in range(1, args.rounds + 1):
            if args.wait_quiet > 0:
                wait_quiet(args.wait_quiet)
            for x in scenarios:
                runs.append(bench.measure(x, c, r, args.duration))
        note('after c=%d' % c)
    return runs


def concurrency(bench, args):
    """--concurrency (and a short one in --smoke): the event-driven
    responder under many connections.

    1. provider_latency_ms = --latency-ms (200): fresh charges through
       lighttpd (procs x threads) at each of --latency-connections; the
       ideal throughput is connections / latency (C/L).
    1b. the same through the HTTP provider: charge-provider-sim at
       --latency-ms (--fsync batch, its data file in the run directory),
       the responder's provider_url pointing at it over TCP loopback, then
       over a unix socket (--no-http-unix: TCP only), at each of
       --http-connections; the simulator's deliveries and charges
       (/_sim/stats), CPU and RSS per run.
    2. provider_latency_ms = 0: fresh and replay through lighttpd and
       through nginx with kept-alive FastCGI connections (charge --listen,
       one process), and the libfcgi baseline through lighttpd, interleaved
       for --rounds at each of --keepalive-connections.
    3. provider_latency_ms = 0: replays through nginx with the upstream
       pool conf/nginx.conf ships, the pool of 64, no kept connections,
       and through lighttpd, at each of --pool-connections (pool_part).
    --pool-only: part 3 alone."""
    out = {'procs': bench.procs_n, 'threads': bench.threads_n,
           'latency_ms': args.latency_ms, 'latency_runs': [], 'http_runs': [],
           'keepalive_runs': [], 'latency_duration_s': args.lat_duration,
           'duration_s': args.duration, 'rounds': args.conc_rounds}
    if args.vs:
        bench.latency_ms = 0
        versus_part(bench, args, out)
        return out
    bench.latency_ms = args.latency_ms
    bench.start_lighttpd(['charge'], bench.procs_n, bench.threads_n)
    log('concurrency: lighttpd on 127.0.0.1:%d, charge %dx%d, provider latency %d ms' % (
        bench.port, bench.procs_n, bench.threads_n, bench.latency_ms))
    for c in args.lat_conns:
        if args.warmup > 0:
            bench.measure_plain('warm-up', 'fresh', c, args.warmup, bench.port,
                                bench.backends['charge'])
        r = bench.measure_plain('fresh L=%d lighttpd' % bench.latency_ms, 'fresh', c,
                                args.lat_duration, bench.port, bench.backends['charge'])
        r['ideal_rps'] = c * 1000.0 / bench.latency_ms if bench.latency_ms else None
        out['latency_runs'].append(r)
    bench.stop_lighttpd()
    for transport in ('tcp',) + (() if args.no_http_unix else ('unix',)):
        if not args.http_conns:
            break
        sim = bench.start_sim(args.latency_ms, args.http_fsync, unix=transport == 'unix')
        bench.start_lighttpd(['charge_http'], bench.procs_n, bench.threads_n)
        bench.sanity_http()
        log('concurrency: lighttpd on 127.0.0.1:%d, charge %dx%d, provider_url %s '
            '(%s at %d ms, fsync %s)' % (bench.http_port, bench.procs_n,
                                         bench.threads_n, sim['url'], SIM_BINARY,
                                         sim['latency_ms'], sim['fsync']))
        out.setdefault('sims', []).append({k: sim[k] for k in (
            'argv', 'url', 'transport', 'latency_ms', 'fsync')})
        for c in args.http_conns:
            pids = bench.backends['charge_http']
            if args.warmup > 0:
                bench.measure_plain('warm-up', 'fresh_http', c, args.warmup,
                                    bench.http_port, pids)
            r = bench.measure_plain('fresh L=%d HTTP/%s' % (args.latency_ms, transport),
                                    'fresh_http', c, args.lat_duration,
                                    bench.http_port, pids)
            r['ideal_rps'] = c * 1000.0 / args.latency_ms if args.latency_ms else None
            r['transport'] = transport
            out['http_runs'].append(r)
        bench.stop_lighttpd()
        bench.stop_sim()
    bench.latency_ms = 0
    if not args.pool_only:
        keepalive_part(bench, args, out)
    if args.pool_conns:
        pool_part(bench, args, out)
    return out


def keepalive_part(bench, args, out):
    """--concurrency part 2: latency 0, kept connections against lighttpd
    and the baseline."""
    bench.start_lighttpd(['charge', 'baseline'], bench.procs_n, bench.threads_n)
    inst = bench.start_nginx()
    out['nginx_keepalive'] = inst['keepalive']
    bench.prime_replay()
    log('concurrency: lighttpd on 127.0.0.1:%d (charge, baseline %dx%d), nginx on '
        '127.0.0.1:%d (charge --listen, threads %d, keepalive %d)' % (
            bench.port, bench.procs_n, bench.threads_n, bench.nginx_port, bench.threads_n,
            inst['keepalive']))
    cases = [('fresh lighttpd', 'fresh', bench.port, bench.backends['charge']),
             ('fresh nginx-keepalive', 'fresh', bench.nginx_port, [bench.nginx_charge.pid]),
             ('replay lighttpd', 'replay', bench.port, bench.backends['charge']),
             ('replay nginx-keepalive', 'replay', bench.nginx_port, [bench.nginx_charge.pid]),
             ('baseline lighttpd', 'baseline', bench.port, bench.backends['baseline'])]
    if args.warmup > 0:
        for label, sc, port, pids in cases:
            bench.measure_plain('warm-up ' + label, sc, max(args.ka_conns), args.warmup,
                                port, pids)
    for c in args.ka_conns:
        for rnd in range(1, args.conc_rounds + 1):
            for label, sc, port, pids in cases:
                out['keepalive_runs'].append(bench.measure_plain(
                    label, sc, c, args.duration, port, pids, rnd))
    bench.stop_nginx()
    bench.stop_lighttpd()


def versus_part(bench, args, out):
    """--concurrency --vs CHARGE: this tree's responder (A) against another
    binary (B, e.g. a build with the other FastCGI transport) at latency 0:
    fresh and replay through nginx with kept FastCGI connections (the pool
    conf/nginx.conf ships) and with a connection per request, each binary
    behind an nginx of its own (charge --listen, threads_n loops), at each
    of --keepalive-connections, --rounds interleaved rounds, A first in odd
    rounds and B first in even ones. CPU per request of the responder and of
    its nginx, p99. The report's versus table gives medians, spread and
    B / A."""
    shipped = shipped_keepalive()
    bins = [(args.vs_labels[0], bench.bins['charge']), (args.vs_labels[1], args.vs)]
    out['versus'] = {'labels': [lb for lb, _ in bins],
                     'bins': [os.path.abspath(b) for _, b in bins],
                     'keepalive': shipped, 'runs': []}
    insts = {}
    for i, (tag, binary) in enumerate(bins):
        for ka in (shipped, 0):
            inst = bench.start_nginx(ka, name='nginx-%d-%d' % (i, ka), charge_bin=binary)
            master = inst['nginx'].pid
            insts[(tag, ka)] = (inst['port'], [inst['charge'].pid],
                                [master] + proc_children(master))
    bench.replay_key = 'bench-replay-' + uuid.uuid4().hex
    st, h, b = http_post(insts[(bins[0][0], shipped)][0], '/charge', bench.replay_key,
                         DEFAULT_BODY)
    if st != 201 or h.get('idempotent-replayed') != 'false':
        raise BenchError('priming the replay key: %d %r' % (st, b[:300]))
    log('versus: %s against %s, nginx keepalive %d and 0, charge --listen threads %d' % (
        bins[0][1], bins[1][1], shipped, bench.threads_n))

    def cases(order):
        return [('%s %s %s' % (sc, 'kept' if ka else 'per-request', tag), sc, tag, ka)
                for sc in ('fresh', 'replay') for ka in (shipped, 0) for tag in order]
    tags = [tag for tag, _ in bins]
    if args.warmup > 0:
        for label, sc, tag, ka in cases(tags):
            port, pids, web = insts[(tag, ka)]
            bench.measure_plain('warm-up ' + label, sc, max(args.ka_conns), args.warmup,
                                port, pids, web_pids=web)
    for c in args.ka_conns:
        for rnd in range(1, args.conc_rounds + 1):
            if args.wait_quiet > 0:
                wait_quiet(args.wait_quiet)
            for label, sc, tag, ka in cases(tags if rnd % 2 else tags[::-1]):
                port, pids, web = insts[(tag, ka)]
                r = bench.measure_plain(label, sc, c, args.duration, port, pids, rnd,
                                        web_pids=web)
                r.update(side=tag, kept=bool(ka))
                out['versus']['runs'].append(r)
    if args.vs_strace > 0:
        out['versus']['strace'] = []
        for label, sc, tag, ka in cases(tags):
            port, pids, web = insts[(tag, ka)]
            out['versus']['strace'].append(dict(
                strace_run(bench, sc, min(args.ka_conns), args.vs_strace, port, pids[0]),
                label=label, scenario=sc, side=tag, kept=bool(ka)))
    bench.stop_nginx()


def strace_run(bench, scenario, conns, duration, port, pid):
    """System calls per request of the responder pid (all its threads,
    strace -c) over a wrk run of duration s: {'requests', 'calls':
    {name: per request}, 'total'}. strace slows it down: counts only."""
    run_id = 's%s' % uuid.uuid4().hex[:10]
    outfile = os.path.join(bench.run, 'strace-%s.txt' % run_id)
    tids = sorted(os.listdir('/proc/%d/task' % pid))
    argv = ['strace', '-c', '-q', '-o', outfile] + [x for t in tids for x in ('-p', t)]
    st = bench.procs.start('strace', argv, stdout=subprocess.DEVNULL,
                           stderr=subprocess.STDOUT)
    time.sleep(1.0)  # attached
    try:
        w, _ = bench.wrk(scenario, conns, duration, run_id, port=port)
    finally:
        time.sleep(0.5)
        st.send_signal(signal.SIGINT)
        st.wait(30)
        bench.procs.items = [(n, q) for n, q in bench.procs.items if q is not st]
    n = w['requests']
    calls = {}
    with open(outfile) as f:
        for line in f:
            parts = line.split()
            # % time, seconds, usecs/call, calls, [errors,] syscall
            if len(parts) >= 5 and parts[0][0].isdigit() and parts[-1] != 'total':
                calls[parts[-1]] = int(parts[3]) / n if n else None
    res = {'requests': n, 'calls': calls,
           'total': sum(v for v in calls.values() if v) if n else None}
    log('strace %-8s port %d c=%d: %d requests, %.2f system calls per request (%s)' % (
        scenario, port, conns, n, res['total'] or 0,
        ', '.join('%s %.2f' % kv for kv in sorted(calls.items(), key=lambda kv: -kv[1]))))
    return res


LUA_PEER = 'nginx + Lua (peer)'


def pool_part(bench, args, out):
    """--concurrency part 3 (issue 31): replays at --pool-connections
    through nginx with the upstream pool conf/nginx.conf ships, with the
    pool of 64 it shipped before, without kept connections (a FastCGI
    connection per request, as NGINX_KEEPALIVE=0), and through lighttpd
    (a connection per request, procs x threads); each nginx in front of a
    charge --listen of its own (one process, a loop per core, as the
    package deploys it); and the nginx + Lua peer's replay (bench/peers/,
    a worker per core, its own key primed through it; skipped, and said so,
    without nginx's Lua module). Interleaved rounds; CPU per replay of the
    responder and of the web server."""
    shipped = shipped_keepalive()
    pools = [('nginx pool %d (shipped)' % shipped, shipped)]
    if shipped != 64:
        pools.append(('nginx pool 64 (before)', 64))
    pools.append(('nginx no keep-alive', 0))
    bench.start_lighttpd(['charge'], bench.procs_n, bench.threads_n)
    cases = []
    for i, (label, ka) in enumerate(pools):
        inst = bench.start_nginx(ka, name='nginx-pool%d' % i, threads=0)
        master = inst['nginx'].pid
        cases.append((label, inst['port'], [inst['charge'].pid],
                      [master] + proc_children(master)))
    cases.append(('lighttpd', bench.port, bench.backends['charge'], [bench.lighttpd.pid]))
    bench.prime_replay()
    keys = {}
    lua_nginx = None
    sys.modules.setdefault('bench', sys.modules[__name__])
    sys.path.insert(0, os.path.join(BENCH, 'peers'))
    import peers as PE
    if PE.lua_available():
        bench.start_sim(0, 'never')
        lport = port_free()
        # a worker per core: the whole endpoint is nginx's worker there
        lua_nginx = PE.start_nginx(bench, bench.run, 'nginx-lua',
                                   PE.lua_servers(bench, bench.run, lport), lua=True,
                                   workers=os.cpu_count() or 1)
        wait_for(lambda: tcp_listening(lport), 10, 'nginx + Lua')
        key = 'bench-replay-lua-' + uuid.uuid4().hex
        st, h, b1 = http_post(lport, '/charge', key, DEFAULT_BODY)
        st2, h2, b2 = http_post(lport, '/charge', key, DEFAULT_BODY)
        if st != 201 or st2 != 201 or b1 != b2 or h2.get('idempotent-replayed') != 'true':
            raise BenchError('nginx + Lua: fresh then replay answered %d / %d %r' % (
                st, st2, b2[:200]))
        keys[LUA_PEER] = key
        cases.append((LUA_PEER, lport, [], [lua_nginx.pid] + proc_children(lua_nginx.pid)))
    else:
        log('concurrency: no nginx Lua module (%s): the nginx + Lua peer is not run' %
            PE.PACKAGES)
    out['pool'] = {'shipped': shipped, 'pools': [ka for _, ka in pools],
                   'nginx_threads': eff_threads(0), 'nginx_workers': nginx_workers(),
                   'lua_peer': lua_nginx is not None,
                   'conns': args.pool_conns, 'runs': []}
    log('concurrency: replays through nginx (pools %s, charge --listen threads %d each) '
        'and lighttpd (charge %dx%d) at %s connections' % (
            ', '.join(str(ka) for _, ka in pools), eff_threads(0), bench.procs_n,
            bench.threads_n, ' '.join(str(c) for c in args.pool_conns)))
    if args.warmup > 0:
        for label, port, pids, web in cases:
            bench.measure_plain('warm-up ' + label, 'replay', max(args.pool_conns),
                                args.warmup, port, pids, web_pids=web, key=keys.get(label))
    for c in args.pool_conns:
        for rnd in range(1, args.conc_rounds + 1):
            for label, port, pids, web in cases:
                out['pool']['runs'].append(bench.measure_plain(
                    label, 'replay', c, args.duration, port, pids, rnd, web_pids=web,
                    key=keys.get(label)))
    if lua_nginx is not None:
        bench.procs.stop(lua_nginx, signal.SIGQUIT)
        bench.stop_sim()
    bench.stop_nginx()
    bench.stop_lighttpd()


def main(argv):
    args = parse_args(argv)
    t_start = time.time()
    date = time.strftime('%Y-%m-%d')
    stem = date + ('-sweep' if args.sweep and not args.smoke else
                   '-callgrind' if args.callgrind_only else
                   '-concurrency' if args.concurrency and not args.smoke else '')
    all_scen = list(dict.fromkeys((args.scen if args.main_runs else []) +
                                  (args.sweep_scen if args.sweep_points else [])))
    need_charge = args.callgrind_only or args.concurrency or \
        any(SCENARIOS[x][1].startswith('charge') for x in all_scen)
    need_sim = (args.concurrency and bool(args.http_conns or args.pool_conns)) or \
        any(SCENARIOS[x][1] == 'charge_http' for x in all_scen) or \
        (need_charge and not args.no_callgrind)
    out_dir = args.out or (tempfile.mkdtemp(prefix='charge-bench-report-')
                           if args.smoke else os.path.join(BENCH, 'results'))
    os.makedirs(out_dir, exist_ok=True)
    run = tempfile.mkdtemp(prefix='charge-bench-')
    bench = None

    def on_signal(signum, frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, on_signal)
    # wrk's connections and lighttpd's two descriptors per request
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    try:
        log('building (release) into ' + BUILD)
        bins = build(args, need_charge, need_sim)
        busy_before = wait_quiet(args.wait_quiet) if args.wait_quiet > 0 \
            else machine_other_pct(1.0)
        log('machine busy before the runs: %.0f %%' % busy_before)
        bench = Bench(args, bins, run)
        log('run directory ' + run)
        bench.start_redis()
        bench.write_charge_conf()
        phases = {}
        results = {'date': date, 'stem': stem, 'smoke': args.smoke,
                   'mode': 'sweep' if args.sweep and not args.smoke else
                   'callgrind' if args.callgrind_only else
                   'concurrency' if args.concurrency and not args.smoke else 'full',
                   'machine': machine_info(),
                   'busy_before_pct': busy_before,
                   'config': {'duration_s': args.duration, 'rounds': args.rounds,
                              'connections': args.conns if args.main_runs else [],
                              'scenarios': args.scen if args.main_runs else [],
                              'procs': args.procs, 'threads': args.threads,
                              'deployment': args.deployment,
                              'wrk_threads': args.wrk_threads,
                              'warmup_s': args.warmup,
                              'charge_body': DEFAULT_BODY,
                              'spill_items': SPILL_ITEMS,
                              'floor_script': FLOOR_SCRIPT_DOC,
                              'charge_env': bench.charge_env},
                   'runs': [], 'rss': []}
        if 'charge_http' in backends_of(all_scen):
            # latency 0 and no fsync: the provider's cost is its CPU, not
            # the disk of a loaded machine (--concurrency runs fsync batch)
            sim = bench.start_sim(0, 'never')
            results['config']['sim'] = {k: sim[k] for k in (
                'argv', 'url', 'transport', 'latency_ms', 'fsync')}
        if args.main_runs:
            t0 = time.time()
            bench.start_lighttpd(backends_of(args.scen), args.procs, args.threads)
            log('lighttpd on 127.0.0.1:%d, %dx%d, backends %s' % (
                bench.port, args.procs, args.threads, bench.backends))
            bench.sanity(args.scen)
            if 'charge' in bench.backends:
                if args.mem[0] > 0 or args.mem[1] > 0:
                    results['memory'] = bench.memory(*args.mem)
                bench.prime_replay()
                results['rss'].append({'when': 'start',
                                       'charge_requests': bench.charge_requests,
                                       'rss_kb': bench.rss('charge')})
            results['runs'] = rounds(bench, args, args.scen, args.conns,
                                     results['rss'], 'main')
            if bench.charge_http_env is not None:
                results['config']['charge_http_env'] = bench.charge_http_env
            results['backend_pids'] = bench.backends
            bench.stop_lighttpd()
            phases['runs'] = round(time.time() - t0, 1)
        if args.sweep_points:
            t0 = time.time()
            results['sweep'] = {'points': ['%dx%d' % pt for pt in args.sweep_points],
                                'scenarios': args.sweep_scen,
                                'connections': args.sweep_conns, 'runs': [],
                                'rss': []}
            for procs, threads in args.sweep_points:
                bench.start_lighttpd(backends_of(args.sweep_scen), procs, threads)
                log('sweep %dx%d: lighttpd on 127.0.0.1:%d, backends %s' % (
                    procs, threads, bench.port, bench.backends))
                bench.sanity(args.sweep_scen)
                if 'charge' in bench.backends and bench.replay_key is None:
                    bench.prime_replay()
                results['sweep']['runs'] += rounds(
                    bench, args, args.sweep_scen, args.sweep_conns,
                    results['sweep']['rss'], '%dx%d' % (procs, threads))
                bench.stop_lighttpd()
            phases['sweep'] = round(time.time() - t0, 1)
        if bench.sim is not None:
            # what the simulator answers alone, the same connections as the
            # largest count of the runs, after them (its store as full);
            # at most 5 s: tens of thousands of keys a second would fill
            # its --max-keys (10^6) within a long --duration and it
            # would refuse new keys (503)
            results['sim_capacity'] = bench.sim_capacity(
                max(args.conns), min(args.duration, 5))
        if args.concurrency:
            t0 = time.time()
            results['concurrency'] = concurrency(bench, args)
            phases['concurrency'] = round(time.time() - t0, 1)
        failed = None
        if not args.no_callgrind:
            t0 = time.time()
            try:
                results['callgrind'] = bench.callgrind(*args.cgn)
            except BenchError as e:
                failed = 'callgrind: %s' % e
                results['callgrind_error'] = failed
            phases['callgrind'] = round(time.time() - t0, 1)
        bench.stop_sim()
        results['sim_exits'] = bench.sim_exits
        if any(rc != 0 for _, rc in bench.sim_exits):
            failed = failed or '%s did not exit 0 on SIGTERM: %s' % (
                SIM_BINARY, bench.sim_exits)
        if args.compare:
            results['compare'] = compare_data(args.compare)
        results['elapsed_s'] = round(time.time() - t_start, 1)
        results['phases_s'] = phases
        jpath = os.path.join(out_dir, stem + '.json')
        with open(jpath, 'w') as f:
            json.dump(results, f, indent=1)
        sys.path.insert(0, BENCH)
        import report
        md = report.write_report(jpath, out_dir)
        log('report: ' + md)
        if failed:
            print('not ok 1 - bench/run: %s' % failed)
            return 1
        print('ok 1 - bench/run%s completed' % (' --smoke' if args.smoke else ''))
        return 0
    except BenchError as e:
        print('not ok 1 - bench/run: %s' % e)
        for name in ('lighttpd.out', 'lighttpd-error.log', 'redis.log'):
            path = os.path.join(run, name)
            if os.path.exists(path):
                with open(path, errors='replace') as f:
                    tail = f.read().splitlines()[-15:]
                print('# --- %s (last lines)' % name)
                for line in tail:
                    print('#   ' + line)
        return 1
    except KeyboardInterrupt:
        print('not ok 1 - bench/run: interrupted')
        return 130
    finally:
        if bench is not None:
            bench.close()
        if args.keep:
            log('kept ' + run)
        else:
            shutil.rmtree(run, ignore_errors=True)


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
