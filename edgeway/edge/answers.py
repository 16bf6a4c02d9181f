"""The answers of the HTTP edge: its own (fixed pages, 502s) and the upstream's relayed to
the client (the response head with the route's changes, its body re-framed for this hop and
optionally gzipped, and the switch to a raw splice after a 101)."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Literal

import structlog

from edgeway.edge import h1
from edgeway.edge.client import ClientWatch
from edgeway.edge.h1 import BadMessage, End, Framer, Request, RequestParser, Response, header
from edgeway.edge.hooks import Exchange
from edgeway.edge.pages import Fixed, page
from edgeway.edge.pipeline import Plan
from edgeway.edge.pool import Upstream
from edgeway.tunnel.pipes import UpstreamGone, splice

log = structlog.get_logger()
FLUSH_AT = 256 * 1024  # response bytes gathered before a write, when more are already here
Headers = h1.Headers


class Retry(Exception):
    """The upstream went away before anything reached the client, and the request may be
    sent again (a safe request, or one not delivered at all)."""


Fate = Literal["reuse", "done", "failed"]
REUSE: Fate = "reuse"  # what became of the upstream after a relay (see ``relay_response``)
DONE: Fate = "done"
FAILED: Fate = "failed"


def _closes(headers: Headers) -> bool:
    return b"close" in header(headers, b"connection").lower()


async def fixed(writer: asyncio.StreamWriter, req: Request | None, answer: Fixed,
                close: bool = False) -> bool:
    """Write a local answer; True if the connection may carry another request."""
    headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in answer.headers]
    keep = not close and req is not None and req.keep_alive and not req.http10 \
        and req.method != b"CONNECT" and not _closes(headers)
    headers.append((b"Content-Length", b"%d" % len(answer.body)))
    if not keep and not _closes(headers):
        headers.append((b"Connection", b"close"))
    out = h1.head(b"HTTP/1.1 %d %b\r\n" % (answer.status, h1.reason(answer.status)), headers)
    if req is None or req.method != b"HEAD":
        out += answer.body
    writer.write(out)
    await writer.drain()
    return keep


async def bad_gateway(writer: asyncio.StreamWriter, req: Request, why: str) -> None:
    log.info("bad_gateway", error=why)
    await fixed(writer, req, page(
        502, "Bad gateway", "The tunnel's agent or upstream went away before "
        "answering this request.", 4502, (("Connection", "close"),)))


def local_answer(x: Exchange, plan: Plan, answer: Fixed) -> Fixed:
    """A backend's fixed answer (http_response) through the response hooks, like an
    upstream's."""
    outcome(x, plan, answer.status >= 500)
    headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in answer.headers]
    for hook in plan.responses:
        headers = hook.response(x, answer.status, headers)
    body = x.gzip.data(answer.body) + x.gzip.end() if x.gzip is not None else answer.body
    return replace(answer, body=body, headers=tuple(
        (k.decode("latin-1"), v.decode("latin-1")) for k, v in headers))


def outcome(x: Exchange, plan: Plan, failed: bool) -> None:
    for hook in plan.outcomes:
        hook.outcome(x, failed)


async def relay_response(parser: RequestParser, writer: asyncio.StreamWriter,
                         reader: asyncio.StreamReader, x: Exchange, plan: Plan,
                         upstream: Upstream, body: asyncio.Task[None] | None, retry: bool,
                         watch: ClientWatch | None = None) -> tuple[bool, Fate]:
    """Relay the upstream's answer: (keep the public connection, what became of the upstream:
    ``REUSE`` it for another request, ``DONE`` (it ends, end it gracefully) or ``FAILED``
    (abort it)). What the upstream sent is written out whenever it has nothing more for now
    (one write per turn, not one per event), so streamed responses still arrive as they are
    written. A request body that fails (malformed, or the client left mid-upload) aborts the
    upstream (``body``, the task sending it), and so does a client that leaves while a
    bodiless request waits (``watch``): that ends the wait for the answer here."""
    req = x.req
    up = upstream.parser
    up.expect(req.method == b"HEAD")
    out = bytearray()
    started = False  # bytes of the answer went to the client
    framer = Framer(False)
    final: Response | None = None
    keep = False
    while True:
        try:
            event = up.next_event()
            if event is None:
                if x.gzip is not None and (pending := x.gzip.flush()):
                    out += framer.data(pending)
                if out:
                    writer.write(out)
                    out.clear()
                    started = True
                    await writer.drain()
                if body is not None and body.done() and body.exception() is not None:
                    raise UpstreamGone(str(body.exception()))
                if upstream.ended:
                    raise UpstreamGone("the upstream closed")
                data = await upstream.pipe.read()
                if data:
                    up.feed(data)
                else:
                    upstream.ended = True
                    up.eof()
                continue
        except (UpstreamGone, BadMessage) as exc:
            upstream.pipe.abort()
            tasks = (body, watch.task if watch is not None else None)
            failed = next((t.exception() for t in tasks if t is not None and t.done()
                           and not t.cancelled() and t.exception() is not None), None)
            if started or out:
                writer.write(out)
                raise ConnectionResetError("the upstream failed mid-response") from None
            if isinstance(failed, BadMessage):  # the client's body, not the upstream
                await fixed(writer, req, page(failed.status, "Bad request", str(failed), 4000),
                            close=True)
                return False, FAILED
            if failed is not None:  # the client left mid-upload: nobody to answer
                return False, FAILED
            if retry:
                raise Retry from None
            outcome(x, plan, True)
            await bad_gateway(writer, req, str(exc))
            return False, FAILED
        if isinstance(event, Response):
            if event.status == 101 and req.upgrade:
                await switch(parser, writer, reader, event, upstream, body)
                return False, DONE
            if event.status == 101:  # to a request that did not ask to upgrade
                outcome(x, plan, True)
                writer.write(out)
                await bad_gateway(writer, req, "the upstream switched protocols "
                                        "unasked")
                return False, FAILED
            if event.status < 200:  # 100 Continue, 103 Early Hints: not for HTTP/1.0
                if not req.http10:
                    out += h1.head(b"HTTP/1.1 %d %b\r\n" % (event.status, event.reason),
                                   h1.end_to_end(event.headers))
                continue
            final = event
            outcome(x, plan, event.status >= 500)
            keep, framer, head = response_head(x, plan, event)
            out += head
        elif isinstance(event, bytes):
            out += framer.data(x.gzip.data(event) if x.gzip else event)
            if len(out) >= FLUSH_AT:
                writer.write(out)
                out.clear()
                started = True
                await writer.drain()
        elif isinstance(event, End):
            if x.gzip is not None:
                out += framer.data(x.gzip.end())
            out += framer.end(event.trailers)
            writer.write(out)
            await writer.drain()
            reuse = final is not None and final.keep_alive and not upstream.ended
            if body is not None:
                try:  # the upload may still be finishing; an early answer ends it
                    await asyncio.wait_for(asyncio.shield(body), 5)
                except (UpstreamGone, TimeoutError, BadMessage):
                    return False, FAILED
            return keep, REUSE if reuse and up.idle else DONE


def response_head(x: Exchange, plan: Plan, resp: Response) -> tuple[bool, Framer, bytes]:
    """The client's response head for ``resp``, through the response hooks: (keep the
    connection, the body's framer, the head); ``x.gzip`` is set if compressing."""
    req = x.req
    headers = h1.end_to_end(resp.headers)
    for hook in plan.responses:
        headers = hook.response(x, resp.status, headers)
    keep = req.keep_alive and not req.http10
    chunked = False
    if not h1.bodiless(resp.status, req.method) and (x.gzip is not None or resp.length is None):
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
