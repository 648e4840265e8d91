"""tap.py - the small test runner the python suites share (stdlib only).

    from tap import Fail, check, diag, test, run
    @test("name")
    def t(): check(1 + 1 == 2, "arithmetic")
    sys.exit(run(only_env="E2E_ONLY"))

Prints TAP: "1..N", "ok N - <prefix><name>" or "not ok N - ..." with the
failure as "#   " lines, the test's diag() lines and its duration.
"""
import os
import re
import sys
import time

TESTS = []
DIAG = []


class Fail(Exception):
    """A failed expectation; the message says what was expected and got."""


def check(cond, msg):
    if not cond:
        raise Fail(msg)


def diag(msg):
    """A "# ..." line printed after the test's result."""
    DIAG.append(msg)


def test(name):
    """Registers the decorated function as a test, in definition order."""
    def deco(fn):
        TESTS.append((name, fn))
        return fn
    return deco


def run(only_env, prefix=""):
    """Runs the registered tests (those matching $only_env, a regex, when
    set); returns the exit status: 1 when any failed."""
    only = os.environ.get(only_env, "")
    tests = [(n, f) for n, f in TESTS if not only or re.search(only, n)]
    print("1..%d" % len(tests))
    sys.stdout.flush()
    failed = 0
    t_start = time.monotonic()
    for i, (name, fn) in enumerate(tests, 1):
        t0 = time.monotonic()
        try:
            fn()
            print("ok %d - %s%s" % (i, prefix, name))
        except Fail as e:
            failed += 1
            print("not ok %d - %s%s" % (i, prefix, name))
            for line in str(e).splitlines():
                print("#   " + line)
        except Exception as e:    # noqa: BLE001 - any crash is a failure
            failed += 1
            print("not ok %d - %s%s" % (i, prefix, name))
            print("#   %s: %s" % (type(e).__name__, e))
        for line in DIAG:
            print("#   " + line)
        del DIAG[:]
        print("#   (%.2fs)" % (time.monotonic() - t0))
        sys.stdout.flush()
    print("# %d tests, %d failed, %.1fs" % (len(tests), failed,
                                           time.monotonic() - t_start))
    return 1 if failed else 0


def ledger_lines(path, principal, key):
    """The provider ledger's entries for (principal, key), as lists of the
    7 tab-separated fields."""
    try:
        with open(path, "rb") as f:
            rows = [ln.rstrip(b"\n").decode().split("\t") for ln in f]
    except FileNotFoundError:
        return []
    return [r for r in rows if len(r) >= 3 and r[1] == principal and r[2] == key]
