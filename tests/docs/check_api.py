#!/usr/bin/env python3
"""check_api.py - docs/API.md against the code, printed as TAP.

The code is the source of truth for what exists; docs/API.md is the
contract users read. This script checks that the two name the same things:

  - problem slugs (src/response.c's problem table) and API.md's problem table,
    with the same status and title, each with a page in www/problems/;
  - configuration keys (src/config.c's cfg_rows[]) and API.md's
    configuration table, with the same defaults and numeric bounds, each
    also in the man page docs/charge.8;
  - response headers the code emits (response_header() calls and
    "Name: value\\r\\n" literals in src/*.c) and API.md; every header of
    API.md's response-header table is emitted, every header of its
    request-header table is read (as its CGI variable);
  - every example response in API.md is self-consistent (Content-Length,
    status, problem type/title/status), and a problem example's detail is
    one the code writes (a C string, adjacent literals joined, printf
    conversions matching any text);
  - the series of GET /metrics (src/metrics.c) and API.md's metrics table
    name the same things, and the table lists every outcome label;
  - the repository stands alone: no tracked file refers to the external
    contract by file name or section.

API.md's reference tables are the markdown tables that directly follow an
HTML comment "<!-- check_api:NAME -->". Run from anywhere; exit status 1
when any check fails. Standard library only.
"""
import json
import os
import re
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
API = os.path.join(ROOT, "docs", "API.md")
MAN = os.path.join(ROOT, "docs", "charge.8")

# Built from pieces so that this file does not match its own checks.
EXTERNAL_PATH = ".." + "/shared"
EXTERNAL_FILE = "SP" + "EC.md"
EXTERNAL_CITE = re.compile(rb"\bSP" + rb"EC\b")

# Characters of its own a format string needs to count as a problem detail.
MIN_FIXED = 12
# Response "headers" that are not HTTP headers: CGI's Status directive.
CGI_PSEUDO_HEADERS = {"Status"}
# Request headers that CGI passes without the HTTP_ prefix.
CGI_UNPREFIXED = {"Content-Type": "CONTENT_TYPE", "Content-Length": "CONTENT_LENGTH"}


def read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def strip_c_comments(text):
    return re.sub(r"/\*.*?\*/|//[^\n]*", " ", text, flags=re.S)


def c_literals(text):
    """The contents of the C string literals in text (escapes kept)."""
    return re.findall(r'"((?:[^"\\\n]|\\.)*)"', text)


# --- the code -----------------------------------------------------------

def code_defines():
    """#define NAME value from src/*.h: numbers as int, strings as str."""
    out = {}
    src = os.path.join(ROOT, "src")
    for name in sorted(os.listdir(src)):
        if not name.endswith(".h"):
            continue
        for m in re.finditer(r"^#define\s+(\w+)\s+(.+?)\s*(?:/\*.*)?$",
                             read(os.path.join(src, name)), re.M):
            v = m.group(2).strip()
            if re.fullmatch(r"-?\d+", v):
                out[m.group(1)] = int(v)
            elif re.fullmatch(r'"(?:[^"\\]|\\.)*"', v):
                out[m.group(1)] = v[1:-1]
            elif re.fullmatch(r"\(?\s*\d+\s*\*\s*\d+(?:\s*\*\s*\d+)*\s*\)?", v):
                n = 1
                for d in re.findall(r"\d+", v):
                    n *= int(d)
                out[m.group(1)] = n
    return out


def code_problems():
    """{slug: (status, title)} from src/response.c's problems[] table."""
    text = strip_c_comments(read(os.path.join(ROOT, "src", "response.c")))
    out = {}
    for m in re.finditer(r"\[PROB_\w+\]\s*=\s*\{(.*?)\}", text, re.S):
        lits = c_literals(m.group(1))
        status = re.search(r",\s*(\d{3})\s*,", m.group(1))
        if len(lits) >= 2 and status:
            out[lits[0]] = (int(status.group(1)), "".join(lits[1:]))
    return out


def code_config(defs):
    """[(key, type, min, max, default)] from src/config.c's cfg_rows[]."""
    text = strip_c_comments(read(os.path.join(ROOT, "src", "config.c")))
    block = re.search(r"cfg_rows\[\]\s*=\s*\{(.*?)\n\};", text, re.S)
    rows = []
    if not block:
        return rows
    row_re = re.compile(r'\{\s*"([a-z0-9_]+)"\s*,\s*(CFG_\w+)\s*,\s*([^,]+?)\s*,'
                        r'\s*([^,]+?)\s*,\s*([^,]+?)\s*,\s*([^,]+?)\s*,', re.S)

    def val(tok):
        tok = tok.strip()
        if re.fullmatch(r"-?\d+", tok):
            return int(tok)
        if tok.startswith('"'):
            return tok[1:-1]
        return defs.get(tok)

    for m in row_re.finditer(block.group(1)):
        key, typ, lo, hi, defnum, defstr = m.groups()
        numeric = typ in ("CFG_INT", "CFG_LONG")
        rows.append((key, typ, val(lo) if numeric else None,
                     val(hi) if numeric else None,
                     val(defnum) if numeric else val(defstr)))
    return rows


def code_emitted_headers():
    """{header: [file, ...]} of response headers src/*.c emits."""
    out = {}
    src = os.path.join(ROOT, "src")
    for name in sorted(os.listdir(src)):
        if not name.endswith(".c"):
            continue
        text = strip_c_comments(read(os.path.join(src, name)))
        found = set(re.findall(r'response_header\s*\(\s*[^,]+?,\s*"([^"]+)"', text))
        for lit in c_literals(text):
            # header framing: "Name: " at the start of the literal or after a
            # CRLF, in a literal that has a CRLF or ends in ": "
            if "\\r\\n" not in lit and not lit.endswith(": "):
                continue
            for seg in lit.split("\\r\\n"):
                m = re.match(r"([A-Za-z][A-Za-z0-9-]*): ", seg)
                if m:
                    found.add(m.group(1))
        for h in found - CGI_PSEUDO_HEADERS:
            out.setdefault(h, []).append("src/" + name)
    return out


def code_strings():
    """Every C string of src/*.c, adjacent literals joined (escapes kept)."""
    out = []
    src = os.path.join(ROOT, "src")
    for name in sorted(os.listdir(src)):
        if not name.endswith(".c"):
            continue
        text = strip_c_comments(read(os.path.join(src, name)))
        for m in re.finditer(r'"(?:[^"\\\n]|\\.)*"(?:\s*"(?:[^"\\\n]|\\.)*")*', text):
            out.append("".join(c_literals(m.group(0))))
    return out


def detail_written(detail, strings):
    """True when some C string is detail, or formats to it: %s as any text,
    integer conversions as digits; the string's own text must be at least
    MIN_FIXED characters (a bare "%s" proves nothing)."""
    conv = re.compile(r"%[-+ #0-9.]*(?:ll|l|z|h)?([sdiuxXgfc])")
    for lit in strings:
        lit = lit.replace('\\"', '"').replace("\\\\", "\\")
        if lit == detail:
            return True
        if "%" not in lit:
            continue
        lit = lit.replace("%%", "\0")
        fixed = conv.sub("", lit)
        if len(fixed) < MIN_FIXED:
            continue
        pat, pos = "", 0
        for m in conv.finditer(lit):
            pat += re.escape(lit[pos:m.start()].replace("\0", "%"))
            pat += ".+" if m.group(1) == "s" else "-?[0-9a-fA-F.]+"
            pos = m.end()
        pat += re.escape(lit[pos:].replace("\0", "%"))
        if re.fullmatch(pat, detail, re.S):
            return True
    return False


def code_metric_series():
    """The series names src/metrics.c renders (histogram parts folded)."""
    text = strip_c_comments(read(os.path.join(ROOT, "src", "metrics.c")))
    out = set()
    for lit in c_literals(text):
        for n in re.findall(r"\bcharge_[a-z_]+", lit):
            out.add(re.sub(r"_(bucket|sum|count)$", "", n))
    return out


def code_outcome_labels():
    """The success labels of charge_requests_total (src/response.c)."""
    text = read(os.path.join(ROOT, "src", "response.c"))
    return re.findall(r'const char OUTCOME_\w+\[\]\s*=\s*"([^"]+)"', text)


def code_text():
    src = os.path.join(ROOT, "src")
    return "\n".join(read(os.path.join(src, n)) for n in sorted(os.listdir(src))
                     if n.endswith((".c", ".h")))


# --- docs/API.md ----------------------------------------------------------

def doc_table(text, name):
    """Rows (lists of cells) of the table after <!-- check_api:name -->."""
    m = re.search(r"<!--\s*check_api:%s\s*-->\s*\n((?:\|.*\n?)+)" % re.escape(name), text)
    if not m:
        return None
    rows = []
    for line in m.group(1).strip().split("\n"):
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        if all(re.fullmatch(r":?-+:?", c) for c in cells):
            continue
        rows.append(cells)
    return rows[1:]     # without the header row


def unticked(cell):
    return cell.replace("`", "").strip()


def doc_header_names(rows):
    out = []
    for r in rows or []:
        m = re.match(r"`?([A-Za-z][A-Za-z0-9-]*)", r[0])
        if m:
            out.append(m.group(1))
    return out


def doc_examples(text):
    """(section, status line, headers dict, body) of every ```http block."""
    out = []
    for m in re.finditer(r"```http\n(.*?)\n```", text, re.S):
        section = "top"
        for h in re.finditer(r"^#+ (§[\d.]+)", text[:m.start()], re.M):
            section = h.group(1)
        block = m.group(1)
        head, _, body = block.partition("\n\n")
        lines = head.split("\n")
        headers = {}
        for line in lines[1:]:
            k, _, v = line.partition(": ")
            headers[k] = v
        out.append((section, lines[0], headers, body))
    return out


# --- TAP --------------------------------------------------------------------

class Tap:
    def __init__(self):
        self.n = 0
        self.failed = 0

    def check(self, ok, name, problems=()):
        self.n += 1
        print("%s %d - %s" % ("ok" if ok else "not ok", self.n, name))
        if not ok:
            self.failed += 1
            for p in problems:
                print("#   " + p)
        sys.stdout.flush()

    def items(self, missing, name, what):
        """One test: missing is a sorted list of names that fail."""
        self.check(not missing, name, ["%s: %s" % (what, x) for x in missing])


def tracked_files():
    try:
        out = subprocess.run(["git", "-C", ROOT, "ls-files", "-z"], check=True,
                             capture_output=True).stdout
        files = [p for p in out.decode().split("\0") if p]
        if files:
            return files
    except (OSError, subprocess.CalledProcessError):
        pass
    # not a git checkout (an exported tree): every file but build output
    files = []
    for d, dirs, names in os.walk(ROOT):
        dirs[:] = [x for x in dirs if x not in (".git", "var", "node_modules", "__pycache__")
                   and not x.startswith("build")]
        files += [os.path.relpath(os.path.join(d, n), ROOT) for n in names]
    return files


def main():
    NTESTS = 19
    print("1..%d" % NTESTS)
    t = Tap()
    api = read(API) if os.path.exists(API) else ""
    defs = code_defines()

    # 1-4: problem types
    probs = code_problems()
    drows = doc_table(api, "problems") or []
    dprobs = {}
    for r in drows:
        m = re.search(r"/problems/([a-z0-9-]+)", r[0])
        if m and len(r) >= 3:
            st = re.search(r"\d{3}", r[1])
            dprobs[m.group(1)] = (int(st.group(0)) if st else None, unticked(r[2]))
    t.check(bool(probs) and bool(dprobs), "the problem tables parse (src/response.c: %d, "
            "docs/API.md: %d)" % (len(probs), len(dprobs)))
    t.items(sorted(s for s in probs if s not in dprobs),
            "every problem slug of src/response.c is in docs/API.md's problem table",
            "not documented in docs/API.md")
    t.items(sorted(s for s in dprobs if s not in probs),
            "every problem type of docs/API.md's problem table is in src/response.c",
            "not in src/response.c")
    diffs = []
    for s in sorted(set(probs) & set(dprobs)):
        if probs[s][0] != dprobs[s][0]:
            diffs.append("%s: status %s in code, %s in docs" % (s, probs[s][0], dprobs[s][0]))
        if probs[s][1] != dprobs[s][1]:
            diffs.append("%s: title %r in code, %r in docs" % (s, probs[s][1], dprobs[s][1]))
    t.check(not diffs, "problem statuses and titles agree between code and docs", diffs)

    # 5: problem pages
    pages = os.path.join(ROOT, "www", "problems")
    index = read(os.path.join(pages, "index.html")) if os.path.exists(
        os.path.join(pages, "index.html")) else ""
    missing = []
    for s in sorted(set(probs) | set(dprobs)):
        if not os.path.isfile(os.path.join(pages, s)):
            missing.append("www/problems/%s does not exist" % s)
        if 'href="%s"' % s not in index:
            missing.append("www/problems/index.html does not link %s" % s)
    t.check(not missing, "every problem type has a page in www/problems/, linked from its index",
            missing)

    # 6-9: configuration keys
    rows = code_config(defs)
    ckeys = {r[0]: r for r in rows}
    crow = doc_table(api, "config") or []
    dkeys = {unticked(r[0]): r for r in crow if r}
    t.check(bool(ckeys) and bool(dkeys), "the configuration tables parse (src/config.c: %d, "
            "docs/API.md: %d)" % (len(ckeys), len(dkeys)))
    t.items(sorted(k for k in ckeys if k not in dkeys),
            "every configuration key of src/config.c is in docs/API.md's configuration table",
            "not documented in docs/API.md")
    t.items(sorted(k for k in dkeys if k not in ckeys),
            "every configuration key of docs/API.md's configuration table is in src/config.c",
            "not in src/config.c")
    diffs = []
    for k in sorted(set(ckeys) & set(dkeys)):
        _, typ, lo, hi, default = ckeys[k]
        cells = dkeys[k]
        ddef = unticked(cells[1]) if len(cells) > 1 else ""
        if typ in ("CFG_INT", "CFG_LONG"):
            if str(default) != ddef:
                diffs.append("%s: default %s in code, %s in docs" % (k, default, ddef))
            nums = [int(x) for x in re.findall(r"-?\d+", cells[2] if len(cells) > 2 else "")]
            if nums[:2] != [lo, hi]:
                diffs.append("%s: bounds %s … %s in code, %s in docs" % (k, lo, hi, cells[2]))
        elif default is not None and default != ddef:
            diffs.append("%s: default %r in code, %r in docs" % (k, default, ddef))
    t.check(not diffs, "configuration defaults and numeric bounds agree between code and docs",
            diffs)

    # 10: the man page
    man = read(MAN) if os.path.exists(MAN) else ""
    t.items(sorted(k for k in set(ckeys) | set(dkeys) if k not in man),
            "every configuration key is in docs/charge.8", "not in docs/charge.8")

    # 11-13: headers
    emitted = code_emitted_headers()
    t.items(sorted(h for h in emitted
                   if not re.search(r"(?<![A-Za-z0-9-])%s(?![A-Za-z0-9-])" % re.escape(h), api)),
            "every response header the code emits is in docs/API.md",
            "emitted but not documented")
    src_all = code_text()
    resp_doc = doc_header_names(doc_table(api, "response-headers"))
    t.items(sorted(h for h in resp_doc
                   if h not in emitted and '"%s"' % h not in src_all
                   and '"%s: ' % h not in src_all),
            "every header of docs/API.md's response-header table is emitted by src/",
            "documented but not emitted")
    req_doc = doc_header_names(doc_table(api, "request-headers"))
    t.items(sorted(h for h in req_doc
                   if CGI_UNPREFIXED.get(h, "HTTP_" + h.upper().replace("-", "_"))
                   not in src_all),
            "every header of docs/API.md's request-header table is read by src/",
            "documented but not read (no CGI variable in src/)")

    # 14: examples
    bad = []
    ex = doc_examples(api)
    for sec, status_line, headers, body in ex:
        where = "%s %s" % (sec, status_line)
        m = re.match(r"HTTP/1\.1 (\d{3}) ", status_line)
        if not m:
            bad.append("%s: bad status line" % where)
            continue
        status = int(m.group(1))
        clen = headers.get("Content-Length")
        if clen is None or int(clen) != len(body.encode()):
            bad.append("%s: Content-Length %s, body has %d bytes" % (where, clen,
                                                                     len(body.encode())))
        for h in ("Content-Type", "Cache-Control", "X-Request-Id"):
            if h not in headers:
                bad.append("%s: no %s" % (where, h))
        if headers.get("Content-Type") == "application/problem+json":
            try:
                doc = json.loads(body)
            except ValueError:
                bad.append("%s: body is not JSON" % where)
                continue
            slug = doc.get("type", "").rpartition("/")[2]
            if doc.get("status") != status:
                bad.append("%s: body status %s" % (where, doc.get("status")))
            if slug in probs and probs[slug] != (status, doc.get("title")):
                bad.append("%s: %s is %s %r in the code" % (where, slug, *probs[slug]))
            if slug not in probs and slug not in dprobs:
                bad.append("%s: unknown problem type %s" % (where, slug))
    t.check(bool(ex) and not bad, "the %d example responses in docs/API.md are consistent"
            % len(ex), bad)
    strings = code_strings()
    stale = []
    for sec, status_line, headers, body in ex:
        if headers.get("Content-Type") != "application/problem+json":
            continue
        try:
            detail = json.loads(body).get("detail")
        except ValueError:
            continue
        # invalid-request: "<field>: <message>" of the first error
        fm = re.fullmatch(r"[\w.\[\]]+: (.+)", detail or "")
        if detail is not None and not detail_written(detail, strings) and not (
                fm and detail_written(fm.group(1), strings)):
            stale.append("%s %s: detail %r is not written by src/" % (sec, status_line, detail))
    t.check(bool(strings) and not stale, "every problem example's detail is one the code writes",
            stale)

    # 17-18: GET /metrics
    series = code_metric_series()
    mrows = doc_table(api, "metrics") or []
    dseries = {re.match(r"`?([a-z_]+)", r[0]).group(1): r for r in mrows
               if r and re.match(r"`?([a-z_]+)", r[0])}
    diffs = ["rendered by src/metrics.c, not in docs/API.md's metrics table: %s" % n
             for n in sorted(series - set(dseries))]
    diffs += ["in docs/API.md's metrics table, not rendered: %s" % n for n in sorted(set(dseries) - series)]
    t.check(bool(series) and bool(dseries) and not diffs,
            "the series of GET /metrics and docs/API.md's metrics table agree", diffs)
    req = dseries.get("charge_requests_total", [""] * 3)
    cell = " ".join(req[1:])
    labels = code_outcome_labels()
    t.items(sorted(x for x in labels if "`%s`" % x not in cell),
            "docs/API.md's charge_requests_total row lists every outcome label of src/response.c",
            "outcome not listed")

    # 19-20: the repository stands alone
    files = tracked_files()
    refs, cites = [], []
    for rel in files:
        path = os.path.join(ROOT, rel)
        if not os.path.isfile(path):
            continue
        with open(path, "rb") as f:
            data = f.read()
        for needle in (EXTERNAL_PATH, EXTERNAL_FILE):
            if needle.encode() in data:
                refs.append("%s contains %s" % (rel, needle))
        if EXTERNAL_CITE.search(data):
            lines = [str(i + 1) for i, line in enumerate(data.split(b"\n"))
                     if EXTERNAL_CITE.search(line)]
            cites.append("%s:%s" % (rel, ",".join(lines[:12]) +
                                    (",…" if len(lines) > 12 else "")))
    t.check(not refs, "no tracked file refers to %s or %s" % (EXTERNAL_PATH, EXTERNAL_FILE), refs)
    t.check(not cites, "no tracked file cites the external contract by section "
            "(cite docs/API.md §N instead)", cites)

    if t.n != NTESTS:
        print("# internal: planned %d tests, ran %d" % (NTESTS, t.n))
        return 1
    return 1 if t.failed else 0


if __name__ == "__main__":
    sys.exit(main())
