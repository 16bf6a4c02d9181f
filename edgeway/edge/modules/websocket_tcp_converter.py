"""The websocket_tcp_converter module: a WebSocket opening handshake takes the public
connection over, and its messages are carried to the route's backend as a plain TCP stream
(``edge/wstcp.py``). Other requests pass."""

from __future__ import annotations

from typing import Any

from edgeway.edge import wstcp
from edgeway.edge.hooks import Compiling, Exchange, Hook, Takeover, Verdict

_CONVERT = Takeover(wstcp.convert)


class WebSocketTcp(Hook):
    name = "websocket_tcp_converter"

    async def request(self, x: Exchange) -> Verdict:
        return _CONVERT if wstcp.wants(x.req) else None


def compile(module: dict[str, Any], ctx: Compiling) -> WebSocketTcp:
    return WebSocketTcp()
