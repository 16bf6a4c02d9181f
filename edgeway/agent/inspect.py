"""Request inspection for HTTP tunnels: a passive tap on both byte directions of a proxied
connection, feeding the store behind the local API's ``/api/requests/http``.

Passive, because inspection must not change the user's traffic: each piece is forwarded first
and only then shown to the tap, nothing is buffered or held back, and when the tap cannot
follow (not HTTP/1.x, a parse error, a head over 64 KiB) it just stops capturing.

Framing of our own next to httptools (llhttp), because llhttp does not say where in a fed piece
a message ended, and each message's raw bytes are wanted even when requests are pipelined: each
direction is split here (head up to CRLF CRLF, then Content-Length, chunked framing or until
close; RFC 9112 §6) and each message goes to a fresh parser, which parses the head and checks
chunked framing. Responses match requests in order; 1xx interim responses are skipped; HEAD
answers have no body; after a 101 (or a 2xx to CONNECT) capture stops, and until an upgrade
request is answered the client's next bytes are kept aside. Bodies are kept up to 64 KiB per
message (``truncated`` says more went by).

What is kept, and how much of it, is ``edgeway.agent.captures``.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections import deque
from typing import TYPE_CHECKING

import httptools
import structlog

from edgeway.agent.captures import BODY_CAP, Exchange, Message, Store, canonical
from edgeway.tunnel.muxado.events import StreamError
from edgeway.tunnel.muxado.stream import MuxStream, StreamClosed

if TYPE_CHECKING:
    from httptools.parser.parser import HttpParser  # the common base, not exported

log = structlog.get_logger()
HEAD_MAX = 64 * 1024  # a longer head (or more bytes held during an upgrade) stops the tap
LINE_MAX = 4096  # chunk-size and trailer lines
_HEX = re.compile(rb"[0-9A-Fa-f]{1,15}")
_HEAD, _LENGTH, _SIZE, _DATA, _TRAILER, _CLOSE, _HOLD = range(7)


class _Stop(Exception):
    """The tap cannot follow this connection any more."""


class _Side:
    """One direction of the connection, split into messages; the callbacks of its parser."""

    def __init__(self, tap: Tap, request: bool) -> None:
        self.tap, self.request = tap, request
        self.state = _HEAD
        self.buf = bytearray()  # a partial head or line; the held bytes in _HOLD
        self.left = 0  # bytes left of a Content-Length body, or of a chunk and its CRLF
        self.msg = Message(bytearray())
        self.headers_done = self.complete = False  # for msg, from llhttp
        self.parser: HttpParser = httptools.HttpRequestParser(self)  # one per message
        self.exchange: Exchange | None = None  # the request side's current one
        self.began = (0.0, 0)

    def on_url(self, url: bytes) -> None:
        self.msg.uri += url.decode("latin-1")

    def on_status(self, status: bytes) -> None:
        self.msg.reason += status.decode("latin-1")

    def on_header(self, name: bytes, value: bytes) -> None:
        if not self.headers_done:  # not the trailers
            self.msg.headers.setdefault(canonical(name.decode("latin-1")), []).append(
                value.decode("latin-1"))

    def on_headers_complete(self) -> None:
        self.headers_done = True

    def on_message_complete(self) -> None:
        self.complete = True

    def feed(self, data: bytes) -> None:
        view, pos, end = memoryview(data), 0, len(data)
        while pos < end and not self.tap.stopped:
            if self.state == _HOLD:
                self.buf += view[pos:]
                if len(self.buf) > HEAD_MAX:
                    raise _Stop("too much sent before the upgrade was answered")
                return
            if self.state in (_LENGTH, _DATA):
                n = min(self.left, end - pos)
                self._body(view[pos:pos + n])
                pos, self.left = pos + n, self.left - n
                if not self.left and self.state == _LENGTH:
                    self._end()
                elif not self.left:
                    self.state = _SIZE
            elif self.state == _CLOSE:
                self._body(view[pos:])
                return
            else:
                pos = self._line(view, pos)

    def _line(self, view: memoryview, pos: int) -> int:
        """The head, chunk-size and trailer states: read up to the end mark."""
        if self.state == _HEAD and not self.buf:
            while pos < len(view) and view[pos] in b"\r\n":  # empty lines between messages
                pos += 1
            if pos == len(view):
                return pos
            self._begin()
        mark, limit = (b"\r\n\r\n", HEAD_MAX) if self.state == _HEAD else (b"\r\n", LINE_MAX)
        old = len(self.buf)
        self.buf += view[pos:pos + limit + len(mark) - old]
        at = self.buf.find(mark, max(0, old - len(mark) + 1))
        if self.state == _HEAD and at < 0:
            self.parser.feed_data(self.buf[old:])  # so that garbage shows at once
        if at < 0:
            if len(self.buf) > limit:
                raise _Stop("head or line too long")
            return len(view)
        stop = at + len(mark)
        line = bytes(self.buf[:stop])
        self.buf.clear()
        if self.state == _HEAD:
            self._head(line, line[old:])
        else:
            self._body(line)
            if self.state == _TRAILER:
                if line == b"\r\n":
                    self._end()
            else:
                size = line[:-2].split(b";", 1)[0].strip(b" \t")
                if not _HEX.fullmatch(size):
                    raise _Stop("bad chunk size")
                self.left = int(size, 16) + 2
                self.state = _DATA if self.left > 2 else _TRAILER
        return pos + stop - old

    def _body(self, piece: memoryview | bytes) -> None:
        msg = self.msg
        if msg.body < BODY_CAP:
            msg.raw += piece[:BODY_CAP - msg.body]
        msg.body += len(piece)
        if self.state != _LENGTH and self.state != _CLOSE:
            self.parser.feed_data(piece)  # chunked framing, checked by llhttp

    def _begin(self) -> None:
        self.began = (time.time(), time.monotonic_ns())
        self.msg = Message(bytearray())
        self.headers_done = self.complete = False
        self.parser = (httptools.HttpRequestParser if self.request
                       else httptools.HttpResponseParser)(self)

    def _head(self, head: bytes, rest: bytes) -> None:
        """The head is complete: ``rest`` is the part of it the parser has not seen."""
        msg, parser = self.msg, self.parser
        msg.raw += head
        with contextlib.suppress(httptools.HttpParserError, httptools.HttpParserUpgrade):
            parser.feed_data(rest)  # (past the head's end, llhttp only pauses)
        if not self.headers_done:
            raise _Stop("not an HTTP head")
        msg.proto = "HTTP/" + parser.get_http_version()
        if isinstance(parser, httptools.HttpRequestParser):
            msg.method = parser.get_method().decode("latin-1")
            self.exchange = self.tap.request_head(msg, self.began)
        elif isinstance(parser, httptools.HttpResponseParser):
            msg.status_code = parser.get_status_code()
            if self.tap.response_head(msg):  # no body
                self._end()
                return
        coding = ",".join(msg.headers.get("Transfer-Encoding", ())).lower()
        lengths = {v.strip() for v in ",".join(msg.headers.get("Content-Length", ())).split(",")}
        if coding:
            if coding.rsplit(",", 1)[-1].strip() == "chunked":
                self.state = _SIZE
            elif self.request:
                raise _Stop("a request body of unknown length")
            else:
                self.state = _CLOSE
        elif lengths != {""}:
            (length,) = lengths  # several different lengths: ValueError, the tap stops
            if not (length.isascii() and length.isdigit()):
                raise _Stop("bad Content-Length")
            self.left, self.state = int(length), _LENGTH
            if not self.left:
                self._end()
        elif self.request:
            self._end()
        else:
            self.state = _CLOSE

    def _end(self) -> None:
        if self.state in (_SIZE, _DATA, _TRAILER) and not self.complete:
            raise _Stop("llhttp disagrees about the end of a chunked body")
        self.state = _HEAD
        self.tap.message_end(self, self.msg)


class Tap:
    """Watches one proxied connection: ``request(data)`` with what the client sent and
    ``response(data)`` with what the service answered, each after it was forwarded."""

    def __init__(self, store: Store, tunnel_name: str, remote_addr: str) -> None:
        self.store, self.tunnel_name, self.remote_addr = store, tunnel_name, remote_addr
        self.requests, self.responses = _Side(self, True), _Side(self, False)
        self.pending: deque[Exchange] = deque()  # requests waiting for their response
        self.stopped = False

    def request(self, data: bytes) -> None:
        self._feed(self.requests, data)

    def response(self, data: bytes) -> None:
        self._feed(self.responses, data)

    def response_eof(self) -> None:
        """The service closed: that ends a response delimited by the close."""
        self._feed(self.responses, None)

    def stop(self) -> None:
        self.stopped = True

    def _feed(self, side: _Side, data: bytes | None) -> None:
        if self.stopped:
            return
        try:
            if data is not None:
                side.feed(data)
            elif side.state == _CLOSE:
                side._end()
        except Exception as exc:  # whatever the bytes, never let inspection break traffic
            log.debug("inspect_stopped", tunnel=self.tunnel_name,
                      error=f"{type(exc).__name__}: {exc}")
            self.stopped = True

    def request_head(self, msg: Message, began: tuple[float, int]) -> Exchange:
        ex = Exchange(self.tunnel_name, self.remote_addr, msg, start=began[0], began=began[1])
        self.pending.append(ex)
        self.store.add(ex)
        return ex

    def response_head(self, msg: Message) -> bool:
        """Whether this response has no body."""
        if not self.pending:
            raise _Stop("a response nobody asked for")
        method, code = self.pending[0].request.method, msg.status_code
        return (method == "HEAD" or code < 200 or code in (204, 304)
                or (method == "CONNECT" and code < 300))

    def message_end(self, side: _Side, msg: Message) -> None:
        if side.request:
            if side.exchange is not None:
                self.store.resize(side.exchange)
            connection = ",".join(msg.headers.get("Connection", ())).lower().split(",")
            if msg.method == "CONNECT" or ("Upgrade" in msg.headers and "upgrade" in
                                           {token.strip() for token in connection}):
                side.state = _HOLD  # until the answer says whether HTTP goes on
            return
        code = msg.status_code
        if 100 <= code < 200 and code != 101:
            return  # interim: the final response follows
        ex = self.pending.popleft()
        ex.response, ex.duration = msg, time.monotonic_ns() - ex.began
        self.store.resize(ex)
        if code == 101 or (ex.request.method == "CONNECT" and code < 300):
            self.stopped = True  # the connection is no longer HTTP
        elif not self.pending and self.requests.state == _HOLD:
            held = bytes(self.requests.buf)
            self.requests.buf.clear()
            self.requests.state = _HEAD
            self.requests.feed(held)


def _reset(stream: MuxStream) -> None:
    with contextlib.suppress(StreamClosed, StreamError):
        stream.reset()


async def splice_tapped(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                        stream: MuxStream, tap: Tap) -> None:
    """``splice`` for inspected tunnels: each piece is forwarded as soon as it is read (no
    extra buffering; half-closes passed on), then shown to the tap."""

    async def outbound() -> None:  # the service's answer, to the public client
        while data := await reader.read(65536):
            await stream.write(data)
            tap.response(data)
        tap.response_eof()
        await stream.write_eof()

    def failed(task: asyncio.Task[None]) -> None:  # the service's side broke: end it all
        if not task.cancelled() and task.exception() is not None:
            _reset(stream)

    pump = asyncio.create_task(outbound())
    pump.add_done_callback(failed)
    try:
        while data := await stream.read(65536):
            writer.write(data)
            tap.request(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
        await pump
    except (StreamClosed, StreamError, ConnectionError, OSError):
        _reset(stream)
    finally:
        pump.cancel()
        tap.stop()
        with contextlib.suppress(ConnectionError, OSError, RuntimeError):
            writer.close()
