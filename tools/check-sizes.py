#!/usr/bin/env python3
"""check-sizes.py - no function too long to read, no file too long to hold.

Every function of the C files under the function folders is at most
FUNC_MAX lines (from its name at column 0 to its closing brace at column 0,
this tree's style), and every C file under the file folders at most
FILE_MAX lines. A file named with --pending (its owner is rewriting it)
is reported but does not fail. Prints TAP: one line per folder and rule,
then 1..N. Exits 1 when one is over.
    tools/check-sizes.py [--functions=DIR,...] [--files=DIR,...] [--pending=FILE,...]
(defaults: functions in src, files in src and sim)
"""
import os
import re
import sys

FUNC_MAX = 90
FILE_MAX = 1000
FUNC_START = re.compile(r'^(\w+)\(')


def c_files(top):
    for root, dirs, files in os.walk(top):
        dirs.sort()
        for name in sorted(files):
            if name.endswith(('.c', '.h')):
                yield os.path.join(root, name)


def long_functions(path):
    """[(lines, name)] of the functions of path longer than FUNC_MAX."""
    out, name, start = [], None, 0
    with open(path, encoding='utf-8') as f:
        lines = f.read().split('\n')
    for i, line in enumerate(lines):
        m = FUNC_START.match(line)
        if m and (i + 1 < len(lines)) and name is None and not line.rstrip().endswith(';'):
            name, start = m.group(1), i
        elif name is not None and line.startswith('}'):
            if i - start + 1 > FUNC_MAX:
                out.append((i - start + 1, name))
            name = None
        elif name is not None and line.rstrip().endswith(';') and '{' not in line \
                and not any(l.startswith('{') for l in lines[start:i + 1]):
            name = None  # a prototype over several lines
    return out


def main(argv):
    funcs, files, pending = ['src'], ['src', 'sim'], set()
    for a in argv:
        if a.startswith('--pending='):
            pending |= {os.path.normpath(f) for f in a.split('=', 1)[1].split(',') if f}
            continue
        if a.startswith('--functions='):
            funcs = [d for d in a.split('=', 1)[1].split(',') if d]
        elif a.startswith('--files='):
            files = [d for d in a.split('=', 1)[1].split(',') if d]
        else:
            print(__doc__.strip().split('\n')[-2], file=sys.stderr)
            return 2
    n = failed = 0
    for top in funcs:
        n += 1
        over = [(ln, name, p) for p in c_files(top) for ln, name in long_functions(p)]
        for ln, name, p in [o for o in over if os.path.normpath(o[2]) in pending]:
            print(f'# pending its owner: {p}: {name}() {ln} lines')
        over = [o for o in over if os.path.normpath(o[2]) not in pending]
        if over:
            failed += 1
            print(f'not ok {n} - sizes: a function of {top}/ over {FUNC_MAX} lines')
            for ln, name, p in sorted(over, reverse=True):
                print(f'#   {p}: {name}() {ln} lines')
        else:
            print(f'ok {n} - sizes: no function of {top}/ over {FUNC_MAX} lines')
    for top in files:
        n += 1
        over = []
        for p in c_files(top):
            with open(p, encoding='utf-8') as f:
                k = sum(1 for _ in f)
            if k > FILE_MAX and os.path.normpath(p) in pending:
                print(f'# pending its owner: {p}: {k} lines')
            elif k > FILE_MAX:
                over.append((k, p))
        if over:
            failed += 1
            print(f'not ok {n} - sizes: a file of {top}/ over {FILE_MAX} lines')
            for k, p in sorted(over, reverse=True):
                print(f'#   {p}: {k} lines')
        else:
            print(f'ok {n} - sizes: no file of {top}/ over {FILE_MAX} lines')
    print(f'1..{n}')
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
