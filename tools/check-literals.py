#!/usr/bin/env python3
"""check-literals.py - one message, one string literal (STYLE: `git grep`
finds where a message is written).

Fails on a string literal that ends a line without ending in "\\n" when the
next line starts with another literal: the two are one text cut in two.
A text of several output lines may be written one literal per line, each
ending in "\\n" (a usage text, a Prometheus header).
    tools/check-literals.py [--pending FILE...] [SRC_DIR]
--pending names files, or prefixes of paths (src/store/redis: its files and
src/store/redis/), still to be joined by their owners, who are rewriting them:
their cuts are counted in a comment, not failed. Prints TAP.
"""
import os
import re
import sys

END = re.compile(r'"\s*$')
END_NL = re.compile(r'\\n"\s*$')
START = re.compile(r'\s*"')


def splits(path):
    """[line numbers] where a literal is cut in two across lines."""
    with open(path, encoding='utf-8') as f:
        lines = f.read().split('\n')
    out = []
    for i in range(len(lines) - 1):
        cur = lines[i]
        if cur.lstrip().startswith(('#', '*', '/*', '//')):
            continue
        if END.search(cur) and not END_NL.search(cur) and START.match(lines[i + 1]):
            out.append(i + 1)
    return out


def main(argv):
    pending, args = set(), argv
    if '--pending' in argv:
        k = argv.index('--pending')
        pending = set(argv[k + 1:])
        args = argv[:k]
    src = args[0] if args else os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', 'src')
    n = failed = 0
    waiting = 0
    left = {p: 0 for p in pending}
    for root, dirs, files in os.walk(src):
        dirs.sort()
        for name in sorted(files):
            if not name.endswith(('.c', '.h')):
                continue
            path = os.path.join(root, name)
            rel = os.path.relpath(path, os.path.join(src, '..'))
            found = splits(path)
            owners = [p for p in pending if rel.startswith(p)]
            if owners:
                waiting += len(found)
                for p in owners:
                    left[p] += len(found)
                if found:
                    print(f'# pending: {rel}: {len(found)} literal(s) cut in two '
                          f'(lines {", ".join(map(str, found))})')
                continue
            if not found:
                continue
            n += 1
            failed += 1
            print(f'not ok {n} - messages: {rel}: a literal cut in two at line(s) '
                  f'{", ".join(map(str, found))} (join it: one message, one literal)')
    for p in sorted(pending):
        if left[p] == 0:
            print(f'# pending: {p} has none left: drop it from --pending')
    n += 1
    if failed:
        print(f'not ok {n} - messages: every text one literal, outside the pending files')
    else:
        print(f'ok {n} - messages: every text one literal, outside the pending files '
              f'({waiting} left in them)')
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
