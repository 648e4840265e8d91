#!/usr/bin/env python3
"""installed-conf.py IN OUT STATE_DIR - the charge.conf that meson install
puts under <sysconfdir>/charge: the checkout's conf/charge.conf with the
paths that point into the checkout's var/ moved under STATE_DIR, and Redis
on Debian's default address. Every other line, comments included, is kept.
"""
import sys

src, dst, state = sys.argv[1:4]
moved = {
    'redis_url': 'redis://127.0.0.1:6379',
    'spill_dir': f'{state}/spill',
    'provider_ledger': f'{state}/provider-ledger.log',
    'metrics_file': f'{state}/metrics.shm',
}
out = []
with open(src, encoding='utf-8') as f:
    for line in f:
        key = line.split('=', 1)[0].strip()
        if not line.lstrip().startswith('#') and key in moved:
            line = f'{key} = {moved.pop(key)}\n'
        out.append(line)
if moved:
    sys.exit(f'installed-conf.py: {src} lacks {", ".join(sorted(moved))}')
with open(dst, 'w', encoding='utf-8') as f:
    f.writelines(out)
