#!/usr/bin/env python3
"""check-map.py - the includes and the calls of src/ against the map in src/LAYERS.

A module is a .c/.h pair (or one of them) named by its path under src/
without the extension: "util", "redis/cmd". src/LAYERS lists every module
in named tiers, bottom up; within a tier each line is one step, so every
module has a step number, counted over the whole file:

    tier base base/  # what the tier holds (its folder: base/)
    base/defaults base/clock    <- step 1
    base/util                   <- step 2 (may use step 1)
    tier codec codec/
    codec/fcgi_codec            <- step 3 (may use steps 1 and 2)
    circle redis/cmd redis/node  # why these two call each other
    only redis/ hiredis.h async.h  # why only that folder (or those) include them

A tier line may name the tier's folder (FOLDER/, or . for src/ itself):
then each of its modules must lie in that folder (or a folder inside it),
so that the tree shows the layers the map names. A module may use
(include a header of, or call a function or read a variable of) only
modules on lower steps. A use of a module on a higher
step runs up; one on the same step runs sideways; both fail. A circle
(modules that use each other, directly or through others: a strongly
connected component of the graph of uses) fails too, unless a `circle`
line names exactly its modules and explains it after a `#`; uses between
the modules of a named circle are allowed in any direction. A named
circle that no longer exists fails too: the map must be true. An `only`
line keeps library headers to its folders: a source outside them that
includes one of them (#include <h>) fails, and so does an `only` line
without its reason or naming no folder of src/. A name in the map that is
no module's path but the file name of exactly one module (one moved into
a folder) is read as that module, with a note to write the path.

Includes are read from the sources. Calls are read from the objects of a
meson build (its compile_commands.json): each object's undefined symbols
(nm -u) are mapped to the module whose object defines them (nm
--defined-only). A module only generated into the build directory (such as
lua_scripts) is found by its file name.

Prints TAP: one line per module, one per circle, then 1..N. Exits 1 on any
violation.
    tools/check-map.py [--stats] [--map=FILE] [SRC_DIR [BUILD_DIR]]
--stats also prints the number of arrows and circles and the longest
functions (with ctags-universal, when installed) as comments; --map reads
another map than SRC_DIR/LAYERS (to measure the code against an old one).
"""
import json
import os
import re
import shutil
import subprocess
import sys

USAGE = 'usage: check-map.py [--stats] [--map=FILE] [SRC_DIR [BUILD_DIR]]'


def parse_map(path):
    """(step of each module, tier of each module, circles, onlys, problems,
    the folder of each tier that names one)."""
    step, tier, circles, onlys, problems, tier_folder = {}, {}, [], [], [], {}
    n = 0
    current = None
    with open(path, encoding='utf-8') as f:
        for lineno, raw in enumerate(f, 1):
            text, _, comment = raw.partition('#')
            words = text.split()
            if not words:
                continue
            if words[0] == 'tier':
                if len(words) not in (2, 3) or (len(words) == 3 and not (
                        words[2] == '.' or words[2].endswith('/'))):
                    problems.append(f'LAYERS:{lineno}: "tier NAME [FOLDER/ or .]", '
                                    f'got {raw.strip()!r}')
                current = words[1] if len(words) > 1 else None
                if len(words) == 3:
                    tier_folder[current] = '' if words[2] == '.' else words[2]
                continue
            if words[0] == 'circle':
                if len(words) < 3:
                    problems.append(f'LAYERS:{lineno}: a circle names two modules or more')
                if not comment.strip():
                    problems.append(f'LAYERS:{lineno}: circle {" ".join(words[1:])} '
                                    'is not explained (add "# why")')
                circles.append((frozenset(words[1:]), lineno, comment.strip()))
                continue
            if words[0] == 'only':
                folders = [w for w in words[1:] if w.endswith('/')]
                headers = [w for w in words[1:] if not w.endswith('/')]
                if not folders or not headers:
                    problems.append(f'LAYERS:{lineno}: "only FOLDER/... HEADER...", '
                                    f'got {raw.strip()!r}')
                elif not comment.strip():
                    problems.append(f'LAYERS:{lineno}: only {" ".join(folders)} is not '
                                    'explained (add "# why")')
                else:
                    onlys.append((folders, headers, lineno))
                continue
            if current is None:
                problems.append(f'LAYERS:{lineno}: modules before the first "tier NAME" line')
            n += 1
            for m in words:
                if m in step:
                    problems.append(f'LAYERS:{lineno}: {m} is listed twice')
                step[m] = n
                tier[m] = current
    return step, tier, circles, onlys, problems, tier_folder


def in_folder(mod, folder):
    """True when module mod lies in folder ('' is src/ itself; a folder holds
    its subfolders too)."""
    if folder == '':
        return '/' not in mod
    return mod.startswith(folder)


INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
SYS_INCLUDE = re.compile(r'^\s*#\s*include\s+<([^>]+)>', re.M)


def read_sys_includes(src):
    """{module: [(file, header)]} of every #include <header> under src."""
    out = {}
    for root, dirs, files in os.walk(src):
        dirs.sort()
        for name in sorted(files):
            base, ext = os.path.splitext(name)
            if ext not in ('.c', '.h'):
                continue
            path = os.path.join(root, name)
            mod = os.path.relpath(os.path.join(root, base), src).replace(os.sep, '/')
            with open(path, encoding='utf-8') as f:
                for h in SYS_INCLUDE.findall(f.read()):
                    out.setdefault(mod, []).append((os.path.relpath(path, src), h))
    return out


def read_modules(src):
    """{module: [(file, [included names])]} for every .c/.h under src."""
    modules = {}
    for root, dirs, files in os.walk(src):
        dirs.sort()
        for name in sorted(files):
            base, ext = os.path.splitext(name)
            if ext not in ('.c', '.h'):
                continue
            path = os.path.join(root, name)
            mod = os.path.relpath(os.path.join(root, base), src).replace(os.sep, '/')
            with open(path, encoding='utf-8') as f:
                modules.setdefault(mod, []).append((path, INCLUDE.findall(f.read())))
    return modules


def resolve_include(src, modules, step, path, inc):
    """The module an #include "inc" in file path names, or None (not ours)."""
    base = os.path.splitext(inc)[0]
    for d in (os.path.dirname(path), src):
        cand = os.path.relpath(os.path.normpath(os.path.join(d, base)), src)
        cand = cand.replace(os.sep, '/')
        if cand in modules and os.path.exists(os.path.join(d, inc)):
            return cand
    # a header found through another include directory: by its file name
    same = [m for m in modules if m.rsplit('/', 1)[-1] == base.rsplit('/', 1)[-1]
            and os.path.exists(os.path.join(src, m + '.h'))]
    if len(same) == 1:
        return same[0]
    if base in step and base not in modules:
        return base  # generated into the build directory
    return None


def read_objects(src, build, modules, step):
    """({module: [object]}, problems) from the build's compile_commands.json."""
    cc = os.path.join(build, 'compile_commands.json')
    if not os.path.exists(cc):
        return None, [f'no {cc}: build first (meson setup {build} && ninja -C {build})']
    objects, problems = {}, []
    src_abs = os.path.realpath(src)
    with open(cc, encoding='utf-8') as f:
        entries = json.load(f)
    for e in entries:
        file = os.path.realpath(os.path.join(e['directory'], e['file']))
        obj = os.path.join(e['directory'], e['output'])
        if file.startswith(src_abs + os.sep):
            mod = os.path.splitext(os.path.relpath(file, src_abs))[0].replace(os.sep, '/')
        else:
            mod = os.path.splitext(os.path.basename(file))[0]
            if mod not in step or mod in modules or file.startswith(
                    os.path.realpath(os.path.join(src, '..')) + os.sep + 'tests'):
                continue  # a test program or a tool, not a module
        if not os.path.exists(obj):
            problems.append(f'{mod}: no object {obj} (build first)')
            continue
        if os.path.getmtime(file) > os.path.getmtime(obj):
            problems.append(f'{mod}: {obj} is older than {file} (build first)')
        objects.setdefault(mod, []).append(obj)
    return objects, problems


def read_symbols(obj):
    """(defined, undefined) external symbols of one object file."""
    out = subprocess.run(['nm', '-g', obj], check=True, capture_output=True,
                         text=True).stdout
    defined, undefined = set(), set()
    for line in out.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] in ('U', 'w', 'v'):
            undefined.add(parts[1])
        elif len(parts) == 3:
            defined.add(parts[2])
    return defined, undefined


def components(nodes, edges):
    """Strongly connected components of the graph (Tarjan, iterative)."""
    index, low, on, stack, out = {}, {}, set(), [], []
    counter = [0]
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                    advanced = True
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = set()
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.add(w)
                    if w == v:
                        break
                out.append(comp)
    return out


def longest_functions(src, n=5):
    """[(lines, name, file)] of the n longest functions, by ctags-universal."""
    ctags = shutil.which('ctags-universal') or shutil.which('ctags')
    if ctags is None:
        return []
    res = subprocess.run([ctags, '-R', '--languages=C', '--kinds-C=f',
                          '--fields=+ne', '-x', '--_xformat=%N %F %n %e', src],
                         capture_output=True, text=True)
    if res.returncode != 0:
        return []
    funcs = []
    for line in res.stdout.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[2].isdigit() and parts[3].isdigit():
            funcs.append((int(parts[3]) - int(parts[2]) + 1, parts[0],
                          os.path.relpath(parts[1], src)))
    return sorted(funcs, reverse=True)[:n]


def main(argv):
    stats = '--stats' in argv
    maps = [a[len('--map='):] for a in argv if a.startswith('--map=')]
    args = [a for a in argv if a != '--stats' and not a.startswith('--map=')]
    if len(args) > 2 or any(a.startswith('-') for a in args):
        print(USAGE, file=sys.stderr)
        return 2
    here = os.path.dirname(os.path.abspath(__file__))
    src = args[0] if args else os.path.join(here, '..', 'src')
    build = args[1] if len(args) > 1 else os.path.join(src, '..', 'build')

    step, tier, circles, onlys, problems, tier_folder = parse_map(
        maps[-1] if maps else os.path.join(src, 'LAYERS'))
    modules = read_modules(src)
    for folders, _, lineno in onlys:
        for folder in folders:
            if not any(m.startswith(folder) for m in modules):
                problems.append(f'LAYERS:{lineno}: only {folder}: no module of src/ is in it')
    sys_includes = read_sys_includes(src)
    objects, obj_problems = read_objects(src, build, modules, step)
    problems += obj_problems

    # A map name that is no module's path but the file name of exactly one
    # module (redis_cmd for redis/redis_cmd, after a move into a folder) is
    # read as that module, with a note to write the path.
    known = set(modules) | set(objects or {})
    renames = {}
    for name in sorted(set(step) - known):
        same = [m for m in known if m.rsplit('/', 1)[-1] == name]
        if len(same) == 1 and same[0] not in step:
            renames[name] = same[0]
            print(f'# map: {name} is src/{same[0]}: write it by its path in src/LAYERS')
    for old, new in renames.items():
        step[new], tier[new] = step.pop(old), tier.pop(old)
    circles = [(frozenset(renames.get(m, m) for m in members), lineno, why)
               for members, lineno, why in circles]

    # uses[a][b] = what a uses of b: "#include" lines and symbols
    uses = {}

    def use(a, b, what):
        if a != b:
            uses.setdefault(a, {}).setdefault(b, set()).add(what)

    for mod, files in modules.items():
        for path, incs in files:
            for inc in incs:
                dst = resolve_include(src, modules, step, path, inc)
                if dst is not None:
                    use(mod, dst, f'#include "{inc}"')
    definer, undefined = {}, {}
    for mod, objs in sorted((objects or {}).items()):
        for obj in objs:
            d, u = read_symbols(obj)
            for s in d:
                definer.setdefault(s, mod)
            undefined.setdefault(mod, set()).update(u)
    for mod, syms in undefined.items():
        for s in syms:
            if s in definer:
                use(mod, definer[s], f'{s}()')

    in_circle = {}
    for members, _, _ in circles:
        for m in members:
            in_circle.setdefault(m, set()).update(members)

    def exempt(a, b):
        return b in in_circle.get(a, ())

    n = failed = 0
    up = sideways = in_named = 0
    for p in problems:
        n += 1
        failed += 1
        print(f'not ok {n} - map: {p}')
    for m in sorted(set(step) - known):
        n += 1
        failed += 1
        print(f'not ok {n} - map: {m} is in src/LAYERS but is no module of src/')
    for mod in sorted(known):
        n += 1
        bad = []
        if mod not in step:
            bad.append('not in src/LAYERS')
        elif tier[mod] in tier_folder and not in_folder(mod, tier_folder[tier[mod]]) and \
                any(os.path.exists(os.path.join(src, mod + e)) for e in ('.c', '.h')):
            bad.append(f'in tier {tier[mod]}, whose folder is '
                       f'src/{tier_folder[tier[mod]]}, but it is src/{mod}')
        for file, h in sys_includes.get(mod, []):
            for folders, headers, lineno in onlys:
                if h in headers and not any(mod.startswith(f) for f in folders):
                    bad.append(f'{file} includes <{h}>, which only {" ".join(folders)} '
                               f'may (LAYERS:{lineno})')
        for dst, whats in sorted(uses.get(mod, {}).items()):
            if mod not in step:
                break
            if dst not in step:
                bad.append(f'uses {dst}, which is not in src/LAYERS')
                continue
            if step[dst] < step[mod]:
                continue
            if exempt(mod, dst):
                in_named += 1
                continue
            way = 'up' if step[dst] > step[mod] else 'sideways'
            up += way == 'up'
            sideways += way == 'sideways'
            bad.append(f'{way}: uses {dst} (tier {tier[dst]}, step {step[dst]}) from '
                       f'tier {tier[mod]}, step {step[mod]}: {", ".join(sorted(whats))}')
        if bad:
            failed += 1
            print(f'not ok {n} - map: {mod}')
            for b in bad:
                print(f'#   {b}')
        else:
            print(f'ok {n} - map: {mod} (tier {tier[mod]}, step {step[mod]})')

    graph = {a: set(bs) for a, bs in uses.items()}
    found = [c for c in components(known | set(graph), graph) if len(c) > 1]
    named = {members: (lineno, why) for members, lineno, why in circles}
    for comp in sorted(found, key=lambda c: sorted(c)):
        n += 1
        members = ' '.join(sorted(comp))
        # the arrows that close it: those against the map, else all of them
        inside = [(a, b) for a in comp for b in graph.get(a, ()) if b in comp]
        against = [(a, b) for a, b in inside
                   if step.get(b, 0) >= step.get(a, 0) and not exempt(a, b)]
        arrows = sorted(f'{a} -> {b}' for a, b in (against or inside))
        if frozenset(comp) in named:
            lineno, why = named[frozenset(comp)]
            print(f'ok {n} - map: circle {members} is named (LAYERS:{lineno}: {why})')
            continue
        failed += 1
        print(f'not ok {n} - map: circle {members} is not named in src/LAYERS')
        for arrow in arrows:
            print(f'#   {arrow}')
    for members, lineno, _ in circles:
        if not any(members <= c for c in found):  # in a bigger one: above
            n += 1
            failed += 1
            print(f'not ok {n} - map: LAYERS:{lineno} names circle {" ".join(sorted(members))}, '
                  'which is no circle of the code: remove or correct it')
    if stats:
        arrows = sum(len(bs) for bs in uses.values())
        print(f'# {len(known)} modules, {arrows} arrows between them; against the map: '
              f'{up} run up, {sideways} run sideways, {in_named} more up or sideways '
              f'inside named circles; {len(found)} circle(s) '
              f'({len([c for c in found if frozenset(c) in named])} named)')
        for lines, name, path in longest_functions(src):
            print(f'# long function: {name} ({path}) {lines} lines')
    print(f'1..{n}')
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
