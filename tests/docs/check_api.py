#!/usr/bin/env python3
"""check_api.py - docs/API.md against the code, printed as TAP.

The code is the source of truth for what exists; docs/API.md is the
contract users read. This script checks that the two name the same things:

  - problem slugs (src/codec/response.c's problem table) and API.md's problem table,
    with the same status and title, each with a page in www/problems/;
  - configuration keys (src/config/config.c's cfg_rows[]) and API.md's
    configuration table, with the same defaults and numeric bounds, each
    also in the man page docs/charge.8;
  - response headers the code emits (response_header() calls and
    "Name: value\\r\\n" literals in src/*.c) and API.md; every header of
    API.md's response-header table is emitted, every header of its
    request-header table is read (as its CGI variable);
  - every example response in API.md is self-consistent (Content-Length,
    status, problem type/title/status);
  - docs/openapi.yaml and API.md name the same routes, statuses, problem
    types (with status and title) and headers, and the description's body
    limits are src/base/defaults.h's;
  - every relative link of every tracked markdown file leads to a file that
    exists, and its #anchor to a heading (or <a id>) of the target;
  - a configuration key's default is the same wherever it is written:
    src/config/config.c, conf/charge.conf, API.md's table, docs/charge.8 and
    docs/configuration.md;
  - a problem example's detail is
    one the code writes (a C string, adjacent literals joined, printf
    conversions matching any text);
  - the series of GET /metrics (src/codec/metrics.c) and API.md's metrics table
    name the same things, and the table lists every outcome label;
  - the repository stands alone: no tracked file refers to the external
    contract by file name or section.

API.md's reference tables are the markdown tables that directly follow an
HTML comment "<!-- check_api:NAME -->". Run from anywhere; exit status 1
when any check fails. Standard library only.
"""
import json
import os
import urllib.parse
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


# The modules of the responder's own tiers (src/ and its tier folders, as
# src/LAYERS names them), without the libraries that have folders of their
# own inside them: the provider client (src/provider/), the Redis client
# (src/store/redis/, src/codec/redis/) and charge-reconcile (src/reconcile/).
LIBRARY_FOLDERS = ("provider", "reconcile", os.path.join("store", "redis"),
                   os.path.join("codec", "redis"))


def src_files(ext):
    """Paths under src/ (sorted, relative) of the responder's own files
    ending in ext."""
    src = os.path.join(ROOT, "src")
    out = []
    for d, dirs, names in os.walk(src):
        rel = os.path.relpath(d, src)
        if rel != "." and any(rel == f or rel.startswith(f + os.sep)
                              for f in LIBRARY_FOLDERS):
            dirs[:] = []
            continue
        for n in names:
            if n.endswith(ext):
                out.append(os.path.normpath(os.path.join(rel, n)))
    return sorted(out)

def code_defines():
    """#define NAME value from src/*.h: numbers as int, strings as str."""
    out = {}
    src = os.path.join(ROOT, "src")
    for name in src_files(".h"):
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
    """{slug: (status, title)} from src/codec/response.c's problems[] table."""
    text = strip_c_comments(read(os.path.join(ROOT, "src", "codec", "response.c")))
    out = {}
    for m in re.finditer(r"\[PROB_\w+\]\s*=\s*\{(.*?)\}", text, re.S):
        lits = c_literals(m.group(1))
        status = re.search(r",\s*(\d{3})\s*,", m.group(1))
        if len(lits) >= 2 and status:
            out[lits[0]] = (int(status.group(1)), "".join(lits[1:]))
    return out


def code_config(defs):
    """[(key, type, min, max, default)] from src/config/config.c's cfg_rows[]."""
    text = strip_c_comments(read(os.path.join(ROOT, "src", "config", "config.c")))
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
    for name in src_files(".c"):
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
    for name in src_files(".c"):
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
    """The series names src/codec/metrics.c renders (histogram parts folded)."""
    text = strip_c_comments(read(os.path.join(ROOT, "src", "codec", "metrics.c")))
    out = set()
    for lit in c_literals(text):
        for n in re.findall(r"\bcharge_[a-z_]+", lit):
            out.add(re.sub(r"_(bucket|sum|count)$", "", n))
    return out


def code_outcome_labels():
    """The success labels of charge_requests_total (src/codec/response.c)."""
    text = read(os.path.join(ROOT, "src", "codec", "response.c"))
    return re.findall(r'const char OUTCOME_\w+\[\]\s*=\s*"([^"]+)"', text)


def code_text():
    src = os.path.join(ROOT, "src")
    return "\n".join(read(os.path.join(src, n)) for n in src_files((".c", ".h")))


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
    """A table cell's value; "(empty)" (or "– (empty)") is the empty string."""
    v = cell.replace("`", "").strip()
    return "" if v in ("(empty)", "– (empty)", "empty") else v


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


# --- docs/openapi.yaml ---------------------------------------------------------

def load_openapi(path):
    """The description as a dict, or None (no python3-yaml: Debian's python
    runs this suite, see test.sh)."""
    try:
        import yaml
    except ImportError:
        return None
    with open(path, encoding="utf-8") as f:
        return yaml.safe_load(f)


def oa_deref(spec, obj):
    while isinstance(obj, dict) and "$ref" in obj:
        node = spec
        for part in obj["$ref"].lstrip("#/").split("/"):
            node = node[part.replace("~1", "/").replace("~0", "~")]
        obj = node
    return obj


def oa_routes(spec):
    """{(METHOD, path)} with {key} for a path parameter."""
    out = set()
    for path, item in spec.get("paths", {}).items():
        for m in ("get", "head", "post", "put", "delete", "patch"):
            if m in item:
                out.add((m.upper(), re.sub(r"\{[^}]*\}", "{key}", path)))
    return out


def oa_responses(spec):
    """Every response object with its status: [(status, response)]."""
    out = []
    for item in spec.get("paths", {}).values():
        for k, v in item.items():
            if k.startswith("x-charge-") and isinstance(v, dict):
                out.append((None, oa_deref(spec, v)))
            elif isinstance(v, dict) and "responses" in v:
                for st, r in v["responses"].items():
                    out.append((st, oa_deref(spec, r)))
    if "x-charge-unknown-path" in spec:
        out.append(("404", oa_deref(spec, spec["x-charge-unknown-path"])))
    return out


def oa_problems(spec):
    """{slug: (status, title)} of the problem schemas (type const)."""
    out = {}
    for schema in spec.get("components", {}).get("schemas", {}).values():
        props = schema.get("properties", {})
        t = props.get("type", {})
        if isinstance(t, dict) and str(t.get("const", "")).startswith("/problems/"):
            out[t["const"].rpartition("/")[2]] = (props.get("status", {}).get("const"),
                                                  props.get("title", {}).get("const"))
    return out


def oa_limits(spec):
    """{src/base/defaults.h name: value in the description} for the body limits."""
    sch = spec["components"]["schemas"]
    req, item = sch["ChargeRequest"]["properties"], sch["LineItem"]["properties"]
    src_max = re.search(r"\{1,(\d+)\}", req["source"]["pattern"])
    key_max = re.search(r"\{0,(\d+)\}", spec["components"]["parameters"]["IdempotencyKey"]
                        ["schema"]["anyOf"][0]["pattern"])
    return {
        "AMOUNT_MIN": req["amount"]["minimum"], "AMOUNT_MAX": req["amount"]["maximum"],
        "SOURCE_TOKEN_MAX": int(src_max.group(1)) if src_max else None,
        "CUSTOMER_MAX": req["customer"]["maxLength"],
        "DESCRIPTION_MAX": req["description"]["maxLength"],
        "METADATA_KEYS_MAX": req["metadata"]["maxProperties"],
        "METADATA_KEY_MAX": req["metadata"]["propertyNames"]["maxLength"],
        "METADATA_VALUE_MAX": req["metadata"]["additionalProperties"]["maxLength"],
        "LINE_ITEMS_MAX": req["line_items"]["maxItems"],
        "LINE_ITEM_DESC_MAX": item["description"]["maxLength"],
        "LINE_ITEM_QTY_MIN": item["quantity"]["minimum"],
        "LINE_ITEM_QTY_MAX": item["quantity"]["maximum"],
        "LINE_ITEM_UNIT_MIN": item["unit_amount"]["minimum"],
        "LINE_ITEM_UNIT_MAX": item["unit_amount"]["maximum"],
        "IDEM_KEY_MAX": int(key_max.group(1)) + 1 if key_max else None,
        "VALIDATION_ERRORS_MAX": sch["InvalidRequestProblem"]["properties"]["errors"]["maxItems"],
    }


def api_routes(api):
    """{(METHOD, path)} from API.md's routes table (§2), HEAD where it says
    a route accepts GET and HEAD."""
    out = set()
    sec = re.search(r"^## §2 .*?(?=^## )", api, re.S | re.M)
    text = sec.group(0) if sec else ""
    for m in re.finditer(r"^\| `(GET|POST|HEAD|PUT|DELETE) (/[^`]*)`", text, re.M):
        out.add((m.group(1), re.sub(r"<[^>]*>", "{key}", m.group(2))))
    for bullet in re.split(r"\n(?=- )", text):
        m = re.match(r"- (.*?) accept `GET`\s+and `HEAD`", bullet, re.S)
        if m:
            for p in re.findall(r"`(/[^`]*)`", m.group(1)):
                out.add(("HEAD", re.sub(r"<[^>]*>", "{key}", p)))
    return out


# --- markdown links -------------------------------------------------------------

def md_slug(heading):
    """GitHub's anchor of a heading."""
    h = heading.strip().lower()
    h = re.sub(r"[^\w\- ]", "", h)
    return h.replace(" ", "-")


def md_anchors(text):
    """The anchors a markdown text defines: headings (GitHub's slugs, -N for
    repeats) and explicit <a id/name>."""
    out, seen = set(), {}
    for line in strip_fences(text).split("\n"):
        m = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if m:
            s = md_slug(m.group(1))
            n = seen.get(s, 0)
            out.add(s if n == 0 else "%s-%d" % (s, n))
            seen[s] = n + 1
    out.update(re.findall(r"<a\s+(?:id|name)=\"([^\"]+)\"", text))
    return out


def strip_fences(text):
    """text with fenced code blocks blanked (links in code are not links)."""
    return re.sub(r"^(```|~~~).*?^\1[^\n]*$", "", text, flags=re.S | re.M)


def md_links(text):
    """(line, target) of the inline and reference links of a markdown text."""
    body = strip_fences(text)
    body = re.sub(r"`[^`\n]*`", "", body)
    out = []
    for m in re.finditer(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)", body):
        out.append((body.count("\n", 0, m.start()) + 1, m.group(1)))
    for m in re.finditer(r"^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)", body, re.M):
        out.append((body.count("\n", 0, m.start()) + 1, m.group(1)))
    for m in re.finditer(r"<a\s[^>]*href=\"([^\"]+)\"", body):
        out.append((body.count("\n", 0, m.start()) + 1, m.group(1)))
    return out


def dead_links(files):
    """Relative links of tracked markdown files that lead nowhere."""
    bad, anchors = [], {}

    def anchors_of(path):
        if path not in anchors:
            anchors[path] = md_anchors(read(path)) if path.endswith(".md") else None
        return anchors[path]

    for rel in files:
        if not rel.endswith(".md"):
            continue
        src = os.path.join(ROOT, rel)
        if not os.path.isfile(src):
            continue
        for line, target in md_links(read(src)):
            if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):
                continue            # http:, https:, mailto:, man: ...
            path, _, frag = target.partition("#")
            path = urllib.parse.unquote(path.split("?", 1)[0])
            dest = os.path.normpath(os.path.join(os.path.dirname(src), path)) if path else src
            if not os.path.exists(dest):
                bad.append("%s:%d: %s: no such file" % (rel, line, target))
                continue
            if frag:
                if os.path.isdir(dest):
                    dest = os.path.join(dest, "README.md")
                known = anchors_of(dest) if os.path.isfile(dest) else None
                if known is None:
                    bad.append("%s:%d: %s: #%s in a file that is not markdown"
                               % (rel, line, target, frag))
                elif urllib.parse.unquote(frag) not in known:
                    bad.append("%s:%d: %s: no heading or <a id> #%s in %s"
                               % (rel, line, target, frag, os.path.relpath(dest, ROOT)))
    return bad


# --- configuration defaults everywhere they are written ---------------------------

def roff_text(s):
    s = re.sub(r"^\.(?:B|I|BR|IR|RB|RI|BI|IB)\s+", "", s, flags=re.M)
    s = s.replace("\\-", "-").replace("\\(mu", "x").replace('\\(dq', '"')
    return re.sub(r"\\[&:]", "", s)


def man_defaults(man):
    """{key: default} from docs/charge.8's .TP entries ("default X", or
    "X (default)")."""
    out = {}
    for m in re.finditer(r"^\.TP\n\.B (\w+)\n(.*?)(?=^\.(?:TP|SH|SS)\b)", man, re.S | re.M):
        text = roff_text(m.group(2))
        text = re.sub(r"\s+", " ", text)
        d = re.search(r"\bdefault (\S+)", text)
        if d:
            out[m.group(1)] = unticked(d.group(1).rstrip(",;"))
        else:
            d = re.search(r"(\S+) \(default\)", text)
            if d:
                out[m.group(1)] = d.group(1)
    return out


def conf_values(text):
    """{key: value} of the active "key = value" lines of a charge.conf."""
    out = {}
    for line in text.split("\n"):
        m = re.match(r"\s*([a-z][a-z0-9_]*)\s*=\s*(.*?)\s*$", line)
        if m and not line.lstrip().startswith("#"):
            out[m.group(1)] = m.group(2)
    return out


def md_config_defaults(text):
    """{key: default} of a markdown table with columns "key" and "default"."""
    out = {}
    lines = text.split("\n")
    for i, line in enumerate(lines):
        cells = [c.strip().lower() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and "key" in cells and "default" in cells:
            ki, di = cells.index("key"), cells.index("default")
            for row in lines[i + 2:]:
                if not row.startswith("|"):
                    break
                rc = [c.strip() for c in re.split(r"(?<!\\)\|", row.strip())[1:-1]]
                if len(rc) > max(ki, di):
                    out[unticked(rc[ki])] = unticked(rc[di])
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
        out = subprocess.run(["git", "-C", ROOT, "ls-files", "-z", "-co", "--exclude-standard"], check=True,
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
    NTESTS = 28
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
    t.check(bool(probs) and bool(dprobs), "the problem tables parse (src/codec/response.c: %d, "
            "docs/API.md: %d)" % (len(probs), len(dprobs)))
    t.items(sorted(s for s in probs if s not in dprobs),
            "every problem slug of src/codec/response.c is in docs/API.md's problem table",
            "not documented in docs/API.md")
    t.items(sorted(s for s in dprobs if s not in probs),
            "every problem type of docs/API.md's problem table is in src/codec/response.c",
            "not in src/codec/response.c")
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
    t.check(bool(ckeys) and bool(dkeys), "the configuration tables parse (src/config/config.c: %d, "
            "docs/API.md: %d)" % (len(ckeys), len(dkeys)))
    t.items(sorted(k for k in ckeys if k not in dkeys),
            "every configuration key of src/config/config.c is in docs/API.md's configuration table",
            "not documented in docs/API.md")
    t.items(sorted(k for k in dkeys if k not in ckeys),
            "every configuration key of docs/API.md's configuration table is in src/config/config.c",
            "not in src/config/config.c")
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

    # 15-20: docs/openapi.yaml against API.md and src/base/defaults.h
    oa_path = os.path.join(ROOT, "docs", "openapi.yaml")
    spec = load_openapi(oa_path) if os.path.exists(oa_path) else None
    t.check(isinstance(spec, dict) and str(spec.get("openapi", "")).startswith("3.1"),
            "docs/openapi.yaml parses as OpenAPI 3.1", ["missing, not YAML, or python3-yaml "
                                                       "is not installed"])
    spec = spec if isinstance(spec, dict) else {"paths": {}, "components": {}}
    ar, orr = api_routes(api), oa_routes(spec)
    t.check(bool(ar) and ar == orr, "docs/API.md §2 and docs/openapi.yaml have the same routes",
            ["only in docs/API.md: %s %s" % r for r in sorted(ar - orr)] +
            ["only in docs/openapi.yaml: %s %s" % r for r in sorted(orr - ar)])
    api_st = {str(v[0]) for v in dprobs.values()} | {
        m.group(1) for m in re.finditer(r"^HTTP/1\.1 (\d{3}) ", api, re.M)}
    oa_st = {st for st, _ in oa_responses(spec) if st}
    t.check(bool(oa_st) and api_st == oa_st,
            "docs/API.md and docs/openapi.yaml have the same statuses",
            ["only in docs/API.md: %s" % x for x in sorted(api_st - oa_st)] +
            ["only in docs/openapi.yaml: %s" % x for x in sorted(oa_st - api_st)])
    oprobs = oa_problems(spec)
    diffs = ["only in docs/API.md: %s" % x for x in sorted(set(dprobs) - set(oprobs))]
    diffs += ["only in docs/openapi.yaml: %s" % x for x in sorted(set(oprobs) - set(dprobs))]
    diffs += ["%s: %s in docs/API.md, %s in docs/openapi.yaml" % (x, dprobs[x], oprobs[x])
              for x in sorted(set(dprobs) & set(oprobs)) if dprobs[x] != oprobs[x]]
    t.check(bool(oprobs) and not diffs, "docs/API.md and docs/openapi.yaml have the same "
            "problem types, statuses and titles", diffs)
    # headers: Content-Type and Content-Length are the media type and the
    # body in OpenAPI, not header objects
    body_headers = {"Content-Type", "Content-Length"}
    api_resp = set(resp_doc) - body_headers
    oa_resp = {h for _, r in oa_responses(spec) for h in r.get("headers", {})}
    api_req = set(req_doc)
    oa_req = set()
    for item in spec.get("paths", {}).values():
        for op in item.values():
            if not isinstance(op, dict):
                continue
            for prm in op.get("parameters", []) + item.get("parameters", []):
                prm = oa_deref(spec, prm)
                if prm.get("in") == "header":
                    oa_req.add(prm["name"])
            rb = op.get("requestBody")
            if rb:
                oa_req.add("Content-Type")
                if "Content-Length" in rb.get("description", ""):
                    oa_req.add("Content-Length")
    if any(sc.get("scheme") == "bearer" for sc in
           spec.get("components", {}).get("securitySchemes", {}).values()):
        oa_req.add("Authorization")
    diffs = ["response header only in docs/API.md: %s" % x for x in sorted(api_resp - oa_resp)]
    diffs += ["response header only in docs/openapi.yaml: %s" % x for x in sorted(oa_resp - api_resp)]
    diffs += ["request header only in docs/API.md: %s" % x for x in sorted(api_req - oa_req)]
    diffs += ["request header only in docs/openapi.yaml: %s" % x for x in sorted(oa_req - api_req)]
    t.check(bool(oa_resp) and not diffs, "docs/API.md and docs/openapi.yaml have the same "
            "request and response headers", diffs)
    try:
        lim = oa_limits(spec)
        diffs = ["%s: %s in src/base/defaults.h, %s in docs/openapi.yaml" % (k, defs.get(k), v)
                 for k, v in sorted(lim.items()) if defs.get(k) != v]
    except (KeyError, TypeError) as e:
        diffs = ["docs/openapi.yaml lacks a body limit: %r" % e]
    t.check(not diffs, "docs/openapi.yaml's body limits are src/base/defaults.h's", diffs)

    # GET /metrics
    series = code_metric_series()
    mrows = doc_table(api, "metrics") or []
    dseries = {re.match(r"`?([a-z_]+)", r[0]).group(1): r for r in mrows
               if r and re.match(r"`?([a-z_]+)", r[0])}
    diffs = ["rendered by src/codec/metrics.c, not in docs/API.md's metrics table: %s" % n
             for n in sorted(series - set(dseries))]
    diffs += ["in docs/API.md's metrics table, not rendered: %s" % n for n in sorted(set(dseries) - series)]
    t.check(bool(series) and bool(dseries) and not diffs,
            "the series of GET /metrics and docs/API.md's metrics table agree", diffs)
    req = dseries.get("charge_requests_total", [""] * 3)
    cell = " ".join(req[1:])
    labels = code_outcome_labels()
    t.items(sorted(x for x in labels if "`%s`" % x not in cell),
            "docs/API.md's charge_requests_total row lists every outcome label of src/codec/response.c",
            "outcome not listed")


    # links
    files = tracked_files()
    bad = dead_links(files)
    t.check(not bad, "every relative link and #anchor of the markdown files leads somewhere",
            bad)

    # 22: every page of docs/ is reachable from the README
    readme_path = os.path.join(ROOT, "README.md")
    readme = read(readme_path) if os.path.exists(readme_path) else ""
    linked = {os.path.normpath(urllib.parse.unquote(tg.partition("#")[0]))
              for _, tg in md_links(readme)}
    pages = sorted(rel for rel in files if rel.startswith("docs/")
                   and rel.endswith((".md", ".yaml", ".8")))
    t.items([p_ for p_ in pages if p_ not in linked],
            "every page of docs/ is linked from README.md", "not linked")

    # 23: one default per key, wherever it is written
    places = {"src/config/config.c": {r[0]: str(r[4]) for r in rows if r[4] is not None},
              "docs/API.md": {k: unticked(v[1]) for k, v in dkeys.items() if len(v) > 1},
              "docs/charge.8": man_defaults(man)}
    conf = os.path.join(ROOT, "conf", "charge.conf")
    if os.path.exists(conf):
        places["conf/charge.conf"] = conf_values(read(conf))
    cfgmd = os.path.join(ROOT, "docs", "configuration.md")
    if os.path.exists(cfgmd):
        places["docs/configuration.md"] = md_config_defaults(read(cfgmd))
    diffs = []
    for k in sorted(set().union(*[set(v) for v in places.values()])):
        vals = {where: v[k] for where, v in places.items() if k in v}
        if len(set(vals.values())) > 1:
            diffs.append("%s: %s" % (k, ", ".join("%s in %s" % (v, w)
                                                 for w, v in sorted(vals.items()))))
    missing = sorted(k for k in places["src/config/config.c"] if k not in places["docs/charge.8"])
    t.check(not diffs and not missing, "each configuration key has one default in %s"
            % ", ".join(sorted(places)), diffs + ["no default in docs/charge.8: %s" % k
                                                 for k in missing])

    # 24-25: the repository stands alone
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
