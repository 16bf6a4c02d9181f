"""HTTP/1.x message framing for the agent's tap (``edgeway.agent.inspect``): one direction of a
proxied connection split into messages.

Framing of our own next to httptools (llhttp), because llhttp does not say where in a fed piece
a message ended, and each message's raw bytes are wanted even when requests are pipelined: each
direction is split here (head up to CRLF CRLF, then Content-Length, chunked framing or until
close; RFC 9112 §6) and each message goes to a parser, which parses the head and checks
chunked framing. Bodies are kept up to 64 KiB per message (``truncated`` says more went by).
A side's parser sees every byte of a message and goes on to the next one while it agrees
about where the last ended (not after an answer to HEAD, say, nor a message it refused): a
parser made and dropped per message was a tenth of the agent's CPU. When nothing is
captured (the light mode: the tunnel's metrics and the console's recent requests), there is
no parser: the start line and the framing headers are read from the head's bytes
(``heads``), chunked framing is this module's own, and a start line that is not HTTP/1.x
stops the tap by the end of that line.

On the request side of a tunnel whose Host header the agent sets (``host_header``), the side
also produces the bytes to forward (``out``): each head with its Host replaced, as soon as the
head is complete, then the body as it passes.
"""

from __future__ import annotations

import re
import time
from typing import TYPE_CHECKING, Final

import httptools

from edgeway.agent.captures import BODY_CAP, Message, canonical
from edgeway.agent.heads import (
    BODY_FRAMING,
    framing_headers,
    may_begin,
    request_line,
    status_line,
    text,
    with_host,
)

if TYPE_CHECKING:
    from httptools.parser.parser import HttpParser  # the common base, not exported

    from edgeway.agent.captures import Exchange
    from edgeway.agent.inspect import Tap

HEAD_MAX: Final = 64 * 1024  # a longer head (or more bytes held during an upgrade) stops the tap
LINE_MAX: Final = 4096  # chunk-size and trailer lines
_HEX = re.compile(rb"[0-9A-Fa-f]{1,15}")
HEAD: Final = 0  # a side's states
LENGTH: Final = 1
SIZE: Final = 2
DATA: Final = 3
TRAILER: Final = 4
CLOSE: Final = 5
HOLD: Final = 6
class Stop(Exception):
    """The tap cannot follow this connection any more."""


class Side:
    """One direction of the connection, split into messages; the callbacks of its parser."""

    def __init__(self, tap: Tap, request: bool) -> None:
        self.tap, self.request = tap, request
        self.state = HEAD
        self.buf = bytearray()  # a partial head or line; the held bytes in HOLD
        self.left = 0  # bytes left of a Content-Length body, or of a chunk and its CRLF
        self.msg = Message(bytearray())
        # for msg, from llhttp; ``complete`` before the first: its parser is between messages
        self.headers_done, self.complete = False, True
        self.line_read = False  # the light mode read this head's start line (it had ended)
        self.reused = False  # msg's parser went on from the last message
        self.exchange: Exchange | None = None  # the request side's current one
        self.began = (0.0, 0)
        self.host = tap.host if request else ""  # the Host to send, when the agent sets it
        self.out = bytearray()  # with ``host``: the bytes to forward
        # nothing is captured nor rewritten: no raw bytes kept, only the framing headers, and
        # no llhttp parser (its start lines and framing are read here)
        self.light = tap.store is None and not self.host
        self.parser: HttpParser | None = None if self.light else self._new_parser()

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
        pos, end = 0, len(data)
        while pos < end and not self.tap.stopped:
            if self.state == HOLD:
                self.buf += memoryview(data)[pos:]
                if len(self.buf) > HEAD_MAX:
                    raise Stop("too much sent before the upgrade was answered")
                return
            if self.state in (LENGTH, DATA):
                n = min(self.left, end - pos)
                self._body(data, pos, pos + n)
                pos, self.left = pos + n, self.left - n
                if not self.left and self.state == LENGTH:
                    self._end()
                elif not self.left:
                    self.state = SIZE
            elif self.state == CLOSE:
                self._body(data, pos, end)
                return
            else:
                pos = self._line(data, pos)

    def _line(self, data: bytes, pos: int) -> int:
        """The head, chunk-size and trailer states: read up to the end mark."""
        end = len(data)
        if self.state == HEAD and not self.buf:
            while pos < end and data[pos] in (13, 10):  # empty lines between messages
                pos += 1
            if pos == end:
                return pos
            self._begin()
        mark, limit = (b"\r\n\r\n", HEAD_MAX) if self.state == HEAD else (b"\r\n", LINE_MAX)
        old = len(self.buf)
        at = data.find(mark, pos, pos + limit + len(mark)) if not old else -1
        if at >= 0:  # the whole of it in this piece (the common case): no copy through buf
            stop = at + len(mark) - pos
            line = data[pos:at + len(mark)]
        else:
            self.buf += memoryview(data)[pos:pos + limit + len(mark) - old]
            at = self.buf.find(mark, max(0, old - len(mark) + 1))
            if self.state == HEAD and at < 0 and self.light and not self._plausible(old):
                raise Stop("not an HTTP head")  # (garbage shows at once)
            elif self.state == HEAD and at < 0 and self.parser is not None:
                try:
                    self.parser.feed_data(self.buf[old:])  # so that garbage shows at once
                except httptools.HttpParserError:
                    if not self.reused:
                        raise
                    self._refeed(bytes(self.buf))
            if at < 0:
                if len(self.buf) > limit:
                    raise Stop("head or line too long")
                return end
            stop = at + len(mark)
            line = bytes(self.buf[:stop])
            self.buf.clear()
        if self.state == HEAD:
            self._head(line, line[old:])
        else:
            self._body(line, 0, len(line))
            if self.state == TRAILER:
                if line == b"\r\n":
                    self._end()
            else:
                size = line[:-2].split(b";", 1)[0].strip(b" \t")
                if not _HEX.fullmatch(size):
                    raise Stop("bad chunk size")
                self.left = int(size, 16) + 2
                self.state = DATA if self.left > 2 else TRAILER
        return pos + stop - old

    def _body(self, data: bytes, start: int, stop: int) -> None:
        """``data[start:stop]`` of a body (a view of it made only to keep or pass it on)."""
        msg = self.msg
        if self.light:  # (only counted)
            msg.body += stop - start
            return
        piece = data if start == 0 and stop == len(data) else memoryview(data)[start:stop]
        if msg.body < BODY_CAP:
            msg.raw += piece[:BODY_CAP - msg.body]
        msg.body += stop - start
        if self.host:
            self.out += piece
        if self.state != CLOSE and self.parser is not None:
            self.parser.feed_data(piece)  # (chunked framing, checked by llhttp)

    def _begin(self) -> None:
        if self.request:  # (a response's is not kept)
            self.began = (time.time(), time.monotonic_ns())
        self.msg = Message(bytearray())
        self.reused = self.complete  # (llhttp saw the last one end too)
        if not self.reused and not self.light:
            self.parser = self._new_parser()
        self.headers_done = self.complete = self.line_read = False

    def _new_parser(self) -> HttpParser:
        return (httptools.HttpRequestParser if self.request
                else httptools.HttpResponseParser)(self)

    def _refeed(self, seen: bytes) -> None:
        """A parser that went on from the last message refused this one (it takes bytes
        after a ``Connection: close`` message for an error, for one): a fresh one gets what
        was ``seen`` of it."""
        self.reused = False
        self.msg.uri = self.msg.reason = ""  # (what the refusing parser called back with)
        self.parser = self._new_parser()
        self.parser.feed_data(seen)

    def _head(self, head: bytes, rest: bytes) -> None:
        """The head is complete: ``rest`` is the part of it the parser has not seen."""
        msg = self.msg
        if self.light:
            self._light_head(head)
        else:
            self._parsed_head(head, rest)
        if self.request:
            self.exchange = self.tap.request_head(msg, self.began)
        elif self.tap.response_head(msg):  # no body
            self._end()
            return
        headers = msg.headers
        coding = ",".join(headers["Transfer-Encoding"]).lower() \
            if "Transfer-Encoding" in headers else ""
        given = headers.get("Content-Length")
        if coding:  # (it wins over a length: RFC 9112 §6.3)
            if coding.rsplit(",", 1)[-1].strip() == "chunked":
                self.state = SIZE
            elif self.request:
                raise Stop("a request body of unknown length")
            else:
                self.state = CLOSE
            return
        if given is not None and len(given) == 1 and given[0].isascii() and \
                given[0].isdigit():  # (the common case: one plain number)
            self._length(int(given[0]))
            return
        lengths = {v.strip() for v in ",".join(given).split(",")} if given else None
        if lengths is not None and lengths != {""}:
            (length,) = lengths  # several different lengths: ValueError, the tap stops
            if not (length.isascii() and length.isdigit()):
                raise Stop("bad Content-Length")
            self._length(int(length))
        elif self.request:
            self._end()
        else:
            self.state = CLOSE

    def _length(self, n: int) -> None:
        self.left, self.state = n, LENGTH
        if not n:
            self._end()

    def _parsed_head(self, head: bytes, rest: bytes) -> None:
        """Its head through llhttp (its syntax checked, every header kept)."""
        msg, parser = self.msg, self.parser
        assert parser is not None  # (not the light mode)
        msg.raw += with_host(head, self.host) if self.host else head
        try:  # noqa: SIM105 (contextlib.suppress: a context manager per message costs more)
            parser.feed_data(rest)  # (past the head's end, llhttp only pauses)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade):
            pass
        if not self.headers_done and self.reused:
            try:  # noqa: SIM105
                self._refeed(head)
            except (httptools.HttpParserError, httptools.HttpParserUpgrade):
                pass
            parser = self.parser
            assert parser is not None
        if not self.headers_done:
            raise Stop("not an HTTP head")
        if self.host:
            self.out += msg.raw
        msg.proto = "HTTP/" + parser.get_http_version()
        if isinstance(parser, httptools.HttpRequestParser):
            msg.method = parser.get_method().decode("latin-1")
        elif isinstance(parser, httptools.HttpResponseParser):
            msg.status_code = parser.get_status_code()

    def _plausible(self, old: int) -> bool:
        """Whether the part of a head held so far (``old`` bytes of it before this piece) may
        begin an HTTP/1.x message: its start line is read once it has ended, and before that
        only its first bytes (the work per piece bounded by the piece: a head sent a byte at
        a time must not cost its length squared)."""
        if self.line_read:
            return True
        buf = self.buf
        if buf.find(b"\r\n", max(0, old - 1)) < 0:
            return may_begin(buf, self.request)
        self.line_read = True
        line = text(buf[:buf.find(b"\r\n") + 2])
        return (request_line(line) if self.request else status_line(line)) is not None

    def _light_head(self, head: bytes) -> None:
        """Its start line and framing headers, read here (the light mode)."""
        msg, head_text = self.msg, text(head)
        if self.request:
            request = request_line(head_text)
            if request is None:
                raise Stop("not an HTTP head")
            msg.method, msg.uri, msg.proto = request
        else:
            status = status_line(head_text)
            if status is None:
                raise Stop("not an HTTP head")
            msg.proto, msg.status_code, msg.reason = status
        msg.headers = framing_headers(head_text) if self.request else framing_headers(
            head_text, BODY_FRAMING)

    def _end(self) -> None:
        if self.state in (SIZE, DATA, TRAILER) and not self.complete and not self.light:
            raise Stop("llhttp disagrees about the end of a chunked body")
        self.state = HEAD
        self.tap.message_end(self, self.msg)


