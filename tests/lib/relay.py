"""relay.py - pipe(reader, writer): copies one asyncio stream into another
until end of file or an error (a reset, a TLS alert), then closes the
writer. Shared by the test proxies (tests/lib/http_proxy.py,
tests/provider/tls_proxy.py). Python standard library only."""


async def pipe(reader, writer):
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            writer.write(data)
            await writer.drain()
    except OSError:  # ConnectionError, ssl.SSLError
        pass
    finally:
        try:
            writer.close()
        except Exception:
            pass
