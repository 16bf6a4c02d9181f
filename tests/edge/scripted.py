"""The HTTP edge without sockets, in the style of mitmproxy's layer tests: a public connection
is a script of bytes fed to a real ``HttpEdge`` (its parser, hooks and answers), its routing
is a function of the request, and what the edge wrote back is returned for the test to read.
For everything the edge answers itself (module verdicts, fixed backends, refusals); traffic
to agents and upstreams is tested through real ones elsewhere."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from edgeway.edge.h1 import Request
from edgeway.edge.http import HttpEdge
from edgeway.edge.router import Decision


class Transport(asyncio.WriteTransport):
    """Collects what the edge writes; ``closed`` once it closes or aborts the connection."""

    def __init__(self) -> None:
        super().__init__()
        self.out = bytearray()
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.out += data

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def abort(self) -> None:
        self.closed = True

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default


class Router:
    """Routes every request with ``decide(request)`` and, like the edge's router, lets the
    plan's checks refuse it first; counts the decisions asked for."""

    def __init__(self, decide: Callable[[Request], Decision]) -> None:
        self.decide, self.asked = decide, 0

    async def http(self, req: Request, ip: str, scheme: str, https_port: int,
                   tls_edge: Any = None) -> Decision:
        self.asked += 1
        decision = self.decide(req)
        refusal = decision.plan.check(ip, req.headers)
        return decision if refusal is None else Decision(refusal)


async def converse(edge: HttpEdge, data: bytes, peer: tuple[str, int] = ("192.0.2.1", 5000)
                   ) -> tuple[bytes, bool]:
    """Feed ``data`` (then end of input) to one public connection of ``edge``: (what it
    wrote, whether it closed the connection)."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    reader.feed_data(data)
    reader.feed_eof()
    transport = Transport()
    writer = asyncio.StreamWriter(transport, asyncio.StreamReaderProtocol(reader), reader, loop)
    await asyncio.wait_for(edge.serve(reader, writer, peer), 10)
    return bytes(transport.out), transport.closed


def edge(decide: Callable[[Request], Decision], scheme: str = "http") -> tuple[HttpEdge, Router]:
    router = Router(decide)
    return HttpEdge(router, scheme), router  # type: ignore[arg-type]


def responses(out: bytes) -> list[tuple[int, dict[str, str], bytes]]:
    """The responses in what the edge wrote: (status, headers by lower-case name, body),
    bodies framed by Content-Length (the edge's own answers always have one)."""
    found = []
    while out:
        head, _, rest = out.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0"))
        found.append((int(lines[0].split()[1]), headers, rest[:length]))
        out = rest[length:]
    return found
