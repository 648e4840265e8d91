#!/usr/bin/env python3
"""check-states.py - every state machine of src/ in one form, with one owner.

A state machine is an enum whose name ends in _state (`enum conn_state`).
Each must have the form charge.c has:

    enum NAME_state { ..., <COUNT> };            the states, then their count
    static const unsigned NAME_allowed[<COUNT>] = { [S] = B(T) | ..., ... };
    static void NAME_set_state(..., enum NAME_state to)
    {   ... assert((NAME_allowed[...] & (1u << to)) != 0); ... = to; }

so this checks, for each such enum: one table NAME_allowed in the file of
the setter, with a row for every state (a row lists its targets: no row
may allow everything); exactly one setter in src/ (a function *_set_state
that reads NAME_allowed: NAME_set_state, or shorter) that
asserts against the table and has no blanket self-transition (`== to`);
and no write of the state outside that setter: no assignment of one of
the enum's states (`x->f = S_IDLE`) anywhere in src/, and no assignment
to a member declared `enum NAME_state f;` in the files that can see the
enum (the file that declares it, or the files that include its header).
One write is not a change: a new object given the first state, in the
file of the setter (cx->state = CS_CHECK where it is made).

Prints TAP: one line per state machine, then 1..N and a comment with the
count of setters. Exits 1 on any violation.
    tools/check-states.py [SRC_DIR]
"""
import os
import re
import sys

ENUM = re.compile(r'\benum\s+(\w+)_state\s*\{([^}]*)\}', re.S)
MEMBER_DECL = re.compile(r'\benum\s+(\w+)_state\s+(\w+)\s*;')
FUNC_START = re.compile(r'^(\w+)\(')
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def strip_comments(text):
    """text with /* */ and // comments blanked (newlines kept)."""
    def blank(m):
        return re.sub(r'[^\n]', ' ', m.group(0))
    return re.sub(r'/\*.*?\*/|//[^\n]*', blank, text, flags=re.S)


def read_sources(src):
    """{path: text without comments} for every .c/.h under src."""
    out = {}
    for root, dirs, files in os.walk(src):
        dirs.sort()
        for name in sorted(files):
            if name.endswith(('.c', '.h')):
                path = os.path.join(root, name)
                with open(path, encoding='utf-8') as f:
                    out[path] = strip_comments(f.read())
    return out


def functions(text):
    """[(name, first line, last line, body)] of the functions of a file in
    this tree's style: the name at column 0, the braces at column 0."""
    lines = text.split('\n')
    out, name, start = [], None, 0
    for i, line in enumerate(lines):
        m = FUNC_START.match(line)
        if m and name is None:
            name, start = m.group(1), i
        elif line.startswith('}') and name is not None:
            out.append((name, start + 1, i + 1, '\n'.join(lines[start:i + 1])))
            name = None
        elif line.startswith(('#', 'static ', 'struct ', 'enum ')) and \
                name is not None and '{' not in '\n'.join(lines[start:i]):
            name = None  # a prototype, not a definition
    return out


def enclosing(funcs, lineno):
    for name, first, last, _ in funcs:
        if first <= lineno <= last:
            return name
    return None


def main(argv):
    if len(argv) > 1 or any(a.startswith('-') for a in argv):
        print('usage: check-states.py [SRC_DIR]', file=sys.stderr)
        return 2
    here = os.path.dirname(os.path.abspath(__file__))
    src = argv[0] if argv else os.path.join(here, '..', 'src')
    sources = read_sources(src)
    funcs = {p: functions(t) for p, t in sources.items()}

    machines = {}  # name -> (declaring file, [members])
    for path, text in sources.items():
        for m in ENUM.finditer(text):
            members = [w.split('=')[0].strip() for w in m.group(2).split(',')]
            machines[m.group(1)] = (path, [w for w in members if w])
    fields = {}  # name -> {member names declared with the enum's type}
    for text in sources.values():
        for m in MEMBER_DECL.finditer(text):
            fields.setdefault(m.group(1), set()).add(m.group(2))

    sharing = {}  # each setter -> its machine
    for m in machines:
        for fs in funcs.values():
            for f in fs:
                if f[0].endswith('_set_state') and re.search(r'\b' + m + r'_allowed\b', f[3]):
                    sharing[f[0]] = m
    n = failed = setters = 0
    for name in sorted(machines):
        decl, members = machines[name]
        states, count = members[:-1], members[-1] if members else ''
        table = f'{name}_allowed'
        rel = os.path.relpath(decl, src)
        bad = []
        if not count.endswith('NSTATES'):
            bad.append(f'enum {name}_state does not end with its count (..._NSTATES)')
            states = members
        # the setter: a function *_set_state that reads the table (named
        # NAME_set_state, or shorter: call_set_state for http_call_state)
        defs = [(p, f) for p, fs in funcs.items() for f in fs
                if f[0].endswith('_set_state') and re.search(r'\b' + table + r'\b', f[3])]
        setter = defs[0][1][0] if len(defs) == 1 else f'{name}_set_state'
        if len(defs) != 1:
            bad.append(f'{len(defs)} functions *_set_state() read {table}, want one')
        else:
            setters += 1
            path, (_, _, _, body) = defs[0]
            if not re.search(r'assert\s*\(\s*\(\s*' + table + r'\s*\[', body):
                bad.append(f'{setter}() does not assert against {table}[from] & (1u << to)')
            if re.search(r'==\s*to\b', body):
                bad.append(f'{setter}() allows a blanket self-transition (== to): '
                           'list it in the table where it may happen')
            m = re.search(r'static\s+const\s+unsigned\s+' + table +
                          r'\s*\[\s*' + re.escape(count) + r'\s*\]\s*=\s*\{(.*?)\};',
                          sources[path], re.S)
            if m is None:
                bad.append(f'no table "static const unsigned {table}[{count}]" '
                           f'beside {setter}()')
            else:
                rows = dict(re.findall(r'\[\s*(\w+)\s*\]\s*=\s*([^\[]*?)\s*,?\s*(?=\[|$)',
                                       m.group(1), re.S))
                for s in states:
                    if s not in rows:
                        bad.append(f'{table} has no row for {s}')
                    elif re.fullmatch(r'~0u?|-1|0xf+u?|1', rows[s].strip()):
                        bad.append(f'{table}[{s}] allows every state: list its targets')
        # writes of the state outside its setter
        const = re.compile(r'(?<![=!<>])=\s*(' + '|'.join(map(re.escape, states)) + r')\b') \
            if states else None
        names = fields.get(name, set())
        member_w = re.compile(r'(?:->|\.)(' + '|'.join(map(re.escape, sorted(names))) +
                              r')\s*=(?!=)') if names else None
        header = os.path.basename(decl) if decl.endswith('.h') else None
        for path, text in sorted(sources.items()):
            sees = path == decl or (header is not None and header in
                                    [os.path.basename(i) for i in INCLUDE.findall(text)])
            for lineno, line in enumerate(text.split('\n'), 1):
                hit = (const is not None and const.search(line)) or \
                    (sees and member_w is not None and member_w.search(line))
                if not hit or re.match(r'\s*\[', line):
                    continue  # a row of a table, not a write
                where = enclosing(funcs[path], lineno)
                if where == setter:
                    continue
                # a member name two machines share (cmd->st, n->st): the
                # other's setter writes its own
                if where in sharing and hit.re is member_w and \
                        hit.group(1) in fields.get(sharing[where], ()):
                    continue
                # a new object starts in the first state, in the setter's file
                if hit.re is const and hit.group(1) == states[0] and \
                        defs and path == defs[0][0]:
                    continue
                bad.append(f'{os.path.relpath(path, src)}:{lineno}: writes the state '
                           f'outside {setter}(): {line.strip()}')
        n += 1
        if bad:
            failed += 1
            print(f'not ok {n} - states: {name}_state ({rel})')
            for b in bad:
                print(f'#   {b}')
        else:
            print(f'ok {n} - states: {name}_state ({rel}): {len(states)} states, '
                  f'changed only by {setter}() against {table}')
    print(f'# {len(machines)} state machine(s), {setters} setter(s), one idiom')
    print(f'1..{n}')
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
