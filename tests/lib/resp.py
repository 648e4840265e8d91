"""The one small Redis client of the test harnesses (RESP2, Python standard
library only): a command is an array of bulk strings, a reply a Python
value. The harnesses use it to read and change what the responder stored;
the responder's own client is src/store/redis/.

    import resp
    resp.command("/run/redis.sock", "HGETALL", key)        # a unix socket
    resp.command(("127.0.0.1", 7000), "CLUSTER", "SLOTS")   # TCP
    resp.pipeline(7000, [[b"CLUSTER", b"KEYSLOT", k] for k in keys])
    conn = resp.Connection("/run/redis.sock"); conn("HGET", key, "state")

Over TCP it speaks TLS when HA_TLS_DIR names tools/ha.sh's certificates.
"""

import os
import socket
import ssl


class RedisError(OSError):
    """An error reply (its text), a closed connection, or bytes that are no
    RESP reply."""


def encode(*args):
    """One command: every argument (bytes, str or a number) a bulk string."""
    parts = [a if isinstance(a, bytes) else str(a).encode() for a in args]
    return b"*%d\r\n" % len(parts) + b"".join(b"$%d\r\n%s\r\n" % (len(p), p) for p in parts)


def read(f, raw=False):
    """One reply from the binary file f: a status as str, an integer as int,
    a bulk string as bytes, an array as a list (nil: None); an error reply
    raises RedisError with its text. raw: a status and an error reply are
    their bytes, and nothing is raised for an error reply."""
    line = f.readline()
    if not line:
        raise RedisError("connection closed")
    t, rest = line[:1], line[1:-2]
    if t in (b"+", b"-") and raw:
        return rest
    if t == b"+":
        return rest.decode()
    if t == b"-":
        raise RedisError(rest.decode())
    if t == b":":
        return int(rest)
    if t == b"$":
        n = int(rest)
        return None if n < 0 else f.read(n + 2)[:-2]
    if t == b"*":
        n = int(rest)
        return None if n < 0 else [read(f, raw) for _ in range(n)]
    raise RedisError("bad reply %r" % line)


def connect(addr, timeout=5):
    """addr: a unix socket path, (host, port), or a port on 127.0.0.1."""
    if isinstance(addr, str):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(timeout)
        try:
            s.connect(addr)
        except OSError:
            s.close()
            raise
        return s
    if isinstance(addr, int):
        addr = ("127.0.0.1", addr)
    s = socket.create_connection(addr, timeout=timeout)
    tls = os.environ.get("HA_TLS_DIR", "")
    if not tls:
        return s
    # TLS-only nodes (tools/ha.sh under HA_TLS_DIR): the test CA, its client
    ctx = ssl.create_default_context(cafile=os.path.join(tls, "ca.crt"))
    ctx.load_cert_chain(os.path.join(tls, "client.crt"), os.path.join(tls, "client.key"))
    try:
        return ctx.wrap_socket(s, server_hostname=addr[0])
    except OSError:
        s.close()
        raise


def pipeline(addr, commands, timeout=5, raw=False):
    """Every command (a list of arguments) in one write on one new
    connection; their replies in order."""
    s = connect(addr, timeout)
    try:
        s.sendall(b"".join(encode(*c) for c in commands))
        f = s.makefile("rb")
        return [read(f, raw) for _ in commands]
    finally:
        s.close()


def command(addr, *args, timeout=5):
    """One command on one new connection: its reply."""
    return pipeline(addr, [args], timeout)[0]


class Connection:
    """One kept connection, a command at a time: conn(*args) is the reply
    (for a harness that polls, where a new connection per command would
    cost more than what it measures). Not for several threads at once."""

    def __init__(self, addr, timeout=5):
        self.s = connect(addr, timeout)
        self.f = self.s.makefile("rb")

    def __call__(self, *args):
        self.s.sendall(encode(*args))
        return read(self.f)

    def close(self):
        self.f.close()
        self.s.close()
