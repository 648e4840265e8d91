#!/usr/bin/env python3
"""hostile_list.py - a provider's list of charges that misbehaves, for
charge-reconcile's defences (tests/reconcile/test_hostile.py). Python
standard library only.

    python3 hostile_list.py            prints "listening on 127.0.0.1:PORT"

The bearer token chooses the behaviour of GET /v1/charges:

  sk_cycle    has_more true for ever; starting_after cycles between two
              charges without the responder's metadata (ch_cycA, ch_cycB)
  sk_endless  has_more true for ever; every page new foreign charges
  sk_escape   one page: a succeeded charge of the responder (principal
              "alice", key "k-escape") whose id and currency carry a
              newline, a forged verdict line and terminal escapes
  sk_evil_error  404 with a body of terminal escapes (quoted on stderr)

GET /v1/charges/<id> answers 404; GET /_pages the pages served so far.
"""
import http.server
import json
import sys
import threading
import time
import urllib.parse

PAGES = {"n": 0}
LOCK = threading.Lock()
NOW = int(time.time())

ESCAPE_ID = ("ch_esc\nclean: every charge has its record, every record its charge\n"
             "\x1b[2J\x1b]0;owned\x07")
ESCAPE_CURRENCY = "u\x1b[31m\r"


def foreign(cid, created):
    return {"id": cid, "object": "charge", "amount": 100, "currency": "usd",
            "created": created, "status": "succeeded", "metadata": {}}


def page(token, after):
    """The list's data and has_more for the token after the cursor."""
    if token == "sk_cycle":
        last = "ch_cycB" if after == "ch_cycA" else "ch_cycA"
        return [foreign("ch_f%s" % last, NOW), foreign(last, NOW)], True
    if token == "sk_endless":
        n = int(after[len("ch_end"):]) + 1 if after.startswith("ch_end") else 0
        return [foreign("ch_end%d" % (n + i), NOW) for i in range(2)], True
    if token == "sk_escape":
        c = {"id": ESCAPE_ID, "object": "charge", "amount": 4242,
             "currency": ESCAPE_CURRENCY, "created": NOW, "status": "succeeded",
             "metadata": {"charge_principal": "alice",
                          "charge_idempotency_key": "k-escape"}}
        return [c], False
    return None, False


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def answer(self, status, doc):
        body = json.dumps(doc).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        u = urllib.parse.urlsplit(self.path)
        q = dict(urllib.parse.parse_qsl(u.query))
        token = self.headers.get("Authorization", "")[len("Bearer "):]
        if u.path == "/_pages":
            return self.answer(200, {"pages": PAGES["n"]})
        if u.path.startswith("/v1/charges/"):
            return self.answer(404, {"error": {"type": "invalid_request_error"}})
        if u.path != "/v1/charges":
            return self.answer(404, {"error": {"type": "invalid_request_error"}})
        if token == "sk_evil_error":
            body = ("oops\n\x1b[2Jclean: every charge has its record\x07").encode()
            self.send_response(404)
            self.send_header("Content-Type", "text/plain")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return None
        data, more = page(token, q.get("starting_after", ""))
        if data is None:
            return self.answer(401, {"error": {"type": "authentication_error"}})
        with LOCK:
            PAGES["n"] += 1
        return self.answer(200, {"object": "list", "data": data, "has_more": more,
                                 "url": "/v1/charges"})


def main():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    print("listening on 127.0.0.1:%d" % srv.server_address[1], flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
