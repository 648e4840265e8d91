"""A minimal FastCGI client for tests: talks to the responder's socket
directly, as a web server would, and can stall at any point (after part of
the params, after part of the body) to test the responder's own deadlines
and shutdown. Python standard library only.
"""

import socket
import struct
import time

BEGIN_REQUEST, END_REQUEST, PARAMS, STDIN, STDOUT, STDERR = 1, 3, 4, 5, 6, 7
RESPONDER = 1


def _record(rtype, content, req_id=1):
    return struct.pack(">BBHHBB", 1, rtype, req_id, len(content), 0, 0) + content


def _nv_len(n):
    return struct.pack(">B", n) if n < 128 else struct.pack(">I", n | 0x80000000)


def encode_params(params):
    out = b""
    for k, v in params.items():
        k = k.encode() if isinstance(k, str) else k
        v = v.encode() if isinstance(v, str) else v
        out += _nv_len(len(k)) + _nv_len(len(v)) + k + v
    return out


def connect(addr, timeout=10.0):
    """addr: "host:port" or a unix socket path."""
    if addr.startswith("/"):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(timeout)
        s.connect(addr)
    else:
        host, port = addr.rsplit(":", 1)
        s = socket.create_connection((host, int(port)), timeout=timeout)
    return s


def charge_params(key, body, api_key="sk_test_demo", **extra):
    p = {
        "REQUEST_METHOD": "POST", "REQUEST_URI": "/charge",
        "SCRIPT_NAME": "/charge", "CONTENT_TYPE": "application/json",
        "CONTENT_LENGTH": str(len(body)),
        "HTTP_AUTHORIZATION": "Bearer " + api_key,
        "HTTP_IDEMPOTENCY_KEY": key,
    }
    p.update(extra)
    return p


def send_request(s, params, body, params_split=None, pause=0.0,
                 body_split=None, body_pause=0.0):
    """Sends one request. params_split: send that many bytes of the params
    stream, sleep pause, then the rest. body_split / body_pause likewise for
    the body; body_pause=None stops after the first part (the body is never
    completed)."""
    p = encode_params(params)
    s.sendall(_record(BEGIN_REQUEST, struct.pack(">HB5x", RESPONDER, 0)))
    stream = _record(PARAMS, p) + _record(PARAMS, b"")
    if params_split is not None:
        s.sendall(stream[:params_split])
        time.sleep(pause)
        s.sendall(stream[params_split:])
    else:
        s.sendall(stream)
    if body_split is not None:
        s.sendall(_record(STDIN, body[:body_split]))
        if body_pause is None:
            return
        time.sleep(body_pause)
        body = body[body_split:]
    if body:
        s.sendall(_record(STDIN, body))
    s.sendall(_record(STDIN, b""))


def read_response(s):
    """Reads records until END_REQUEST or EOF. Returns (stdout bytes,
    ended: True when END_REQUEST arrived)."""
    buf, out = b"", b""
    while True:
        # a reset propagates: the caller tells "never accepted" from "EOF"
        chunk = s.recv(65536)
        if not chunk:
            return out, False
        buf += chunk
        while len(buf) >= 8:
            _, rtype, _, clen, plen, _ = struct.unpack(">BBHHBB", buf[:8])
            if len(buf) < 8 + clen + plen:
                break
            content = buf[8:8 + clen]
            buf = buf[8 + clen + plen:]
            if rtype == STDOUT:
                out += content
            elif rtype == END_REQUEST:
                return out, True


def status_of(out):
    """The Status: header of a CGI-style response, as an int, or None."""
    for line in out.split(b"\r\n"):
        if line.lower().startswith(b"status:"):
            return int(line.split(b":", 1)[1].split()[0])
        if not line:
            break
    return None


class RecordReader:
    """Records from a socket, as they come: record() gives (type, id,
    content), None on EOF (a reset counts as EOF), "timeout" when the
    socket's timeout passes with nothing complete. Suites add response()."""

    RECV_BYTES = 262144

    def __init__(self, s):
        self.s, self.buf, self.eof = s, b"", False

    def record(self):
        while True:
            if len(self.buf) >= 8:
                _, rtype, rid, clen, plen, _ = struct.unpack(">BBHHBB", self.buf[:8])
                if len(self.buf) >= 8 + clen + plen:
                    content = self.buf[8:8 + clen]
                    self.buf = self.buf[8 + clen + plen:]
                    return rtype, rid, content
            if self.eof:
                return None
            try:
                chunk = self.s.recv(self.RECV_BYTES)
            except (ConnectionResetError, BrokenPipeError):
                chunk = b""
            except socket.timeout:
                return "timeout"
            if not chunk:
                self.eof = True
            self.buf += chunk
