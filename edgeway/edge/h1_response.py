"""The upstream's side of the edge's HTTP/1.1 (see ``h1``): responses parsed with llhttp, one
per request sent, HEAD responses whatever their ``Content-Length``, interim 1xx heads,
close-delimited bodies ended at EOF, and the bytes after a 101 kept for the splice. A
malformed response is a ``BadMessage`` with status 502."""

from __future__ import annotations

import httptools

from edgeway.edge.h1 import (
    MAX_HEAD,
    BadMessage,
    End,
    ParserBase,
    Response,
    chunked,
    content_length,
    header,
)


def _failure(exc: httptools.HttpParserError) -> BadMessage:
    if isinstance(exc.__context__, BadMessage):
        return exc.__context__
    return BadMessage(502, f"the upstream's response is not valid HTTP: {exc}")


class ResponseParser(ParserBase):
    """Responses from an upstream, one per request sent (``expect`` says whether that request
    was a HEAD: then the head is the whole response, whatever its ``Content-Length``)."""

    def __init__(self) -> None:
        super().__init__()
        self._p = httptools.HttpResponseParser(self)
        self._reason = b""
        self._head = False
        self._pending = b""  # a HEAD response's head until it is complete
        self._open: Response | None = None  # headers seen, End not yet
        self.upgraded: bytes | None = None  # after a 101: the bytes that followed it
        self.reusable = True  # no byte arrived that no request asked for

    def expect(self, head: bool) -> None:
        self._head, self._pending, self._open = head, b"", None

    def feed(self, data: bytes) -> None:
        if self._head:
            self._feed_head(data)
            return
        try:
            self._p.feed_data(data)
        except httptools.HttpParserUpgrade as exc:
            self.upgraded = data[exc.args[0]:]
        except httptools.HttpParserError as exc:
            raise _failure(exc) from None

    def _feed_head(self, data: bytes) -> None:
        """A HEAD response: heads (1xx ones first) are fed one by one, each to a new parser."""
        self._pending += data
        while self._head and (end := self._pending.find(b"\r\n\r\n")) >= 0:
            head, self._pending = self._pending[:end + 4], self._pending[end + 4:]
            self._p = httptools.HttpResponseParser(self)
            try:
                self._p.feed_data(head)
            except httptools.HttpParserError as exc:
                raise _failure(exc) from None
            if self._open is not None:  # the final head: the response is complete
                self._events.append(End())
                self._open, self._head = None, False
                self._p = httptools.HttpResponseParser(self)
                self.reusable = not self._pending
        if len(self._pending) > MAX_HEAD:
            raise BadMessage(502, "the upstream's response head is too large")

    @property
    def idle(self) -> bool:
        """Between responses, with nothing unasked-for received."""
        return self.reusable and not self._events and not self._in_head \
            and self._open is None and not self._pending and self.upgraded is None

    def eof(self) -> None:
        """The upstream closed: the end of a close-delimited body, else an error if a
        response was under way."""
        if self._open is not None and self._open.length is None \
                and not chunked(self._open.headers) and self.upgraded is None:
            self._open = None
            self._events.append(End())
        elif self._open is not None or self._in_head or self._pending:
            raise BadMessage(502, "the upstream closed the connection mid-response")

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._reason = b""

    def on_status(self, status: bytes) -> None:
        self._grow(len(status))
        self._reason += status

    def on_headers_complete(self) -> None:
        self._in_head = False
        p, headers = self._p, self._headers
        status = p.get_status_code()
        informational = 100 <= status < 200 and status != 101
        if self._head:  # llhttp would wait for the body a HEAD response does not have
            tokens = header(headers, b"connection").lower()
            keep = p.get_http_version() == "1.1" and b"close" not in tokens
        else:
            keep = p.should_keep_alive()
        response = Response(status, self._reason, headers, keep and not informational,
                            content_length(headers))
        if not informational:
            self._open = response
        self._events.append(response)

    def on_message_complete(self) -> None:
        if self._open is not None and not self._head:
            self._open = None
            self._events.append(End(self._trailers))

    def _grow(self, n: int) -> None:
        self._head_size += n
        if self._head_size > MAX_HEAD:
            raise BadMessage(502, "the upstream's response head is too large")
