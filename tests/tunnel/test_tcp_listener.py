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
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    ended: list[tuple[str, int]] = []
    monkeypatch.setattr(TcpListener, "closed",
                        lambda _listener, peer, _sock, _started: ended.append(peer))

    async def main() -> tuple[list[tuple[str, int]], list[Any], bytes]:
        entered, hold = asyncio.Event(), asyncio.Event()

        async def handler(_r: asyncio.StreamReader, _w: asyncio.StreamWriter) -> None:
            entered.set()
            await hold.wait()  # (a connection that would go on: only close() ends it)

        port = free_port()
        listener = TcpListener("127.0.0.1", port, handler)
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
