#!/usr/bin/env python3
"""installed-conf.py IN OUT STATE_DIR [--demo-provider URL] - the charge.conf
that meson install puts under <sysconfdir>/charge: the checkout's
conf/charge.conf with the paths that point into the checkout's var/ moved
under STATE_DIR, and Redis on Debian's default address. Every other line,
comments included, is kept.

--demo-provider URL (the Debian package: the socket of its
charge-provider-sim.service) sets provider_url to URL, with a comment above
it that says to replace it with a real provider's. IN may be OUT.
"""
import sys

args = sys.argv[1:]
demo = None
if len(args) == 5 and args[3] == '--demo-provider':
    demo = args[4]
    args = args[:3]
if len(args) != 3:
    sys.exit('usage: installed-conf.py IN OUT STATE_DIR [--demo-provider URL]')
src, dst, state = args
moved = {
    'redis_url': 'redis://127.0.0.1:6379',
    'spill_dir': f'{state}/spill',
    'provider_ledger': f'{state}/provider-ledger.log',
    'metrics_file': f'{state}/metrics.shm',
}
if demo is not None:
    moved['provider_url'] = demo
DEMO_NOTE = (
    '# This package: the demo provider, charge-provider-sim.service (a\n'
    '# simulator: it charges nobody). For real payments replace it with the\n'
    "# provider's https URL (e.g. https://api.stripe.com) and set\n"
    '# provider_api_key (CHARGE_PROVIDER_API_KEY in /etc/charge/charge.env);\n'
    '# see docs/deploying.md, "Pointing at a real provider".\n')
out = []
with open(src, encoding='utf-8') as f:
    for line in f:
        key = line.split('=', 1)[0].strip()
        if not line.lstrip().startswith('#') and key in moved:
            if key == 'provider_url' and demo is not None:
                out.append(DEMO_NOTE)
            line = f'{key} = {moved.pop(key)}\n'
        out.append(line)
if moved:
    sys.exit(f'installed-conf.py: {src} lacks {", ".join(sorted(moved))}')
with open(dst, 'w', encoding='utf-8') as f:
    f.writelines(out)
