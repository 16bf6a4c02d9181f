"""Public TCP listeners: one per TCP tunnel's bound address and per TCP edge hostport."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
from collections.abc import Awaitable, Callable

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def client_addr(peer: tuple[str, int] | None) -> str:
    if not peer:
        return "0.0.0.0:0"
    host = peer[0]
    return f"[{host}]:{peer[1]}" if ipaddress.ip_address(host).version == 6 else \
        f"{host}:{peer[1]}"


class TcpListener:
    """A public TCP listener whose connections go to ``handler``; closing it also ends the
    connections it accepted."""

    def __init__(self, host: str, port: int, handler: Handler) -> None:
        self.host, self.port = host, port
        self._handler = handler
        self._server: asyncio.Server | None = None
        self._clients: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._client, self.host, self.port)

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._clients.add(task)
        try:
            await self._handler(reader, writer)
        finally:
            self._clients.discard(task)
            with contextlib.suppress(ConnectionError, OSError):
                writer.close()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._clients):
            task.cancel()
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)
