"""The asyncio muxado shell over a real loopback TCP connection."""

from __future__ import annotations

import asyncio
import hashlib
import os
import socket
import ssl
import struct
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import cast

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edgeway.tunnel.muxado import aio, frames
from edgeway.tunnel.muxado.aio import MuxConnection
from edgeway.tunnel.muxado.core import WINDOW
from edgeway.tunnel.muxado.events import StreamError
from edgeway.tunnel.muxado.frames import ErrorCode
from edgeway.tunnel.muxado.stream import HIGH_WATER, MuxStream, StreamClosed
from edgeway.tunnel.muxado.transport import records
from edgeway.tunnel.pipes import StreamPipe, splice
from tests.edge.tls_upstream import localhost_contexts
from tests.waiting import until


@asynccontextmanager
async def connected(tls: tuple[ssl.SSLContext, ssl.SSLContext] | None = None
                    ) -> AsyncIterator[tuple[MuxConnection, MuxConnection]]:
    ready: asyncio.Future[MuxConnection] = asyncio.get_running_loop().create_future()

    async def on_client(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        ready.set_result(MuxConnection(r, w, client=False))

    server = await asyncio.start_server(on_client, "127.0.0.1", 0, ssl=tls[0] if tls else None)
    port = server.sockets[0].getsockname()[1]
    r, w = await asyncio.open_connection("127.0.0.1", port, ssl=tls[1] if tls else None,
                                         server_hostname="localhost" if tls else None)
    client = MuxConnection(r, w, client=True)
    srv = await asyncio.wait_for(ready, 5)
    try:
        yield client, srv
    finally:
        await client.close()
        await srv.close()
        server.close()
        await server.wait_closed()


def run(fn: Callable[[], Awaitable[None]], loop: str = "asyncio") -> None:
    if loop == "uvloop":
        uvloop = pytest.importorskip("uvloop")
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(asyncio.wait_for(fn(), 60))
    else:
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
            # A server's reset is a FIN then the RST (the SDKs' readers only end on a FIN):
            # the client reads the end, and then cannot write.
            assert await asyncio.wait_for(stream.read(), 5) == b""
            with pytest.raises(StreamClosed) as err:
                for _ in range(50):
                    await stream.write(b"x")
                    await asyncio.sleep(0.01)
            assert err.value.code == ErrorCode.STREAM_REFUSED
            # A client's reset is a bare RST: the server's reader fails.
            again = await client.open_stream()
            await again.write(b"abc")
            other = await server.accept()
            assert other is not None and await other.read() == b"abc"
            again.reset(ErrorCode.STREAM_CANCELLED)
            with pytest.raises(StreamClosed) as err:
                await asyncio.wait_for(other.read(), 5)
            assert err.value.code == ErrorCode.STREAM_CANCELLED
            await client.close()
            assert await asyncio.wait_for(server.accept(), 5) is None
    run(main)


def tls_contexts(tmp: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    return localhost_contexts(tmp)


@given(st.lists(st.binary(max_size=40_000), max_size=10), st.sampled_from([16, 100, 16384]))
def test_records_keep_the_bytes_and_cut_at_record_boundaries(parts: list[bytes],
                                                             size: int) -> None:
    out = records(list(parts), size)
    assert b"".join(out) == b"".join(parts)
    assert all(len(o) % size == 0 for o in out[:-1]) and all(out)


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_tls_transfer_and_many_streams(tmp_path: Path, loop: str) -> None:
    """Over TLS (where the connection takes the SSL transport over and TLS decrypts into the
    session's buffer), under both event loops: bulk both ways at once and 100 short streams."""
    contexts = tls_contexts(tmp_path)

    async def main() -> None:
        async with connected(contexts) as (client, server):
            up, down = os.urandom(3 << 20), os.urandom(3 << 20)
            stream = await client.open_stream()
            sender = asyncio.create_task(stream.write(up, eof=True))
            peer = await server.accept()
            assert peer is not None
            replier = asyncio.create_task(peer.write(down, eof=True))
            got_up, got_down = await asyncio.gather(read_all(peer), read_all(stream))
            await asyncio.gather(sender, replier)
            assert (got_up, got_down) == (up, down)

            async def echo() -> None:
                while (s := await server.accept()) is not None:
                    await s.write(await read_all(s), eof=True)

            echoer = asyncio.create_task(echo())

            async def one(i: int) -> bytes:
                s = await client.open_stream()
                await s.write(str(i).encode() * 50, eof=True)
                return await read_all(s)

            answers = await asyncio.gather(*(one(i) for i in range(100)))
            assert answers == [str(i).encode() * 50 for i in range(100)]
            echoer.cancel()

    run(main, loop)


def test_bytes_the_stream_reader_already_held_are_not_lost() -> None:
    async def main() -> None:
        pair: asyncio.Future[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = \
            asyncio.get_running_loop().create_future()

        async def on_client(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            pair.set_result((r, w))

        srv = await asyncio.start_server(on_client, "127.0.0.1", 0)
        r, w = await asyncio.open_connection("127.0.0.1", srv.sockets[0].getsockname()[1])
        client = MuxConnection(r, w, client=True)
        stream = await client.open_stream()
        await stream.write(b"early bytes", eof=True)
        reader, writer = await asyncio.wait_for(pair, 5)
        for _ in range(100):  # the bytes reach the stream reader before the takeover
            if getattr(reader, "_buffer", b""):
                break
            await asyncio.sleep(0.01)
        server = MuxConnection(reader, writer, client=False)
        peer = await asyncio.wait_for(server.accept(), 5)
        assert peer is not None and await read_all(peer) == b"early bytes"
        await client.close()
        await server.close()
        srv.close()
        await srv.wait_closed()

    run(main)


SMALL = 32 << 10  # socket buffers of a public client that reads slowly


@asynccontextmanager
async def spliced(client: MuxConnection, server: MuxConnection, small: bool = False
                  ) -> AsyncIterator[tuple[asyncio.StreamReader, asyncio.StreamWriter]]:
    """A public TCP connection spliced (as a TCP tunnel does) to a stream the edge end
    (``server``) opens to the agent end (``client``); yields the public client's pair.
    ``small``: the kernel's buffers between them are kept small (``SMALL``)."""
    tasks: list[asyncio.Task[None]] = []

    async def on_public(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        tasks.append(task)
        if small:
            w.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, SMALL)
        await splice(r, w, StreamPipe(await server.open_stream()))

    public = await asyncio.start_server(on_public, "127.0.0.1", 0)
    sock = socket.socket()
    if small:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SMALL)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, public.sockets[0].getsockname())
    r, w = await asyncio.open_connection(sock=sock)
    try:
        yield r, w
    finally:
        w.close()
        await asyncio.wait_for(asyncio.gather(*tasks, return_exceptions=True), 5)
        public.close()
        await public.wait_closed()


def test_splice_passes_bytes_and_half_closes_both_ways_with_backpressure() -> None:
    async def main() -> None:
        async with connected() as (agent, edge), spliced(agent, edge) as (r, w):
            up, down = os.urandom(4 << 20), os.urandom(2 << 20)
            w.write(up)
            stream = await asyncio.wait_for(agent.accept(), 5)
            assert stream is not None
            await asyncio.sleep(0.3)  # the agent reads nothing yet: the edge stops reading
            (sid,) = edge._streams
            assert edge.session.pending(sid) <= HIGH_WATER + (1 << 20)
            await w.drain()
            w.write_eof()
            assert await read_all(stream) == up  # ... and the client's EOF came after it
            await stream.write(down, eof=True)
            assert await r.read() == down  # EOF: the half-close passed on the other way

    run(main)


def test_a_public_client_that_does_not_read_holds_back_the_agent() -> None:
    """What the agent sends goes to the public client from the stream's callbacks: its window
    must go back only as the client's transport drains, or a client that never reads would
    make the edge buffer all that the agent sends."""

    async def main() -> None:
        async with connected() as (agent, edge), spliced(agent, edge, small=True) as (r, w):
            data = os.urandom(8 << 20)
            w.write(b"go")  # (the stream reaches the agent with its first bytes)
            accepted = await asyncio.wait_for(agent.accept(), 5)
            assert accepted is not None and await accepted.read() == b"go"
            stream = accepted
            client = cast(asyncio.Transport, w.transport)
            client.pause_reading()  # the client reads nothing
            writer = asyncio.create_task(stream.write(data, eof=True))
            # Once the edge holds what its buffers take (its transport's high-water mark,
            # one window, the small kernel buffers), the rest waits at the agent for window.
            def held_back() -> bool:
                assert not writer.done(), "the edge took everything from the agent"
                return agent.session.pending(stream.id) >= len(data) - (2 << 20)

            await until(held_back, "the rest to wait at the agent for window")
            assert not writer.done()
            client.resume_reading()
            assert await asyncio.wait_for(r.read(), 20) == data  # all of it, in order
            await asyncio.wait_for(writer, 5)

    run(main)


def test_a_public_connection_reset_resets_the_stream() -> None:
    async def main() -> None:
        async with connected() as (agent, edge), spliced(agent, edge) as (_, w):
            w.write(b"hello")
            stream = await asyncio.wait_for(agent.accept(), 5)
            assert stream is not None and await stream.read() == b"hello"
            sock = w.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            w.transport.abort()  # an RST, not a FIN
            # The agent's stream is aborted: its reader sees the end (the SDKs' readers need
            # the FIN), its writes fail.
            assert await asyncio.wait_for(stream.read(), 5) == b""
            with pytest.raises(StreamClosed):
                for _ in range(50):
                    await stream.write(b"late")
                    await asyncio.sleep(0.01)

    run(main)


def test_a_writer_waiting_for_window_wakes_when_window_and_fin_arrive_together() -> None:
    """The peer's window increment and its FIN in one read: the increment sends the rest of
    our data (and our FIN), the stream is then done on both sides and forgotten; the writer
    blocked on the window must still return."""

    async def main() -> None:
        ours, theirs = socket.socketpair()
        r, w = await asyncio.open_connection(sock=ours)
        conn = MuxConnection(r, w, client=False)
        stream = await conn.open_stream()
        writer = asyncio.create_task(stream.write(b"x" * (WINDOW + 3 * HIGH_WATER), eof=True))
        await asyncio.sleep(0.1)
        assert not writer.done()
        theirs.sendall(frames.encode(frames.wndinc(stream.id, 4 * HIGH_WATER))
                       + frames.encode(frames.data(stream.id, b"bye", fin=True)))
        await asyncio.wait_for(writer, 5)
        assert await read_all(stream) == b"bye"
        assert not conn._streams and not conn.session.is_open(stream.id)  # nothing kept
        await conn.close()
        theirs.close()

    run(main)


def test_opening_waits_in_turn_for_the_stream_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    """At ``max_open`` streams, openers wait (first come, first served) instead of failing;
    a stream ended both ways frees a place at once, a reset one after ``LINGER`` (the peer
    may still hold it)."""
    monkeypatch.setattr(aio, "LINGER", 0.3)

    async def main() -> None:
        async with connected() as (agent, edge):
            edge.max_open = 2
            a, b = await edge.open_stream(), await edge.open_stream()
            for s in (a, b):
                await s.write(b"x")
            waiting = [asyncio.create_task(edge.open_stream()) for _ in range(2)]
            await asyncio.sleep(0.1)
            assert not any(t.done() for t in waiting) and edge.crowded
            peer_a = await agent.accept()
            assert peer_a is not None
            a.close()  # our FIN; the place frees when the peer's FIN comes back
            await asyncio.sleep(0.1)
            assert not waiting[0].done()
            await peer_a.write_eof()
            first = await asyncio.wait_for(waiting[0], 5)
            assert not waiting[1].done()
            b.reset()  # the peer may hold it a while: counted until LINGER passed
            await asyncio.sleep(0.1)
            assert not waiting[1].done()
            second = await asyncio.wait_for(waiting[1], 5)
            assert {first.id, second.id}.isdisjoint({a.id, b.id})
            await edge.close()
            with pytest.raises(StreamError):  # a closing session fails its openers
                await asyncio.wait_for(edge.open_stream(), 5)
    run(main)


def test_a_closed_stream_drops_what_still_arrives_and_returns_its_window() -> None:
    async def main() -> None:
        async with connected() as (agent, edge):
            stream = await edge.open_stream()
            await stream.write(b"x")
            peer = await agent.accept()
            assert peer is not None
            stream.close()
            assert await asyncio.wait_for(peer.read(), 5) == b"x"
            assert await asyncio.wait_for(peer.read(), 5) == b""  # our FIN
            for _ in range(4):  # four windows' worth: it flows, nobody reads it
                await asyncio.wait_for(peer.write(b"y" * WINDOW), 5)
            await peer.write_eof()
            for _ in range(100):
                if not edge.session.is_open(stream.id):
                    break
                await asyncio.sleep(0.02)
            assert not edge.session.is_open(stream.id) and stream.id not in edge._streams
    run(main)


def test_a_peer_that_grants_window_but_does_not_read_makes_writers_wait() -> None:
    """Window is the peer's promise to take data, not proof that it reads: when the transport
    has more than it wants to buffer, writers wait, so nothing queues without bound."""
    async def main() -> None:
        ours, theirs = socket.socketpair()
        theirs.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
        r, w = await asyncio.open_connection(sock=ours)
        conn = MuxConnection(r, w, client=False)
        stream = await conn.open_stream()
        await stream.write(b"x")
        grant = frames.encode(frames.wndinc(stream.id, 0x7FFFFFFF - WINDOW))
        theirs.sendall(grant)  # all the window there is, and then it reads nothing
        await asyncio.sleep(0.1)
        chunk = b"y" * 65536
        written = 0

        async def writer() -> None:
            nonlocal written
            while written < 256 << 20:
                await stream.write(chunk)
                written += len(chunk)

        task = asyncio.create_task(writer())
        await asyncio.sleep(1)
        assert not task.done() and written < 16 << 20, written
        queued = sum(len(part) for part in conn.session._out)
        assert queued < 4 << 20, queued
        task.cancel()
        await conn.close()
        theirs.close()
    run(main)


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_a_stream_whose_end_resets_another_does_not_break_the_shutdown(loop: str) -> None:
    """The edge's callback path aborts its upstream from a stream's end callback: when the
    connection ends, that resets (and forgets) another stream while the streams are being
    ended. The shutdown still ends every stream and the accept loop (it raised
    'dictionary changed size during iteration', and the session was left open)."""
    async def main() -> None:
        async with connected() as (client, server):
            opened = [await client.open_stream() for _ in range(2)]
            for s in opened:
                await s.write(b"x")
            first, second = await server.accept(), await server.accept()
            assert first is not None and second is not None
            ends: list[str] = []

            def on_end() -> None:
                ends.append("first")
                second.reset()

            first.deliver(lambda data: first.taken(len(data)), on_end)
            await server.close()
            assert ends == ["first"]
            assert await asyncio.wait_for(server.accept(), 5) is None
    run(main, loop)
