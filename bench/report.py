#!/usr/bin/env python3
"""report.py - turn a bench/run result (<date>.json) into <date>.md and
<date>.svg (gnuplot) next to it.

    python3 bench/report.py bench/results/2026-11-22.json [--notes FILE]

--notes FILE inserts FILE (markdown) as the "Analysis" section; without it
an existing <date>.notes.md next to the JSON is used. Python stdlib only.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys

ORDER = ['fresh', 'replay', 'baseline', 'floor1', 'floor2']
LABEL = {'fresh': 'fresh', 'replay': 'replay', 'baseline': 'baseline',
         'floor1': 'floor(1)', 'floor2': 'floor(2)'}
TARGET_RATIO = 0.90
TARGET_RSS_KB = 8 * 1024
TARGET_RSS_REQUESTS = 100000
TARGET_RSS_GROWTH_KB = 64           # "no growth": allocator noise only
TARGET_RECORD_BYTES = 1024
TARGET_P99_FACTOR = 2.0
TARGET_P99_CONNS = 32


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def spread(xs, fmt):
    xs = [x for x in xs if x is not None]
    if not xs:
        return 'n/a'
    if len(xs) == 1:
        return fmt(xs[0])
    return '%s [%s–%s]' % (fmt(statistics.median(xs)), fmt(min(xs)), fmt(max(xs)))


def f_rps(x):
    return '{:,.0f}'.format(x).replace(',', ' ')


def f_ratio(x):
    return '%.2f' % x


def f_ms(x):
    return '%.2f' % (x / 1000.0)


def f_us(x):
    return 'n/a' if x is None else '%.1f' % x


def f_int(x):
    return '{:,.0f}'.format(x).replace(',', ' ')


class Data:
    def __init__(self, res):
        self.res = res
        self.conns = res['config']['connections']
        self.scen = [s for s in ORDER if s in res['config']['scenarios']]
        self.by = {}
        for r in res['runs']:
            self.by.setdefault((r['scenario'], r['conns']), []).append(r)
        for v in self.by.values():
            v.sort(key=lambda r: r['round'])

    def runs(self, s, c):
        return self.by.get((s, c), [])

    def vals(self, s, c, f):
        return [f(r) for r in self.runs(s, c)]

    def ratios(self, a, b, c, f=lambda r: r['rps']):
        """Per-round ratios of neighbouring runs a/b."""
        rb = {r['round']: r for r in self.runs(b, c)}
        out = []
        for r in self.runs(a, c):
            o = rb.get(r['round'])
            if o is not None and f(o):
                out.append(f(r) / f(o))
        return out

    def cpu_total(self, s, c):
        def tot(r):
            u = r['cpu_us_per_req']
            return (u['responder'] or 0) + (u['redis'] or 0) + (u['lighttpd'] or 0)
        return med(self.vals(s, c, tot))


def table(head, rows, left=1):
    """Markdown table; the first `left` columns are left-aligned."""
    out = ['| ' + ' | '.join(head) + ' |',
           '|' + '|'.join('---' if i < left else '---:' for i in range(len(head))) + '|']
    out += ['| ' + ' | '.join(str(x) for x in row) + ' |' for row in rows]
    return '\n'.join(out)


def cpu_why(d, a, b, c):
    """One sentence comparing CPU per request of scenario a against b."""
    def parts(s):
        u = [r['cpu_us_per_req'] for r in d.runs(s, c)]
        return (med([x['responder'] for x in u]), med([x['redis'] for x in u]),
                med([x['lighttpd'] for x in u]))
    pa, pb = parts(a), parts(b)
    if None in pa or None in pb:
        return ''
    ta, tb = sum(pa), sum(pb)
    procs = min(d.res['config']['procs'], c)     # requests in flight at most
    wa = procs * 1e6 / med(d.vals(a, c, lambda r: r['rps']))
    wb = procs * 1e6 / med(d.vals(b, c, lambda r: r['rps']))
    ea, eb = script_usec(d, a, c), script_usec(d, b, c)
    return ('Wall time per request in a responder process (%d / req/s): '
            '%.0f µs against %.0f µs (%+.0f µs). CPU per request: %s %.1f µs '
            '(responder %.1f, Redis %.1f, lighttpd %.1f) against %.1f µs for %s '
            '(%.1f, %.1f, %.1f): %+.1f µs on the responder, %+.1f µs in Redis%s.' % (
                procs, wa, wb, wa - wb, LABEL[a], ta, pa[0], pa[1], pa[2], tb,
                LABEL[b], pb[0], pb[1], pb[2], pa[0] - pb[0], pa[1] - pb[1],
                '' if ea is None or eb is None else
                ' (script execution %.1f against %.1f µs)' % (ea, eb)))


def script_usec(d, s, c):
    xs = [r.get('cmd_usec', {}).get('evalsha', 0) / r['wrk']['requests']
          for r in d.runs(s, c) if r['wrk']['requests'] and 'cmd_usec' in r]
    return med(xs) if xs else None


def cmd_totals(d, s):
    n = evalsha = ledger = 0
    deltas = {}
    exact = True
    for c in d.conns:
        for r in d.runs(s, c):
            n += r['wrk']['requests']
            ledger += r['ledger_delta']
            for k, v in r['cmd_deltas'].items():
                deltas[k] = deltas.get(k, 0) + v
            e = r['cmd_deltas'].get('evalsha', 0)
            k = 2 if s in ('fresh', 'floor2') else 1
            if s == 'fresh':
                exact &= e == 2 * r['ledger_delta'] and \
                    0 <= r['ledger_delta'] - r['wrk']['requests'] <= c
            elif s == 'replay':
                exact &= r['ledger_delta'] == 0 and \
                    0 <= e - r['wrk']['requests'] <= c
            elif s.startswith('floor'):
                exact &= 0 <= e - k * r['wrk']['requests'] <= k * c
    evalsha = deltas.get('evalsha', 0)
    return n, evalsha, ledger, deltas, exact


def targets(d, lines):
    res = d.res
    rows = []
    why = []

    def ratio_target(a, b, label):
        if a not in d.scen or b not in d.scen:
            rows.append((label, 'n/a (scenario not run)', '—'))
            return
        parts, ok = [], True
        for c in d.conns:
            r = med(d.ratios(a, b, c))
            if r is None:
                continue
            good = r >= TARGET_RATIO
            ok &= good
            parts.append('c=%d: %.2f%s' % (c, r, '' if good else ' (short by %.0f %%)'
                                          % (100 * (TARGET_RATIO - r) / TARGET_RATIO)))
            if not good:
                why.append('- %s at c=%d: %.2f × %s, %.0f %% below the %.2f target. %s' % (
                    LABEL[a], c, r, LABEL[b], 100 * (TARGET_RATIO - r) / TARGET_RATIO,
                    TARGET_RATIO, cpu_why(d, a, b, c)))
        rows.append((label, '; '.join(parts), 'met' if ok else '**missed**'))

    ratio_target('fresh', 'floor2', 'fresh ≥ 0.90 × floor(2) (req/s, median of per-round ratios)')
    ratio_target('replay', 'floor1', 'replay ≥ 0.90 × floor(1)')

    for s, k in (('fresh', 2), ('replay', 1)):
        if s not in d.scen:
            continue
        n, evalsha, ledger, deltas, exact = cmd_totals(d, s)
        ev = deltas.get('eval', 0)
        sl = sum(v for kk, v in deltas.items() if kk.startswith('script'))
        per = evalsha / ledger if s == 'fresh' and ledger else evalsha / n if n else 0
        ok = exact and ev == 0 and sl == 0
        what = ('%d evalsha for %d provider calls = %.3f per fresh charge' % (
            evalsha, ledger, per) if s == 'fresh' else
            '%d evalsha for %d requests = %.4f per replay, %d provider calls' % (
                evalsha, n, per, ledger))
        rows.append(('exactly %d EVALSHA per %s, 0 EVAL / SCRIPT LOAD' % (k, s),
                     '%s; EVAL %d, SCRIPT %d%s' % (what, ev, sl,
                                                     '' if exact else ' (not exact per run)'),
                     'met' if ok else '**missed**'))
        if not ok:
            why.append('- %s: commands per run deviate: %s' % (s, deltas))

    rss = res.get('rss') or []
    if rss:
        base = next((x for x in rss if x['when'] == 'after warm-up'), rss[0])
        last = rss[-1]
        maxkb = max(last['rss_kb']) if last['rss_kb'] else 0
        growth = max(b - a for a, b in zip(base['rss_kb'], last['rss_kb'])) \
            if base['rss_kb'] and len(base['rss_kb']) == len(last['rss_kb']) else 0
        enough = last['charge_requests'] >= TARGET_RSS_REQUESTS
        ok = maxkb < TARGET_RSS_KB and growth <= TARGET_RSS_GROWTH_KB
        rows.append(('responder RSS < 8 MiB per process after 100 000 requests, '
                     'no growth after warm-up',
                     'max %.2f MiB after %s requests (%s); growth since %s: %+d KiB' % (
                         maxkb / 1024, f_int(last['charge_requests']),
                         'enough' if enough else 'fewer than 100 000: not conclusive',
                         base['when'], growth),
                     ('met' if ok else '**missed**') if enough else
                     ('not reached' if ok else '**missed**')))
        if not ok:
            why.append('- RSS: %.2f MiB per process, growth %+d KiB (limit %d KiB).' % (
                maxkb / 1024, growth, TARGET_RSS_GROWTH_KB))

    mem = (res.get('memory') or {}).get('inline')
    if mem and mem.get('bytes_per_record') is not None:
        b = mem['bytes_per_record']
        ok = b < TARGET_RECORD_BYTES
        rows.append(('Redis memory per completed inline record < 1 KiB',
                     '%.0f B (used_memory delta over %s records)' % (b, f_int(mem['records'])),
                     'met' if ok else '**missed** by %.0f B' % (b - TARGET_RECORD_BYTES)))
        if not ok:
            why.append('- Redis memory: %.0f B per record, fields %s; the response body '
                       'alone is %d B.' % (b, mem['fields'], mem['response_bytes']))

    c = TARGET_P99_CONNS
    if 'fresh' in d.scen and 'floor2' in d.scen and d.runs('fresh', c):
        r = med(d.ratios('fresh', 'floor2', c, f=lambda x: x['wrk']['p99_us']))
        pf = med(d.vals('fresh', c, lambda x: x['wrk']['p99_us']))
        pl = med(d.vals('floor2', c, lambda x: x['wrk']['p99_us']))
        ok = r <= TARGET_P99_FACTOR
        rows.append(('p99 fresh ≤ 2 × p99 floor(2) at 32 connections',
                     '%.2f ms vs %.2f ms: %.2f ×' % (pf / 1e3, pl / 1e3, r),
                     'met' if ok else '**missed** by %.0f %%' % (
                         100 * (r - TARGET_P99_FACTOR) / TARGET_P99_FACTOR)))
        if not ok:
            why.append('- p99 at c=32: fresh %.2f ms is %.2f × floor(2) %.2f ms.' % (
                pf / 1e3, r, pl / 1e3))
    else:
        rows.append(('p99 fresh ≤ 2 × p99 floor(2) at 32 connections',
                     'n/a (32 connections not measured)', '—'))

    lines.append('## Targets\n')
    lines.append(table(['target', 'measured', 'verdict'], rows, left=3))
    if why:
        lines.append('\nWhere a target is missed:\n')
        lines += why
    lines.append('')


def plot(d, out_svg):
    gp = shutil.which('gnuplot')
    if gp is None:
        return False
    base = os.path.splitext(out_svg)[0]
    dat = base + '.plot.dat'
    with open(dat, 'w') as f:
        for s in d.scen:
            f.write('# %s\n' % s)
            for c in d.conns:
                xs = d.vals(s, c, lambda r: r['rps'])
                if xs:
                    f.write('%d %.1f %.1f %.1f\n' % (c, med(xs), min(xs), max(xs)))
            f.write('\n\n')
    colors = {'fresh': '#d62728', 'replay': '#1f77b4', 'baseline': '#2ca02c',
              'floor1': '#9467bd', 'floor2': '#ff7f0e'}
    plots = []
    for i, s in enumerate(d.scen):
        plots.append('"%s" index %d using 1:2:3:4 with yerrorlines lw 2 pt 7 '
                     'lc rgb "%s" title "%s"' % (dat, i, colors[s], LABEL[s]))
    script = '\n'.join([
        'set terminal svg size 820,520 dynamic font "sans,12" background "white"',
        'set output "%s"' % out_svg,
        'set title "requests/s against connections (median, min–max of %d rounds, '
        '%g s each)"' % (d.res['config']['rounds'], d.res['config']['duration_s']),
        'set xlabel "wrk connections"',
        'set ylabel "requests/s"',
        'set logscale x 2',
        'set xtics (%s)' % ', '.join('"%d" %d' % (c, c) for c in d.conns),
        'set xrange [%g:%g]' % (min(d.conns) / 1.5, max(d.conns) * 1.5),
        'set yrange [0:*]',
        'set grid',
        'set key outside right top',
        'plot ' + ', \\\n  '.join(plots),
        ''])
    r = subprocess.run([gp], input=script, text=True, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=60)
    os.unlink(dat)
    if r.returncode != 0:
        sys.stderr.write(r.stdout)
        return False
    return True


def write_report(json_path, out_dir=None, notes=None):
    with open(json_path) as f:
        res = json.load(f)
    d = Data(res)
    out_dir = out_dir or os.path.dirname(os.path.abspath(json_path))
    stem = os.path.join(out_dir, res['date'])
    cfg, m = res['config'], res['machine']
    L = []
    L.append('# Benchmark of `/charge` — %s%s\n' % (res['date'], ' (smoke run)' if res['smoke'] else ''))
    L.append('Produced by `bench/run` (%s rounds × %g s per run, connections %s, '
             'took %s s). Raw data: [`%s.json`](%s.json).\n' % (
                 cfg['rounds'], cfg['duration_s'], ' '.join(map(str, d.conns)),
                 res.get('elapsed_s', '?'), res['date'], res['date']))
    L.append('## Set-up\n')
    L += ['- Machine: %s, %d cores, Linux %s; commit %s.' % (
              m['cpu'], m['cores'], m['kernel'], m['commit']),
          '- %s; %s; %s; %s.' % (m['lighttpd'], m['redis'].split(' sha=')[0],
                                  m['wrk'].split(' Copyright')[0], m['gcc']),
          '- One lighttpd on 127.0.0.1 (single worker, no access log) serves every '
          'scenario through mod_fastcgi `bin-path` with **max-procs = %d for each '
          'responder**; the responder runs with threads = 1, provider_latency_ms = 0, '
          'metrics_file = none, log_level = warn, built with meson --buildtype=release; '
          'baseline and floor with gcc -O3.' % cfg['procs'],
          '- Redis: private, started from the project\'s `conf/redis.conf` with '
          'overrides: unix socket in the run directory, no persistence '
          '(`save ""`, `appendonly no`), `maxmemory-policy noeviction`.',
          '- wrk: `-t min(%d, c) -c c -d %gs`, script `bench/charge.lua`; every '
          'scenario sends the same request: `POST`, `Authorization: Bearer sk_test_demo`, '
          '`Content-Type: application/json`, an `Idempotency-Key`, body `%s`.' % (
              cfg['wrk_threads'], cfg['duration_s'], cfg['charge_body']),
          '- Runs are interleaved (%s) for %d rounds at each connection count, after '
          '%g s of unrecorded warm-up per scenario; ratios are computed per round '
          'between neighbouring runs and then summarised as median [min–max].' % (
              ' → '.join(LABEL[s] for s in d.scen), cfg['rounds'], cfg['warmup_s']),
          '']
    L.append('Scenarios:\n')
    L += ['- **fresh**: `POST /charge` with a new Idempotency-Key on every request '
          '(claim + provider + record).',
          '- **replay**: `POST /charge` with one key, primed once before the runs.',
          '- **baseline**: `bench/baseline.c`, a minimal libfcgi responder that reads '
          'the body and answers 201 with a charge-sized JSON (241 B) and the same '
          'headers: the transport\'s ceiling.',
          '- **floor(1)**, **floor(2)**: `bench/floor.c`, the baseline plus one or two '
          'blocking hiredis `EVALSHA` round trips of `%s` on a new key '
          '`bench:floor:<pid>:<n>` per request (ARGV = `r1`/`r2`, TTL 86 400 000 ms), '
          'loaded once with SCRIPT LOAD: the cheapest any Redis-backed design can be.'
          % cfg['floor_script'], '']

    others = [(r.get('machine') or {}).get('other_pct') for r in res['runs']]
    others = [x for x in others if x is not None]
    if others and statistics.median(others) > 10:
        L.append('> **Noisy machine:** other processes used %.0f %% of all cores '
                 'during the median run (max %.0f %%; %.0f %% just before the runs). '
                 'Throughput and latency are depressed and the spread is wide; CPU time '
                 'per request, command counts, memory and instruction counts are much '
                 'less affected.\n' % (statistics.median(others), max(others),
                                       res.get('busy_before_pct', 0)))
    elif others and max(others) > 25:
        L.append('> Other processes used %.0f %% of all cores during the median run, '
                 'but up to %.0f %% during single runs (column "other processes %%" of '
                 'the CPU table): the max of a spread may come from those.\n' % (
                     statistics.median(others), max(others)))

    targets(d, L)

    notes_path = notes or stem + '.notes.md'
    if os.path.exists(notes_path):
        with open(notes_path) as f:
            L.append('## Analysis\n')
            L.append(f.read().strip() + '\n')

    svg = stem + '.svg'
    if plot(d, svg):
        L.append('## Requests/s against connections\n')
        L.append('![requests/s against connections](%s.svg)\n' % res['date'])

    L.append('## Requests/s (median [min–max] over rounds)\n')
    L.append(table(['connections'] + [LABEL[s] for s in d.scen],
                   [[c] + [spread(d.vals(s, c, lambda r: r['rps']), f_rps) for s in d.scen]
                    for c in d.conns]))
    L.append('')

    pairs = [(a, b) for a, b in (('fresh', 'baseline'), ('fresh', 'floor2'),
                                 ('replay', 'baseline'), ('replay', 'floor1'),
                                 ('floor1', 'baseline'), ('floor2', 'baseline'))
             if a in d.scen and b in d.scen]
    if pairs:
        L.append('## Throughput ratios (per-round ratio of neighbouring runs, median [min–max])\n')
        L.append(table(['connections'] + ['%s / %s' % (LABEL[a], LABEL[b]) for a, b in pairs],
                       [[c] + [spread(d.ratios(a, b, c), f_ratio) for a, b in pairs]
                        for c in d.conns]))
        L.append('')

    for name, key in (('p50', 'p50_us'), ('p99', 'p99_us')):
        L.append('## Latency %s in ms (wrk; median [min–max] over rounds)\n' % name)
        L.append(table(['connections'] + [LABEL[s] for s in d.scen],
                       [[c] + [spread(d.vals(s, c, lambda r, k=key: r['wrk'][k]), f_ms)
                               for s in d.scen] for c in d.conns]))
        L.append('')

    L.append('## CPU time per request in µs (utime + stime from /proc/<pid>/stat, '
             'median over rounds)\n')
    L.append('"responder" is the sum over the %d processes of the scenario\'s backend. '
             'On 2 cores, 2 000 000 / (sum) bounds the requests/s that the server side '
             'alone allows (wrk runs on the same cores).\n' % cfg['procs'])
    rows = []
    for c in d.conns:
        for s in d.scen:
            if not d.runs(s, c):
                continue
            u = [r['cpu_us_per_req'] for r in d.runs(s, c)]
            rp, rd, lt = (med([x['responder'] for x in u]), med([x['redis'] for x in u]),
                          med([x['lighttpd'] for x in u]))
            wk = med([x.get('wrk') for x in u])
            mach = [r.get('machine') or {} for r in d.runs(s, c)]
            busy = med([x.get('busy_pct') for x in mach])
            other = med([x.get('other_pct') for x in mach])
            rows.append([c, LABEL[s], f_us(rp), f_us(rd), f_us(lt),
                         f_us((rp or 0) + (rd or 0) + (lt or 0)), f_us(wk),
                         'n/a' if busy is None else '%.0f' % busy,
                         'n/a' if other is None else '%.1f' % other])
    L.append(table(['connections', 'scenario', 'responder', 'Redis', 'lighttpd', 'sum',
                    'wrk', 'machine busy %', 'other processes %'], rows))
    L.append('\n"machine busy %" is the share of all cores busy during the run (/proc/stat); '
             '"other processes %" is the part of it not used by the processes above '
             '(the noise of a shared machine; kernel work on their behalf outside their '
             'own accounting lands here too).')
    L.append('')

    L.append('## Redis commands per request (INFO commandstats deltas, all runs)\n')
    L.append('Commands run inside the Lua scripts are counted too. "Provider calls" are '
             'ledger lines written during the runs. "Redis command µs" is the time Redis '
             'spent executing the EVALSHA calls (commandstats `usec`, scripts included, '
             'network I/O excluded), median over runs.\n')
    rows = []
    for s in d.scen:
        n, evalsha, ledger, deltas, exact = cmd_totals(d, s)
        if not n:
            continue
        other = ', '.join('%s %.2f' % (k, v / n) for k, v in sorted(deltas.items())
                          if k not in ('evalsha', 'eval') and not k.startswith('script'))
        rows.append([LABEL[s], f_int(n), '%.4f' % (evalsha / n),
                     deltas.get('eval', 0),
                     sum(v for k, v in deltas.items() if k.startswith('script')),
                     '%.4f' % (ledger / n) if is_charge(s) else '—',
                     other or '—', redis_usec(d, s)])
    L.append(table(['scenario', 'requests', 'EVALSHA / req', 'EVAL (total)',
                    'SCRIPT * (total)', 'provider calls / req', 'other commands / req',
                    'Redis command µs / req'], rows))
    L.append('\nRequests still in flight when wrk stops are served but not counted by wrk, '
             'so per-request ratios can exceed the exact value by at most '
             'connections / requests; the per-run check "evalsha = 2 × provider calls" '
             '(fresh) and "evalsha − requests ≤ connections" (replay) is exact.\n')

    rss = res.get('rss') or []
    if rss:
        L.append('## Responder RSS (VmRSS from /proc/<pid>/status)\n')
        L.append(table(['when', 'requests served by the responder', 'RSS per process (KiB)'],
                       [[x['when'], f_int(x['charge_requests']),
                         ' · '.join(str(k) for k in x['rss_kb'])] for x in rss]))
        L.append('')

    mem = res.get('memory') or {}
    if mem:
        L.append('## Redis memory per completed record\n')
        L.append('`used_memory` from INFO memory before and after writing N records '
                 'sequentially (after FLUSHALL), divided by the DBSIZE delta; '
                 '`MEMORY USAGE` of sample records for comparison. Spilled records use a '
                 'body with %d line items, whose charge object exceeds spill_threshold_bytes.\n'
                 % cfg.get('spill_items', 0))
        rows = []
        for kind in ('inline', 'spilled'):
            x = mem.get(kind)
            if not x:
                continue
            rows.append([kind, f_int(x['records']), f_int(x['request_bytes']),
                         f_int(x['response_bytes']),
                         '%.0f' % x['bytes_per_record'] if x['bytes_per_record'] is not None else 'n/a',
                         ' · '.join(str(u) for u in x['memory_usage_samples']),
                         '%.0f' % x['spill_bytes_per_record'], ', '.join(x['fields'])])
        L.append(table(['record', 'N', 'request B', 'response B', 'Redis B / record',
                        'MEMORY USAGE samples', 'spill file B / record', 'hash fields'], rows))
        L.append('')

    if res.get('callgrind_error'):
        L.append('## Instructions per request (valgrind --tool=callgrind)\n')
        L.append('Failed to run: %s\n' % res['callgrind_error'])
    cg = res.get('callgrind')
    if cg:
        L.append('## Instructions per request (valgrind --tool=callgrind)\n')
        L.append('Each binary runs standalone (`--listen 127.0.0.1:PORT`, one thread) under '
                 'callgrind and serves N requests over FastCGI from a Python client, one '
                 'connection per request; instructions per request = (total(N2) − total(N1)) '
                 '/ (N2 − N1), which removes start-up and shutdown. Redis is not included.\n')
        rows = []
        for case in ('fresh', 'replay', 'baseline', 'floor1', 'floor2'):
            x = cg.get(case)
            if x:
                rows.append([LABEL[case], x['n1'], x['n2'], f_int(x['ir_n1']),
                             f_int(x['ir_n2']), f_int(x['ir_per_request'])])
        L.append(table(['binary / scenario', 'N1', 'N2', 'Ir total N1', 'Ir total N2',
                        'Ir / request'], rows))
        L.append('')
        for case in ('fresh', 'replay'):
            x = cg.get(case)
            if not x or not x.get('profile'):
                continue
            per = x['ir_per_request']
            for kind in ('exclusive', 'inclusive'):
                rows = [r for r in x['profile'][kind] if r['ir'] >= 0.005 * per][:25]
                L.append('<details><summary>%s: instructions per request by function, '
                         '%s (differential: N2 run − N1 run)</summary>\n' % (case, kind))
                L.append(table(['Ir / request', '% of request', 'function'],
                               [[f_int(r['ir']), '%.1f' % (100.0 * r['ir'] / per),
                                 '`%s`' % r['fn'].replace('|', '\\|')] for r in rows]))
                L.append('\n</details>\n')

    md = stem + '.md'
    with open(md, 'w') as f:
        f.write('\n'.join(L).rstrip() + '\n')
    return md


def redis_usec(d, s):
    """Median over runs of the µs Redis spent executing EVALSHA per request."""
    xs = []
    for c in d.conns:
        for r in d.runs(s, c):
            u = r.get('cmd_usec', {}).get('evalsha')
            if u is not None and r['wrk']['requests']:
                xs.append(u / r['wrk']['requests'])
    return '%.1f' % med(xs) if xs else '—'


def is_charge(s):
    return s in ('fresh', 'replay')


def main(argv):
    ap = argparse.ArgumentParser(description='bench/run report generator')
    ap.add_argument('json')
    ap.add_argument('--notes', help='markdown file for the Analysis section')
    a = ap.parse_args(argv)
    print(write_report(a.json, notes=a.notes))
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
