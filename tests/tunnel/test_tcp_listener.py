"""The public TCP listener: closing it ends its connections, and reports each end before it
returns (a stopping server sends their traffic events after the listeners close)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from edgeway.tunnel.tcp import TcpListener
from tests.server import free_port


def test_closing_ends_each_connection_and_reports_it_before_returning(
        caplog: pytest.LogCaptureFixture) -> None:
    ended: list[tuple[str, int]] = []

    async def main() -> tuple[list[tuple[str, int]], list[Any], bytes]:
        entered, hold = asyncio.Event(), asyncio.Event()

        async def handler(_r: asyncio.StreamReader, _w: asyncio.StreamWriter,
                          _peer: tuple[str, int]) -> None:
            entered.set()
            await hold.wait()  # (a connection that would go on: only close() ends it)

        port = free_port()
        listener = TcpListener("127.0.0.1", port, handler,
                               closed=lambda _listener, peer, _sock, _started: ended.append(peer))
        await listener.start()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        await asyncio.wait_for(entered.wait(), 10)
        await listener.close()
        reported = list(ended)  # what close() had reported when it returned
        rest = await asyncio.wait_for(reader.read(), 10)
        writer.close()
        await writer.wait_closed()
        return reported, writer.get_extra_info("sockname"), rest

    with caplog.at_level(logging.ERROR, logger="asyncio"):
        reported, client, rest = asyncio.run(main())
    assert reported == [tuple(client)]
    assert rest == b""  # the connection was closed
    assert not caplog.records, [r.getMessage() for r in caplog.records]


def test_each_listener_reports_its_ends_to_its_own_observer() -> None:
    """Two servers in one process (an embedder's, or a test's) each get the ends of their own
    listeners' connections, never the other's."""
    ends: dict[str, list[tuple[str, int, int]]] = {"a": [], "b": []}

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                   _peer: tuple[str, int]) -> None:
        writer.write(await reader.readexactly(1))
        await writer.drain()

    def observer(name: str) -> Any:
        return lambda listener, peer, _sock, _started: ends[name].append(
            (listener.owner, peer[1], listener.port))

    async def main() -> dict[str, list[int]]:
        listeners = {name: TcpListener("127.0.0.1", free_port(), echo, f"tunnel-{name}",
                                       observer(name)) for name in ("a", "b")}
        clients: dict[str, list[int]] = {"a": [], "b": []}
        for listener in listeners.values():
            await listener.start()
        for name in ("a", "b", "a"):
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", listeners[name].port)
            writer.write(b"x")
            assert await asyncio.wait_for(reader.readexactly(1), 10) == b"x"
            assert await asyncio.wait_for(reader.read(), 10) == b""  # the handler ended
            clients[name].append(writer.get_extra_info("sockname")[1])
            writer.close()
            await writer.wait_closed()
        for listener in listeners.values():
            await listener.close()  # (reports any end not yet reported before it returns)
        return clients

    clients = asyncio.run(main())
    for name in ("a", "b"):
        assert sorted(ends[name]) == sorted(
            (f"tunnel-{name}", port, ends[name][0][2]) for port in clients[name])
