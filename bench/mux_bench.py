"""muxado micro-benchmark: a pair of ``MuxConnection`` objects over loopback TLS in one process
(uvloop's event loop, as ``edgeway serve`` runs), no agent, no edge. Both ends are ours, so the
CPU figures are the sum of both ends' work.

- bulk: one stream, 64 KiB writes (what a public socket read gives), read on the other end;
  MB/s and process CPU per MB, one direction (the other end only returns window).
- rr: request/response the way the edge proxies one HTTP request on a new stream: open a
  stream, write the 4-byte stream type and a proxy header, write a ~100-byte request; the other
  end accepts, reads the header and request, answers ~150 bytes and half-closes; the opener
  reads to EOF and half-closes. CPU per request, both ends, and wall time per request.
- pooled: the same request and response on one stream kept open (the edge reuses an agent
  stream for the next request of a keep-alive connection).

Run from the repository root:  python -m bench.mux_bench [--mib N] [--requests N] [--loop
asyncio] [--profile] [--plain]. ``--plain`` runs over TCP without TLS, to tell the cost of the
TLS records from the cost of frame handling; ``--profile`` prints the top of a cProfile of
each part.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import json
import os
import pstats
import ssl
import struct
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


from edgeway.tunnel.muxado.aio import MuxConnection  # noqa: E402
from tests.edge.tls_upstream import localhost_contexts  # noqa: E402

CHUNK = 64 * 1024
PREAMBLE = struct.pack(">I", 3) + struct.pack("<q", 120) + json.dumps(
    {"Id": "tn_" + "x" * 27, "ClientAddr": "127.0.0.1:50000", "Proto": "http", "EdgeType": "",
     "PassthroughTLS": False}).encode().ljust(120)
REQUEST = b"GET / HTTP/1.1\r\nHost: bench.example.com\r\nUser-Agent: wrk\r\nAccept: */*\r\n\r\n"
RESPONSE = (b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: 13\r\n"
            b"Date: Thu, 01 Jan 2026 00:00:00 GMT\r\nConnection: keep-alive\r\n\r\nHello, World!")


def contexts(tmp: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    return localhost_contexts(tmp)


async def pair(plain: bool) -> tuple[MuxConnection, MuxConnection, asyncio.Server]:
    with tempfile.TemporaryDirectory() as tmp:
        server_ctx, client_ctx = contexts(Path(tmp))
    ready: asyncio.Future[MuxConnection] = asyncio.get_running_loop().create_future()

    async def on_client(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        ready.set_result(MuxConnection(r, w, client=False))

    srv = await asyncio.start_server(on_client, "127.0.0.1", 0,
                                     ssl=None if plain else server_ctx)
    port = srv.sockets[0].getsockname()[1]
    r, w = await asyncio.open_connection("127.0.0.1", port, ssl=None if plain else client_ctx,
                                         server_hostname=None if plain else "localhost")
    client = MuxConnection(r, w, client=True)
    return client, await asyncio.wait_for(ready, 10), srv


def cpu() -> float:
    return time.process_time()


async def timed(serve: Callable[[], Coroutine[Any, Any, None]],
                one: Callable[[], Awaitable[None]], count: int) -> tuple[float, float]:
    """(CPU µs, wall µs) per call of ``one`` while ``serve`` answers, after a warm-up."""
    server = asyncio.create_task(serve())
    for _ in range(min(count, 200)):
        await one()
    c0, t0 = cpu(), time.perf_counter()
    for _ in range(count):
        await one()
    wall, used = time.perf_counter() - t0, cpu() - c0
    server.cancel()
    return used * 1e6 / count, wall * 1e6 / count


async def bulk(opener: MuxConnection, acceptor: MuxConnection, total: int) -> tuple[float, float]:
    """(MB/s, CPU ms per MB) for ``total`` bytes from ``opener`` to ``acceptor``."""
    payload = os.urandom(CHUNK)
    stream = await opener.open_stream()

    async def send() -> None:
        for _ in range(total // CHUNK):
            await stream.write(payload)
        await stream.write_eof()

    c0, t0 = cpu(), time.perf_counter()
    sender = asyncio.create_task(send())
    peer = await acceptor.accept()
    assert peer is not None
    got = 0
    while data := await peer.read(1 << 20):
        got += len(data)
    await sender
    wall, used = time.perf_counter() - t0, cpu() - c0
    assert got == total, (got, total)
    return total / wall / 1e6, used * 1e3 / (total / 1e6)


async def rr(opener: MuxConnection, acceptor: MuxConnection, count: int) -> tuple[float, float]:
    """(CPU µs, wall µs) per request/response, both ends."""

    async def serve() -> None:
        while (stream := await acceptor.accept()) is not None:
            await stream.readexactly(len(PREAMBLE) + len(REQUEST))
            await stream.write(RESPONSE, eof=True)

    async def one() -> None:
        stream = await opener.open_stream()
        await stream.write(PREAMBLE)
        await stream.write(REQUEST)
        out = bytearray()
        while chunk := await stream.read():
            out += chunk
        assert out == RESPONSE
        await stream.write_eof()

    return await timed(serve, one, count)


async def pooled(opener: MuxConnection, acceptor: MuxConnection, count: int
                 ) -> tuple[float, float]:
    """(CPU µs, wall µs) per request/response on one open stream, both ends."""
    stream = await opener.open_stream()
    await stream.write(PREAMBLE)
    peer = await acceptor.accept()
    assert peer is not None
    await peer.readexactly(len(PREAMBLE))

    async def serve() -> None:
        while await peer.readexactly(len(REQUEST)):
            await peer.write(RESPONSE)

    async def one() -> None:
        await stream.write(REQUEST)
        assert await stream.readexactly(len(RESPONSE)) == RESPONSE

    try:
        return await timed(serve, one, count)
    finally:
        stream.reset()


async def run(args: argparse.Namespace) -> None:
    client, server, srv = await pair(args.plain)
    try:
        parts: list[tuple[str, Callable[[], Awaitable[str]]]] = []

        async def up() -> str:
            mbs, ms = await bulk(server, client, args.mib << 20)
            return f"bulk edge->agent: {mbs:,.0f} MB/s, {ms:.2f} ms CPU/MB (both ends)"

        async def down() -> str:
            mbs, ms = await bulk(client, server, args.mib << 20)
            return f"bulk agent->edge: {mbs:,.0f} MB/s, {ms:.2f} ms CPU/MB (both ends)"

        async def requests() -> str:
            us, wall = await rr(server, client, args.requests)
            return f"request/response: {us:.1f} us CPU/request (both ends), {wall:.1f} us wall"

        async def kept() -> str:
            us, wall = await pooled(server, client, args.requests)
            return (f"request/response on a kept stream: {us:.1f} us CPU/request (both ends), "
                    f"{wall:.1f} us wall")

        parts = [("up", up), ("down", down), ("rr", requests), ("pooled", kept)]
        for name, fn in parts:
            if args.profile:
                prof = cProfile.Profile()
                prof.enable()
                line = await fn()
                prof.disable()
                out = io.StringIO()
                pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(12)
                print(line, flush=True)
                print("\n".join(out.getvalue().splitlines()[:30]))
            else:
                print(f"[{name}] {await fn()}", flush=True)
    finally:
        await client.close()
        await server.close()
        srv.close()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mib", type=int, default=512, help="MiB per bulk direction")
    p.add_argument("--requests", type=int, default=20000)
    p.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop")
    p.add_argument("--plain", action="store_true", help="TCP without TLS")
    p.add_argument("--profile", action="store_true", help="cProfile each part")
    args = p.parse_args()
    print(f"muxado pair over loopback {'TCP' if args.plain else 'TLS'}, {args.loop} loop, "
          f"{args.mib} MiB bulk, {args.requests} requests", flush=True)
    if args.loop == "uvloop":
        import uvloop

        uvloop.run(run(args))
    else:
        asyncio.run(run(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
