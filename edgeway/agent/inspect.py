"""The tap on HTTP tunnels: both byte directions of a proxied connection, split into exchanges
(``edgeway.agent.framing``) for the store behind ``/api/requests/http`` and the inspector (when
``inspect`` is on), the tunnel's request metrics and the console's recent requests.

Passive, unless the agent sets the Host header: each piece is forwarded first and only then
shown to the tap, nothing is buffered or held back, and when the tap cannot follow (not
HTTP/1.x, a parse error, a head over 64 KiB) it just stops. With ``host_header`` set, the
request side is rewritten instead: each head is forwarded when it is complete, with its Host
replaced; a connection the tap cannot follow is then ended rather than passed on unchanged,
except after an accepted upgrade (101, or a 2xx to CONNECT), when the bytes are no longer
HTTP and pass as they are.

Responses match requests in order; 1xx interim responses are skipped; HEAD answers have no
body; after a 101 (or a 2xx to CONNECT) capture stops, and until an upgrade request is
answered the client's next bytes are kept aside (with the Host rewritten: held back).
What is kept, and how much of it, is ``edgeway.agent.captures``.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from typing import cast

import structlog

from edgeway.agent.captures import Exchange, Message, Store
from edgeway.agent.framing import CLOSE, HEAD, HOLD, Side, Stop
from edgeway.tunnel.muxado.stream import MuxStream
from edgeway.tunnel.splice import Splice

log = structlog.get_logger()


class Tap:
    """Watches one proxied connection: ``request(data)`` with what the client sent and
    ``response(data)`` with what the service answered. Passive (``host`` ""): each after it
    was forwarded. With ``host``: ``request`` comes first and ``take()`` gives what to forward.
    ``done`` hears of every exchange once its response is complete."""

    def __init__(self, store: Store | None, tunnel_name: str, remote_addr: str,
                 host: str = "", done: Callable[[Exchange], None] | None = None) -> None:
        self.store, self.tunnel_name, self.remote_addr = store, tunnel_name, remote_addr
        self.host, self.done = host, done
        self.requests, self.responses = Side(self, True), Side(self, False)
        self.pending: deque[Exchange] = deque()  # requests waiting for their response
        self.stopped = False
        self.failed = False  # stopped because it could not follow (not by an upgrade)

    def request(self, data: bytes) -> None:
        if self.stopped and not self.failed and self.host:
            self.requests.out += data  # upgraded: the bytes pass as they are
        self._feed(self.requests, data)

    def response(self, data: bytes) -> None:
        self._feed(self.responses, data)

    def response_eof(self) -> None:
        """The service closed: that ends a response delimited by the close."""
        self._feed(self.responses, None)

    def take(self) -> bytes:
        """With ``host``: the request bytes to forward now."""
        out = bytes(self.requests.out)
        self.requests.out.clear()
        return out

    def stop(self) -> None:
        self.stopped = True

    def _feed(self, side: Side, data: bytes | None) -> None:
        if self.stopped:
            return
        try:
            if data is not None:
                side.feed(data)
            elif side.state == CLOSE:
                side._end()
        except Exception as exc:  # whatever the bytes, never let inspection break traffic
            log.debug("inspect_stopped", tunnel=self.tunnel_name,
                      error=f"{type(exc).__name__}: {exc}")
            self.stopped = self.failed = True

    def request_head(self, msg: Message, began: tuple[float, int]) -> Exchange:
        ex = Exchange(self.tunnel_name, self.remote_addr, msg, start=began[0], began=began[1])
        self.pending.append(ex)
        if self.store is not None:
            self.store.add(ex)
        return ex

    def response_head(self, msg: Message) -> bool:
        """Whether this response has no body."""
        if not self.pending:
            raise Stop("a response nobody asked for")
        method, code = self.pending[0].request.method, msg.status_code
        return (method == "HEAD" or code < 200 or code in (204, 304)
                or (method == "CONNECT" and code < 300))

    def message_end(self, side: Side, msg: Message) -> None:
        if side.request:
            if side.exchange is not None and self.store is not None:
                self.store.resize(side.exchange)
            if msg.method == "CONNECT" or ("Upgrade" in msg.headers and "upgrade" in {
                    token.strip() for token in
                    ",".join(msg.headers.get("Connection", ())).lower().split(",")}):
                side.state = HOLD  # until the answer says whether HTTP goes on
            return
        code = msg.status_code
        if 100 <= code < 200 and code != 101:
            return  # interim: the final response follows
        ex = self.pending.popleft()
        ex.response, ex.duration = msg, time.monotonic_ns() - ex.began
        if self.store is not None:
            self.store.resize(ex, final=True)
        if self.done is not None:
            self.done(ex)
        held = bytes(self.requests.buf) if self.requests.state == HOLD else b""
        if code == 101 or (ex.request.method == "CONNECT" and code < 300):
            self.stopped = True  # the connection is no longer HTTP
            if self.host:
                self.requests.out += held
        elif not self.pending and self.requests.state == HOLD:
            self.requests.buf.clear()
            self.requests.state = HEAD
            self.requests.feed(held)


class _Tapped(Splice):
    """The splice of an HTTP tunnel's proxy stream with its local service (the transport),
    both directions shown to the tap: requests as they go to the service (or rewritten by
    the tap: ``host``), answers once they went into the stream."""

    def __init__(self, stream: MuxStream, transport: asyncio.Transport, over_ssl: bool,
                 tap: Tap) -> None:
        super().__init__(stream, transport, over_ssl, tls_waits=True)
        self.tap = tap

    def _sent(self, data: bytes) -> None:
        tap = self.tap
        tap.response(data)
        if tap.host and (held := tap.take()):  # requests held for an upgrade's answer
            self.transport.write(held)

    def _eof(self) -> None:
        self.tap.response_eof()

    def _write(self, data: bytes) -> None:
        tap = self.tap
        if tap.host:
            tap.request(data)
            if tap.failed:  # never pass on a request whose Host was not set
                self.fail()
                return
            self.transport.write(tap.take())
        else:
            self.transport.write(data)
            tap.request(data)


async def splice_tapped(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                        stream: MuxStream, tap: Tap) -> None:
    """``splice`` for HTTP tunnels: each piece is forwarded as soon as it arrives (no extra
    buffering; half-closes passed on) and shown to the tap, or rewritten by it (``host``)."""
    over_ssl = writer.get_extra_info("sslcontext") is not None
    try:
        await _Tapped(stream, cast(asyncio.Transport, writer.transport), over_ssl, tap).run(
            reader, writer)
    finally:
        tap.stop()
