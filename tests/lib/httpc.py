"""httpc.py - the HTTP client of the test harnesses: one request on a new
connection (TCP, or a unix socket), its answer as a Resp. Standard library
only."""

import http.client
import json
import socket
import time


class Resp:
    """An answer: status, headers (a list of pairs), body (bytes), elapsed
    (seconds, from sending the request to the end of the body)."""

    def __init__(self, status, headers, body, elapsed=0.0):
        self.status, self.headers, self.body, self.elapsed = status, headers, body, elapsed

    def h(self, name):
        for k, v in self.headers:
            if k.lower() == name.lower():
                return v
        return None

    def json(self):
        return json.loads(self.body)

    def __repr__(self):
        return "HTTP %d %r" % (self.status, self.body[:300])


class UnixHTTPConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout):
        super().__init__("localhost", timeout=timeout)
        self.unix_path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self.unix_path)


def request(url, method, path, body=None, headers=None, timeout=30, unix_path=None, resp=Resp):
    """url: a urllib.parse.urlsplit result (host and port); unix_path: a unix
    socket to use instead; resp: the class of the answer."""
    if unix_path:
        c = UnixHTTPConnection(unix_path, timeout)
    else:
        c = http.client.HTTPConnection(url.hostname, url.port, timeout=timeout)
    try:
        t0 = time.monotonic()
        c.request(method, path, body=body, headers=headers or {})
        r = c.getresponse()
        return resp(r.status, r.getheaders(), r.read(), time.monotonic() - t0)
    finally:
        c.close()
