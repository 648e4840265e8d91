#!/usr/bin/env python3
"""How the responders use the sentinels, against a scripted sentinel (run
by tests/ha/sentinel.sh): a dead sentinel is skipped, READONLY from a
demoted primary sends the script again to the primary the sentinels name
now, a named node that is not a primary (ROLE) is refused, and an unknown
master name or no sentinel at all is a 503 with Retry-After.

Environment: HA_BASE_URL, HA_FAKE_SENTINEL_PORT, HA_P, HA_R (two Redis
ports), HA_STACK_LOG, plus halib's.
"""
import os
import socketserver
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import halib as h  # noqa: E402
from halib import Fail, check, diag, test  # noqa: E402

BASE = os.environ.get("HA_BASE_URL", "")
FAKE = int(os.environ.get("HA_FAKE_SENTINEL_PORT", "0"))
P = int(os.environ.get("HA_P", "0"))
R = int(os.environ.get("HA_R", "0"))
STACK_LOG = os.environ.get("HA_STACK_LOG", "")
MASTER = b"charge"


class Sentinel:
    """Answers SENTINEL get-master-addr-by-name with self.primary (a port,
    or None for an unknown master)."""

    def __init__(self):
        self.primary = None
        self.asked = 0
        self.server = None

    def start(self):
        outer = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self):
                while True:
                    line = self.rfile.readline()
                    if not line.startswith(b"*"):
                        return
                    args = []
                    for _ in range(int(line[1:])):
                        n = int(self.rfile.readline()[1:])
                        args.append(self.rfile.read(n + 2)[:-2])
                    if [a.upper() for a in args[:2]] == [b"SENTINEL", b"GET-MASTER-ADDR-BY-NAME"]:
                        outer.asked += 1
                        if outer.primary is None or args[2:] != [MASTER]:
                            self.wfile.write(b"*-1\r\n")
                        else:
                            port = str(outer.primary).encode()
                            self.wfile.write(b"*2\r\n$9\r\n127.0.0.1\r\n$%d\r\n%s\r\n" % (len(port), port))
                    elif args[:1] == [b"PING"]:
                        self.wfile.write(b"+PONG\r\n")
                    else:
                        self.wfile.write(b"-ERR unknown command\r\n")

        socketserver.ThreadingTCPServer.allow_reuse_address = True
        socketserver.ThreadingTCPServer.daemon_threads = True
        self.server = socketserver.ThreadingTCPServer(("127.0.0.1", FAKE), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


SENTINEL = Sentinel()


def log_has(text, since):
    with open(STACK_LOG, errors="replace") as f:
        f.seek(since)
        return text in f.read()


def log_size():
    return os.path.getsize(STACK_LOG)


def charges(n, tag):
    out = []
    for i in range(n):
        k = h.new_key("%s%d" % (tag, i))
        out.append((k, h.post(BASE, k, h.charge_body(amount=500 + i))))
    return out


def drop_connections(port):
    h.cli(port, "CLIENT", "KILL", "TYPE", "normal")


@test("the first sentinel is down, the second names the primary: charges are recorded there")
def t_first_dead():
    SENTINEL.primary = P
    SENTINEL.start()
    h.wait_health(BASE, 15)
    for k, r in charges(6, "p"):
        check(r.status == 201, "%s: %r" % (k, r))
        check(h.cli(P, "EXISTS", h.rkey(k)).strip() == "1", "%s is not on %d" % (k, P))


@test("READONLY from a demoted primary: the sentinels are asked again and the script runs on the new primary")
def t_readonly():
    off = log_size()
    h.cli(P, "REPLICAOF", "127.0.0.1", R)
    end = time.monotonic() + 15
    while time.monotonic() < end and h.info_field(P, "replication", "master_link_status") != "up":
        time.sleep(0.05)
    check(h.info_field(P, "replication", "master_link_status") == "up", "%d did not sync from %d" % (P, R))
    SENTINEL.primary = R
    asked = SENTINEL.asked
    for k, r in charges(6, "r"):
        check(r.status == 201, "%s after the switch: %r" % (k, r))
        check(h.cli(R, "EXISTS", h.rkey(k)).strip() == "1", "%s is not on the new primary %d" % (k, R))
    check(log_has("READONLY", off), "no READONLY in the responders' log")
    check(log_has("Redis primary of 'charge' is 127.0.0.1:%d" % R, off), "the new primary was not logged")
    diag("sentinel asked %d times" % (SENTINEL.asked - asked))


@test("a named node that is a replica (ROLE) is refused: 503 with Retry-After; the named primary then serves")
def t_role_check():
    off = log_size()
    SENTINEL.primary = P                    # a replica now
    drop_connections(R)
    k, r = charges(1, "role")[0]
    h.check_documented(r, "named replica", allow=(503,))
    check(0.8 < r.elapsed < 5, "the 503 took %.2fs, want about redis_timeout_ms" % r.elapsed)
    check(log_has("127.0.0.1:%d is not the primary (ROLE slave)" % P, off), "ROLE refusal not logged")
    check(h.cli(P, "EXISTS", h.rkey(k)).strip() == "0", "written to the replica")
    SENTINEL.primary = R
    r2, _ = h.settle(BASE, k, h.charge_body(amount=500), time.monotonic() + 10)
    check(r2.status == 201 and not r2.replayed, "retry: %r" % r2)
    check(len(h.ledger_ids().get(k, [])) == 1, "ledger")


@test("an unknown master name, then no sentinel at all: 503 with Retry-After, the provider not called; then 201")
def t_no_primary():
    off = log_size()
    SENTINEL.primary = None
    drop_connections(R)
    k1, r1 = charges(1, "unknown")[0]
    h.check_documented(r1, "unknown master", allow=(503,))
    check(log_has("unknown master name", off), "reason not logged")
    SENTINEL.stop()
    drop_connections(R)
    k2, r2 = charges(1, "nosentinel")[0]
    h.check_documented(r2, "no sentinel", allow=(503,))
    r = h.get(BASE, "/readyz")
    check(r.status == 503, "/readyz without sentinels: %r" % r)
    check(not any(k in h.ledger_ids() for k in (k1, k2)), "the provider was called")
    SENTINEL.primary = R
    SENTINEL.start()
    h.wait_health(BASE, 10)
    for k in (k1, k2):
        r, _ = h.settle(BASE, k, h.charge_body(amount=500), time.monotonic() + 10)
        check(r.status == 201, "%s once the sentinel is back: %r" % (k, r))


def main():
    if not BASE:
        print("Bail out! HA_BASE_URL is not set")
        return 2
    try:
        return h.tap.run("HA_ONLY", prefix="[scripted sentinel] ")
    finally:
        try:
            SENTINEL.stop()
        except Exception:      # noqa: BLE001 - already stopped
            pass


if __name__ == "__main__":
    sys.exit(main())
