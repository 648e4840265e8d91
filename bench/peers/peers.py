#!/usr/bin/env python3
"""bench/run --peers: the responder against its peers in each provider mode,
like for like: everyone calling the provider simulator over loopback HTTP
with kept connections, and everyone with the provider in the process (a
local simulation at latency 0: src/provider/provider_inproc.c in the
responder, its copy in each peer).

Backends, all on one machine, one Redis, one simulator (latency 0,
--fsync never). The provider over HTTP:
  charge_http    nginx (1 worker, kept FastCGI connections) -> charge --listen,
                 provider_url = the simulator (the packaged deployment: one
                 process, a loop per core)
  lua            nginx + Lua (bench/peers/charge_peer.lua: cosockets, kept
                 Redis and provider connections; --lua-workers workers,
                 default one per core as the responder has a loop per core)
  go             Go net/http + go-redis (bench/peers/charge.go)
The provider in the process:
  charge_inproc  the same nginx -> a second charge --listen with the
                 provider in the process
  lua_inproc     a second nginx + Lua peer with provider_host unset (its
                 in-process provider: the responder's simulation)
and, fresh charges only:
  charge_lighttpd  lighttpd (bench.py's, mod_fastcgi bin-path) -> charge at
                 the packaged deployment's processes x threads (run.sh's
                 MAX_PROCS, conf/charge.conf's threads), provider_url empty
  go_inproc      the Go peer with PEER_PROVIDER_URL empty (its in-process
                 provider)
Interleaved rounds of fresh and replay at --connections (32), then fresh
at 1 connection for charge_http and charge_inproc (what the HTTP provider
adds to a charge's latency). Per run: req/s, p50/p99, machine busy, CPU
per request of the server side (web server + application), of the
simulator and of Redis. Every ratio sets two backends with the same
provider mode side by side. Writes <date>-peers.{md,json}.
"""
import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
BENCH = os.path.dirname(HERE)
ROOT = os.path.dirname(BENCH)
sys.path.insert(0, BENCH)
import bench as B  # noqa: E402

GOPATH = '/usr/share/gocode'
LUA_MODULES = ('/usr/lib/nginx/modules/ndk_http_module.so',
               '/usr/lib/nginx/modules/ngx_http_lua_module.so')
PACKAGES = 'golang-go golang-gopkg-redis.v5-dev libnginx-mod-http-lua lua-resty-core lua-cjson'
BACKENDS = ('charge_http', 'lua', 'go', 'charge_inproc', 'lua_inproc')
# fresh charges only, the provider in the process: the responder through
# lighttpd against the Go peer in its in-process mode
INPROC_BACKENDS = ('charge_lighttpd', 'go_inproc')
ALL_BACKENDS = BACKENDS + INPROC_BACKENDS


def scenario_backends(scen):
    """The backends measured in scenario scen, in interleaving order."""
    return ALL_BACKENDS if scen == 'fresh' else BACKENDS


def log(msg):
    B.log(msg)


def build_go():
    out = os.path.join(B.BUILD, 'bin', 'charge-peer-go')
    os.makedirs(os.path.dirname(out), exist_ok=True)
    src = os.path.join(HERE, 'charge.go')
    if shutil.which('go') is None or not os.path.isdir(
            os.path.join(GOPATH, 'src', 'gopkg.in', 'redis.v5')):
        raise B.BenchError('--peers needs Go and go-redis: apt-get install ' + PACKAGES)
    if not os.path.exists(out) or os.path.getmtime(out) < os.path.getmtime(src):
        env = dict(os.environ, GO111MODULE='off', GOPATH=GOPATH,
                   GOCACHE=os.path.join(B.BUILD, 'gocache'))
        B.run_checked(['go', 'build', '-o', out, src], 'go build', env=env)
    return out


def lua_available():
    return all(os.path.exists(m) for m in LUA_MODULES)


def lua_servers(b, run, port, ledger=None):
    """The http-level lines of the nginx + Lua peer (charge_peer.lua) on
    127.0.0.1:port, its Redis b's, its provider b's simulator (b.sim) over
    HTTP; or, with ledger (a file path), the provider in the process at
    latency 0, its ledger that file."""
    if ledger is not None:
        provider = 'provider_ledger = "%s", provider_latency_ms = 0' % ledger
    else:
        host, sport = b.sim['listen'].rsplit(':', 1)
        provider = 'provider_host = "%s", provider_port = %s, provider_api_key = "%s"' % (
            host, sport, B.SIM_API_KEY)
    return (
        '    lua_package_path "%s/?.lua;/usr/share/lua/5.1/?.lua;;";\n'
        '    lua_package_cpath "/usr/lib/x86_64-linux-gnu/lua/5.1/?.so;;";\n'
        '    init_by_lua_block {\n'
        '        require("charge_peer").init({ redis = "unix:%s", %s,\n'
        '            api_keys = "%s", lua_dir = "%s" })\n'
        '    }\n'
        '    server {\n        listen 127.0.0.1:%d backlog=4096;\n'
        '        location = /charge { content_by_lua_block { require("charge_peer").handle() } }\n'
        '    }\n' % (HERE, b.redis_sock, provider,
                     os.path.join(run, 'api-keys'), os.path.join(ROOT, 'lua'), port))


def start_nginx(b, run, name, servers, lua, workers=1):
    """An nginx (bench/peers/nginx.conf, `workers` worker processes) named
    name in run with the http-level lines servers, Lua's modules loaded when
    lua; started by b.procs (stopped with SIGQUIT by the caller). Returns
    its Popen."""
    with open(os.path.join(HERE, 'nginx.conf')) as f:
        tpl = ''.join(x for x in f if not x.startswith('#'))
    for d in ('body', 'fastcgi', 'proxy', 'uwsgi', 'scgi'):
        os.makedirs(os.path.join(run, name + '-tmp', d), exist_ok=True)
    if lua and not lua_available():
        raise B.BenchError('the nginx + Lua peer needs nginx\'s Lua module: apt-get install ' +
                           PACKAGES)
    conf = (tpl.replace('@RUN@', run).replace('@NAME@', name)
            .replace('@WORKERS@', str(workers))
            .replace('@USER@', 'user root root;' if os.geteuid() == 0 else '')
            .replace('@LOAD_LUA@', ''.join('load_module %s;\n' % m for m in LUA_MODULES)
                     if lua else '')
            .replace('@SERVERS@', servers))
    path = os.path.join(run, name + '.conf')
    with open(path, 'w') as f:
        f.write(conf)
    elog = os.path.join(run, name + '-error.log')
    B.run_checked(['nginx', '-t', '-q', '-p', run, '-c', path, '-e', elog], 'nginx -t')
    p = b.procs.start(name, ['nginx', '-p', run, '-c', path, '-e', elog],
                      stdout=open(os.path.join(run, name + '.out'), 'w'),
                      stderr=subprocess.STDOUT, env=b.base_env(), cwd=run)
    time.sleep(0.5)
    if p.poll() is not None:
        raise B.BenchError('%s exited; see %s-error.log' % (name, name))
    return p


class Peers:
    def __init__(self, args, bins, run):
        self.args = args
        self.bench = B.Bench(args, bins, run)
        self.run = run
        self.bins = bins
        self.ports = {}
        self.pids = {}      # backend -> [pid, ...] (server side)
        self.nginx = {}
        self.ledgers = {}   # in-process backend -> its provider ledger

    def start(self):
        b = self.bench
        b.start_redis()
        # three backends charge over HTTP at up to ~20 000/s for 3 rounds
        # of 8 s and their warm-ups: over the simulator's default million
        # keys on a fast machine (the full run of 2026-12-07 filled it and
        # its 1-connection part then answered nothing); ~1 KiB a key
        b.start_sim(0, 'never', max_keys=8000000)
        b.write_charge_conf()
        sock = os.path.join(self.run, 'sock')
        os.makedirs(sock, exist_ok=True)
        charges = {}
        for name, env in (('charge_http', b.charge_http_env), ('charge_inproc', b.charge_env)):
            path = os.path.join(sock, name + '.sock')
            e = dict(b.base_env(), **env)
            e['CHARGE_THREADS'] = str(self.args.threads)
            p = b.procs.start(name, [self.bins['charge'], '--listen', path],
                              stdout=open(os.path.join(self.run, name + '.log'), 'w'),
                              stderr=subprocess.STDOUT, env=e, cwd=self.run)
            B.wait_for(lambda: os.path.exists(path) or p.poll() is not None, 10, name)
            if p.poll() is not None:
                raise B.BenchError('%s exited; see %s.log' % (name, name))
            charges[name] = (p, path)
        for name in BACKENDS + ('go_inproc',):
            self.ports[name] = B.port_free()
        servers = ''.join(
            '    upstream %s { server unix:%s; keepalive 64; }\n'
            '    server {\n        listen 127.0.0.1:%d backlog=4096;\n'
            '        location = /charge {\n            include /etc/nginx/fastcgi_params;\n'
            '            fastcgi_keep_conn on;\n            fastcgi_pass %s;\n        }\n    }\n' % (
                name, charges[name][1], self.ports[name], name)
            for name in ('charge_http', 'charge_inproc'))
        self.start_nginx('nginx-charge', servers, lua=False)
        # the nginx + Lua peer in each provider mode, a worker per core
        # unless --lua-workers says otherwise
        lua = lua_servers(b, self.run, self.ports['lua'])
        self.start_nginx('nginx-lua', lua, lua=True)
        self.ledgers['lua_inproc'] = os.path.join(self.run, 'lua-ledger.log')
        lua = lua_servers(b, self.run, self.ports['lua_inproc'], self.ledgers['lua_inproc'])
        self.start_nginx('nginx-lua-inproc', lua, lua=True)
        g = self.start_go('go', b.sim['url'])
        self.ledgers['go_inproc'] = os.path.join(self.run, 'go-ledger.log')
        self.ledgers['charge_inproc'] = b.ledger
        gi = self.start_go('go_inproc', '')
        # the responder as lighttpd runs it in the other benches, at the
        # packaged deployment's processes x threads, provider in the process
        dep = B.deployment_defaults()
        b.start_lighttpd(['charge'], dep['procs'], dep['threads'])
        self.lighttpd_deployment = dep
        self.ports['charge_lighttpd'] = b.port
        self.ledgers['charge_lighttpd'] = b.ledger
        log('lighttpd on 127.0.0.1:%d, charge %dx%d (in-process provider), pids %s' % (
            b.port, dep['procs'], dep['threads'], b.backends['charge']))
        ng = self.nginx['nginx-charge']
        workers = B.proc_children(ng.pid)
        self.pids = {'charge_http': workers + [charges['charge_http'][0].pid],
                     'charge_inproc': workers + [charges['charge_inproc'][0].pid],
                     'lua': B.proc_children(self.nginx['nginx-lua'].pid),
                     'lua_inproc': B.proc_children(self.nginx['nginx-lua-inproc'].pid),
                     'go': [g.pid], 'go_inproc': [gi.pid],
                     'charge_lighttpd': [b.lighttpd.pid] + b.backends['charge']}
        self.charge_pids = {k: charges[k][0].pid for k in charges}
        for name in ALL_BACKENDS:
            self.check(name)

    def start_go(self, name, provider_url):
        """The Go peer named name on self.ports[name]: the provider over HTTP
        at provider_url, or in the process (provider_url empty; its ledger
        self.ledgers[name])."""
        b = self.bench
        env = dict(b.base_env(), PEER_LISTEN='127.0.0.1:%d' % self.ports[name],
                   PEER_REDIS_SOCKET=b.redis_sock, PEER_PROVIDER_URL=provider_url,
                   PEER_PROVIDER_API_KEY=B.SIM_API_KEY,
                   PEER_PROVIDER_LEDGER=self.ledgers.get(name, ''),
                   PEER_API_KEYS=os.path.join(self.run, 'api-keys'),
                   PEER_LUA_DIR=os.path.join(ROOT, 'lua'))
        g = b.procs.start(name, [self.bins['go']], env=env, cwd=self.run,
                          stdout=open(os.path.join(self.run, name + '.log'), 'w'),
                          stderr=subprocess.STDOUT)
        B.wait_for(lambda: B.tcp_listening(self.ports[name]) or g.poll() is not None,
                   20, 'Go peer (%s)' % name)
        if g.poll() is not None:
            raise B.BenchError('the Go peer %s exited; see %s.log' % (name, name))
        return g

    def start_nginx(self, name, servers, lua):
        self.nginx[name] = start_nginx(self.bench, self.run, name, servers, lua,
                                       workers=self.args.lua_workers if lua else 1)

    def check(self, name):
        key = 'peers-sanity-%s-%s' % (name, uuid.uuid4().hex)
        port = self.ports[name]
        B.wait_for(lambda: B.tcp_listening(port), 10, name)
        lines0 = ledger_lines(self.ledgers.get(name))
        st, h, body = B.http_post(port, '/charge', key, B.DEFAULT_BODY)
        st2, h2, body2 = B.http_post(port, '/charge', key, B.DEFAULT_BODY)
        if st != 201 or st2 != 201 or body != body2 or \
                h.get('idempotent-replayed') != 'false' or \
                h2.get('idempotent-replayed') != 'true':
            raise B.BenchError('%s: fresh then replay answered %d %r / %d %r' % (
                name, st, body[:200], st2, body2[:200]))
        if name in self.ledgers:
            # the in-process provider: one ledger line for the pair, and a
            # charge id of its form ("ch_" + 24 hex digits)
            got = ledger_lines(self.ledgers[name]) - lines0
            cid = json.loads(body).get('id', '')
            if got != 1 or len(cid) != 27 or not cid.startswith('ch_'):
                raise B.BenchError('%s: fresh then replay wrote %d ledger lines '
                                   '(want 1), charge id %r' % (name, got, cid))
        self.replay_key = getattr(self, 'replay_key', {})
        self.replay_key[name] = key

    def wrk(self, name, scenario, conns, duration):
        env = dict(os.environ, BENCH_PATH='/charge',
                   BENCH_RUN='p%s' % uuid.uuid4().hex[:10])
        env.pop('BENCH_KEY', None)
        if scenario == 'replay':
            env['BENCH_KEY'] = self.replay_key[name]
        argv = ['wrk', '-t', str(max(1, min(2, conns))), '-c', str(conns),
                '-d', '%gs' % duration, '--timeout', '10s', '--latency',
                '-s', os.path.join(BENCH, 'charge.lua'),
                'http://127.0.0.1:%d/' % self.ports[name]]
        r = subprocess.run(argv, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=duration + 60)
        import re
        m = re.search(r'^BENCH (\{.*\})$', r.stdout, re.M)
        if r.returncode != 0 or not m:
            raise B.BenchError('wrk failed: ' + r.stdout[-400:])
        return json.loads(m.group(1))

    def measure(self, name, scenario, conns, duration, rnd):
        b = self.bench
        pids = self.pids[name]
        sim_pid, redis_pid = b.sim['pid'], b.redis_proc.pid
        c0 = {p: B.proc_cpu_ticks(p) for p in pids}
        s0, r0, m0 = B.proc_cpu_ticks(sim_pid), B.proc_cpu_ticks(redis_pid), B.machine_busy_ticks()
        st0 = b.sim_stats()
        u0 = task_ticks()
        k0 = os.times()
        w = self.wrk(name, scenario, conns, duration)
        m1 = B.machine_busy_ticks()
        u1 = task_ticks()
        k1 = os.times()
        time.sleep(0.2)
        n = w['requests']
        if n == 0:
            raise B.BenchError('%s %s c=%d: wrk completed no request (%s)' % (
                name, scenario, conns, w))
        st1 = b.sim_stats()
        tick_us = 1e6 / B.CLK_TCK
        srv_ticks = sum(B.proc_cpu_ticks(p) - c0[p] for p in pids)
        srv = srv_ticks * tick_us / n
        sim_ticks = B.proc_cpu_ticks(sim_pid) - s0
        redis_ticks = B.proc_cpu_ticks(redis_pid) - r0
        # wrk's CPU (a child of ours, reaped): what is left of the time the
        # cores ran tasks is other work's, the noise of a shared machine
        wrk_ticks = ((k1.children_user + k1.children_system) -
                     (k0.children_user + k0.children_system)) * B.CLK_TCK
        other = (u1 - u0) - srv_ticks - sim_ticks - redis_ticks - wrk_ticks
        res = {'backend': name, 'scenario': scenario, 'conns': conns, 'round': rnd,
               'requests': n, 'rps': n / (w['duration_us'] / 1e6),
               'p50_ms': w['p50_us'] / 1e3, 'p99_ms': w['p99_us'] / 1e3,
               'errors': w['err_connect'] + w['err_read'] + w['err_write'] +
               w['err_status'] + w['err_timeout'],
               'busy_pct': 100.0 * (m1[0] - m0[0]) / max(1, m1[2] - m0[2]),
               'server_cpu_us': srv,
               'sim_cpu_us': sim_ticks * tick_us / n,
               'redis_cpu_us': redis_ticks * tick_us / n,
               'other_pct': max(0.0, 100.0 * other / max(1, m1[2] - m0[2])),
               'deliveries': st1['deliveries'] - st0['deliveries']}
        if name == 'charge_lighttpd':
            b.check_backends()      # lighttpd respawned a responder: fail
        log('%-15s %-6s c=%-3d round %d: %8.0f req/s p50 %6.2f p99 %6.2f ms busy %3.0f %% '
            'server %5.0f µs sim %4.0f µs redis %4.0f µs err %d others %2.0f %%' % (
                name, scenario, conns, rnd, res['rps'], res['p50_ms'], res['p99_ms'],
                res['busy_pct'], srv, res['sim_cpu_us'], res['redis_cpu_us'], res['errors'],
                res['other_pct']))
        return res


def task_ticks():
    """user + nice + system ticks of all CPUs (/proc/stat): the time the
    cores ran tasks, without the interrupts' time, which no process is
    charged with."""
    with open('/proc/stat') as f:
        v = [int(x) for x in f.readline().split()[1:4]]
    return sum(v)


def ledger_lines(path):
    """Lines in the ledger file path (0: none yet; None: no path)."""
    if path is None:
        return None
    try:
        with open(path, 'rb') as f:
            return sum(chunk.count(b'\n') for chunk in iter(lambda: f.read(1 << 20), b''))
    except FileNotFoundError:
        return 0


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


# what the responder does per request that no peer does (docs/performance.md)
MORE_WORK = ('the same Redis work on each side (the claim and the record as one `EVALSHA` '
             'each of `lua/claim.lua` and `lua/record.lua`, a replay one `EVALSHA`), but '
             'the responder does more per request than either peer: strict validation of '
             'the body (every member checked, unknown members refused, a problem+json '
             'naming the field on a bad one), the canonical request and its member '
             'digests built from the parsed body (the peers write the members the '
             'benchmark never sends as a fixed tail), the API key\'s hash compared in '
             'constant time with every key (the peers look it up in a table), and a '
             'FastCGI hop behind nginx where the nginx + Lua peer runs inside nginx; the '
             'peers write out only the two paths the benchmark takes')


def report(data):
    runs = data['runs']
    conns = data['config']['connections']
    rounds = data['config']['rounds']

    def get(backend, scen, c, key, rnd=None):
        v = [r[key] for r in runs if r['backend'] == backend and r['scenario'] == scen
             and r['conns'] == c and (rnd is None or r['round'] == rnd)]
        return v[0] if rnd is not None and v else med(v)

    def ratio(a, b, scen, c, key='rps'):
        return med([get(a, scen, c, key, r) / get(b, scen, c, key, r)
                    for r in range(1, rounds + 1)
                    if get(a, scen, c, key, r) and get(b, scen, c, key, r)])
    cfg = data['config']
    lua_inproc = any(r['backend'] == 'lua_inproc' for r in runs)
    L = ['# charge against its peers, the provider over HTTP%s (%s)' % (
        ' and in the process, like for like' if lua_inproc else
        (', and in the process' if cfg.get('lighttpd') else ''), data['date']), '']
    lt = cfg.get('lighttpd')
    la = data.get('loadavg')
    oth = [r['other_pct'] for r in runs if 'other_pct' in r]
    others = '%.0f %%, %.0f %%' % (med(oth), max(oth)) if oth else '-'
    L.append('`bench/run --peers`: one Redis, one `charge-provider-sim` (latency 0, '
             '`--fsync never`) called by the HTTP-provider backends over loopback HTTP with '
             'kept connections%s; the responder behind nginx (one worker, kept FastCGI '
             'connections), one process with %s%s; the nginx + Lua peer with '
             '%s; %d interleaved rounds '
             'of %g s (after %g s of warm-up each), medians; ratios are medians of '
             'per-round ratios. Machine busy before the run: %.0f %%%s%s.' % (
                 '; the in-process backends simulate the provider in their own process '
                 '(the responder\'s `provider_inproc.c` at latency 0, and its copy in each '
                 'peer: the outcome from the token, the charge id from the request\'s MAC, '
                 'one ledger line per call)' if lua_inproc else '',
                 '%d event loops' % cfg['threads'] if cfg['threads'] else 'an event loop per core',
                 '; fresh charges also with the provider in the process for the '
                 'responder through lighttpd (mod_fastcgi `bin-path`, processes × loops '
                 '%d × %d, the packaged deployment) and for the Go peer '
                 '(`PEER_PROVIDER_URL` empty)' % (lt['procs'], lt['threads'])
                 if lt else '',
                 '%s worker process%s' % (cfg['lua_workers'], '' if cfg['lua_workers'] == 1
                                          else 'es') if 'lua_workers' in cfg
                 else 'one worker process', rounds,
                 cfg['duration_s'], cfg['warmup_s'],
                 data['busy_before_pct'],
                 '; load average %.2f before; other work used %s of the machine during '
                 'the runs (median, max)' % (la['before'], others) if la else '',
                 ' (**loaded: other work shared the cores; read the ratios, not the absolute numbers**)'
                 if data['busy_before_pct'] > 10 else ''))
    L += ['', 'Every ratio below names the provider mode of both sides; ' + MORE_WORK + '.', '']
    names = {'charge_http': 'charge (HTTP provider)', 'lua': 'nginx + Lua (HTTP provider)',
             'go': 'Go (HTTP provider)',
             'charge_inproc': 'charge (in-process provider)',
             'lua_inproc': 'nginx + Lua (in-process provider)',
             'charge_lighttpd': 'charge (in-process provider, lighttpd)',
             'go_inproc': 'Go (in-process provider)'}

    def num(v, f='%.0f'):
        return f % v if v is not None else '-'
    for c in conns:
        L += ['## %d connections' % c, '',
              '| backend | fresh/s | replay/s | busy fresh | p50 / p99 fresh ms | server µs/fresh '
              '| simulator µs/fresh | Redis µs/fresh | server µs/replay | errors |',
              '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|']
        for be in ALL_BACKENDS:
            if get(be, 'fresh', c, 'rps') is None:
                continue    # not in this run (a report of an older run)
            L.append('| %s | %s | %s | %s %% | %s / %s | %s | %s | %s | %s | %d |' % (
                names[be], num(get(be, 'fresh', c, 'rps')), num(get(be, 'replay', c, 'rps')),
                num(get(be, 'fresh', c, 'busy_pct')), num(get(be, 'fresh', c, 'p50_ms'), '%.2f'),
                num(get(be, 'fresh', c, 'p99_ms'), '%.2f'),
                num(get(be, 'fresh', c, 'server_cpu_us')),
                num(get(be, 'fresh', c, 'sim_cpu_us')), num(get(be, 'fresh', c, 'redis_cpu_us')),
                num(get(be, 'replay', c, 'server_cpu_us')),
                sum(r['errors'] for r in runs if r['backend'] == be and r['conns'] == c)))
        L.append('')
        t = []

        def target(what, v, limit, ge=True):
            ok = v is not None and (v >= limit if ge else v <= limit)
            t.append('| %s | %s | %s %.2f | %s |' % (
                what, '%.2f' % v if v is not None else '-', '≥' if ge else '≤', limit,
                'met' if ok else '**missed**'))

        def info(what, v):
            t.append('| %s | %s | | for information |' % (
                what, '%.2f' % v if v is not None else '-'))
        target('fresh, charge (HTTP) ÷ nginx + Lua (HTTP)', ratio('charge_http', 'lua', 'fresh', c), 1.0)
        target('fresh, charge (HTTP) ÷ Go (HTTP)', ratio('charge_http', 'go', 'fresh', c), 1.2)
        target('replay, charge (HTTP) ÷ nginx + Lua (HTTP)', ratio('charge_http', 'lua', 'replay', c), 1.0)
        if lua_inproc:
            target('fresh, charge (in-process) ÷ nginx + Lua (in-process)',
                   ratio('charge_inproc', 'lua_inproc', 'fresh', c), 1.05)
            target('replay, charge (in-process) ÷ nginx + Lua (in-process)',
                   ratio('charge_inproc', 'lua_inproc', 'replay', c), 1.05)
        else:
            # a report of an older run: its nginx + Lua peer had only the
            # HTTP provider, so these two set unlike things side by side
            info('fresh, charge (in-process) ÷ nginx + Lua (**HTTP**): unlike provider modes',
                 ratio('charge_inproc', 'lua', 'fresh', c))
            info('replay, charge (in-process) ÷ nginx + Lua (HTTP; a replay calls no provider)',
                 ratio('charge_inproc', 'lua', 'replay', c))
        target('fresh, charge (in-process, lighttpd) ÷ Go (in-process)',
               ratio('charge_lighttpd', 'go_inproc', 'fresh', c), 1.0)
        target('machine busy %, charge (HTTP) fresh', get('charge_http', 'fresh', c, 'busy_pct'), 90)
        target('server CPU per fresh, charge (HTTP) ÷ nginx + Lua (HTTP)',
               ratio('charge_http', 'lua', 'fresh', c, 'server_cpu_us'), 1.0, ge=False)
        if lua_inproc:
            info('server CPU per fresh, charge (in-process) ÷ nginx + Lua (in-process)',
                 ratio('charge_inproc', 'lua_inproc', 'fresh', c, 'server_cpu_us'))
            info('server CPU per replay, charge (in-process) ÷ nginx + Lua (in-process)',
                 ratio('charge_inproc', 'lua_inproc', 'replay', c, 'server_cpu_us'))
        target('simulator CPU per fresh, charge (HTTP) ÷ nginx + Lua (HTTP)',
               ratio('charge_http', 'lua', 'fresh', c, 'sim_cpu_us'), 1.0, ge=False)
        target('simulator CPU per fresh, charge (HTTP) ÷ Go (HTTP)',
               ratio('charge_http', 'go', 'fresh', c, 'sim_cpu_us'), 1.0, ge=False)
        target('server CPU per fresh, charge: HTTP ÷ in-process provider',
               ratio('charge_http', 'charge_inproc', 'fresh', c, 'server_cpu_us'), 1.4, ge=False)
        L += ['| target | measured | limit | |', '|---|---:|---:|---|'] + t + ['']
    one = [r for r in data.get('one_conn', [])]
    if one:
        d = med([a['p50_ms'] - b['p50_ms'] for a, b in zip(
            [r for r in one if r['backend'] == 'charge_http'],
            [r for r in one if r['backend'] == 'charge_inproc'])])
        L += ['## 1 connection', '',
              '| backend | fresh/s | p50 / p99 ms |', '|---|---:|---:|']
        for be in ('charge_http', 'charge_inproc'):
            rs = [r for r in one if r['backend'] == be]
            L.append('| %s | %.0f | %.3f / %.3f |' % (names[be], med([r['rps'] for r in rs]),
                                                     med([r['p50_ms'] for r in rs]),
                                                     med([r['p99_ms'] for r in rs])))
        L += ['', 'The HTTP provider adds %.0f µs to a fresh charge\'s p50 (target ≤ 100 µs: %s).' % (
            d * 1000, 'met' if d * 1000 <= 100 else '**missed**'), '']
    rss = data.get('rss_kb')
    if rss:
        L += ['Responder RSS at the end (%d requests through each): %s.' % (
            data.get('charge_requests', 0),
            ', '.join('%s %.1f MiB' % (names[k], v / 1024) for k, v in rss.items())), '']
    return '\n'.join(L) + '\n'


def main(argv):
    ap = argparse.ArgumentParser(prog='bench/run --peers')
    ap.add_argument('--peers', action='store_true')
    ap.add_argument('--duration', type=float, default=8)
    ap.add_argument('--warmup', type=float, default=2)
    ap.add_argument('--rounds', type=int, default=3)
    ap.add_argument('--connections', default='32')
    ap.add_argument('--one-conn-duration', type=float, default=5)
    ap.add_argument('--threads', type=int, default=0)
    ap.add_argument('--lua-workers', type=int, default=os.cpu_count() or 1,
                    help="the nginx + Lua peer's worker processes (default: one per core)")
    ap.add_argument('--out')
    ap.add_argument('--wait-quiet', type=float, default=0,
                    help='wait up to S seconds for other processes to use < 10 %% of the machine')
    ap.add_argument('--smoke', action='store_true')
    ap.add_argument('--charge')
    ap.add_argument('--sim')
    args = ap.parse_args(argv)
    if args.smoke:
        args.duration, args.warmup, args.rounds, args.one_conn_duration = 1, 0, 1, 1
    args.conns = [int(x) for x in args.connections.split()]
    args.procs = 1
    args.port = 0       # lighttpd's (bench.py's start_lighttpd): a free one
    date = time.strftime('%Y-%m-%d')
    out_dir = args.out or (tempfile.mkdtemp(prefix='charge-peers-report-')
                           if args.smoke else os.path.join(BENCH, 'results'))
    os.makedirs(out_dir, exist_ok=True)
    run = tempfile.mkdtemp(prefix='charge-peers-')
    peers = None
    signal.signal(signal.SIGTERM, lambda s, f: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        bins = B.build(args, True, True)
        bins['go'] = build_go()
        busy = (B.wait_quiet(args.wait_quiet) if args.wait_quiet > 0
                else B.machine_other_pct(1.0))
        load0 = os.getloadavg()[0]
        log('machine busy before the runs: %.0f %% (load average %.2f)' % (busy, load0))
        peers = Peers(args, bins, run)
        peers.start()
        data = {'date': date, 'busy_before_pct': busy, 'machine': B.machine_info(),
                'config': {'duration_s': args.duration, 'warmup_s': args.warmup,
                           'rounds': args.rounds, 'connections': args.conns,
                           'threads': args.threads, 'sim': peers.bench.sim['argv'],
                           'lua_workers': args.lua_workers,
                           'lighttpd': {k: peers.lighttpd_deployment[k] for k in (
                               'procs', 'threads', 'procs_from', 'threads_from')}},
                'runs': [], 'one_conn': []}
        for c in args.conns:
            if args.warmup > 0:
                for be in ALL_BACKENDS:
                    peers.wrk(be, 'fresh', c, args.warmup)
            for rnd in range(1, args.rounds + 1):
                for scen in ('fresh', 'replay'):
                    for be in scenario_backends(scen):
                        data['runs'].append(peers.measure(be, scen, c, args.duration, rnd))
        for rnd in range(1, args.rounds + 1):
            for be in ('charge_http', 'charge_inproc'):
                data['one_conn'].append(peers.measure(be, 'fresh', 1, args.one_conn_duration, rnd))
        data['charge_requests'] = min(
            sum(r['requests'] for r in data['runs'] + data['one_conn'] if r['backend'] == k)
            for k in ('charge_http', 'charge_inproc'))
        data['rss_kb'] = {k: B.proc_rss_kb(p) for k, p in peers.charge_pids.items()}
        data['loadavg'] = {'before': load0}
        errors = sum(r['errors'] for r in data['runs'] + data['one_conn'])
        stem = date + '-peers'
        with open(os.path.join(out_dir, stem + '.json'), 'w') as f:
            json.dump(data, f, indent=1)
        with open(os.path.join(out_dir, stem + '.md'), 'w') as f:
            f.write(report(data))
        log('report: ' + os.path.join(out_dir, stem + '.md'))
        if errors:
            # a run with errors measured something else (e.g. a full simulator)
            print('not ok 1 - bench/run --peers: %d errors (the report says which runs)' % errors)
            return 1
        print('ok 1 - bench/run --peers completed (0 errors)')
        return 0
    except (B.BenchError, subprocess.CalledProcessError, OSError) as e:
        print('not ok 1 - bench/run --peers: %s' % e)
        return 1
    except KeyboardInterrupt:
        print('not ok 1 - bench/run --peers: interrupted')
        return 1
    finally:
        if peers is not None:
            for p in peers.nginx.values():
                peers.bench.procs.stop(p, signal.SIGQUIT)
            peers.bench.close()
        shutil.rmtree(run, ignore_errors=True)


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
