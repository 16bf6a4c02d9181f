"""The asyncio muxado shell over a real loopback TCP connection."""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest

from edgeway.tunnel.muxado.aio import MuxConnection, MuxStream, StreamClosed
from edgeway.tunnel.muxado.frames import ErrorCode
from edgeway.tunnel.muxado.session import WINDOW


@asynccontextmanager
async def connected() -> AsyncIterator[tuple[MuxConnection, MuxConnection]]:
    ready: asyncio.Future[MuxConnection] = asyncio.get_running_loop().create_future()

    async def on_client(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        ready.set_result(MuxConnection(r, w, client=False))

    server = await asyncio.start_server(on_client, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    r, w = await asyncio.open_connection("127.0.0.1", port)
    client = MuxConnection(r, w, client=True)
    srv = await asyncio.wait_for(ready, 5)
    try:
        yield client, srv
    finally:
        await client.close()
        await srv.close()
        server.close()
        await server.wait_closed()


def run(fn: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(fn(), 60))


async def read_all(stream: MuxStream) -> bytes:
    out = bytearray()
    while chunk := await stream.read():
        out += chunk
    return bytes(out)


def test_large_transfer_arrives_intact_both_ways() -> None:
    async def main() -> None:
        async with connected() as (client, server):
            payload = os.urandom(5 << 20)
            up = await client.open_stream()

            async def send() -> None:
                await up.write(payload, eof=True)

            sender = asyncio.create_task(send())
            down = await server.accept()
            assert down is not None
            got = await read_all(down)
            await sender
            assert hashlib.sha256(got).digest() == hashlib.sha256(payload).digest()
            await down.write(b"thanks", eof=True)
            assert await read_all(up) == b"thanks"
    run(main)


def test_a_stalled_stream_blocks_only_its_writer() -> None:
    async def main() -> None:
        async with connected() as (client, server):
            slow = await client.open_stream()
            blocked = asyncio.create_task(slow.write(b"x" * (2 * WINDOW)))
            slow_in = await server.accept()
            assert slow_in is not None
            await asyncio.sleep(0.2)
            assert not blocked.done()  # held by the peer's window, nothing read yet
            fast = await client.open_stream()
            await fast.write(b"hello", eof=True)
            fast_in = await server.accept()
            assert fast_in is not None and await read_all(fast_in) == b"hello"
            assert len(await slow_in.readexactly(2 * WINDOW)) == 2 * WINDOW
            await asyncio.wait_for(blocked, 5)
    run(main)


def test_reset_reaches_the_peer_and_eof_ends_accept() -> None:
    async def main() -> None:
        async with connected() as (client, server):
            stream = await client.open_stream()
            await stream.write(b"abc")
            peer = await server.accept()
            assert peer is not None and await peer.read() == b"abc"
            peer.reset(ErrorCode.STREAM_REFUSED)
            with pytest.raises(StreamClosed) as err:
                for _ in range(50):
                    await stream.read()
            assert err.value.code == ErrorCode.STREAM_REFUSED
            await client.close()
            assert await asyncio.wait_for(server.accept(), 5) is None
    run(main)
