#!/usr/bin/env python3
"""check-layers.py - the includes of src/ against the map in src/LAYERS.

Every module (a .c/.h pair, or one of them) must appear in src/LAYERS, and
may include only the headers of modules on lower levels (and its own).
Prints TAP: one line per module, then 1..N. Exits 1 on any violation.
    tools/check-layers.py [SRC_DIR]
"""
import os
import re
import sys

src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    os.path.dirname(os.path.abspath(__file__)), '..', 'src')
levels = {}
with open(os.path.join(src, 'LAYERS'), encoding='utf-8') as f:
    for line in f:
        line = line.split('#', 1)[0].split()
        if not line:
            continue
        for m in line[1:]:
            levels[m] = int(line[0])

include = re.compile(r'^\s*#\s*include\s+"([A-Za-z0-9_]+)\.h"', re.M)
modules = {}
# a library's files sit in a folder of src/ of their own (src/redis/)
paths = sorted(os.path.join(d, n) for d, _, names in os.walk(src) for n in names)
for path in paths:
    base, ext = os.path.splitext(os.path.basename(path))
    if ext not in ('.c', '.h'):
        continue
    with open(path, encoding='utf-8') as f:
        modules.setdefault(base, set()).update(include.findall(f.read()))

n = failed = 0
for mod, incs in sorted(modules.items()):
    n += 1
    problems = []
    if mod not in levels:
        problems.append('not in src/LAYERS')
    else:
        for inc in sorted(incs - {mod}):
            if inc not in levels:
                problems.append(f'includes {inc}.h, which is not in src/LAYERS')
            elif levels[inc] >= levels[mod]:
                problems.append(f'includes {inc}.h (level {levels[inc]}) from level {levels[mod]}')
    if problems:
        failed += 1
        print(f'not ok {n} - layers: {mod}')
        for p in problems:
            print(f'#   {p}')
    else:
        print(f'ok {n} - layers: {mod} (level {levels[mod]})')
print(f'1..{n}')
sys.exit(1 if failed else 0)
