#!/usr/bin/env python3
"""readyz.py SOCKET PID - /healthz and /readyz of a responder (PID) on its
FastCGI socket, before and while it drains, on one kept connection as a
web server holds it: /readyz 200 and /healthz 200 first; after SIGTERM to
PID, /readyz on that connection answers 503 problem+json naming the drain
(draining: true) while the process still serves. Prints TAP lines without
numbers. Standard library only (tests/lib/fcgi.py).
"""

import json
import os
import signal
import struct
import sys
import time

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import fcgi  # noqa: E402


def get(s, path):
    """GET path on the kept connection s: (status, headers, body)."""
    p = fcgi.encode_params({"REQUEST_METHOD": "GET", "REQUEST_URI": path,
                            "SCRIPT_NAME": path, "QUERY_STRING": ""})
    s.sendall(fcgi._record(fcgi.BEGIN_REQUEST, struct.pack(">HB5x", fcgi.RESPONDER, 1)) +
              fcgi._record(fcgi.PARAMS, p) + fcgi._record(fcgi.PARAMS, b"") +
              fcgi._record(fcgi.STDIN, b""))
    out, ended = fcgi.read_response(s)
    head, _, body = out.partition(b"\r\n\r\n")
    headers = {}
    for line in head.split(b"\r\n"):
        k, _, v = line.partition(b":")
        headers[k.strip().lower().decode()] = v.strip().decode()
    return fcgi.status_of(out), headers, body, ended


def tap(ok, desc, why=""):
    print("%s - %s" % ("ok" if ok else "not ok", desc))
    if not ok and why:
        print("#   %s" % why)


def main():
    sock, pid = sys.argv[1], int(sys.argv[2])
    s = fcgi.connect(sock)
    st, h, body, _ = get(s, "/healthz")
    tap(st == 200 and json.loads(body) == {"status": "ok"}, "/healthz: 200 {\"status\":\"ok\"}",
        "%s %r" % (st, body))
    st, h, body, _ = get(s, "/readyz")
    ok = st == 200 and json.loads(body).get("draining") is False
    tap(ok, "/readyz while serving: 200, draining false", "%s %r" % (st, body))
    os.kill(pid, signal.SIGTERM)
    time.sleep(0.2)
    st, h, body, _ = get(s, "/readyz")
    try:
        doc = json.loads(body)
    except ValueError:
        doc = {}
    ok = (st == 503 and h.get("content-type", "").startswith("application/problem+json")
          and doc.get("type") == "/problems/service-unavailable" and doc.get("draining") is True
          and "draining" in doc.get("detail", "") and h.get("retry-after", "").isdigit())
    tap(ok, "/readyz after SIGTERM, on a kept connection: 503 problem+json, draining true, Retry-After",
        "%s %r %r" % (st, h, body))


if __name__ == "__main__":
    main()
