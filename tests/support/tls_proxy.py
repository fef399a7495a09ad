#!/usr/bin/env python3
"""A TLS-terminating TCP proxy for the tests: TLS on 127.0.0.1 (a free
port) with the given certificate and key, plain TCP to --target. Prints
`READY <port>` on stdout, then one line on stderr for each connection whose
handshake completed (`TLS <version> <cipher>`); exits when its standard
input closes."""
import argparse
import asyncio
import ssl
import sys


async def pipe(reader, writer):
    try:
        while True:
            data = await reader.read(65536)
            if not data:
                break
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        try:
            writer.close()
        except Exception:
            pass


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cert", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--target", required=True, help="host:port")
    args = ap.parse_args()
    host, port = args.target.rsplit(":", 1)
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(args.cert, args.key)

    async def handle(client_r, client_w):
        tls = client_w.get_extra_info("ssl_object")
        print(f"TLS {tls.version()} {tls.cipher()[0]}", file=sys.stderr, flush=True)
        try:
            up_r, up_w = await asyncio.open_connection(host, int(port))
        except OSError:
            client_w.close()
            return
        await asyncio.gather(pipe(client_r, up_w), pipe(up_r, client_w))

    server = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=ctx)
    print("READY", server.sockets[0].getsockname()[1], flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)


asyncio.run(main())
