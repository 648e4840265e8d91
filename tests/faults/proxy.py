"""proxy.py - a Redis proxy for the fault suite that can lose replies.

The responder reaches Redis over TCP on 127.0.0.1 through this proxy, which
forwards to the stack's Redis on its unix socket. hiredis sends one command
and waits for its reply (the responder never pipelines), so each client
connection is served by one thread: read a command, forward it, read the
reply, pass it back. On command (arm) the proxy forwards the Nth EVALSHA (or
EVAL) of a given script to Redis, waits for Redis's reply, discards it and
resets the client's connection: the script ran, the client never learns it.
Scripts are told apart by the SHA-1 of lua/claim.lua, lua/record.lua and
lua/release.lua. Python standard library only.
"""

import hashlib
import os
import socket
import struct
import threading
import time

LUA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "lua")


def script_shas():
    """{sha1 hex: script name} for the scripts in lua/."""
    out = {}
    for name in ("claim", "record", "release"):
        with open(os.path.join(LUA_DIR, name + ".lua"), "rb") as f:
            out[hashlib.sha1(f.read()).hexdigest()] = name
    return out


def _read_line(f):
    line = f.readline(65536)
    if not line or not line.endswith(b"\r\n"):
        return None
    return line


def read_command(f):
    """One RESP command (an array of bulk strings) from a client: (raw bytes,
    [args]) or (None, None) at EOF or on anything else."""
    head = _read_line(f)
    if head is None or head[:1] != b"*":
        return None, None
    n = int(head[1:-2])
    raw, args = [head], []
    for _ in range(n):
        h = _read_line(f)
        if h is None or h[:1] != b"$":
            return None, None
        ln = int(h[1:-2])
        data = f.read(ln + 2)
        if data is None or len(data) != ln + 2:
            return None, None
        raw += [h, data]
        args.append(data[:-2])
    return b"".join(raw), args


def read_reply(f):
    """One complete RESP2 reply, raw, or None at EOF."""
    line = _read_line(f)
    if line is None:
        return None
    t = line[:1]
    if t in (b"+", b"-", b":"):
        return line
    if t == b"$":
        n = int(line[1:-2])
        if n < 0:
            return line
        data = f.read(n + 2)
        if data is None or len(data) != n + 2:
            return None
        return line + data
    if t == b"*":
        n = int(line[1:-2])
        parts = [line]
        for _ in range(max(n, 0)):
            p = read_reply(f)
            if p is None:
                return None
            parts.append(p)
        return b"".join(parts)
    return None


def _reset(sock):
    """Closes with RST instead of FIN."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    try:
        sock.close()
    except OSError:
        pass


class RedisProxy:
    def __init__(self, upstream_unix):
        self.upstream = upstream_unix
        self.shas = script_shas()
        self.lock = threading.Lock()
        self.rules = []            # [script, skip]: reset the (skip+1)th match
        self.seen = {"claim": 0, "record": 0, "release": 0}
        self.resets = []           # (monotonic time, script)
        self.conns = 0
        self.srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.srv.bind(("127.0.0.1", 0))
        self.srv.listen(128)
        self.port = self.srv.getsockname()[1]
        self.closing = False
        self.thread = threading.Thread(target=self._accept_loop, daemon=True)
        self.thread.start()

    @property
    def url(self):
        return "redis://127.0.0.1:%d" % self.port

    def arm(self, script, nth=1, mode="after"):
        """The nth EVALSHA of script from now on (counting only matches no
        earlier rule took): mode "after" runs it in Redis, then resets the
        client's connection instead of passing the reply on (a reply that
        is NOSCRIPT does not count: the script did not run); mode "before"
        resets the connection without forwarding it (it never runs)."""
        with self.lock:
            self.rules.append([script, nth - 1, mode])

    def disarm(self):
        with self.lock:
            left = list(self.rules)
            self.rules = []
        return left

    def pending(self):
        with self.lock:
            return len(self.rules)

    def close(self):
        self.closing = True
        try:
            self.srv.close()
        except OSError:
            pass

    def _accept_loop(self):
        while not self.closing:
            try:
                c, _ = self.srv.accept()
            except OSError:
                return
            with self.lock:
                self.conns += 1
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _script_of(self, args):
        if len(args) < 2:
            return None
        verb = args[0].upper()
        if verb == b"EVALSHA":
            return self.shas.get(args[1].decode("ascii", "replace").lower())
        if verb == b"EVAL":
            return self.shas.get(hashlib.sha1(args[1]).hexdigest())
        return None

    def _match(self, script, mode, reply=None):
        """True when this command (mode "before": before it is forwarded;
        "after": once its reply came) is to be lost."""
        if script is None or (reply is not None and reply.startswith(b"-NOSCRIPT")):
            return False
        with self.lock:
            if mode == "after":
                self.seen[script] += 1
            for rule in self.rules:
                if rule[0] != script or rule[2] != mode:
                    continue
                if rule[1] > 0:
                    rule[1] -= 1
                    return False
                self.rules.remove(rule)
                self.resets.append((time.monotonic(), script, mode))
                return True
        return False

    def _serve(self, c):
        u = None
        try:
            u = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            u.settimeout(30)
            u.connect(self.upstream)
        except OSError:
            # Redis is down: the client sees its connection closed
            if u is not None:
                u.close()
            c.close()
            return
        c.settimeout(None)
        cf, uf = c.makefile("rb"), u.makefile("rb")
        try:
            while True:
                raw, args = read_command(cf)
                if raw is None:
                    break
                script = self._script_of(args)
                if self._match(script, "before"):
                    cf.close()
                    _reset(c)
                    c = None
                    break
                u.sendall(raw)
                reply = read_reply(uf)
                if reply is None:
                    break
                if self._match(script, "after", reply):
                    cf.close()        # else close() leaves the fd open
                    _reset(c)
                    c = None
                    break
                c.sendall(reply)
        except (OSError, ValueError):
            pass
        finally:
            for f in (cf, uf):
                try:
                    f.close()
                except OSError:
                    pass
            for s in (c, u):
                if s is not None:
                    try:
                        s.close()
                    except OSError:
                        pass
