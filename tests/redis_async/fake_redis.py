#!/usr/bin/env python3
"""fake_redis.py - a tiny RESP server on 127.0.0.1 for tests/redis_async.

    fake_redis.py PORT silent
        accepts connections, reads, never answers (a hung node)
    fake_redis.py PORT sentinel HOST NODEPORT
        answers SENTINEL get-master-addr-by-name with HOST NODEPORT (a
        sentinel that may name a stale primary)
    fake_redis.py PORT lagging SELFSLOTS OWNERHOST OWNERPORT
        a cluster node with an old map: CLUSTER SLOTS gives itself slots
        0..SELFSLOTS-1 and OWNERHOST:OWNERPORT the rest
    fake_redis.py PORT churn HOST
        a cluster node whose every CLUSTER SLOTS names 16 new primaries at
        HOST (ports never named before, nobody listening: a map that keeps
        changing, so a client's table of nodes fills and gives nodes up)
    fake_redis.py PORT proxy UPPORT LOSE [rst|fin]
        forwards every command to the Redis on 127.0.0.1:UPPORT, except
        that for the EVALSHA or EVAL whose number (counted over every
        connection from 1, a NOSCRIPT reply not counted) is in the
        comma-separated list LOSE it drops Redis's reply and resets the
        client's connection (rst, the default) or closes it (fin): the
        script ran, the client never learns it

Every other mode answers PING, CONFIG GET maxmemory-policy (noeviction).
Every mode counts the commands it got in PORT.count (one line per command
name). Runs until killed.
"""
import socket
import struct
import sys
import threading


def parse(buf):
    """One RESP array of bulk strings from buf: (args, rest) or (None, buf)."""
    if not buf.startswith(b'*'):
        i = buf.find(b'\r\n')
        if i < 0:
            return None, buf
        return buf[:i].split(), buf[i + 2:]
    i = buf.find(b'\r\n')
    if i < 0:
        return None, buf
    n = int(buf[1:i])
    pos = i + 2
    args = []
    for _ in range(n):
        j = buf.find(b'\r\n', pos)
        if j < 0:
            return None, buf
        ln = int(buf[pos + 1:j])
        if len(buf) < j + 2 + ln + 2:
            return None, buf
        args.append(buf[j + 2:j + 2 + ln])
        pos = j + 2 + ln + 2
    return args, buf[pos:]


def bulk(s):
    s = s.encode() if isinstance(s, str) else s
    return b'$%d\r\n%s\r\n' % (len(s), s)


def node(host, port):
    return b'*2\r\n' + bulk(host) + b':%d\r\n' % port


def read_reply(f):
    """One complete RESP2 reply from the file f, raw, or None at EOF."""
    line = f.readline()
    if not line.endswith(b'\r\n'):
        return None
    t = line[:1]
    if t in (b'+', b'-', b':'):
        return line
    n = int(line[1:-2])
    if t == b'$':
        if n < 0:
            return line
        data = f.read(n + 2)
        return line + data if len(data) == n + 2 else None
    if t == b'*':
        parts = [line]
        for _ in range(max(n, 0)):
            p = read_reply(f)
            if p is None:
                return None
            parts.append(p)
        return b''.join(parts)
    return None


def proxy(port, conn, upport, lose, how, state, lock):
    """Serves one client connection of the proxy mode (see the top)."""
    try:
        up = socket.create_connection(('127.0.0.1', upport))
    except OSError:
        return
    uf = up.makefile('rb')
    buf = b''
    try:
        while True:
            data = conn.recv(65536)
            if not data:
                return
            buf += data
            while True:
                args, buf = parse(buf)
                if args is None:
                    break
                name = args[0].upper() if args else b''
                with lock, open('%d.count' % port, 'a') as f:
                    f.write(name.decode(errors='replace') + '\n')
                up.sendall(b'*%d\r\n' % len(args) +
                           b''.join(bulk(a) for a in args))
                reply = read_reply(uf)
                if reply is None:
                    return
                if name in (b'EVALSHA', b'EVAL') and \
                        not reply.startswith(b'-NOSCRIPT'):
                    with lock:
                        state['evals'] += 1
                        drop = state['evals'] in lose
                    if drop:
                        if how == 'rst':
                            conn.setsockopt(socket.SOL_SOCKET,
                                            socket.SO_LINGER,
                                            struct.pack('ii', 1, 0))
                        return
                conn.sendall(reply)
    except OSError:
        return
    finally:
        uf.close()
        up.close()


def main():
    port = int(sys.argv[1])
    mode = sys.argv[2]
    lock = threading.Lock()

    def answer(args):
        name = args[0].upper() if args else b''
        with lock, open('%d.count' % port, 'a') as f:
            f.write(name.decode(errors='replace') + '\n')
        if mode == 'silent':
            return None
        if name == b'PING':
            return b'+PONG\r\n'
        if name == b'CONFIG':
            return b'*2\r\n' + bulk('maxmemory-policy') + bulk('noeviction')
        if mode == 'sentinel' and name == b'SENTINEL':
            return b'*2\r\n' + bulk(sys.argv[3]) + bulk(sys.argv[4])
        if mode == 'lagging' and name == b'CLUSTER':
            self_slots = int(sys.argv[3])
            return (b'*2\r\n' +
                    b'*3\r\n:0\r\n:%d\r\n' % (self_slots - 1) +
                    node('127.0.0.1', port) +
                    b'*3\r\n:%d\r\n:16383\r\n' % self_slots +
                    node(sys.argv[4], int(sys.argv[5])))
        if mode == 'churn' and name == b'CLUSTER':
            with lock:
                state['maps'] += 1
                base = 30000 + (state['maps'] * 16) % 30000
            return b'*16\r\n' + b''.join(
                b'*3\r\n:%d\r\n:%d\r\n' % (k * 1024, k * 1024 + 1023) +
                node(sys.argv[3], base + k) for k in range(16))
        return b'-ERR fake node: unsupported\r\n'

    def serve(conn):
        buf = b''
        with conn:
            while True:
                try:
                    data = conn.recv(65536)
                except OSError:
                    return
                if not data:
                    return
                buf += data
                while True:
                    args, buf = parse(buf)
                    if args is None:
                        break
                    out = answer(args)
                    if out is not None:
                        conn.sendall(out)

    def serve_proxy(conn):
        with conn:
            proxy(port, conn, int(sys.argv[3]),
                  {int(n) for n in sys.argv[4].split(',')},
                  sys.argv[5] if len(sys.argv) > 5 else 'rst', state, lock)

    state = {'evals': 0, 'maps': 0}
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(('127.0.0.1', port))
    srv.listen(64)
    while True:
        conn, _ = srv.accept()
        threading.Thread(target=serve_proxy if mode == 'proxy' else serve,
                         args=(conn,), daemon=True).start()


if __name__ == '__main__':
    main()
