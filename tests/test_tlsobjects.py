"""TLS objects whose record calls go straight to ``_ssl`` (``edgeway.tlsobjects``): over a real
TLS connection on each event loop, both ends carry every byte, and the transports' objects
are ``Direct`` with the C methods bound."""

from __future__ import annotations

import asyncio
import hashlib
import os
import ssl
from pathlib import Path

import pytest

from edgeway.tlsobjects import SHAPED, Direct, direct
from tests.edge.tls_upstream import localhost_contexts


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_direct_objects_carry_every_byte_both_ways(loop: str, tmp_path: Path) -> None:
    assert SHAPED  # (CPython 3.11's ssl: if this fails, the optimisation is silently off)
    server_ctx, client_ctx = (direct(c) for c in localhost_contexts(tmp_path))
    data = os.urandom(3 << 20)
    seen: list[object] = []

    async def main() -> None:
        async def echo(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            seen.append(w.get_extra_info("ssl_object"))
            while chunk := await r.read(1 << 16):
                w.write(chunk)
                await w.drain()
            w.close()

        server = await asyncio.start_server(echo, "127.0.0.1", 0, ssl=server_ctx)
        port = server.sockets[0].getsockname()[1]
        r, w = await asyncio.open_connection("127.0.0.1", port, ssl=client_ctx,
                                             server_hostname="localhost")
        seen.append(w.get_extra_info("ssl_object"))

        async def send() -> None:
            for at in range(0, len(data), 100_000):
                w.write(data[at:at + 100_000])
                await w.drain()

        sender = asyncio.create_task(send())
        got = await r.readexactly(len(data))
        await sender
        assert hashlib.sha256(got).digest() == hashlib.sha256(data).digest()
        w.close()
        server.close()
        await server.wait_closed()

    if loop == "uvloop":
        uvloop = pytest.importorskip("uvloop")
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(asyncio.wait_for(main(), 30))
    else:
        asyncio.run(asyncio.wait_for(main(), 30))
    assert len(seen) == 2
    for obj in seen:
        assert type(obj) is Direct
        inner = obj._sslobj  # type: ignore[attr-defined]
        for name in ("read", "write", "pending"):
            assert getattr(obj, name).__self__ is inner  # the C method, not ssl.py's
    assert isinstance(seen[0], ssl.SSLObject)
