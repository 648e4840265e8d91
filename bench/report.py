#!/usr/bin/env python3
"""report.py - turn a bench/run result (<stem>.json) into <stem>.md and
<stem>.svg (gnuplot) next to it.

    python3 bench/report.py bench/results/2026-11-22.json [--notes FILE]
                            [--compare OLD.json]

--notes FILE inserts FILE (markdown) as the "Analysis" section; without it
an existing <stem>.notes.md next to the JSON is used. --compare OLD.json
shows instruction counts per function against that earlier result (the
JSON's own "compare" part, written by bench/run --compare, otherwise).
Python stdlib only.
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys

sys.dont_write_bytecode = True     # no __pycache__ in the tree

ORDER = ['fresh', 'fresh_http', 'replay', 'fresh_kept', 'replay_kept', 'baseline', 'floor1',
         'floor2']
LABEL = {'fresh': 'fresh', 'fresh_http': 'fresh (HTTP)', 'replay': 'replay',
         'fresh_kept': 'fresh (kept connection)', 'replay_kept': 'replay (kept connection)',
         'baseline': 'baseline', 'floor1': 'floor(1)', 'floor2': 'floor(2)'}
# The floor each scenario of the responder is held against.
FLOOR_OF = {'fresh': 'floor2', 'replay': 'floor1'}

# Targets (issue 8). Ratios are medians of per-round ratios of neighbouring
# runs in the same bench/run, the floors at the same processes x threads and
# connections.
TARGET_BUSY_PCT = 90.0              # machine busy at TARGET_BUSY_CONNS ...
TARGET_BUSY_CONNS = 32              # ... in the default deployment
TARGET_CPU_RATIO = 0.90             # CPU/request <= 0.90 x the floor's
TARGET_RPS_RATIO = 1.0              # req/s >= 1.0 x the floor's ...
TARGET_RPS_CONNS = (8, 32, 64)      # ... at these connection counts
TARGET_REDIS_RATIO = 1.10           # Redis CPU/request <= 1.10 x the floor's
TARGET_P99_FACTOR = 1.5             # p99 fresh <= 1.5 x p99 floor(2) ...
TARGET_P99_CONNS = 32               # ... at 32 connections
TARGET_RSS_KB = 8 * 1024
TARGET_RSS_REQUESTS = 100000
TARGET_RSS_GROWTH_KB = 64           # "no growth": allocator noise only
TARGET_RECORD_BYTES = 1024
TARGET_IR = {'fresh': 65000, 'replay': 50000}   # callgrind, per request

# Targets (issue 22): the provider over HTTP (charge-provider-sim).
TARGET_HTTP_CPU_RATIO = 1.4         # CPU/fresh charge: HTTP <= 1.4 x in-process
TARGET_SIM_HEADROOM = 3.0           # one core of the simulator serves >= 3 x
                                    # the rate the responder sends it
TARGET_HTTP_CL_RATIO = 0.9          # --concurrency: req/s >= 0.9 x C/L ...
TARGET_HTTP_P99_MS = 300.0          # ... p99 <= 300 ms, 0 errors ...
TARGET_HTTP_CONNS = 1024            # ... at 1 024 connections (TCP)


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


def f_pct(x):
    return 'n/a' if x is None else '%.0f' % x


def f_int(x):
    return '{:,.0f}'.format(x).replace(',', ' ')


def f_signed(x):
    x = round(x)
    return ('+' if x > 0 else '−' if x < 0 else '±') + f_int(abs(x))


def f_signed_pct(x):
    return ('%+.1f %%' % x).replace('-', '−')


def cpu_sum(r):
    """responder + lighttpd + Redis CPU µs per request of one run."""
    u = r['cpu_us_per_req']
    if u.get('responder') is None:
        return None
    return (u['responder'] or 0) + (u['redis'] or 0) + (u['lighttpd'] or 0)


def redis_cpu(r):
    return r['cpu_us_per_req'].get('redis')


class Data:
    """The runs of one sequence (the main runs, or one sweep point)."""

    def __init__(self, runs, conns, scenarios, cfg):
        self.conns = conns
        self.scen = [s for s in ORDER if s in scenarios]
        self.by = {}
        for r in runs:
            self.by.setdefault((r['scenario'], r['conns']), []).append(r)
        for v in self.by.values():
            v.sort(key=lambda r: r['round'])
        self.procs = cfg.get('procs', 2)
        self.threads = cfg.get('threads', 1)

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
            if o is not None and f(o) and f(r) is not None:
                out.append(f(r) / f(o))
        return out


def table(head, rows, left=1):
    """Markdown table; the first `left` columns are left-aligned."""
    out = ['| ' + ' | '.join(head) + ' |',
           '|' + '|'.join('---' if i < left else '---:' for i in range(len(head))) + '|']
    out += ['| ' + ' | '.join(str(x) for x in row) + ' |' for row in rows]
    return '\n'.join(out)


def script_usec(d, s, c):
    return med(d.vals(s, c, lambda r: r['cpu_us_per_req'].get('redis_cmdstat')
                      if 'redis_cmdstat' in r['cpu_us_per_req'] else
                      r.get('cmd_usec', {}).get('evalsha', 0) / r['wrk']['requests']
                      if r['wrk']['requests'] else None))


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
    workers = min(d.procs * d.threads, c)    # requests in flight at most
    wa = workers * 1e6 / med(d.vals(a, c, lambda r: r['rps']))
    wb = workers * 1e6 / med(d.vals(b, c, lambda r: r['rps']))
    ea, eb = script_usec(d, a, c), script_usec(d, b, c)
    return ('Wall time per request in a worker (%d / req/s): '
            '%.0f µs against %.0f µs (%+.0f µs). CPU per request: %s %.1f µs '
            '(responder %.1f, Redis %.1f, lighttpd %.1f) against %.1f µs for %s '
            '(%.1f, %.1f, %.1f): %+.1f µs on the responder, %+.1f µs in Redis%s.' % (
                workers, wa, wb, wa - wb, LABEL[a], ta, pa[0], pa[1], pa[2], tb,
                LABEL[b], pb[0], pb[1], pb[2], pa[0] - pb[0], pa[1] - pb[1],
                '' if ea is None or eb is None else
                ' (script execution %.1f against %.1f µs)' % (ea, eb)))


def provider_calls(r):
    """Provider calls of one run: the simulator's deliveries for the HTTP
    provider (/_sim/stats), the in-process provider's ledger lines else."""
    if r['scenario'] == 'fresh_http':
        return (r.get('sim') or {}).get('deliveries', 0)
    return r['ledger_delta']


def background_evalsha(r):
    """EVALSHA calls of no request in one run: the completer's polls of the
    index of unknown records (every responder process, once a second, one
    pending.lua 'due' each, which runs ZCARD once; no request's script runs
    ZCARD). They land in every run while the responders are up, the floors'
    included."""
    return r['cmd_deltas'].get('zcard', 0)


def cmd_totals(d, s):
    """(requests, EVALSHA of the requests, provider calls, command deltas
    with 'evalsha_background' = the completer's polls, exact per run)."""
    n = ledger = 0
    deltas = {}
    exact = True
    for c in d.conns:
        for r in d.runs(s, c):
            n += r['wrk']['requests']
            calls = provider_calls(r)
            ledger += calls
            for k, v in r['cmd_deltas'].items():
                deltas[k] = deltas.get(k, 0) + v
            bg = background_evalsha(r)
            deltas['evalsha_background'] = deltas.get('evalsha_background', 0) + bg
            e = r['cmd_deltas'].get('evalsha', 0) - bg
            k = 2 if s in ('fresh', 'fresh_http', 'floor2') else 1
            if s in ('fresh', 'fresh_http'):
                # 2 per provider call, one call per fresh charge (those wrk
                # left in flight at its end are served but not counted)
                exact &= e == 2 * calls and 0 <= calls - r['wrk']['requests'] <= c
            if s == 'fresh_http':
                # and at the simulator one charge per delivery: nothing failed
                exact &= (r.get('sim') or {}).get('charges') == calls
            elif s == 'replay':
                exact &= r['ledger_delta'] == 0 and \
                    0 <= e - r['wrk']['requests'] <= c
            elif s.startswith('floor'):
                exact &= 0 <= e - k * r['wrk']['requests'] <= k * c
    evalsha = deltas.get('evalsha', 0) - deltas.get('evalsha_background', 0)
    return n, evalsha, ledger, deltas, exact


def verdict(ok, short=None):
    if ok is None:
        return '—'
    if ok:
        return 'met'
    return '**missed**' + (' by %.0f %%' % short if short is not None else '')


def ratio_rows(d, rows, why, detail, what, f, target, higher, conns_in_target):
    """One row per responder scenario: a per-round ratio against its floor.

    f(run) -> value; ratio = f(scenario) / f(floor); met when ratio >= target
    (higher) or <= target (not higher) at every connection count in
    conns_in_target (None: every measured one). A miss adds a line to why
    and (scenario, floor, connections) to detail."""
    for a, b in FLOOR_OF.items():
        label = '%s: %s %s %.2f × %s' % (what, LABEL[a], '≥' if higher else '≤',
                                         target, LABEL[b])
        if a not in d.scen or b not in d.scen:
            rows.append((label, 'n/a (scenario not run)', '—'))
            continue
        parts, ok, worst = [], True, 0.0
        counted, missed = 0, []
        for c in d.conns:
            xs = d.ratios(a, b, c, f)
            r = med(xs)
            if r is None:
                continue
            inside = conns_in_target is None or c in conns_in_target
            good = r >= target if higher else r <= target
            short = 100 * abs(r - target) / target
            parts.append('c=%d: %s%s' % (c, spread(xs, f_ratio),
                                         '' if inside else ' (not in the target)'))
            if inside:
                counted += 1
                ok &= good
                if not good:
                    worst = max(worst, short)
                    missed.append('%.2f (c=%d)' % (r, c))
                    detail.append((a, b, c))
        if missed:
            why.append('- %s: %s / %s = %s; target %s %.2f.' % (
                what, LABEL[a], LABEL[b], ', '.join(missed),
                '≥' if higher else '≤', target))
        if counted == 0:
            rows.append((label, '; '.join(parts) + ' (connections of the target '
                         'not measured)' if parts else 'n/a', '—'))
        else:
            rows.append((label, '; '.join(parts), verdict(ok, worst if not ok else None)))


def sim_headroom(r):
    """Requests/s one core of the simulator serves at its CPU per request
    in this run, over the requests/s the responder sent it."""
    u = r['cpu_us_per_req'].get('sim')
    return 1e6 / u / r['rps'] if u and r['rps'] else None


def http_targets(d, rows, why, cap):
    """Issue 22 at latency 0: CPU per fresh charge with the HTTP provider
    against the in-process one (responder + lighttpd + Redis, the
    simulator apart), and the simulator's headroom."""
    if 'fresh_http' not in d.scen:
        return
    label = 'CPU per fresh charge (responder + lighttpd + Redis): fresh (HTTP) ≤ %.1f × ' \
        'fresh (in-process)' % TARGET_HTTP_CPU_RATIO
    if 'fresh' not in d.scen:
        rows.append((label, 'n/a (fresh not run)', '—'))
    else:
        parts, ok, worst, missed = [], True, 0.0, []
        for c in d.conns:
            xs = d.ratios('fresh_http', 'fresh', c, cpu_sum)
            r = med(xs)
            if r is None:
                continue
            a = med(d.vals('fresh_http', c, cpu_sum))
            b = med(d.vals('fresh', c, cpu_sum))
            parts.append('c=%d: %s (%.1f against %.1f µs)' % (c, spread(xs, f_ratio), a, b))
            if r > TARGET_HTTP_CPU_RATIO:
                ok = False
                worst = max(worst, 100 * (r - TARGET_HTTP_CPU_RATIO) / TARGET_HTTP_CPU_RATIO)
                missed.append('%.2f (c=%d)' % (r, c))
        rows.append((label, '; '.join(parts) or 'n/a',
                     verdict(ok, worst if not ok else None) if parts else '—'))
        if missed:
            why.append('- CPU per fresh charge, HTTP provider / in-process: %s; target ≤ '
                       '%.1f. The CPU table below splits it by process.' % (
                           ', '.join(missed), TARGET_HTTP_CPU_RATIO))
        parts = []
        for c in d.conns:
            xs = d.ratios('fresh_http', 'fresh', c,
                          lambda r: (cpu_sum(r) or 0) + (r['cpu_us_per_req'].get('sim') or 0)
                          if cpu_sum(r) is not None else None)
            if xs:
                parts.append('c=%d: %s' % (c, spread(xs, f_ratio)))
        if parts:
            rows.append(('(information) the same with the simulator\'s CPU added to fresh '
                         '(HTTP)', '; '.join(parts), '—'))
    label = 'simulator not the bottleneck: one core of it serves ≥ %.0f × the req/s ' \
        'of fresh (HTTP)' % TARGET_SIM_HEADROOM
    parts, ok = [], True
    for c in d.conns:
        xs = d.vals('fresh_http', c, sim_headroom)
        if not [x for x in xs if x is not None]:
            continue
        u = med(d.vals('fresh_http', c, lambda r: r['cpu_us_per_req'].get('sim')))
        core = med(d.vals('fresh_http', c, lambda r: (r.get('sim') or {}).get('core_pct')))
        parts.append('c=%d: %s (%.1f µs per request, %.0f %% of a core)' % (
            c, spread(xs, f_ratio), u, core or 0))
        ok &= med(xs) >= TARGET_SIM_HEADROOM
    rows.append((label, '; '.join(parts) or 'n/a (no simulator CPU measured)',
                 verdict(ok) if parts else '—'))
    if parts and not ok:
        why.append('- the simulator: %s; less than %.0f × means it can slow the '
                   'responder down.' % ('; '.join(parts), TARGET_SIM_HEADROOM))
    if cap:
        best = max([med(d.vals('fresh_http', c, lambda r: r['rps'])) or 0
                    for c in d.conns] or [0])
        x = cap['rps'] / best if best else None
        rows.append(('the simulator alone (wrk straight at it, %d connections) answers '
                     '≥ %.0f × the most req/s of fresh (HTTP)' % (
                         cap['conns'], TARGET_SIM_HEADROOM),
                     '%s req/s at %.0f %% of a core (%.1f µs CPU per request) = %s × %s '
                     'req/s' % (f_rps(cap['rps']), cap.get('core_pct') or 0,
                                cap.get('cpu_us') or 0, 'n/a' if x is None else
                                '%.2f' % x, f_rps(best)),
                     verdict(x is not None and x >= TARGET_SIM_HEADROOM)))
        if x is not None and x < TARGET_SIM_HEADROOM:
            why.append('- the simulator alone answers %.2f × what the responder sent it '
                       '(wrk shares the cores with it: on a 2-core machine this bounds '
                       'it from below).' % x)


def targets(res, d, lines):
    rows = []
    why = []
    detail = []
    cfg = res['config']
    dep = cfg.get('deployment') or {}
    default_dep = (not dep or (dep.get('procs'), dep.get('threads')) ==
                   (cfg.get('procs'), cfg.get('threads', 1)))

    # machine busy at 32 connections (fresh and replay runs)
    c = TARGET_BUSY_CONNS
    busy_label = 'machine busy ≥ %.0f %% at %d connections, default deployment' % (
        TARGET_BUSY_PCT, c)
    if d is None:
        pass        # no throughput runs (a sweep, instruction counts only)
    elif not any(d.runs(s, c) for s in FLOOR_OF):
        rows.append((busy_label, 'n/a (%d connections not measured)' % c, '—'))
    else:
        parts, ok = [], True
        for s in FLOOR_OF:
            xs = d.vals(s, c, lambda r: (r.get('machine') or {}).get('busy_pct'))
            if not xs:
                continue
            m = med(xs)
            ok &= m is not None and m >= TARGET_BUSY_PCT
            parts.append('%s %s %%' % (LABEL[s], spread(xs, f_pct)))
        note = '' if default_dep else (
            ' (run at %d×%d; the default deployment is %d×%d)' % (
                cfg['procs'], cfg.get('threads', 1), dep['procs'], dep['threads']))
        rows.append((busy_label, '; '.join(parts) + note,
                     verdict(ok) if default_dep else
                     ('met' if ok else 'missed') + ', not the default deployment'))
        if not ok:
            why.append('- machine busy at c=%d: %s. Less than %.0f %% busy means '
                       'the responders wait (on Redis, on lighttpd) instead of '
                       'working; more processes or threads fill the cores.' % (
                           c, '; '.join(parts), TARGET_BUSY_PCT))

    if d is not None:
        ratio_rows(d, rows, why, detail,
                   'CPU per request (responder + lighttpd + Redis)',
                   cpu_sum, TARGET_CPU_RATIO, False, None)
        ratio_rows(d, rows, why, detail, 'throughput (req/s)', lambda r: r['rps'],
                   TARGET_RPS_RATIO, True, TARGET_RPS_CONNS)
        ratio_rows(d, rows, why, detail, 'Redis CPU per request', redis_cpu,
                   TARGET_REDIS_RATIO, False, None)

        c = TARGET_P99_CONNS
        label = 'p99 latency: fresh ≤ %.1f × floor(2) at %d connections' % (
            TARGET_P99_FACTOR, c)
        if 'fresh' in d.scen and 'floor2' in d.scen and d.runs('fresh', c):
            xs = d.ratios('fresh', 'floor2', c, f=lambda x: x['wrk']['p99_us'])
            r = med(xs)
            pf = med(d.vals('fresh', c, lambda x: x['wrk']['p99_us']))
            pl = med(d.vals('floor2', c, lambda x: x['wrk']['p99_us']))
            ok = r <= TARGET_P99_FACTOR
            rows.append((label, '%s (%.2f ms against %.2f ms)' % (
                spread(xs, f_ratio), pf / 1e3, pl / 1e3),
                verdict(ok, 100 * (r - TARGET_P99_FACTOR) / TARGET_P99_FACTOR)))
            if not ok:
                why.append('- p99 at c=%d: fresh %.2f ms is %.2f × floor(2) %.2f ms.' % (
                    c, pf / 1e3, r, pl / 1e3))
        else:
            rows.append((label, 'n/a (%d connections not measured)' % c, '—'))

        for s, k in (('fresh', 2), ('fresh_http', 2), ('replay', 1)):
            if s not in d.scen:
                continue
            n, evalsha, ledger, deltas, exact = cmd_totals(d, s)
            ev = deltas.get('eval', 0)
            sl = sum(v for kk, v in deltas.items() if kk.startswith('script'))
            per = evalsha / ledger if s != 'replay' and ledger else evalsha / n if n else 0
            ok = exact and ev == 0 and sl == 0
            if s == 'fresh_http':
                charges = sum((r.get('sim') or {}).get('charges', 0)
                              for c in d.conns for r in d.runs(s, c))
                what = ('%d evalsha for %d deliveries at the simulator = %.3f per fresh '
                        'charge; %d charges, %d requests completed (%.4f deliveries per '
                        'request)' % (evalsha, ledger, per, charges, n,
                                      ledger / n if n else 0))
            elif s == 'fresh':
                what = '%d evalsha for %d provider calls = %.3f per fresh charge' % (
                    evalsha, ledger, per)
            else:
                what = '%d evalsha for %d requests = %.4f per replay, %d provider calls' % (
                    evalsha, n, per, ledger)
            bg = deltas.get('evalsha_background', 0)
            rows.append(('exactly %d EVALSHA per %s, 0 EVAL / SCRIPT LOAD%s' % (
                k, LABEL[s], '; one delivery and one charge at the simulator per fresh '
                'charge' if s == 'fresh_http' else ''),
                         '%s; EVAL %d, SCRIPT %d%s%s' % (
                             what, ev, sl, '' if exact else ' (not exact per run)',
                             '; besides, %d EVALSHA of the completers\' polls (no '
                             'request\'s)' % bg if bg else ''),
                         verdict(ok)))
            if not ok:
                why.append('- %s: commands per run deviate: %s' % (s, deltas))

        http_targets(d, rows, why, res.get('sim_capacity'))

    rss = res.get('rss') or []
    if rss:
        base = next((x for x in rss if x['when'] == 'after warm-up'), rss[0])
        last = rss[-1]
        maxkb = max(max(x['rss_kb']) for x in rss if x['rss_kb']) \
            if any(x['rss_kb'] for x in rss) else 0
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
                     verdict(ok) if enough else
                     ('**missed**' if maxkb >= TARGET_RSS_KB else 'not conclusive')))
        if not ok and (enough or maxkb >= TARGET_RSS_KB):
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

    cg = res.get('callgrind') or {}
    for s, limit in TARGET_IR.items():
        x = cg.get(s)
        if not x:
            continue
        per = x['ir_per_request']
        ok = per <= limit
        rows.append(('responder instructions per %s request ≤ %s (callgrind)' % (
            s, f_int(limit)), '%s (N = %d and %d)' % (f_int(per), x['n1'], x['n2']),
            verdict(ok, 100 * (per - limit) / limit)))
        if not ok:
            why.append('- instructions per %s request: %s, %s above %s.' % (
                s, f_int(per), f_int(per - limit), f_int(limit)))

    if not rows:
        return
    lines.append('## Targets\n')
    if d is not None:
        lines.append('Ratios are per-round ratios of neighbouring runs in this run, '
                     'the floor at the same processes × threads (%d × %d) and '
                     'connections: median [min–max].\n' % (
                         cfg.get('procs', 2), cfg.get('threads', 1)))
    lines.append(table(['target', 'measured', 'verdict'], rows, left=3))
    if why:
        lines.append('\nWhere a target is missed:\n')
        lines += why
    if detail:
        lines.append('\nWhere the time goes, at each connection count where a ratio '
                     'misses (medians over rounds):\n')
        for a, b, c in sorted(set(detail), key=lambda x: (ORDER.index(x[0]), x[2])):
            lines.append('- %s at c=%d: %s' % (LABEL[a], c, cpu_why(d, a, b, c)))
    lines.append('')


def plot(d, res, out_svg):
    gp = shutil.which('gnuplot')
    if gp is None or d is None or not d.conns:
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
    colors = {'fresh': '#d62728', 'fresh_http': '#8c564b', 'replay': '#1f77b4', 'baseline': '#2ca02c',
              'floor1': '#9467bd', 'floor2': '#ff7f0e'}
    plots = []
    for i, s in enumerate(d.scen):
        plots.append('"%s" index %d using 1:2:3:4 with yerrorlines lw 2 pt 7 '
                     'lc rgb "%s" title "%s"' % (dat, i, colors[s], LABEL[s]))
    script = '\n'.join([
        'set terminal svg size 820,520 dynamic font "sans,12" background "white"',
        'set output "%s"' % out_svg,
        'set title "requests/s against connections, %d×%d (median, min–max of %d '
        'rounds, %g s each)"' % (d.procs, d.threads, res['config']['rounds'],
                                 res['config']['duration_s']),
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


def cpu_table(d, with_point=None):
    rows = []
    for c in d.conns:
        for s in d.scen:
            if not d.runs(s, c):
                continue
            u = [r['cpu_us_per_req'] for r in d.runs(s, c)]
            rp, rd, lt = (med([x['responder'] for x in u]), med([x['redis'] for x in u]),
                          med([x['lighttpd'] for x in u]))
            ri = med([x.get('redis_info') for x in u])
            rc = med(d.vals(s, c, lambda r: r['cpu_us_per_req'].get('redis_cmdstat')))
            wk = med([x.get('wrk') for x in u])
            mach = [r.get('machine') or {} for r in d.runs(s, c)]
            busy = med([x.get('busy_pct') for x in mach])
            other = med([x.get('other_pct') for x in mach])
            sm = med([x.get('sim') for x in u]) if s == 'fresh_http' else None
            rows.append(([with_point] if with_point else []) + [
                c, LABEL[s], f_us(rp), f_us(lt), f_us(rd), f_us(sm) if sm is not None else '—',
                f_us((rp or 0) + (rd or 0) + (lt or 0)), f_us(ri), f_us(rc), f_us(wk),
                f_pct(busy), 'n/a' if other is None else '%.1f' % other])
    return rows


CPU_HEAD = ['connections', 'scenario', 'responder', 'lighttpd', 'Redis', 'simulator',
            'sum', 'Redis (INFO cpu)', 'Redis scripts (commandstats)', 'wrk',
            'machine busy %', 'other processes %']

CPU_NOTE = ('"responder", "lighttpd" and "Redis" are utime + stime deltas of their '
            'processes (/proc/<pid>/stat; "responder" sums the scenario\'s processes) '
            'divided by the requests wrk completed; "sum" is their total, the CPU per '
            'request of the targets. "simulator" is the same for charge-provider-sim, '
            'the HTTP provider of fresh (HTTP), kept out of "sum". "Redis (INFO cpu)" is the same for Redis from its '
            'own `used_cpu_user + used_cpu_sys`; "Redis scripts (commandstats)" is the '
            'time Redis spent executing the EVALSHA calls (`usec_per_call × calls`, '
            'scripts included, network I/O and event loop excluded). "machine busy %" '
            'is the share of all cores busy while wrk ran (/proc/stat, wrk included); '
            '"other processes %" is the part of the whole measurement window not used '
            'by the processes above (the noise of a shared machine; kernel work on '
            'their behalf outside their own accounting lands here too).')


def concurrency_section(res, L):
    """bench/run --concurrency: throughput against connections / latency at
    a provider latency, and latency 0 through lighttpd and through nginx
    with kept-alive FastCGI connections against the libfcgi baseline."""
    c = res.get('concurrency')
    if not c:
        return
    if c.get('versus'):
        versus_section(c, L)
        return
    L.append('## Many connections: provider latency %d ms\n' % c['latency_ms'])
    L.append('Fresh charges through lighttpd (mod_fastcgi `bin-path`, %d process(es), '
             '`threads` = %d), one wrk run of %g s per connection count. **C/L** = '
             'connections / provider latency: the throughput if every connection always '
             'had one request waiting on the provider. "in flight" = requests × mean '
             'latency ÷ duration (Little\'s law). RSS and threads per responder process '
             'after the run.\n' % (c['procs'], c['threads'], c.get('latency_duration_s', 0)))
    rows = []
    for r in c['latency_runs']:
        w = r['wrk']
        rows.append([r['conns'], f_rps(r['ideal_rps']) if r.get('ideal_rps') else '–',
                     f_rps(r['rps']),
                     '%.2f' % (r['rps'] / r['ideal_rps']) if r.get('ideal_rps') else '–',
                     f_ms(w['p50_us']), f_ms(w['p99_us']), '%.0f' % r['in_flight'],
                     r['errors'], r['ledger_delta'],
                     ' / '.join('%.1f' % (k / 1024.0) for k in r['rss_kb']),
                     ' / '.join(str(t) for t in r['threads'])])
    L.append(table(['connections', 'C/L req/s', 'req/s', 'req/s ÷ C/L', 'p50 ms', 'p99 ms',
                    'in flight', 'errors', 'provider calls', 'RSS MiB per process',
                    'threads per process'], rows))
    L.append('')
    for r in c['latency_runs']:
        if r['errors'] and r.get('logs'):
            L.append('Log lines during the run at %d connections (%d errors: wrk counts '
                     'non-2xx answers, connect, read, write and timeout errors):\n' % (
                         r['conns'], r['errors']))
            L += ['- %d × `%s`' % (k, msg.replace('`', "'")) for msg, k in r['logs']]
            L.append('')
    http_section(c, L)
    pool_section(c, L)
    runs = c['keepalive_runs']
    if not runs:
        return
    labels = list(dict.fromkeys(r['label'] for r in runs))
    conns = list(dict.fromkeys(r['conns'] for r in runs))
    L.append('## Provider latency 0: lighttpd, nginx with kept-alive connections, '
             'the libfcgi baseline\n')
    L.append('lighttpd: `bin-path`, %d process(es) of each responder (`threads` = %d; the '
             'baseline: libfcgi, one accepting thread per core when 0). nginx: '
             '`charge --listen` on a unix socket, one process, `threads` = %d, upstream '
             '`keepalive %d` + `fastcgi_keep_conn on` (`bench/nginx.conf`). Interleaved, '
             '%d round(s) of %g s; req/s median [min–max] over rounds, "in flight" as '
             'above (a backend that starves kept connections shows few in flight).\n' % (
                 c['procs'], c['threads'], c['threads'], c.get('nginx_keepalive', 64),
                 c['rounds'], c['duration_s']))

    def vals(label, conn, f):
        return [f(r) for r in runs if r['label'] == label and r['conns'] == conn]
    rows = []
    for conn in conns:
        for label in labels:
            rps = vals(label, conn, lambda r: r['rps'])
            base = vals('baseline lighttpd', conn, lambda r: r['rps'])
            ratio = ['%.2f' % (a / b) for a, b in zip(rps, base) if b]
            rows.append([conn, label, spread(rps, f_rps),
                         ' / '.join(ratio) if ratio else '–',
                         f_ms(statistics.median(vals(label, conn, lambda r: r['wrk']['p50_us'])))
                         if rps else '–',
                         f_ms(statistics.median(vals(label, conn, lambda r: r['wrk']['p99_us'])))
                         if rps else '–',
                         '%.1f' % statistics.median(vals(label, conn, lambda r: r['in_flight'])),
                         sum(vals(label, conn, lambda r: r['errors'])),
                         ' / '.join('%.1f' % (k / 1024.0) for k in
                                    vals(label, conn, lambda r: r['rss_kb'])[-1])])
    L.append(table(['connections', 'path', 'req/s', '÷ baseline (per round)', 'p50 ms',
                    'p99 ms', 'in flight', 'errors', 'RSS MiB per process'], rows, left=2))
    L.append('')


def versus_section(c, L):
    """bench/run --concurrency --vs CHARGE: two responder binaries side by
    side through nginx, kept connections and a connection per request."""
    v = c['versus']
    a, b = v['labels']
    runs = v['runs']
    L.append('## %s against %s through nginx, provider latency 0\n' % (a, b))
    L.append('%s: `%s`; %s: `%s`. Each behind an nginx of its own (`charge --listen` '
             'on a unix socket, `threads` = %d), upstream `keepalive %d` + '
             '`fastcgi_keep_conn on` ("kept") or no kept connections ("per-request"). '
             '%d interleaved round(s) of %g s, the order of %s and %s alternating per '
             'round. Median [min–max] over rounds; CPU µs per request of the responder, '
             'and of the responder plus its nginx; "%s / %s" is the ratio of the '
             'medians.\n' % (a, v['bins'][0], b, v['bins'][1], c['threads'],
                              v['keepalive'], c['rounds'], c['duration_s'], a, b, b, a))

    def sel(sc, kept, side, conn):
        return [r for r in runs if r['scenario'] == sc and r['kept'] == kept and
                r['side'] == side and r['conns'] == conn]

    def med(xs):
        xs = [x for x in xs if x is not None]
        return statistics.median(xs) if xs else None

    def f_us(x):
        return '%.1f' % x

    def both(r):
        if r.get('responder_cpu_us') is None:
            return None
        return r['responder_cpu_us'] + (r.get('web_cpu_us') or 0)
    rows = []
    conns = list(dict.fromkeys(r['conns'] for r in runs))
    for conn in conns:
        for sc in ('fresh', 'replay'):
            for kept in (True, False):
                for what, f, fmt in (
                        ('req/s', lambda r: r['rps'], f_rps),
                        ('responder CPU µs/req', lambda r: r.get('responder_cpu_us'), f_us),
                        ('+ nginx CPU µs/req', both, f_us),
                        ('p99 ms', lambda r: r['wrk']['p99_us'] / 1e3, lambda x: '%.2f' % x)):
                    xa = [f(r) for r in sel(sc, kept, a, conn)]
                    xb = [f(r) for r in sel(sc, kept, b, conn)]
                    ma, mb = med(xa), med(xb)
                    rows.append([conn, '%s %s' % (sc, 'kept' if kept else 'per-request'),
                                 what, spread(xa, fmt), spread(xb, fmt),
                                 '%.3f' % (mb / ma) if ma and mb is not None else '–'])
    L.append(table(['connections', 'path', 'measure', a, b, '%s / %s' % (b, a)],
                   rows, left=3))
    L.append('')
    if v.get('strace'):
        L.append('System calls per request of the responder (`strace -c` on all its '
                 'threads over one wrk run per case; strace slows it down, so counts '
                 'only):\n')
        rows = []
        for r in v['strace']:
            top = sorted(r['calls'].items(), key=lambda kv: -(kv[1] or 0))
            rows.append([r['label'], r['requests'], '%.2f' % (r['total'] or 0),
                         ', '.join('%s %.2f' % (k, x) for k, x in top if x and x >= 0.05)])
        L.append(table(['case', 'requests', 'calls/request', 'per request'], rows, left=1))
        L.append('')


TARGET_POOL_CPU_VS_32 = 1.10    # pool part: CPU per replay at the most connections
TARGET_CHURN_CPU_VS_KEPT = 1.3  # ... a connection per request vs kept
TARGET_POOL_RPS_VS_LUA = 1.0    # ... the shipped pool's replays/s vs nginx + Lua
LUA_PEER = 'nginx + Lua (peer)'


def pool_section(c, L):
    """--concurrency part 3 (issue 31): replays through nginx with the pool
    as shipped, the pool of 64, no kept connections, and lighttpd."""
    p = c.get('pool')
    if not p or not p.get('runs'):
        return
    runs = p['runs']
    labels = list(dict.fromkeys(r['label'] for r in runs))
    conns = list(dict.fromkeys(r['conns'] for r in runs))
    kept = labels[0]  # the shipped pool

    def cpu(r):
        if r.get('responder_cpu_us') is None:
            return None
        return r['responder_cpu_us'] + (r.get('web_cpu_us') or 0)

    def sel(label, conn):
        return sorted((r for r in runs if r['label'] == label and r['conns'] == conn),
                      key=lambda r: r['round'])

    def med_of(xs):
        xs = [x for x in xs if x is not None]
        return statistics.median(xs) if xs else None

    def sys_share(rs):
        """The kernel's time (stime) of the server CPU, median over rounds;
        '–' for runs from before it was recorded."""
        xs = [((r.get('responder_sys_us') or 0) + (r.get('web_sys_us') or 0)) / cpu(r)
              for r in rs if cpu(r) and r.get('responder_sys_us') is not None]
        return '%.0f %%' % (100 * statistics.median(xs)) if xs else '–'
    L.append('## Replays and the web server\'s connection pool\n')
    L.append('Provider latency 0, one key replayed. nginx: %s, each nginx in '
             'front of a `charge --listen` of its own (one process, %d event loops (one '
             'per core), a unix socket), upstream `keepalive` %s + `fastcgi_keep_conn on`, or no kept '
             'connections (`fastcgi_keep_conn off`: a FastCGI connection per request, '
             'as `NGINX_KEEPALIVE=0`); `conf/nginx.conf` ships `keepalive %d`. lighttpd: '
             '`bin-path`, %d process(es) × `threads` = %d, a FastCGI connection per '
             'request. Interleaved, %d round(s) of %g s. CPU µs per replay: the '
             'responder\'s processes, the web server\'s (nginx master and worker, '
             'lighttpd), and both ("server"), and the part of it the kernel spent '
             '(their `stime`); ratios are medians of per-round ratios '
             'against the shipped pool at the same connection count.%s\n' % (
                 'one worker' if p.get('nginx_workers', 1) == 1 else
                 '%d workers (`NGINX_WORKERS`)' % p['nginx_workers'],
                 p.get('nginx_threads', c['threads']),
                 ' / '.join(str(k) for k in p['pools'] if k), p['shipped'],
                 c['procs'], c['threads'], c['rounds'], c['duration_s'],
                 ' nginx + Lua (peer): `bench/peers/charge_peer.lua` in an nginx of its '
                 'own (a worker per core), the same wrk settings, its own key primed through '
                 'it: its replay path (the claim script\'s `EVALSHA` on a kept Redis '
                 'connection, the stored answer); its CPU is its nginx\'s (master and '
                 'worker), in the web server\'s column.' if p.get('lua_peer') else ''))
    rows = []
    for conn in conns:
        base = sel(kept, conn)
        for label in labels:
            rs = sel(label, conn)
            ratio = [cpu(a) / cpu(b) for a, b in zip(rs, base) if cpu(a) and cpu(b)]
            rows.append([conn, label, spread([r['rps'] for r in rs], f_rps),
                         f_ms(med_of(r['wrk']['p50_us'] for r in rs)),
                         f_ms(med_of(r['wrk']['p99_us'] for r in rs)),
                         '%.1f' % med_of(r['responder_cpu_us'] for r in rs),
                         '%.1f' % (med_of(r.get('web_cpu_us') for r in rs) or 0),
                         '%.1f' % med_of(cpu(r) for r in rs),
                         sys_share(rs),
                         '%.2f' % statistics.median(ratio) if ratio else '–',
                         sum(r['errors'] for r in rs)])
    L.append(table(['connections', 'path', 'replays/s', 'p50 ms', 'p99 ms',
                    'responder CPU µs', 'web server CPU µs', 'server CPU µs',
                    'of it in the kernel', 'server CPU ÷ shipped pool', 'errors'],
                   rows, left=2))
    L.append('')
    if len(conns) < 1:
        return
    lo, hi = min(conns), max(conns)
    L.append('| target | measured | |')
    L.append('|---|---:|---|')
    if lo != hi:
        a, b = med_of(cpu(r) for r in sel(kept, hi)), med_of(cpu(r) for r in sel(kept, lo))
        if a and b:
            L.append('| server CPU per replay at %d connections (shipped pool) ≤ %.2f × '
                     'at %d | %.2f | %s |' % (hi, TARGET_POOL_CPU_VS_32, lo, a / b,
                                              verdict(a / b <= TARGET_POOL_CPU_VS_32)))
    if LUA_PEER in labels:
        rs, lua = sel(kept, hi), sel(LUA_PEER, hi)
        ratio = [x['rps'] / y['rps'] for x, y in zip(rs, lua) if x['rps'] and y['rps']]
        if ratio:
            m = statistics.median(ratio)
            L.append('| replays/s at %d connections, the shipped pool ≥ %.1f × nginx + Lua '
                     '| %.2f | %s |' % (hi, TARGET_POOL_RPS_VS_LUA, m,
                                        verdict(m >= TARGET_POOL_RPS_VS_LUA)))
        ratio = [cpu(x) / cpu(y) for x, y in zip(rs, lua) if cpu(x) and cpu(y)]
        if ratio:
            L.append('| server CPU per replay at %d connections, the shipped pool ÷ '
                     'nginx + Lua (for information) | %.2f | |' % (hi, statistics.median(ratio)))
    for label in labels[1:]:
        if 'no keep-alive' not in label and label != 'lighttpd':
            continue
        rs, base = sel(label, hi), sel(kept, hi)
        ratio = [cpu(x) / cpu(y) for x, y in zip(rs, base) if cpu(x) and cpu(y)]
        if ratio:
            m = statistics.median(ratio)
            L.append('| %s: server CPU per replay ≤ %.1f × the kept connections\' '
                     '(%d connections) | %.2f | %s |' % (
                         label, TARGET_CHURN_CPU_VS_KEPT, hi, m,
                         verdict(m <= TARGET_CHURN_CPU_VS_KEPT)))
    L.append('')


def http_section(c, L):
    """--concurrency through the HTTP provider: the simulator at the
    provider latency, the responder's provider_url pointing at it."""
    runs = c.get('http_runs') or []
    if not runs:
        return
    sims = c.get('sims') or []
    L.append('## Many connections: the HTTP provider at %d ms\n' % c['latency_ms'])
    L.append('Fresh charges through lighttpd (%d process(es), `threads` = %d), the '
             'responder\'s `provider_url` pointing at `charge-provider-sim --latency-ms '
             '%d --fsync %s` (its data file in the run directory%s) on TCP loopback%s; '
             'one wrk run of %g s per '
             'connection count. "deliveries" and "charges" are what the simulator '
             'counted during the run (`/_sim/stats`); a delivery per request (up to the '
             'requests wrk left in flight) and a charge per delivery is what holds when '
             'nothing fails. CPU µs per request of the responder processes and of the '
             'simulator; "simulator core %%" is its CPU time over the run\'s wall time. '
             'RSS per process after the run.\n' % (
                 c['procs'], c['threads'], c['latency_ms'],
                 (sims[0] if sims else {}).get('fsync', 'batch'),
                 {'batch': '; every answer waits for the fsync of its record, one fsync '
                  'per loop turn', 'always': '; an fsync per record before its answer',
                  'never': '; **no fsync**'}.get((sims[0] if sims else {}).get('fsync'), ''),
                 ' and on a unix socket (`provider_url = unix:/…`)'
                 if any(s['transport'] == 'unix' for s in sims) else '',
                 c.get('latency_duration_s', 0)))
    rows = []
    for r in runs:
        w, sm = r['wrk'], r.get('sim') or {}
        n = w['requests']
        rows.append([r['transport'], r['conns'],
                     f_rps(r['ideal_rps']) if r.get('ideal_rps') else '–', f_rps(r['rps']),
                     '%.2f' % (r['rps'] / r['ideal_rps']) if r.get('ideal_rps') else '–',
                     f_ms(w['p50_us']), f_ms(w['p99_us']), '%.0f' % r['in_flight'],
                     r['errors'], f_int(n), f_int(sm.get('deliveries', 0)),
                     f_int(sm.get('charges', 0)),
                     '%.4f' % (sm.get('deliveries', 0) / n) if n else '–',
                     f_us(r.get('responder_cpu_us')), f_us(sm.get('cpu_us')),
                     f_pct(sm.get('core_pct')),
                     ' / '.join('%.1f' % (k / 1024.0) for k in r['rss_kb']),
                     '%.1f' % (sm.get('rss_kb', 0) / 1024.0)])
    L.append(table(['provider', 'connections', 'C/L req/s', 'req/s', 'req/s ÷ C/L',
                    'p50 ms', 'p99 ms', 'in flight', 'errors', 'requests', 'deliveries',
                    'charges', 'deliveries / request', 'responder CPU µs / req',
                    'simulator CPU µs / req', 'simulator core %', 'RSS MiB per responder',
                    'RSS MiB simulator'], rows))
    L.append('')
    for r in runs:
        if r['errors'] and r.get('logs'):
            L.append('Log lines during the run at %d connections (HTTP/%s, %d errors):\n' % (
                r['conns'], r['transport'], r['errors']))
            L += ['- %d × `%s`' % (k, msg.replace('`', "'")) for msg, k in r['logs']]
            L.append('')
    # the targets of issue 22, on TCP at TARGET_HTTP_CONNS connections
    rows = []
    for r in runs:
        if r['transport'] != 'tcp' or r['conns'] != TARGET_HTTP_CONNS:
            continue
        w, sm = r['wrk'], r.get('sim') or {}
        ratio = r['rps'] / r['ideal_rps'] if r.get('ideal_rps') else None
        rows.append(('req/s ≥ %.1f × C/L at %d connections' % (
            TARGET_HTTP_CL_RATIO, TARGET_HTTP_CONNS),
            '%s req/s = %.2f × C/L (%s)' % (f_rps(r['rps']), ratio or 0,
                                            f_rps(r['ideal_rps'] or 0)),
            verdict(ratio is not None and ratio >= TARGET_HTTP_CL_RATIO,
                    100 * (TARGET_HTTP_CL_RATIO - ratio) / TARGET_HTTP_CL_RATIO
                    if ratio is not None and ratio < TARGET_HTTP_CL_RATIO else None)))
        p99 = w['p99_us'] / 1e3
        rows.append(('p99 ≤ %.0f ms at %d connections' % (TARGET_HTTP_P99_MS,
                                                        TARGET_HTTP_CONNS),
                     '%.1f ms (p50 %.1f ms)' % (p99, w['p50_us'] / 1e3),
                     verdict(p99 <= TARGET_HTTP_P99_MS,
                             100 * (p99 - TARGET_HTTP_P99_MS) / TARGET_HTTP_P99_MS
                             if p99 > TARGET_HTTP_P99_MS else None)))
        rows.append(('0 errors at %d connections' % TARGET_HTTP_CONNS,
                     '%d (connect %d, read %d, write %d, timeout %d, non-2xx %d)' % (
                         r['errors'], w['err_connect'], w['err_read'], w['err_write'],
                         w['err_timeout'], w['err_status']),
                     verdict(r['errors'] == 0)))
        n = w['requests']
        d = sm.get('deliveries', 0)
        ok = sm.get('charges') == d and 0 <= d - n <= r['conns']
        rows.append(('one provider delivery and one charge per fresh charge',
                     '%d deliveries, %d charges for %d requests completed (wrk leaves up '
                     'to %d in flight)' % (d, sm.get('charges', 0), n, r['conns']),
                     verdict(ok)))
    if rows:
        L.append('Targets (issue 22), through the HTTP provider over TCP:\n')
        L.append(table(['target', 'measured', 'verdict'], rows, left=3))
        L.append('')
    elif runs:
        L.append('The targets are held at %d connections over TCP: not measured in this '
                 'run.\n' % TARGET_HTTP_CONNS)


def sweep_section(res, L):
    sw = res.get('sweep')
    if not sw or not sw.get('runs'):
        return
    cfg = res['config']
    dep = cfg.get('deployment') or {}
    by_point = {}
    for r in sw['runs']:
        by_point.setdefault((r['procs'], r['threads']), []).append(r)
    conns = sw['connections']
    L.append('## Processes × threads sweep\n')
    L.append('Every backend (the responder and the floors alike) runs at P processes '
             '(lighttpd max-procs) × T worker threads per process, each thread with '
             'its own Redis connection. %d round(s) × %g s at %s connections per point, '
             'interleaved %s, after %g s of warm-up per scenario. req/s, machine busy %% '
             'and CPU µs per request (utime + stime of the processes / requests): '
             'median [min–max] over rounds.%s\n' % (
                 cfg['rounds'], cfg['duration_s'], ' · '.join(map(str, conns)),
                 ' → '.join(LABEL[s] for s in ORDER if s in sw['scenarios']),
                 cfg['warmup_s'],
                 ' The default deployment is %d×%d (%s, %s).' % (
                     dep['procs'], dep['threads'], dep.get('procs_from'),
                     dep.get('threads_from')) if dep else ''))
    rows = []
    best = {}
    datas = {}
    for pt in sorted(by_point):
        d = Data(by_point[pt], conns, sw['scenarios'],
                 {'procs': pt[0], 'threads': pt[1]})
        datas[pt] = d
        for c in conns:
            for s in d.scen:
                if not d.runs(s, c):
                    continue
                rps = med(d.vals(s, c, lambda r: r['rps']))
                if rps and rps > best.get((s, c), (0, None))[0]:
                    best[(s, c)] = (rps, pt)
    has_floor = any(FLOOR_OF[s] in sw['scenarios'] for s in FLOOR_OF
                    if s in sw['scenarios'])
    for pt, d in datas.items():
        name = '%d×%d%s' % (pt[0], pt[1], ' (default)' if dep and
                             (dep['procs'], dep['threads']) == pt else '')
        for c in conns:
            for s in d.scen:
                if not d.runs(s, c):
                    continue
                u = lambda k: med(d.vals(s, c, lambda r: r['cpu_us_per_req'].get(k)))
                rps = d.vals(s, c, lambda r: r['rps'])
                row = [name, c, LABEL[s],
                       spread(rps, f_rps) + (' **best**' if best.get((s, c), (0, None))[1] == pt
                                             and len(datas) > 1 else ''),
                       spread(d.vals(s, c, lambda r: (r.get('machine') or {}).get('busy_pct')), f_pct),
                       f_us(u('responder')), f_us(u('lighttpd')), f_us(u('redis')),
                       spread(d.vals(s, c, cpu_sum), f_us),
                       f_ms(med(d.vals(s, c, lambda r: r['wrk']['p50_us'])))
                       + ' / ' + f_ms(med(d.vals(s, c, lambda r: r['wrk']['p99_us'])))]
                if has_floor:
                    fl = FLOOR_OF.get(s)
                    if fl and fl in d.scen:
                        row += [spread(d.ratios(s, fl, c), f_ratio),
                                spread(d.ratios(s, fl, c, cpu_sum), f_ratio)]
                    else:
                        row += ['', '']
                rows.append(row)
    for (s, c), (rps, pt) in sorted(best.items(), key=lambda x: (ORDER.index(x[0][0]), x[0][1])):
        if s in FLOOR_OF and len(datas) > 1:
            d = datas[pt]
            L.append('- %s at %d connections: most req/s at **%d×%d** (%s req/s, machine '
                     '%s %% busy, %s µs CPU per request).' % (
                         LABEL[s], c, pt[0], pt[1], f_rps(rps),
                         f_pct(med(d.vals(s, c, lambda r: (r.get('machine') or {}).get('busy_pct')))),
                         f_us(med(d.vals(s, c, cpu_sum)))))
    if len(datas) > 1 and any(s in FLOOR_OF for s, _ in best):
        L.append('')
    head = ['P×T', 'connections', 'scenario', 'req/s', 'machine busy %',
            'responder µs', 'lighttpd µs', 'Redis µs', 'sum µs', 'p50 / p99 ms']
    if has_floor:
        head += ['req/s ÷ floor', 'CPU ÷ floor']
    L.append(table(head, rows, left=3))
    if has_floor:
        L.append('\n"÷ floor": fresh against floor(2), replay against floor(1) at the '
                 'same P×T (targets: req/s ≥ %.2f, CPU ≤ %.2f).' % (
                     TARGET_RPS_RATIO, TARGET_CPU_RATIO))
    L.append('')
    rows = []
    for pt, d in datas.items():
        rows += cpu_table(d, with_point='%d×%d' % pt)
    L.append('<details><summary>Sweep: CPU per request in µs, every measure</summary>\n')
    L.append(table(['P×T'] + CPU_HEAD, rows, left=3))
    L.append('\n' + CPU_NOTE)
    L.append('\n</details>\n')
    rss = sw.get('rss') or []
    if rss:
        L.append('Responder RSS per process after each point (KiB): ' + '; '.join(
            '%d×%d %s' % (x['procs'], x['threads'], ' · '.join(map(str, x['rss_kb'])))
            for x in rss if x['when'].startswith('after c=')) + '.\n')


def unnamed(fn):
    """'0x000000000029c680 [libcrypto.so.3]' (a stripped library's function)."""
    return fn.startswith('0x')


def profile_map(x, kind):
    """{function: Ir/request}. Stripped functions have no stable name (their
    address depends on the library build and on the code path the CPU
    selects): exclusive counts of them are summed per library, inclusive
    ones (nested in each other) are left out, and so are all of them in a
    profile that lists its top functions only (the sum would be partial)."""
    out = {}
    for r in (x.get('profile') or {}).get(kind, []):
        fn = r['fn']
        if unnamed(fn):
            if kind == 'inclusive' or not x.get('profile_complete'):
                continue
            fn = 'unnamed functions ' + fn.split(' ', 1)[1] if ' ' in fn else \
                'unnamed functions'
        out[fn] = out.get(fn, 0) + r['ir']
    return out


def compare_section(res, L, top=30, min_delta=20):
    cmp = res.get('compare')
    cg = res.get('callgrind') or {}
    if not cmp or not cg:
        return
    old = cmp.get('callgrind') or {}
    L.append('## Instructions per request against %s (commit %s)\n' % (
        cmp.get('date') or '?', cmp.get('commit') or '?'))
    L.append('callgrind, one worker thread, differential (N2 run − N1 run); the '
             'earlier result is `%s`. A saving shows as a negative delta. Functions of '
             'stripped libraries have no name: their exclusive counts are summed per '
             'library ("unnamed functions"), their inclusive counts left out.\n' % cmp['path'])
    if cmp.get('cpu') and cmp['cpu'] != res['machine']['cpu']:
        L.append('> The earlier result comes from another CPU (%s, now %s): libraries '
                 'pick code paths by CPU features (SHA-256, memcpy, strcmp), so '
                 'library counts can differ by a few thousand without any change in '
                 'the responder.\n' % (cmp['cpu'], res['machine']['cpu']))
    rows = []
    for case in ORDER:
        a, b = old.get(case), cg.get(case)
        if not a or not b:
            continue
        d = b['ir_per_request'] - a['ir_per_request']
        rows.append([LABEL[case], f_int(a['ir_per_request']), f_int(b['ir_per_request']),
                     f_signed(d), f_signed_pct(100.0 * d / a['ir_per_request'])])
    L.append(table(['binary / scenario', 'before', 'now', 'delta', 'delta %'], rows))
    L.append('')
    for case in ('fresh', 'fresh_http', 'replay'):
        a, b = old.get(case), cg.get(case)
        if not a or not b or not b.get('profile'):
            continue
        # a profile written before they were complete lists its top 30 only:
        # a function missing there has an unknown count, not 0
        complete = (a.get('profile_complete', False), b.get('profile_complete', False))
        for kind in ('exclusive', 'inclusive'):
            pa, pb = profile_map(a, kind), profile_map(b, kind)
            rows, unknown = [], 0
            for fn in set(pa) | set(pb):
                va = pa.get(fn, 0 if complete[0] else None)
                vb = pb.get(fn, 0 if complete[1] else None)
                if va is None or vb is None:
                    unknown += 1
                    continue
                d = vb - va
                rows.append((d, fn, f_int(va), f_int(vb), f_signed(d)))
            rows = [r for r in rows if abs(r[0]) >= min_delta]
            rows.sort(key=lambda r: (-abs(r[0]), r[1]))
            L.append('<details><summary>%s: instructions per request by function, %s, '
                     'before → now (largest changes first)</summary>\n' % (case, kind))
            if rows:
                L.append(table(['function', 'before', 'now', 'delta'],
                               [['`%s`' % r[1].replace('|', '\\|'), r[2], r[3], r[4]]
                                for r in rows[:top]], left=1))
            else:
                L.append('No function changed by %d instructions or more.' % min_delta)
            if unknown:
                L.append('\n%d functions have no delta: a profile written before '
                         'profiles were complete lists its top 30 functions only, and '
                         'they are missing from one of the two lists.' % unknown)
            L.append('\n</details>\n')


def write_report(json_path, out_dir=None, notes=None, compare=None):
    with open(json_path) as f:
        res = json.load(f)
    if compare:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from bench import compare_data
        res['compare'] = compare_data(compare)
    cfg, m = res['config'], res['machine']
    cfg.setdefault('threads', 1)
    d = Data(res['runs'], cfg['connections'], cfg['scenarios'], cfg) \
        if res.get('runs') else None
    out_dir = out_dir or os.path.dirname(os.path.abspath(json_path))
    stem_name = res.get('stem', res['date'])
    stem = os.path.join(out_dir, stem_name)
    mode = res.get('mode', 'full')
    L = []
    L.append('# Benchmark of `/charge` — %s%s%s\n' % (
        res['date'], {'sweep': ', processes × threads sweep',
                      'callgrind': ', instruction counts only',
                      'concurrency': ', many connections'}.get(mode, ''),
        ' (smoke run)' if res['smoke'] else ''))
    phases = res.get('phases_s') or {}
    L.append('Produced by `bench/run` (took %s s%s). Raw data: [`%s.json`](%s.json).\n' % (
        res.get('elapsed_s', '?'),
        (': ' + ', '.join('%s %s s' % kv for kv in phases.items())) if phases else '',
        stem_name, stem_name))
    L.append('## Set-up\n')
    dep = cfg.get('deployment') or {}
    L += ['- Machine: %s, %d cores, Linux %s; commit %s.' % (
              m['cpu'], m['cores'], m['kernel'], m['commit']),
          '- %s; %s; %s; %s.' % (m['lighttpd'], m['redis'].split(' sha=')[0],
                                  m['wrk'].split(' Copyright')[0], m['gcc'])]
    if d is not None:
        L += ['- One lighttpd on 127.0.0.1 (single worker, no access log) serves every '
              'scenario through mod_fastcgi `bin-path` with **%d × %d (processes × '
              'threads) for each responder** (max-procs; the responder\'s `threads`, '
              '`FLOOR_THREADS`, `BASELINE_THREADS`: every thread accepts on the '
              'process\'s socket with `FCGX_Accept_r` and has its own Redis '
              'connection)%s; the responder runs with provider_latency_ms = 0, '
              'metrics_file = none, log_level = warn, built with meson '
              '--buildtype=release; baseline and floor with gcc -O3.' % (
                  cfg['procs'], cfg['threads'],
                  '' if not dep else ' — the default deployment is %d × %d (%s, %s)' % (
                      dep['procs'], dep['threads'], dep.get('procs_from'),
                      dep.get('threads_from'))),
              '- Runs are interleaved (%s) for %d rounds at each connection count, after '
              '%g s of unrecorded warm-up per scenario; ratios are computed per round '
              'between neighbouring runs and then summarised as median [min–max].' % (
                  ' → '.join(LABEL[s] for s in d.scen), cfg['rounds'], cfg['warmup_s'])]
    if d is not None or res.get('sweep'):
        L.append('- wrk: `-t min(%d, c) -c c -d %gs --latency`, script `bench/charge.lua`; '
                 'every scenario sends the same request: `POST`, `Authorization: Bearer '
                 'sk_test_demo`, `Content-Type: application/json`, an `Idempotency-Key`, '
                 'body `%s`.' % (cfg['wrk_threads'], cfg['duration_s'], cfg['charge_body']))
    L += ['- Redis: private, started from the project\'s `conf/redis.conf` with '
          'overrides: unix socket in the run directory, no persistence '
          '(`save ""`, `appendonly no`), `maxmemory-policy noeviction`.', '']
    if d is not None or res.get('sweep'):
        L.append('Scenarios:\n')
        L += ['- **fresh**: `POST /charge` with a new Idempotency-Key on every request '
              '(claim + provider + record).',
              '- **replay**: `POST /charge` with one key, primed once before the runs.',
              '- **fresh (HTTP)**: fresh, the responder calling the provider simulator '
              '`charge-provider-sim` over HTTP on loopback (`provider_url` = %s), which '
              'runs at latency 0 with `--fsync %s` (for the benchmark only: no disk '
              'flush per answer, so the provider\'s cost is its CPU); the responder '
              'behind a second port of the same lighttpd at the same processes × threads. '
              'The simulator\'s CPU is reported apart from the sum.' % (
                  (cfg.get('sim') or {}).get('url', '?'),
                  (cfg.get('sim') or {}).get('fsync', '?'))
              if d is not None and 'fresh_http' in d.scen or
              'fresh_http' in ((res.get('sweep') or {}).get('scenarios') or []) else None,
              '- **baseline**: `bench/baseline.c`, a minimal libfcgi responder that reads '
              'the body and answers 201 with a charge-sized JSON (241 B) and the same '
              'headers: the transport\'s ceiling.',
              '- **floor(1)**, **floor(2)**: `bench/floor.c`, the baseline plus one or two '
              'blocking hiredis `EVALSHA` round trips of `%s` on a new key '
              '`bench:floor:<pid>:<thread>:<n>` per request (ARGV = `r1`/`r2`, TTL '
              '86 400 000 ms), loaded once with SCRIPT LOAD: the cheapest any '
              'Redis-backed design can be.' % cfg['floor_script'], '']
        L[:] = [x for x in L if x is not None]

    all_runs = list(res.get('runs') or []) + list((res.get('sweep') or {}).get('runs') or [])
    others = [(r.get('machine') or {}).get('other_pct') for r in all_runs]
    others = [x for x in others if x is not None]
    if others and statistics.median(others) > 10:
        L.append('> **Noisy machine:** other processes used %.0f %% of all cores '
                 'during the median run (max %.0f %%; %.0f %% just before the runs). '
                 'Throughput, latency and machine busy %% are unreliable and the spread '
                 'is wide; CPU time per request, command counts, memory and instruction '
                 'counts are much less affected.\n' % (
                     statistics.median(others), max(others),
                     res.get('busy_before_pct', 0)))
    elif others and max(others) > 25:
        L.append('> Other processes used %.0f %% of all cores during the median run, '
                 'but up to %.0f %% during single runs (column "other processes %%" of '
                 'the CPU table): the max of a spread may come from those.\n' % (
                     statistics.median(others), max(others)))

    targets(res, d, L)

    notes_path = notes or stem + '.notes.md'
    if os.path.exists(notes_path):
        with open(notes_path) as f:
            L.append('## Analysis\n')
            L.append(f.read().strip() + '\n')

    compare_section(res, L)
    sweep_section(res, L)
    concurrency_section(res, L)

    if d is not None:
        svg = stem + '.svg'
        if plot(d, res, svg):
            L.append('## Requests/s against connections\n')
            L.append('![requests/s against connections](%s.svg)\n' % stem_name)

        L.append('## Requests/s (median [min–max] over rounds)\n')
        L.append(table(['connections'] + [LABEL[s] for s in d.scen],
                       [[c] + [spread(d.vals(s, c, lambda r: r['rps']), f_rps)
                               for s in d.scen] for c in d.conns]))
        L.append('')

        pairs = [(a, b) for a, b in (('fresh', 'baseline'), ('fresh', 'floor2'),
                                     ('fresh_http', 'fresh'),
                                     ('replay', 'baseline'), ('replay', 'floor1'),
                                     ('floor1', 'baseline'), ('floor2', 'baseline'))
                 if a in d.scen and b in d.scen]
        if pairs:
            L.append('## Throughput ratios (per-round ratio of neighbouring runs, '
                     'median [min–max])\n')
            L.append(table(['connections'] + ['%s / %s' % (LABEL[a], LABEL[b])
                                              for a, b in pairs],
                           [[c] + [spread(d.ratios(a, b, c), f_ratio) for a, b in pairs]
                            for c in d.conns]))
            L.append('')
            cpairs = [(a, b) for a, b in pairs if b != 'baseline']
            if cpairs:
                L.append('## CPU per request ratios (responder + lighttpd + Redis, '
                         'per-round, median [min–max])\n')
                L.append(table(['connections'] + ['%s / %s' % (LABEL[a], LABEL[b])
                                                  for a, b in cpairs] +
                               ['Redis: %s / %s' % (LABEL[a], LABEL[b]) for a, b in cpairs],
                               [[c] + [spread(d.ratios(a, b, c, cpu_sum), f_ratio)
                                       for a, b in cpairs] +
                                [spread(d.ratios(a, b, c, redis_cpu), f_ratio)
                                 for a, b in cpairs] for c in d.conns]))
                L.append('')

        for name, key in (('p50', 'p50_us'), ('p99', 'p99_us')):
            L.append('## Latency %s in ms (wrk --latency; median [min–max] over rounds)\n'
                     % name)
            L.append(table(['connections'] + [LABEL[s] for s in d.scen],
                           [[c] + [spread(d.vals(s, c, lambda r, k=key: r['wrk'][k]), f_ms)
                                   for s in d.scen] for c in d.conns]))
            L.append('')

        L.append('## CPU time per request in µs (median over rounds)\n')
        L.append('On %d cores, %d 000 000 / (sum) bounds the requests/s that the server '
                 'side alone allows (wrk runs on the same cores).\n' % (
                     m['cores'], m['cores']))
        L.append(table(CPU_HEAD, cpu_table(d)))
        L.append('\n' + CPU_NOTE)
        L.append('')

        L.append('## Redis commands per request (INFO commandstats deltas, all runs)\n')
        L.append('Commands run inside the Lua scripts are counted too. "Provider calls" '
                 'are ledger lines written during the runs (fresh (HTTP): deliveries '
                 'counted by the simulator, `/_sim/stats`). "Redis command µs" is the '
                 'time Redis spent executing the EVALSHA calls (commandstats `usec`, '
                 'scripts included, network I/O excluded), median over runs. "EVALSHA / '
                 'req" leaves out the completers\' polls of the index of unknown records '
                 '(one EVALSHA a second per responder process, whichever scenario runs; '
                 'counted by the ZCARD each runs, shown among the other commands).\n')
        rows = []
        for s in d.scen:
            n, evalsha, ledger, deltas, exact = cmd_totals(d, s)
            if not n:
                continue
            other = ', '.join('%s %.2f' % (k, v / n) for k, v in sorted(deltas.items())
                              if k not in ('evalsha', 'eval', 'evalsha_background')
                              and not k.startswith('script'))
            rows.append([LABEL[s], f_int(n), '%.4f' % (evalsha / n),
                         deltas.get('eval', 0),
                         sum(v for k, v in deltas.items() if k.startswith('script')),
                         '%.4f' % (ledger / n) if s in FLOOR_OF or s == 'fresh_http'
                         else '—',
                         other or '—', redis_usec(d, s)])
        L.append(table(['scenario', 'requests', 'EVALSHA / req', 'EVAL (total)',
                        'SCRIPT * (total)', 'provider calls / req',
                        'other commands / req', 'Redis command µs / req'], rows))
        L.append('\nRequests still in flight when wrk stops are served but not counted by '
                 'wrk, so per-request ratios can exceed the exact value by at most '
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
        L.append('Each binary runs standalone (`--listen 127.0.0.1:PORT`, one worker '
                 'thread) under callgrind and serves N requests over FastCGI from a '
                 'Python client, one connection per request; instructions per request = '
                 '(total(N2) − total(N1)) / (N2 − N1), which removes start-up and '
                 'shutdown. Redis is not included; neither is the simulator, the '
                 'provider of fresh (HTTP) (the responder with `provider_url` pointing '
                 'at it, latency 0).\n')
        rows = []
        for case in ORDER:
            x = cg.get(case)
            if x:
                rows.append([LABEL[case], x['n1'], x['n2'], f_int(x['ir_n1']),
                             f_int(x['ir_n2']), f_int(x['ir_per_request'])])
        L.append(table(['binary / scenario', 'N1', 'N2', 'Ir total N1', 'Ir total N2',
                        'Ir / request'], rows))
        L.append('')
        for case in ('fresh', 'fresh_http', 'replay'):
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


def main(argv):
    ap = argparse.ArgumentParser(description='bench/run report generator')
    ap.add_argument('json')
    ap.add_argument('--notes', help='markdown file for the Analysis section')
    ap.add_argument('--compare', metavar='OLD.json',
                    help='instruction counts per function against this result')
    ap.add_argument('--out', help='directory for the .md and .svg (next to the JSON)')
    a = ap.parse_args(argv)
    print(write_report(a.json, out_dir=a.out, notes=a.notes, compare=a.compare))
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
