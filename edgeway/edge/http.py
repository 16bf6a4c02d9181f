"""The HTTP edge: public HTTP/1.1 connections (plain, or TLS terminated by the listener) are
parsed (``h1``, llhttp underneath), routed request by request, and relayed to an agent's proxy
stream or a static backend, which speak HTTP/1.1 too.

Faithful forwarding: keep-alive on both sides (one upstream connection per public connection
and target, reused while both ends keep it alive), pipelined requests answered in order,
chunked and close-delimited bodies, uploads and downloads streamed with backpressure (never
buffered whole), responses relayed as the upstream writes them (server-sent events), and
``Upgrade`` (WebSocket) turning the connection into a raw two-way splice after the 101.
Hop-by-hop headers stay on their hop; each side's body framing is its own (HTTP/1.0 clients
get a close-delimited body when the length is not known). ``X-Forwarded-For`` gets the client
address appended; ``X-Forwarded-Proto`` and ``X-Forwarded-Host`` are set. An upstream that
fails before its response starts gives that request a 502; after it started, the public
connection is cut (a truncated body must not look complete).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass, field, replace

from edgeway.edge import h1, wstcp
from edgeway.edge.auth import OidcGate
from edgeway.edge.client import Deadline, next_event, read_body
from edgeway.edge.h1 import BadMessage, End, Framer, Request, RequestParser, Response
from edgeway.edge.modules import compression
from edgeway.edge.modules.request_headers import header
from edgeway.edge.modules.webhook_verification import MAX_BODY as MAX_WEBHOOK_BODY
from edgeway.edge.modules.webhook_verification import Verifier
from edgeway.edge.pages import Fixed, page
from edgeway.edge.router import Decision, Edge, Router, Static
from edgeway.tunnel.muxado.aio import StreamClosed
from edgeway.tunnel.muxado.session import StreamError
from edgeway.tunnel.pipes import Pipe, SocketPipe, StreamPipe, UpstreamGone, splice
from edgeway.tunnel.registry import Tunnel

log = logging.getLogger("edgeway.edge")
HEAD_TIMEOUT = 30.0  # to receive a whole request head
IDLE_TIMEOUT = 75.0  # between requests on a kept-alive connection
DRAIN_LIMIT = 1 << 20
FLUSH_AT = 256 * 1024  # response bytes gathered before a write, when more are already here
RETRIES = 2  # safe requests whose tunnel died before answering go to another live one
FORWARDED = frozenset((b"x-forwarded-for", b"x-forwarded-proto", b"x-forwarded-host"))
Headers = h1.Headers


class _Retry(Exception):
    pass


@dataclass
class Upstream:
    key: str
    pipe: Pipe
    parser: h1.ResponseParser = field(default_factory=h1.ResponseParser)
    ended: bool = False  # the upstream closed its side


def _replayable(req: Request, decision: Decision) -> bool:
    """A safe, bodiless request routed to a tunnel may be sent again if its agent vanished
    before answering (nothing reached the client yet)."""
    return req.method in (b"GET", b"HEAD", b"OPTIONS") and isinstance(decision.target, Tunnel) \
        and not req.body


def _closes(headers: Headers) -> bool:
    return b"close" in header(headers, b"connection").lower()


class HttpEdge:
    def __init__(self, router: Router, scheme: str, https_port: int = 443,
                 login: OidcGate | None = None) -> None:
        self.router, self.scheme, self.https_port = router, scheme, https_port
        self.login = login

    # -- one public connection -------------------------------------------------------------

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    peer: tuple[str, int], tls_edge: Edge | None = None) -> None:
        """One public connection; ``tls_edge``: the HTTPS edge its TLS server name chose
        (whose client certificate check, if any, the handshake passed)."""
        parser = RequestParser()
        upstream: Upstream | None = None
        deadline = Deadline(writer.transport)
        try:
            while True:
                try:
                    event = await next_event(parser, reader, deadline,
                                        HEAD_TIMEOUT if parser.mid_message else IDLE_TIMEOUT)
                except BadMessage as exc:
                    await self._fixed(writer, None, page(
                        exc.status, "Bad request", str(exc), 4000), close=True)
                    return
                if not isinstance(event, Request):
                    return  # the client closed, or was too slow
                keep, upstream = await self._answer(parser, reader, writer, event, peer,
                                                    upstream, deadline, tls_edge)
                if not keep:
                    return
                parser.resume()
        except (ConnectionError, OSError, BadMessage):
            pass
        finally:
            deadline.cancel()
            if upstream is not None:
                upstream.pipe.close()
            with contextlib.suppress(ConnectionError, OSError, RuntimeError):
                writer.close()

    async def _answer(self, parser: RequestParser, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter, req: Request, peer: tuple[str, int],
                      upstream: Upstream | None, deadline: Deadline, tls_edge: Edge | None
                      ) -> tuple[bool, Upstream | None]:
        """Answer one request: (keep the public connection, the upstream to reuse)."""
        decision = await self._decide(req, peer, tls_edge)
        if decision.plan.websocket_tcp and wstcp.wants(req) \
                and isinstance(decision.target, Tunnel | Static):
            try:
                pipe = (await self._open(decision, peer)).pipe
            except UpstreamGone as exc:
                await self._bad_gateway(writer, req, str(exc))
                return False, upstream
            await wstcp.convert(reader, writer, req, parser.upgraded, pipe)
            return False, upstream
        if decision.plan.oidc is not None:  # (only HTTPS edges have routes, and a login)
            outcome = await self.login.check(decision.plan.oidc, req) if self.login else \
                page(503, "Not available", "Logins need HTTPS.", 4008)
            if isinstance(outcome, Fixed):
                keep = await self._fixed(writer, req, outcome)
                return keep and await self._drain(parser, reader, deadline), upstream
            req, renew = outcome
            decision = replace(decision, set_headers=renew)
        body: bytes | None = None  # read whole already (webhook verification)
        if decision.plan.webhook is not None:
            checked = await self._verify(parser, reader, writer, req, decision.plan.webhook)
            if isinstance(checked, bool):
                return checked, upstream
            req, body = checked
        for attempt in range(RETRIES + 1):
            if isinstance(decision.target, Fixed):
                if decision.breaker is not None:  # an http_response backend
                    decision.breaker.record(decision.target.status >= 500)
                answer = decision.target
                if decision.set_headers:
                    answer = replace(answer, headers=answer.headers + decision.set_headers)
                keep = await self._fixed(writer, req, answer)
                return keep and (body is not None
                                 or await self._drain(parser, reader, deadline)), upstream
            retry = attempt < RETRIES and _replayable(req, decision)
            try:
                return await self._proxy(parser, reader, writer, req, decision, peer, upstream,
                                         retry, body)
            except _Retry:  # that tunnel's agent is gone: ask the router again
                upstream = None
                decision = await self._decide(req, peer, tls_edge)
                if not isinstance(decision.target, Tunnel):
                    await self._bad_gateway(writer, req, "no other tunnel")
                    return False, None
        return False, upstream  # not reached: the last attempt does not retry

    async def _verify(self, parser: RequestParser, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter, req: Request, webhook: Verifier
                      ) -> tuple[Request, bytes] | bool:
        """Read the body whole and check its webhook signature: the request to forward and its
        body, or (answered here) whether the connection may carry another request."""
        length = header(req.headers, b"content-length")
        too_long = length.isdigit() and int(length) > MAX_WEBHOOK_BODY  # known before reading
        if req.body and not too_long and not req.http10 \
                and header(req.headers, b"expect").lower() == b"100-continue":
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        body = None if too_long else await read_body(parser, reader, MAX_WEBHOOK_BODY)
        if body is None:
            await self._fixed(writer, req, page(
                413, "Payload too large", "Webhook bodies are verified whole, up to "
                f"{MAX_WEBHOOK_BODY} bytes.", 4013), close=True)
            return False
        if not webhook.verify(req.headers, body, time.time()):
            return await self._fixed(writer, req, page(
                403, "Forbidden", f"The request does not carry a valid {webhook.provider} "
                "webhook signature.", 3204))
        return h1.with_length(req, len(body)), body

    async def _drain(self, parser: RequestParser, reader: asyncio.StreamReader,
                     deadline: Deadline) -> bool:
        """Read and drop the rest of a request answered locally; False: close instead."""
        seen = 0
        while True:
            try:
                event = await next_event(parser, reader, deadline, HEAD_TIMEOUT)
            except BadMessage:
                return False
            if isinstance(event, End):
                return True
            if not isinstance(event, bytes):
                return False
            seen += len(event)
            if seen > DRAIN_LIMIT:
                return False

    @staticmethod
    async def _fixed(writer: asyncio.StreamWriter, req: Request | None, answer: Fixed,
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

    async def _decide(self, req: Request, peer: tuple[str, int], tls_edge: Edge | None
                      ) -> Decision:
        return await self.router.http(req, peer[0], self.scheme, self.https_port, tls_edge)

    # -- proxying --------------------------------------------------------------------------

    async def _open(self, decision: Decision, peer: tuple[str, int]) -> Upstream:
        target = decision.target
        client = f"[{peer[0]}]:{peer[1]}" if ":" in peer[0] else f"{peer[0]}:{peer[1]}"
        if isinstance(target, Tunnel):
            try:
                stream = await target.open(client, decision.proto, decision.edge)
            except (StreamClosed, StreamError) as exc:
                raise UpstreamGone(f"the agent is gone ({exc})") from None
            return Upstream(target.id, StreamPipe(stream))
        assert isinstance(target, Static)
        pipe = await SocketPipe.dial(target.host, target.port, target.tls)
        return Upstream(f"static:{target.host}:{target.port}", pipe)

    def _request_head(self, req: Request, decision: Decision, peer: tuple[str, int]) -> bytes:
        forwarded_for = b""
        for name, value in req.headers:
            if name.lower() == b"x-forwarded-for":
                forwarded_for = value + b", "
        out = [(k, v) for k, v in h1.end_to_end(req.headers) if k.lower() not in FORWARDED]
        if h1.chunked(req.headers):
            out.append((b"Transfer-Encoding", b"chunked"))
        if req.upgrade:
            out += [(b"Connection", b"Upgrade"), (b"Upgrade", header(req.headers, b"upgrade"))]
        out += [(b"X-Forwarded-For", forwarded_for + peer[0].encode()),
                (b"X-Forwarded-Proto", self.scheme.encode()),
                (b"X-Forwarded-Host", header(req.headers, b"host"))]
        out = decision.plan.request_headers.apply(out)
        return h1.head(b"%b %b HTTP/1.1\r\n" % (req.method, req.target), out)

    async def _proxy(self, parser: RequestParser, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter, req: Request, decision: Decision,
                     peer: tuple[str, int], upstream: Upstream | None, retry: bool,
                     whole: bytes | None = None) -> tuple[bool, Upstream | None]:
        """Forward the request (its body from the client as it comes, or ``whole``, read
        already) and relay the answer."""
        target = decision.target
        assert isinstance(target, Tunnel | Static)
        key = target.id if isinstance(target, Tunnel) else f"static:{target.host}:{target.port}"
        if upstream is not None and (upstream.key != key or not upstream.parser.idle):
            upstream.pipe.close()
            upstream = None
        try:
            if upstream is None:
                upstream = await self._open(decision, peer)
            await upstream.pipe.write(self._request_head(req, decision, peer) + (whole or b""))
        except UpstreamGone as exc:
            if upstream is not None:
                upstream.pipe.close()
            if retry:
                raise _Retry from None
            await self._bad_gateway(writer, req, str(exc))
            return False, None
        body: asyncio.Task[None] | None = None
        if whole is not None:
            pass  # sent with the head
        elif not req.body:  # the usual case: its End is already here, no task to pump a body
            if not isinstance(parser.next_event(), End):
                raise BadMessage(400, "a request without a body had one")
        else:
            body = asyncio.create_task(self._pump_body(parser, reader, req, upstream))
        try:
            keep, reuse = await self._relay_response(parser, writer, reader, req, decision,
                                                     upstream, body, retry)
        finally:
            if body is not None and not body.done():
                body.cancel()
                with contextlib.suppress(BaseException):
                    await body
        if reuse:
            return keep, upstream
        upstream.pipe.close()
        return keep, None

    async def _pump_body(self, parser: RequestParser, reader: asyncio.StreamReader,
                         req: Request, upstream: Upstream) -> None:
        framer = Framer(h1.chunked(req.headers))
        while True:
            event = await next_event(parser, reader)
            if isinstance(event, bytes):
                await upstream.pipe.write(framer.data(event))
            elif isinstance(event, End):
                if framer.chunked:
                    await upstream.pipe.write(framer.end(event.trailers))
                return
            else:
                raise UpstreamGone("the client closed the connection mid-request")

    async def _bad_gateway(self, writer: asyncio.StreamWriter, req: Request, why: str) -> None:
        log.info('{"event": "bad_gateway", "error": "%s"}', why.replace('"', "'"))
        await self._fixed(writer, req, page(
            502, "Bad gateway", "The tunnel's agent or upstream went away before "
            "answering this request.", 4502, (("Connection", "close"),)))

    async def _relay_response(self, parser: RequestParser, writer: asyncio.StreamWriter,
                              reader: asyncio.StreamReader, req: Request, decision: Decision,
                              upstream: Upstream, body: asyncio.Task[None] | None, retry: bool
                              ) -> tuple[bool, bool]:
        """Relay the upstream's answer: (keep the public connection, reuse the upstream).
        What the upstream sent is written out whenever it has nothing more for now (one write
        per turn, not one per event), so streamed responses still arrive as they are written."""
        up = upstream.parser
        up.expect(req.method == b"HEAD")
        out = bytearray()
        started = False  # bytes of the answer went to the client
        gzip: compression.Gzip | None = None
        framer = Framer(False)
        final: Response | None = None
        keep = False
        while True:
            try:
                event = up.next_event()
                if event is None:
                    if gzip is not None and (pending := gzip.flush()):
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
                if started or out:
                    writer.write(out)
                    raise ConnectionResetError("the upstream failed mid-response") from None
                if retry:
                    upstream.pipe.close()
                    raise _Retry from None
                if decision.breaker is not None:
                    decision.breaker.record(True)
                await self._bad_gateway(writer, req, str(exc))
                return False, False
            if isinstance(event, Response):
                if event.status == 101 and req.upgrade:
                    await self._switch(parser, writer, reader, event, upstream, body)
                    return False, False
                if event.status == 101:  # to a request that did not ask to upgrade
                    if decision.breaker is not None:
                        decision.breaker.record(True)
                    writer.write(out)
                    await self._bad_gateway(writer, req, "the upstream switched protocols "
                                            "unasked")
                    return False, False
                if event.status < 200:  # 100 Continue, 103 Early Hints: not for HTTP/1.0
                    if not req.http10:
                        out += h1.head(b"HTTP/1.1 %d %b\r\n" % (event.status, event.reason),
                                       h1.end_to_end(event.headers))
                    continue
                final = event
                if decision.breaker is not None:
                    decision.breaker.record(event.status >= 500)
                keep, framer, gzip, head = self._response_head(req, decision, event)
                out += head
            elif isinstance(event, bytes):
                out += framer.data(gzip.data(event) if gzip else event)
                if len(out) >= FLUSH_AT:
                    writer.write(out)
                    out.clear()
                    started = True
                    await writer.drain()
            elif isinstance(event, End):
                if gzip is not None:
                    out += framer.data(gzip.end())
                out += framer.end(event.trailers)
                writer.write(out)
                await writer.drain()
                reuse = final is not None and final.keep_alive and not upstream.ended
                if body is not None:
                    try:  # the upload may still be finishing; an early answer ends it
                        await asyncio.wait_for(asyncio.shield(body), 5)
                    except (UpstreamGone, TimeoutError, BadMessage):
                        return False, False
                return keep, reuse and up.idle

    def _response_head(self, req: Request, decision: Decision, resp: Response
                       ) -> tuple[bool, Framer, compression.Gzip | None, bytes]:
        """The client's response head for ``resp``: (keep the connection, the body's framer,
        the gzip stream if compressing, the head)."""
        plan = decision.plan
        headers = plan.response_headers.apply(h1.end_to_end(resp.headers))
        headers += [(k.encode(), v.encode()) for k, v in decision.set_headers]
        keep = req.keep_alive and not req.http10
        gzip: compression.Gzip | None = None
        chunked = False
        if not h1.bodiless(resp.status, req.method):
            if plan.compression and compression.wanted(req.headers, resp.status, headers,
                                                       False):
                headers, gzip = compression.rewrite(headers), compression.Gzip()
            if gzip is not None or resp.length is None:
                if req.http10:
                    keep = False  # the end of the body is the end of the connection
                else:
                    chunked = True
                    headers.append((b"Transfer-Encoding", b"chunked"))
        if not keep:
            headers.append((b"Connection", b"close"))
        start = b"HTTP/1.1 %d %b\r\n" % (resp.status, resp.reason or h1.reason(resp.status))
        return keep, Framer(chunked), gzip, h1.head(start, headers)

    async def _switch(self, parser: RequestParser, writer: asyncio.StreamWriter,
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
