#!/usr/bin/env python3
"""http_proxy.py PORT LOG [--deny] [--auth USER:PASSWORD] - a small HTTP
proxy on 127.0.0.1:PORT, a network peer for the tests (not a mock of
anything of ours): CONNECT HOST:PORT opens a tunnel and relays its bytes
both ways; a request with an absolute-form target (POST http://HOST:PORT/p)
is forwarded to HOST:PORT in origin form on a kept connection, the answer
(Content-Length) relayed back. With --deny every request is answered 403;
with --auth one without "Proxy-Authorization: Basic base64(USER:PASSWORD)"
is answered 407. Every request line it gets is appended to LOG (one line,
then " -> STATUS" of what the proxy itself answered or relayed). Prints
"listening" when ready. Python standard library only."""
import asyncio
import base64
import sys

from relay import pipe

LOG = None


def log(line):
    with open(LOG, "a") as f:
        f.write(line + "\n")


async def read_head(reader):
    """The request or answer head (bytes up to the empty line), or None."""
    try:
        return await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
        return None


def content_length(head):
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value.strip())
    return 0


def host_port(authority, default):
    host, _, port = authority.rpartition(":")
    if not host or not port.isdigit():
        return authority.strip("[]"), default
    return host.strip("[]"), int(port)


async def forward(head, reader, writer, upstreams):
    """One absolute-form request to its origin, its answer back. False: stop."""
    line, _, rest = head.partition(b"\r\n")
    method, url, version = line.decode("latin-1").split(" ", 2)
    body = await reader.readexactly(content_length(head))
    target = url[len("http://"):]
    authority, slash, path = target.partition("/")
    host, port = host_port(authority, 80)
    key = (host, port)
    if key not in upstreams:
        upstreams[key] = await asyncio.open_connection(host, port)
    ur, uw = upstreams[key]
    uw.write(("%s /%s %s\r\n" % (method, path, version)).encode("latin-1") + rest + body)
    await uw.drain()
    ahead = await read_head(ur)
    if ahead is None:
        return False
    abody = await ur.readexactly(content_length(ahead))
    writer.write(ahead + abody)
    await writer.drain()
    return ahead.split(b" ", 2)[1].decode()


async def handle(reader, writer, deny, auth):
    upstreams = {}
    try:
        while True:
            head = await read_head(reader)
            if head is None:
                return
            line = head.split(b"\r\n", 1)[0].decode("latin-1")
            lower = head.lower()
            if deny:
                status = "403"
            elif auth and (b"proxy-authorization: basic " + auth.lower()) not in lower:
                status = "407"
            else:
                status = None
            if status:
                log("%s -> %s" % (line, status))
                writer.write(("HTTP/1.1 %s No\r\nContent-Length: 0\r\n\r\n" % status).encode())
                await writer.drain()
                continue
            if line.startswith("CONNECT "):
                host, port = host_port(line.split(" ")[1], 443)
                try:
                    ur, uw = await asyncio.open_connection(host, port)
                except OSError:
                    log("%s -> 502" % line)
                    writer.write(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\n\r\n")
                    await writer.drain()
                    continue
                log("%s -> 200" % line)
                writer.write(b"HTTP/1.1 200 Connection established\r\nProxy-agent: http_proxy.py\r\n\r\n")
                await writer.drain()
                await asyncio.gather(pipe(reader, uw), pipe(ur, writer))
                return
            status = await forward(head, reader, writer, upstreams)
            log("%s -> %s" % (line, status))
            if not status:
                return
    except (ConnectionError, asyncio.IncompleteReadError, ValueError):
        pass
    finally:
        for _, uw in upstreams.values():
            uw.close()
        try:
            writer.close()
        except Exception:
            pass


async def main():
    global LOG
    port, LOG = int(sys.argv[1]), sys.argv[2]
    deny = "--deny" in sys.argv
    auth = None
    if "--auth" in sys.argv:
        auth = base64.b64encode(sys.argv[sys.argv.index("--auth") + 1].encode())
    server = await asyncio.start_server(lambda r, w: handle(r, w, deny, auth), "127.0.0.1", port)
    print("listening", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        pass
