"""The upstream's answer relayed to the public client: the response head through the route's
response hooks, its body re-framed for this hop (and gzipped when the compression hook says
so), interim 1xx heads passed on, and the switch to a raw splice after a 101.

What the upstream sent is written out whenever it has nothing more for now (one write per
turn, not one per event), so streamed responses still arrive as they are written. A request
body that fails (malformed, or the client left mid-upload) aborts the upstream (``body``, the
task sending it), and so does a client that leaves while a bodiless request waits
(``watch``): that ends the wait for the answer here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Final

from edgeway.edge import h1
from edgeway.edge.answers import DONE, FAILED, REUSE, Fate, Retry, bad_gateway, fixed, outcome
from edgeway.edge.client import ClientWatch
from edgeway.edge.h1 import BadMessage, End, Framer, RequestParser, Response, header
from edgeway.edge.hooks import Exchange
from edgeway.edge.pages import Fixed, page
from edgeway.edge.pipeline import Plan
from edgeway.edge.pool import Upstream
from edgeway.tunnel.pipes import UpstreamGone, must_drain, splice

FLUSH_AT: Final = 256 * 1024  # response bytes gathered before a write, when more are already here
Result = tuple[bool, Fate]  # (keep the public connection, what became of the upstream)


class Relay:
    """One response, from ``upstream`` to the client of ``x``: ``run()`` gives (keep the
    public connection, ``REUSE`` the upstream for another request, ``DONE`` (end it
    gracefully) or ``FAILED`` (abort it))."""

    __slots__ = ("body", "final", "framer", "keep", "observer", "out", "parser", "plan",
                 "reader", "retry", "started", "upstream", "watch", "writer", "x")

    def __init__(self, parser: RequestParser, writer: asyncio.StreamWriter,
                 reader: asyncio.StreamReader, x: Exchange, plan: Plan, upstream: Upstream,
                 body: asyncio.Task[None] | None, retry: bool,
                 watch: ClientWatch | None = None,
                 observer: Callable[[bytes, bytes, int], None] | None = None) -> None:
        self.parser, self.writer, self.reader, self.x, self.plan = parser, writer, reader, x, plan
        self.upstream, self.body, self.retry, self.watch = upstream, body, retry, watch
        self.observer = observer  # the tunnel's (``Tunnel.observer``): told of the answer
        self.out = bytearray()
        self.started = False  # bytes of the answer went to the client
        self.framer = Framer(False)
        self.final: Response | None = None
        self.keep = False

    async def run(self) -> Result:
        up = self.upstream.parser
        up.expect(self.x.req.method == b"HEAD")
        while True:
            try:
                event = up.next_event()
                if event is None:
                    await self._more()
                    continue
            except (UpstreamGone, BadMessage) as exc:
                return await self._failed(exc)
            if isinstance(event, bytes):
                self.out += body_out(self.x, self.framer, event)
                if len(self.out) >= FLUSH_AT:
                    await self._flush()
            elif isinstance(event, Response):
                if event.status == 101:
                    return await self._switched(event)
                if self.plan.awaits and event.status >= 200:
                    if (refused := await self._awaited(event)) is not None:
                        return refused
                else:
                    self._head(event)
            elif isinstance(event, End):
                return await self._end(event)

    async def _flush(self) -> None:
        writer = self.writer
        writer.write(self.out)
        # (a new buffer, not this one cleared: a transport that cannot send it all at once,
        # uvloop's, keeps it exported rather than copy it, and a resize then raises)
        self.out = bytearray()
        self.started = True
        if must_drain(writer):
            await writer.drain()

    async def _more(self) -> None:
        """Nothing more parsed: write what is gathered and read from the upstream."""
        upstream, body = self.upstream, self.body
        self.out += flushed(self.x, self.framer)
        if self.out:
            await self._flush()
        if body is not None and body.done() and body.exception() is not None:
            raise UpstreamGone(str(body.exception()))
        if upstream.ended:
            raise UpstreamGone("the upstream closed")
        data = await upstream.pipe.read()
        if data:
            upstream.parser.feed(data)
        else:
            upstream.ended = True
            upstream.parser.eof()

    async def _failed(self, exc: Exception) -> Result:
        """The upstream (or the request body on its way there) failed."""
        self.upstream.pipe.abort()
        req, writer = self.x.req, self.writer
        tasks = (self.body, self.watch.task if self.watch is not None else None)
        failed = next((t.exception() for t in tasks if t is not None and t.done()
                       and not t.cancelled() and t.exception() is not None), None)
        if self.started or self.out:
            writer.write(self.out)
            raise ConnectionResetError("the upstream failed mid-response") from None
        if isinstance(failed, BadMessage):  # the client's body, not the upstream
            self.x.status = failed.status
            await fixed(writer, req, page(failed.status, "Bad request", str(failed), 4000),
                        close=True)
            return False, FAILED
        if failed is not None:  # the client left mid-upload: nobody to answer
            return False, FAILED
        if self.retry:
            raise Retry from None
        outcome(self.x, self.plan, 502)
        await bad_gateway(writer, req, str(exc))
        return False, FAILED

    async def _switched(self, event: Response) -> Result:
        """A 101: the relay ends here, with a splice (or a 502 if nobody asked to upgrade)."""
        req = self.x.req
        if self.observer is not None:
            self.observer(req.method, req.target, event.status)
        if req.upgrade:
            self.x.status = 101
            await switch(self.parser, self.writer, self.reader, event, self.upstream, self.body)
            return False, DONE
        outcome(self.x, self.plan, 502)  # to a request that did not ask to upgrade
        self.writer.write(self.out)
        await bad_gateway(self.writer, req, "the upstream switched protocols unasked")
        return False, FAILED

    def _head(self, event: Response) -> None:
        """A response head other than a 101: interim ones passed on, the final one through
        the hooks."""
        if event.status < 200:
            self.out += interim(self.x, event)
            return
        req = self.x.req
        if self.observer is not None:
            self.observer(req.method, req.target, event.status)
        self.final = event
        outcome(self.x, self.plan, event.status)
        self.keep, self.framer, head = response_head(self.x, self.plan, event)
        self.out += head

    async def _awaited(self, event: Response) -> Result | None:
        """The final head through response hooks that wait (a traffic policy calling out in
        on_http_response); one that answers instead ends the exchange with that answer and
        drops the upstream's (None: the head went on)."""
        x, req = self.x, self.x.req
        if self.observer is not None:
            self.observer(req.method, req.target, event.status)
        headers = h1.end_to_end(event.headers)
        for hook in self.plan.responses:
            got = await hook.response_awaiting(x, event.status, headers)
            if isinstance(got, Fixed):
                self.upstream.pipe.abort()
                outcome(x, self.plan, got.status)
                self.writer.write(self.out)  # (interim heads)
                await fixed(self.writer, req, got, close=True)
                return False, FAILED
            headers = got
        self.final = event
        outcome(x, self.plan, event.status)
        self.keep, self.framer, head = framed(x, event, headers)
        self.out += head
        return None

    async def _end(self, event: End) -> Result:
        self.out += end_out(self.x, self.framer, event)
        writer = self.writer
        writer.write(self.out)
        if must_drain(writer):
            await writer.drain()
        final, upstream = self.final, self.upstream
        reuse = final is not None and final.keep_alive and not upstream.ended
        if self.body is not None:
            try:  # the upload may still be finishing; an early answer ends it
                await asyncio.wait_for(asyncio.shield(self.body), 5)
            except (UpstreamGone, TimeoutError, BadMessage):
                return False, FAILED
        return self.keep, REUSE if reuse and upstream.parser.idle else DONE


def body_out(x: Exchange, framer: Framer, data: bytes) -> bytes:
    """A piece of the response body as this hop sends it: rewritten, gzipped, framed."""
    x.sent += len(data)
    if x.rewrite is not None:
        data = x.rewrite.data(data)
    return framer.data(x.gzip.data(data) if x.gzip else data)


def flushed(x: Exchange, framer: Framer) -> bytes:
    """What the gzip stream holds of the body so far (when nothing more is here for now: a
    compressed event stream still goes event by event)."""
    if x.gzip is not None and (pending := x.gzip.flush()):
        return framer.data(pending)
    return b""


def end_out(x: Exchange, framer: Framer, end: End) -> bytes:
    """What ends the response body on this hop: the rest of a rewrite and of the gzip
    stream, then the last chunk and the trailers when chunked."""
    out = b""
    if x.rewrite is not None:
        rest = x.rewrite.end()
        out += framer.data(x.gzip.data(rest) if x.gzip else rest)
    if x.gzip is not None:
        out += framer.data(x.gzip.end())
    return out + framer.end(end.trailers)


def interim(x: Exchange, resp: Response) -> bytes:
    """An interim head (100 Continue, 103 Early Hints) as passed on: not to HTTP/1.0."""
    if x.req.http10:
        return b""
    return h1.head(b"HTTP/1.1 %d %b\r\n" % (resp.status, resp.reason),
                   h1.end_to_end(resp.headers))


def response_head(x: Exchange, plan: Plan, resp: Response) -> tuple[bool, Framer, bytes]:
    """The client's response head for ``resp``, through the response hooks: (keep the
    connection, the body's framer, the head); ``x.gzip`` is set if compressing."""
    headers = h1.end_to_end(resp.headers)
    for hook in plan.responses:
        headers = hook.response(x, resp.status, headers)
    return framed(x, resp, headers)


def framed(x: Exchange, resp: Response, headers: h1.Headers) -> tuple[bool, Framer, bytes]:
    """The client's response head with ``headers`` (the hooks'), and how its body is framed."""
    req = x.req
    keep = req.keep_alive and not req.http10
    chunked = False
    if not h1.bodiless(resp.status, req.method) and (
            x.gzip is not None or x.rewrite is not None or resp.length is None):
        if req.http10:
            keep = False  # the end of the body is the end of the connection
        else:
            chunked = True
            headers.append((b"Transfer-Encoding", b"chunked"))
    if not keep:
        headers.append((b"Connection", b"close"))
    start = b"HTTP/1.1 %d %b\r\n" % (resp.status, resp.reason or h1.reason(resp.status))
    return keep, Framer(chunked), h1.head(start, headers)


async def switch(parser: RequestParser, writer: asyncio.StreamWriter,
                 reader: asyncio.StreamReader, resp: Response, upstream: Upstream,
                 body: asyncio.Task[None] | None) -> None:
    """101 Switching Protocols: from here on, bytes both ways as they come."""
    if body is not None:
        await body
    headers = [*h1.end_to_end(resp.headers), (b"Connection", b"Upgrade"),
               (b"Upgrade", header(resp.headers, b"upgrade"))]
    writer.write(h1.head(b"HTTP/1.1 101 %b\r\n" % (resp.reason or b"Switching Protocols"),
                         headers))
    if upstream.parser.upgraded:
        writer.write(upstream.parser.upgraded)
    await writer.drain()
    if parser.upgraded:
        await upstream.pipe.write(parser.upgraded)
    await splice(reader, writer, upstream.pipe)
