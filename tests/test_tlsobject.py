"""``edgeway.tlsobject``: TLS connections of contexts given to ``direct``, on asyncio's loop and
uvloop, as both ends of a real loopback connection: their TLS objects call the C object's
methods straight, every byte arrives both ways across many records (a write bigger than
the loop's buffers, so reads and writes come back for more), and a close after the data is
read as the end."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import pytest
import uvloop

from edgeway.agent import dial
from edgeway.pki.platform_ca import EdgeCerts
from edgeway.tlsobject import DirectObject, direct
from tests.edge.tls_upstream import localhost_contexts, self_signed

BIG = 8 << 20  # bytes each way


def run(loop: str, main: Coroutine[Any, Any, None]) -> None:
    factory = uvloop.new_event_loop if loop == "uvloop" else asyncio.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(main)


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_direct_tls_objects_carry_every_byte_and_each_end(loop: str, tmp_path: Path) -> None:
    server_ctx, client_ctx = (direct(c) for c in localhost_contexts(tmp_path))
    data = hashlib.shake_256(b"tls").digest(BIG)
    objects: list[object] = []

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        objects.append(writer.get_extra_info("ssl_object"))
        while chunk := await reader.read(1 << 16):
            writer.write(chunk)
            await writer.drain()
        writer.close()

    async def main() -> None:
        server = await asyncio.start_server(echo, "127.0.0.1", 0, ssl=server_ctx)
        port = server.sockets[0].getsockname()[1]
        async with server:
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", port, ssl=client_ctx, server_hostname="localhost")
            mine = writer.get_extra_info("ssl_object")
            assert isinstance(mine, DirectObject) and type(mine.read).__name__ == \
                "builtin_function_or_method"
            writer.write(data)
            got = bytearray()
            while len(got) < BIG:
                chunk = await reader.read(1 << 20)
                assert chunk, f"the echo ended after {len(got)} of {BIG} bytes"
                got += chunk
            assert bytes(got) == data
            writer.close()
            assert await reader.read() == b""  # (its close, read as the end)
            await writer.wait_closed()
            assert isinstance(objects[0], DirectObject)


    run(loop, main())


def test_the_contexts_on_the_traffic_paths_are_direct(tmp_path: Path) -> None:
    """The agent's to its server and to local https:// services, the edge's public ones."""
    cert, key = self_signed("localhost", tmp_path)
    for context in (dial.context(""), dial.context(str(cert)), dial.LOCAL_TLS,
                    EdgeCerts._context(cert, key)):
        assert context.sslobject_class is DirectObject
