"""HTTP/1.1 for the edge, sans I/O: the public side's requests are parsed here and the
upstream's responses in ``h1_response``, both with llhttp (``httptools``); heads are written
here.

Each side is a parser fed bytes and asked for its next event: a ``Request`` or ``Response``
head, body bytes (``bytes``), ``End`` (with any trailers), or ``NEED_DATA``. llhttp does the
strict parts (framing, ``Content-Length`` against ``Transfer-Encoding``, header syntax); a
malformed message raises ``BadMessage`` with the status to answer. The edge writes heads
itself and frames bodies with a ``Framer``, so the framing on each side is its own:
``Connection`` and the headers it names, ``Keep-Alive``, ``Transfer-Encoding`` and
``Proxy-Connection`` are hop-by-hop and never forwarded.

The framing headers (``Content-Length``, ``Transfer-Encoding``) and ``Host`` are never taken
for hop-by-hop: a request whose ``Connection`` names one is refused (400), since dropping it
while forwarding the body would leave the body to be read upstream as the next request (request
smuggling on a pooled upstream); a response's are kept. An absolute-form request target
(``GET http://b.example/ HTTP/1.1``) is routed by its authority, as RFC 9112 §3.2.2 says:
it becomes the request's ``Host`` and the target is forwarded in origin form.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, replace
from http import HTTPStatus
from typing import Final

import httptools

Headers = list[tuple[bytes, bytes]]
MAX_HEAD: Final = 64 * 1024
NEED_DATA: Final = None  # next_event(): nothing complete yet
HOP_BY_HOP = frozenset((b"connection", b"keep-alive", b"proxy-connection", b"transfer-encoding",
                        b"te", b"trailer", b"upgrade"))
FRAMING = frozenset((b"content-length", b"transfer-encoding", b"host"))  # never hop-by-hop
_REASONS = {s.value: s.phrase.encode() for s in HTTPStatus}


def header(headers: Headers, name: bytes) -> bytes:
    """The first value of header ``name`` (lower case), b"" if absent."""
    for k, v in headers:  # (a loop, not next() over a generator: this runs per request)
        if k.lower() == name:
            return v
    return b""


class BadMessage(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(slots=True)
class Request:
    method: bytes
    target: bytes
    headers: Headers  # as received, names in their case
    http10: bool
    keep_alive: bool  # the client allows another request on this connection
    upgrade: bool  # asks to switch protocols (WebSocket): bytes after it are not HTTP
    body: bool  # a body follows (chunked, or a non-zero Content-Length)

    def __init__(self, method: bytes, target: bytes, headers: Headers, http10: bool,
                 keep_alive: bool, upgrade: bool, body: bool) -> None:
        # (written out: compiled, the one dataclass generates runs interpreted)
        self.method, self.target, self.headers, self.http10 = method, target, headers, http10
        self.keep_alive, self.upgrade, self.body = keep_alive, upgrade, body


@dataclass(slots=True)
class Response:
    status: int
    reason: bytes
    headers: Headers
    keep_alive: bool  # the upstream connection can carry another request
    length: int | None  # Content-Length; None: chunked, close-delimited or bodiless

    def __init__(self, status: int, reason: bytes, headers: Headers, keep_alive: bool,
                 length: int | None) -> None:
        self.status, self.reason, self.headers = status, reason, headers
        self.keep_alive, self.length = keep_alive, length


@dataclass(slots=True)
class End:
    trailers: Headers

    def __init__(self, trailers: Headers | None = None) -> None:
        self.trailers = [] if trailers is None else trailers


Event = Request | Response | bytes | End


def reason(status: int) -> bytes:
    return _REASONS.get(status, b"")


def content_length(headers: Headers) -> int | None:
    raw = header(headers, b"content-length")
    return int(raw) if raw else None  # llhttp checked it: digits, at most one


def chunked(headers: Headers) -> bool:
    return b"chunked" in header(headers, b"transfer-encoding").lower()


def with_length(req: Request, length: int) -> Request:
    """``req`` with its body read whole: framed by ``Content-Length`` from here on (and no
    ``Expect``: the body goes along)."""
    drop = (b"content-length", b"transfer-encoding", b"expect")
    headers = [(k, v) for k, v in req.headers if k.lower() not in drop]
    return replace(req, headers=[*headers, (b"Content-Length", b"%d" % length)],
                   body=length > 0)


def connection_names(headers: Headers, names: list[bytes] | None = None) -> set[bytes]:
    """The header names the ``Connection`` headers name (lower case); ``names``: the
    headers' names in lower case, when the caller has them."""
    names = names if names is not None else lowered(headers)
    if b"connection" not in names:
        return set()
    return {t.strip().lower() for (_, v), n in zip(headers, names, strict=True)
            if n == b"connection" for t in v.split(b",")} - {b""}


def _keep_alive_only(headers: Headers, names: list[bytes]) -> bool:
    """Whether every ``Connection`` header says just ``keep-alive`` (what most responses
    say): it names no header beyond the hop-by-hop ones (a set less to build per message)."""
    for (_, v), n in zip(headers, names, strict=True):
        if n == b"connection" and v.lower() != b"keep-alive":
            return False
    return True


def lowered(headers: Headers) -> list[bytes]:
    """The names of ``headers`` in lower case (once, for the checks of one message)."""
    return [k.lower() for k, _ in headers]


def end_to_end(headers: Headers, keep: frozenset[bytes] = frozenset(),
               drop: frozenset[bytes] = frozenset(), names: list[bytes] | None = None
               ) -> Headers:
    """``headers`` without the hop-by-hop ones (and those ``Connection`` names, but never a
    framing header or ``Host``), except the names in ``keep``, and without the names in
    ``drop``; ``names``: theirs in lower case, when the caller has them. A new list, which
    the caller may change."""
    names = names if names is not None else lowered(headers)
    gone = HOP_BY_HOP | drop if drop else HOP_BY_HOP
    if b"connection" in names and not _keep_alive_only(headers, names):
        gone = gone | (connection_names(headers, names) - FRAMING)
    gone = gone - keep if keep else gone
    if gone.isdisjoint(names):
        return headers.copy()
    return [h for h, n in zip(headers, names, strict=True) if n not in gone]


def origin_form(target: bytes, headers: Headers) -> tuple[bytes, Headers]:
    """An absolute-form target (``http://host:port/path?q``) as the origin-form target and the
    headers with its authority as their one ``Host`` (RFC 9112 §3.2.2: the Host header of such
    a request is ignored); any other target as it is."""
    scheme, sep, rest = target.partition(b"://")
    if not sep or target.startswith(b"/"):
        return target, headers
    if scheme.lower() not in (b"http", b"https"):
        raise BadMessage(400, "an absolute-form request target must be an http or https URL")
    cut = min((i for i in (rest.find(b"/"), rest.find(b"?")) if i >= 0), default=len(rest))
    authority, path = rest[:cut], rest[cut:]
    if not authority or b"@" in authority:
        raise BadMessage(400, "an absolute-form request target names a host (and no user)")
    path = path if path.startswith(b"/") else b"/" + path
    return path, [*((k, v) for k, v in headers if k.lower() != b"host"), (b"Host", authority)]


class ParserBase:
    """What both parsers share: the callbacks llhttp calls, turned into queued events."""

    def __init__(self) -> None:
        self._events: deque[Event] = deque()
        self._headers: Headers = []
        self._head_size = 0
        self._in_head = False
        self._trailers: Headers = []

    def unread(self, *events: Event) -> None:
        """Events given back: the next ``next_event`` calls return them again, in order."""
        self._events.extendleft(reversed(events))

    def on_message_begin(self) -> None:
        self._headers, self._trailers = [], []
        self._head_size, self._in_head = 0, True

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._in_head:
            self._head_size += len(name) + len(value) + 4
            if self._head_size > MAX_HEAD:
                self._grow(0)  # (raises; inline otherwise: this runs per header)
            self._headers.append((name, value))
        else:
            self._trailers.append((name, value))

    def on_body(self, body: bytes) -> None:
        self._events.append(body)

    def _grow(self, n: int) -> None:
        self._head_size += n
        if self._head_size > MAX_HEAD:
            raise BadMessage(431, f"the request head is larger than {MAX_HEAD} bytes")

    def next_event(self) -> Event | None:
        return self._events.popleft() if self._events else NEED_DATA


def _failure(exc: httptools.HttpParserError) -> BadMessage:
    if isinstance(exc.__context__, BadMessage):
        return exc.__context__
    return BadMessage(400, str(exc) or type(exc).__name__)


class RequestParser(ParserBase):
    """Requests from a public client, pipelined ones included."""

    def __init__(self) -> None:
        super().__init__()
        self._p = httptools.HttpRequestParser(self)
        self._url = b""
        self.upgraded = b""  # after a request that asked to upgrade: the bytes that followed
        self._paused = False  # ... and more bytes go there, not to the parser
        self.mid_message = False  # between a request's first byte and its End
        self._request: Request | None = None  # the latest head
        self._body_left = 0  # of a body read here rather than by llhttp
        self._error: BadMessage | None = None  # raised once the events before it are taken

    def feed(self, data: bytes) -> None:
        """Parse ``data``. A malformed message raises ``BadMessage`` from ``next_event`` once
        the events before it (complete requests pipelined ahead of it) have been taken."""
        if self._error is not None:
            return
        try:
            self._feed(data)
        except BadMessage as exc:
            self._error = exc

    def next_event(self) -> Event | None:
        if self._events:
            return self._events.popleft()
        if self._error is not None:
            raise self._error
        return NEED_DATA

    def _feed(self, data: bytes) -> None:
        if self._body_left:
            data = self._take_body(data)
        if self._paused:
            self.upgraded += data
            return
        if not data:
            return
        try:
            self._p.feed_data(data)
        except httptools.HttpParserUpgrade as exc:
            rest = data[exc.args[0]:]
            if self._request is not None and self._request.body:
                self._upgrade_with_body(self._request, rest)
            else:
                self._paused = True
                self.upgraded = rest
        except httptools.HttpParserError as exc:
            raise _failure(exc) from None

    def _upgrade_with_body(self, req: Request, rest: bytes) -> None:
        """llhttp takes what follows an upgrade request's head for the new protocol, its body
        included. A request with a body (h2c's upgrade POST) is forwarded as plain HTTP
        instead (a proxy need not pass an upgrade on): its body is read here."""
        self._events.pop()  # its End: llhttp saw no body
        if chunked(req.headers):
            self._events.pop()  # and the head: refused before anything goes upstream
            raise BadMessage(400, "an Upgrade request with a chunked body is not supported")
        req.upgrade = False
        self._body_left = content_length(req.headers) or 0
        self.mid_message = True
        self._feed(rest)

    def _take_body(self, data: bytes) -> bytes:
        n = min(len(data), self._body_left)
        if n:
            self._events.append(data[:n])
            self._body_left -= n
        if not self._body_left:
            self._events.append(End())
            self.mid_message = False
        return data[n:]

    def resume(self) -> None:
        """The upgrade was refused (no 101): what followed is HTTP again."""
        if self._paused:
            self._paused = False
            rest, self.upgraded = self.upgraded, b""
            if rest:
                self.feed(rest)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._url = b""
        self.mid_message = True

    def on_url(self, url: bytes) -> None:
        self._grow(len(url))
        self._url += url

    def on_headers_complete(self) -> None:
        self._in_head = False
        p, headers = self._p, self._headers
        http10 = p.get_http_version() == "1.0"
        names = lowered(headers)
        hosts = names.count(b"host")
        if hosts > 1 or (hosts == 0 and not http10):
            raise BadMessage(400, "an HTTP/1.1 request carries exactly one Host header"
                             f" (this one has {hosts})")
        if b"connection" in names:
            framing = sorted(n.decode("latin-1")
                             for n in connection_names(headers, names) & FRAMING)
            if framing:
                raise BadMessage(400, f"the Connection header names {', '.join(framing)}, "
                                 "which frames or routes the request and cannot be "
                                 "hop-by-hop")
        url = self._url
        target, headers = (url, headers) if url[:1] == b"/" else origin_form(url, headers)
        body = (b"transfer-encoding" in names and chunked(headers)) or (
            b"content-length" in names and bool(content_length(headers)))
        self._request = Request(p.get_method(), target, headers, http10,
                                p.should_keep_alive(), p.should_upgrade(), body)
        self._events.append(self._request)

    def on_message_complete(self) -> None:
        self.mid_message = False
        self._events.append(End(self._trailers))


# -- writing ------------------------------------------------------------------------------

def head(start: bytes, headers: Headers) -> bytes:
    """A message head: the start line, then the headers."""
    parts = [start]
    for name, value in headers:
        parts += (name, b": ", value, b"\r\n")
    parts.append(b"\r\n")
    return b"".join(parts)


class Framer:
    """A body on its way out: as it is (``Content-Length`` said how long), chunked, or
    delimited by closing the connection."""

    __slots__ = ("chunked",)

    def __init__(self, chunked: bool) -> None:
        self.chunked = chunked

    def data(self, data: bytes) -> bytes:
        if not self.chunked or not data:
            return data
        return b"%x\r\n%b\r\n" % (len(data), data)

    def end(self, trailers: Headers | None = None) -> bytes:
        if not self.chunked:
            return b""
        return head(b"0\r\n", trailers) if trailers else b"0\r\n\r\n"


def bodiless(status: int, method: bytes) -> bool:
    return method == b"HEAD" or status < 200 or status in (204, 304)
