#!/usr/bin/env python3
"""charge-reconcile against a hostile provider and a hostile file system
(issue 37, item 7; docs/reconcile.md).

The harness (tests/reconcile/run.sh) passes the Redis the responder uses
and the configuration through the environment (CHARGE_*), RECONCILE_BIN
and RECONCILE_RUN (a scratch directory). This script starts
tests/reconcile/hostile_list.py itself and points the reconciler at it
(CHARGE_PROVIDER_URL), under a key prefix nobody writes: no record is
scanned. Each test is one defect found on the reconciler of 2026-12-07:

  - a list whose starting_after cycles between two foreign charges and
    answers has_more for ever ran for ever (no page bound, no cycle check);
  - a charge id or currency with a newline and terminal escapes reached
    the table raw (a forged verdict line, control sequences);
  - the textfile's temporary <FILE>.<pid>.tmp was opened without O_EXCL |
    O_NOFOLLOW: a symlink planted there made the run overwrite its target
    (and the file's mode followed the umask).
Python standard library; prints TAP.
"""
import json
import os
import stat
import subprocess
import sys
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from tap import check, diag, run, test  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
BIN = os.environ["RECONCILE_BIN"]
RUN_DIR = os.environ["RECONCILE_RUN"]
BOUND_S = 20  # a run that does not end by then has no bound

sys.path.insert(0, HERE)
import hostile_list  # noqa: E402  (its strings, for the checks)

PROVIDER = subprocess.Popen([sys.executable, os.path.join(HERE, "hostile_list.py")],
                            stdout=subprocess.PIPE, text=True)
URL = "http://" + PROVIDER.stdout.readline().split()[-1]


def pages():
    with urllib.request.urlopen(URL + "/_pages", timeout=10) as r:
        return json.load(r)["pages"]


def reconcile(token, *args, preexec=None):
    """(exit status or None when it had to be killed, stdout, stderr)."""
    env = dict(os.environ)
    env["CHARGE_PROVIDER_URL"] = URL
    env["CHARGE_PROVIDER_API_KEY"] = token
    env["CHARGE_KEY_PREFIX"] = "hostile:"
    p = subprocess.Popen([BIN, "--quiet", "--since", "1h"] + list(args), env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=preexec)
    try:
        out, err = p.communicate(timeout=BOUND_S)
        rc = p.returncode
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        rc = None
    return rc, out.decode(errors="replace"), err.decode(errors="replace")


@test("hostile: a list cycling between two foreign charges with has_more: exit 2, the cycle named")
def t_cycle():
    before = pages()
    rc, _, err = reconcile("sk_cycle")
    n = pages() - before
    diag("exit %r after %d pages, stderr %r" % (rc, n, err[:300]))
    check(rc is not None, "it ends within %d s (it read %d pages)" % (BOUND_S, n))
    check(rc == 2, "exit 2, got %r" % rc)
    check("cycle" in err and "ch_cyc" in err, "the message names the cycle: %r" % err)
    check(n <= 4, "the cycle is seen on its first return, not at the page bound: %d pages" % n)


@test("hostile: a list that never ends: --max-pages 20 stops it at 20 pages, exit 2")
def t_page_bound():
    before = pages()
    rc, _, err = reconcile("sk_endless", "--max-pages", "20")
    n = pages() - before
    diag("exit %r after %d pages, stderr %r" % (rc, n, err[:300]))
    check(rc == 2, "exit 2, got %r" % rc)
    check("more than 20 pages" in err, "the message names the bound: %r" % err)
    check(n == 20, "exactly 20 pages read, got %d" % n)
    rc, _, err = reconcile("sk_endless", "--max-pages", "0")
    check(rc == 2 and "usage" in err, "--max-pages 0 is a usage error: %r %r" % (rc, err[:80]))


@test("hostile: a charge id and currency with a newline and terminal escapes: escaped in the table")
def t_escape():
    rc, out, err = reconcile("sk_escape")
    diag("table: %r" % out[-400:])
    check(rc == 1, "the orphan found: exit 1, got %r (%r)" % (rc, err))
    bad = [c for c in out if (ord(c) < 0x20 and c != "\n") or ord(c) == 0x7f]
    check(not bad, "no control byte but the newline in the table: %r" % bad[:8])
    lines = out.splitlines()
    verdict = [ln for ln in lines if ln.startswith("clean:")]
    check(verdict == [], "no forged verdict line: %r" % verdict)
    check(lines[-1] == "NOT CLEAN: see above", "the verdict is the last line: %r" % lines[-1])
    row = [ln for ln in lines if ln.startswith("ch_esc")]
    check(len(row) == 1 and "\\nclean: every charge" in row[0] and "\\x1b[2J" in row[0]
          and "u\\x1b[31m\\r" in row[0] and "alice" in row[0] and "k-escape" in row[0],
          "one row, the id and currency escaped: %r" % row)
    rc, out, err = reconcile("sk_escape", "--json")
    doc = json.loads(out)
    check(rc == 1 and doc["orphans"][0]["charge"] == hostile_list.ESCAPE_ID
          and doc["orphans"][0]["currency"] == hostile_list.ESCAPE_CURRENCY,
          "--json keeps the strings exactly (JSON escapes them): %r" % doc["orphans"])


@test("hostile: a provider's error body with terminal escapes: escaped on stderr, exit 2")
def t_escape_stderr():
    rc, out, err = reconcile("sk_evil_error")
    diag("stderr %r" % err[:300])
    check(rc == 2, "exit 2, got %r" % rc)
    check("answered 404" in err and "\\x1b[2J" in err, "the body quoted, escaped: %r" % err)
    bad = [c for c in err if (ord(c) < 0x20 and c != "\n") or ord(c) == 0x7f]
    check(not bad and err.count("\n") == 1, "one line, no control byte: %r" % err)


@test("hostile: --prometheus: a symlink planted at the temporary file is not followed, its target kept")
def t_prom_symlink():
    d = os.path.join(RUN_DIR, "hostile-textfile")
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "charge_reconcile.prom")
    target = os.path.join(RUN_DIR, "precious")
    with open(target, "w", encoding="utf-8") as f:
        f.write("precious\n")

    def plant():  # in the child, before exec: the reconciler's own pid
        os.symlink(target, "%s.%d.tmp" % (path, os.getpid()))

    rc, _, err = reconcile("sk_escape", "--prometheus", path, preexec=plant)
    diag("exit %r, stderr %r" % (rc, err[:300]))
    with open(target, encoding="utf-8") as f:
        kept = f.read()
    check(kept == "precious\n", "the symlink's target unchanged: %r" % kept[:120])
    check(rc == 2 and "--prometheus" in err and ".tmp" in err,
          "exit 2 naming the temporary file: %r %r" % (rc, err))
    check(not os.path.exists(path), "no textfile written through it")
    for name in os.listdir(d):
        os.unlink(os.path.join(d, name))


@test("hostile: --prometheus: the textfile is 0644 under umask 077 (the collector reads it), no temporary left")
def t_prom_mode():
    d = os.path.join(RUN_DIR, "hostile-textfile")
    os.makedirs(d, exist_ok=True)
    path = os.path.join(d, "charge_reconcile.prom")
    rc, _, err = reconcile("sk_escape", "--prometheus", path, preexec=lambda: os.umask(0o077))
    check(rc == 1, "exit 1 (the orphan), got %r: %r" % (rc, err))
    mode = stat.S_IMODE(os.lstat(path).st_mode)
    check(mode == 0o644, "mode 0644, got %o" % mode)
    check(os.listdir(d) == ["charge_reconcile.prom"], "no temporary left: %r" % os.listdir(d))


if __name__ == "__main__":
    try:
        rc = run(only_env="RECONCILE_ONLY", prefix="reconcile: ")
    finally:
        PROVIDER.kill()
        PROVIDER.wait()
    sys.exit(rc)
