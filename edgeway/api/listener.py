"""The management API's HTTP connections: uvicorn's httptools protocol with a deadline on each
request head and the connection caps (``edgeway.caps``).

uvicorn times out only the wait between two requests of a kept-alive connection: a client that
sends nothing, or a head a byte at a time, kept its connection (and a descriptor) for as long
as it liked. Here a head must be complete within ``head_timeout`` seconds of the connection's
start, or of its first byte for a later request; the connection is closed otherwise.
"""

from __future__ import annotations

import asyncio
import json
from typing import ClassVar

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from edgeway.caps import API_HEAD_TIMEOUT, Door, Refusal, Ticket, http_refusal
from edgeway.errors import CODE_PREFIX

CODES = {429: 254, 503: 255}  # Edgeway's own error codes of the caps' answers


def _error_body(status: int, message: str) -> tuple[bytes, bytes]:
    body = {"error_code": f"{CODE_PREFIX}{CODES[status]}", "status_code": status,
            "msg": message, "details": {}}
    return b"application/json", json.dumps(body).encode()


def refusal() -> Refusal:
    """The API's answer to a connection over a cap: the spec's error body."""
    return http_refusal(_error_body)


class ApiProtocol(HttpToolsProtocol):
    door: ClassVar[Door]
    head_timeout: ClassVar[float]
    _ticket: Ticket | None = None
    _head: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._ticket = self.door.admit(transport.get_extra_info("peername"))
        if self._ticket is None:
            transport.write(self.door.answer(self.door.refused_by))
            transport.close()
            return
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        if self._ticket is not None:
            self._ticket.release()
        super().connection_lost(exc)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._arm()

    def on_headers_complete(self) -> None:
        self._disarm()
        super().on_headers_complete()

    def _arm(self) -> None:
        if self._head is None:
            self._head = self.loop.call_later(self.head_timeout, self._too_slow)

    def _disarm(self) -> None:
        if self._head is not None:
            self._head.cancel()
            self._head = None

    def _too_slow(self) -> None:
        self._head = None
        if not self.transport.is_closing():
            self.transport.close()


def protocol(door: Door, head_timeout: float = API_HEAD_TIMEOUT) -> type[ApiProtocol]:
    """The protocol class uvicorn is given (``http=``), for one listener."""
    class Protocol(ApiProtocol):
        pass
    Protocol.door, Protocol.head_timeout = door, head_timeout
    return Protocol
