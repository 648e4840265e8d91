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

Every mode answers PING, CONFIG GET maxmemory-policy (noeviction) and
counts the commands it got in PORT.count (one line per command name).
Runs until killed.
"""
import socket
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

    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(('127.0.0.1', port))
    srv.listen(64)
    while True:
        conn, _ = srv.accept()
        threading.Thread(target=serve, args=(conn,), daemon=True).start()


if __name__ == '__main__':
    main()
