#!/usr/bin/env python3
"""tls_proxy.py CERT KEY PORT UPSTREAM_PORT - terminates TLS on 127.0.0.1:PORT
and relays each connection's bytes to 127.0.0.1:UPSTREAM_PORT (the provider
simulator, which speaks plain HTTP). Test use only; prints "listening" when
ready. Python standard library only."""
import asyncio
import os
import ssl
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
from relay import pipe  # noqa: E402


async def main():
    cert, key, port, upstream = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)

    async def handle(cr, cw):
        try:
            ur, uw = await asyncio.open_connection("127.0.0.1", upstream)
        except OSError:
            cw.close()
            return
        await asyncio.gather(pipe(cr, uw), pipe(ur, cw))

    server = await asyncio.start_server(handle, "127.0.0.1", port, ssl=ctx)
    print("listening", flush=True)
    async with server:
        await server.serve_forever()


asyncio.run(main())
