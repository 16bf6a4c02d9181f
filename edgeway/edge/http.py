"""The HTTP edge: public HTTP/1.1 connections (plain, or TLS terminated by the listener) are
parsed with h11, routed request by request, and relayed to an agent's proxy stream or a static
backend, which speak HTTP/1.1 too.

Faithful forwarding: keep-alive on both sides (one upstream connection per public connection
and target, reused while both ends keep it alive), pipelined requests answered in order,
chunked and close-delimited bodies, uploads and downloads streamed with backpressure (never
buffered whole), responses relayed as the upstream writes them (server-sent events), and
``Upgrade`` (WebSocket) turning the connection into a raw two-way splice after the 101.
``X-Forwarded-For`` gets the client address appended; ``X-Forwarded-Proto`` and
``X-Forwarded-Host`` are set. An upstream that fails before its response starts gives that
request a 502; after it started, the public connection is cut (a truncated body must not look
complete).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from http import HTTPStatus

import h11

from edgeway.edge.modules import compression
from edgeway.edge.modules.request_headers import header
from edgeway.edge.pages import Fixed, page
from edgeway.edge.router import Decision, Router, Static
from edgeway.tunnel.muxado.aio import StreamClosed
from edgeway.tunnel.muxado.session import StreamError
from edgeway.tunnel.pipes import Pipe, SocketPipe, StreamPipe, UpstreamGone, splice
from edgeway.tunnel.registry import Tunnel

log = logging.getLogger("edgeway.edge")
MAX_HEAD = 64 * 1024
HEAD_TIMEOUT = 30.0  # to receive a whole request head
IDLE_TIMEOUT = 75.0  # between requests on a kept-alive connection
DRAIN_LIMIT = 1 << 20
FLUSH_AT = 256 * 1024  # request body read and dropped after a local answer, else close
Headers = list[tuple[bytes, bytes]]


RETRIES = 2  # safe requests whose tunnel died before answering go to another live one


class _Retry(Exception):
    pass


@dataclass
class Upstream:
    key: str
    pipe: Pipe
    conn: h11.Connection


def _bodiless(req: h11.Request) -> bool:
    return not any(name == b"transfer-encoding" or (name == b"content-length" and value != b"0")
                   for name, value in req.headers)


def _replayable(req: h11.Request, decision: Decision) -> bool:
    """A safe, bodiless request routed to a tunnel may be sent again if its agent vanished
    before answering (nothing reached the client yet)."""
    return req.method in (b"GET", b"HEAD", b"OPTIONS") and isinstance(decision.target, Tunnel) \
        and _bodiless(req)


def _reason(status: int) -> bytes:
    try:
        return HTTPStatus(status).phrase.encode()
    except ValueError:
        return b""


class HttpEdge:
    def __init__(self, router: Router, scheme: str, https_port: int = 443) -> None:
        self.router, self.scheme, self.https_port = router, scheme, https_port

    # -- one public connection -------------------------------------------------------------

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    peer: tuple[str, int]) -> None:
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_HEAD)
        upstream: Upstream | None = None
        try:
            while True:
                timeout = IDLE_TIMEOUT if conn.their_state is h11.IDLE else HEAD_TIMEOUT
                try:
                    event = await asyncio.wait_for(self._next(conn, reader), timeout)
                except h11.RemoteProtocolError as exc:
                    if conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):
                        await self._fixed(conn, writer, page(
                            exc.error_status_hint, "Bad request", str(exc), 4000), head=False)
                    return
                except TimeoutError:
                    return
                if not isinstance(event, h11.Request):
                    return  # ConnectionClosed (or PAUSED after a switch)
                decision = await self._decide(event, peer)
                for attempt in range(RETRIES + 1):
                    if isinstance(decision.target, Fixed):
                        if decision.breaker is not None:  # an http_response backend
                            decision.breaker.record(decision.target.status >= 500)
                        await self._fixed(conn, writer, decision.target,
                                          event.method == b"HEAD")
                        if not await self._drain(conn, reader):
                            return
                        break
                    retry = attempt < RETRIES and _replayable(event, decision)
                    try:
                        upstream = await self._proxy(conn, reader, writer, event, decision,
                                                     peer, upstream, retry)
                        break
                    except _Retry:  # that tunnel's agent is gone: ask the router again
                        upstream = None
                        decision = await self._decide(event, peer)
                        if not isinstance(decision.target, Tunnel):
                            await self._bad_gateway(conn, writer, event, "no other tunnel")
                            return
                if conn.our_state is h11.SWITCHED_PROTOCOL:
                    return
                if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                    return
                conn.start_next_cycle()
        except (ConnectionError, OSError, h11.LocalProtocolError):
            pass
        finally:
            if upstream is not None:
                upstream.pipe.close()
            with contextlib.suppress(ConnectionError, OSError, RuntimeError):
                writer.close()

    @staticmethod
    async def _next(conn: h11.Connection, reader: asyncio.StreamReader
                    ) -> type[h11.PAUSED] | h11.Event:
        while True:
            event = conn.next_event()
            if event is not h11.NEED_DATA:
                return event  # type: ignore[return-value]
            conn.receive_data(await reader.read(65536))

    async def _drain(self, conn: h11.Connection, reader: asyncio.StreamReader) -> bool:
        """Read and drop the rest of a request answered locally; False: close instead."""
        seen = 0
        while conn.their_state is h11.SEND_BODY:
            try:
                event = await asyncio.wait_for(self._next(conn, reader), HEAD_TIMEOUT)
            except (TimeoutError, h11.RemoteProtocolError):
                return False
            if isinstance(event, h11.Data):
                seen += len(event.data)
                if seen > DRAIN_LIMIT:
                    return False
            elif not isinstance(event, h11.EndOfMessage):
                return False
        return conn.our_state is h11.DONE and conn.their_state is h11.DONE

    @staticmethod
    async def _fixed(conn: h11.Connection, writer: asyncio.StreamWriter, answer: Fixed,
                     head: bool) -> None:
        headers = [*answer.headers, ("Content-Length", str(len(answer.body)))]
        out = conn.send(h11.Response(status_code=answer.status, headers=headers,
                                     reason=_reason(answer.status))) or b""
        if not head:
            out += conn.send(h11.Data(data=answer.body)) or b""
        out += conn.send(h11.EndOfMessage()) or b""
        writer.write(out)
        await writer.drain()

    async def _decide(self, req: h11.Request, peer: tuple[str, int]) -> Decision:
        return await self.router.http(req, peer[0], self.scheme, self.https_port)

    # -- proxying --------------------------------------------------------------------------

    async def _open(self, decision: Decision, peer: tuple[str, int]) -> Upstream:
        target = decision.target
        client = f"[{peer[0]}]:{peer[1]}" if ":" in peer[0] else f"{peer[0]}:{peer[1]}"
        if isinstance(target, Tunnel):
            try:
                stream = await target.open(client, decision.proto, decision.edge)
            except (StreamClosed, StreamError) as exc:
                raise UpstreamGone(f"the agent is gone ({exc})") from None
            return Upstream(target.id, StreamPipe(stream), h11.Connection(h11.CLIENT))
        assert isinstance(target, Static)
        pipe = await SocketPipe.dial(target.host, target.port, target.tls)
        return Upstream(f"static:{target.host}:{target.port}", pipe,
                        h11.Connection(h11.CLIENT))

    def _request_headers(self, req: h11.Request, decision: Decision,
                         peer: tuple[str, int]) -> Headers:
        out: Headers = []
        forwarded_for = ""
        for name, value in req.headers.raw_items():
            low = name.lower()
            if low == b"x-forwarded-for":
                forwarded_for = value.decode("latin-1") + ", "
            elif low in (b"x-forwarded-proto", b"x-forwarded-host"):
                continue
            else:
                out.append((name, value))
        out += [(b"X-Forwarded-For", (forwarded_for + peer[0]).encode()),
                (b"X-Forwarded-Proto", self.scheme.encode()),
                (b"X-Forwarded-Host", header(list(req.headers), b"host"))]
        return decision.plan.request_headers.apply(out)

    async def _proxy(self, conn: h11.Connection, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter, req: h11.Request, decision: Decision,
                     peer: tuple[str, int], upstream: Upstream | None, retry: bool
                     ) -> Upstream | None:
        target = decision.target
        assert isinstance(target, Tunnel | Static)
        key = target.id if isinstance(target, Tunnel) else f"static:{target.host}:{target.port}"
        if upstream is not None and (upstream.key != key
                                     or upstream.conn.our_state is not h11.IDLE):
            upstream.pipe.close()
            upstream = None
        try:
            if upstream is None:
                upstream = await self._open(decision, peer)
            head = upstream.conn.send(h11.Request(
                method=req.method, target=req.target,
                headers=self._request_headers(req, decision, peer)))
            await upstream.pipe.write(head or b"")
        except (UpstreamGone, h11.LocalProtocolError) as exc:
            if upstream is not None:
                upstream.pipe.close()
            if retry:
                raise _Retry from None
            await self._bad_gateway(conn, writer, req, str(exc))
            await self._drain(conn, reader)
            return None
        body: asyncio.Task[None] | None = None
        if _bodiless(req):  # the usual case: no task to pump a body
            if not isinstance(conn.next_event(), h11.EndOfMessage):
                raise h11.LocalProtocolError("a request without a body had one")
            upstream.conn.send(h11.EndOfMessage())
        else:
            body = asyncio.create_task(self._pump_body(conn, reader, upstream))
        try:
            keep = await self._relay_response(conn, writer, reader, req, decision, upstream,
                                              body, retry)
        finally:
            if body is not None and not body.done():
                body.cancel()
                with contextlib.suppress(BaseException):
                    await body
        if keep and upstream.conn.our_state is h11.DONE \
                and upstream.conn.their_state is h11.DONE:
            upstream.conn.start_next_cycle()
            return upstream
        upstream.pipe.close()
        return None

    async def _pump_body(self, conn: h11.Connection, reader: asyncio.StreamReader,
                         upstream: Upstream) -> None:
        while conn.their_state is h11.SEND_BODY:
            event = await self._next(conn, reader)
            if isinstance(event, h11.Data):
                await upstream.pipe.write(upstream.conn.send(h11.Data(data=event.data)) or b"")
            elif isinstance(event, h11.EndOfMessage):
                await upstream.pipe.write(upstream.conn.send(h11.EndOfMessage()) or b"")
            else:
                raise UpstreamGone("the client closed the connection mid-request")

    async def _bad_gateway(self, conn: h11.Connection, writer: asyncio.StreamWriter,
                           req: h11.Request, why: str) -> None:
        log.info('{"event": "bad_gateway", "error": "%s"}', why.replace('"', "'"))
        if conn.our_state is h11.SEND_RESPONSE:
            await self._fixed(conn, writer, page(
                502, "Bad gateway", "The tunnel's agent or upstream went away before "
                "answering this request.", 4502, (("Connection", "close"),)),
                req.method == b"HEAD")

    async def _relay_response(self, conn: h11.Connection, writer: asyncio.StreamWriter,
                              reader: asyncio.StreamReader, req: h11.Request,
                              decision: Decision, upstream: Upstream,
                              body: asyncio.Task[None] | None, retry: bool) -> bool:
        """Relay the upstream's answer; True if both connections may be reused. What the
        upstream sent is written out whenever it has nothing more for now (one write per
        turn, not one per event), so streamed responses still arrive as they are written."""
        up = upstream.conn
        out = bytearray()
        gzip: compression.Gzip | None = None
        while True:
            try:
                event = up.next_event()
                if event is h11.NEED_DATA:
                    if gzip is not None and (pending := gzip.flush()):
                        out += conn.send(h11.Data(data=pending)) or b""
                    if out:
                        writer.write(out)
                        out.clear()
                        await writer.drain()
                    if body is not None and body.done() and body.exception() is not None:
                        raise UpstreamGone(str(body.exception()))
                    up.receive_data(await upstream.pipe.read())
                    continue
            except (UpstreamGone, h11.RemoteProtocolError) as exc:
                if retry and conn.our_state is h11.SEND_RESPONSE:
                    upstream.pipe.close()
                    raise _Retry from None
                if decision.breaker is not None:
                    decision.breaker.record(True)
                await self._bad_gateway(conn, writer, req, str(exc))
                return False
            if isinstance(event, h11.InformationalResponse):
                if event.status_code == 101:
                    await self._switch(conn, writer, reader, event, upstream, body)
                    return False
                out += conn.send(event) or b""
            elif isinstance(event, h11.Response):
                if decision.breaker is not None:
                    decision.breaker.record(event.status_code >= 500)
                headers = decision.plan.response_headers.apply(list(event.headers.raw_items()))
                if decision.plan.compression and compression.wanted(
                        list(req.headers), event.status_code, headers, req.method == b"HEAD"):
                    headers, gzip = compression.rewrite(headers), compression.Gzip()
                out += conn.send(h11.Response(
                    status_code=event.status_code, headers=headers, reason=event.reason)) or b""
            elif isinstance(event, h11.Data):
                data = gzip.data(event.data) if gzip else event.data
                if data:
                    out += conn.send(h11.Data(data=data)) or b""
                if len(out) >= FLUSH_AT:
                    writer.write(out)
                    out.clear()
                    await writer.drain()
            elif isinstance(event, h11.EndOfMessage):
                if gzip is not None:
                    out += conn.send(h11.Data(data=gzip.end())) or b""
                out += conn.send(h11.EndOfMessage(headers=event.headers)) or b""
                writer.write(out)
                await writer.drain()
                if body is None:
                    return conn.their_state is h11.DONE
                try:  # the upload may still be finishing; an early answer ends it
                    await asyncio.wait_for(asyncio.shield(body), 5)
                except (UpstreamGone, TimeoutError, h11.RemoteProtocolError):
                    return False
                return conn.their_state is h11.DONE
            else:  # ConnectionClosed before the response: treated as a lost upstream
                if conn.our_state is h11.SEND_RESPONSE:
                    await self._bad_gateway(conn, writer, req, "the upstream closed")
                    return False
                writer.write(out)
                raise ConnectionResetError("the upstream closed mid-response")

    async def _switch(self, conn: h11.Connection, writer: asyncio.StreamWriter,
                      reader: asyncio.StreamReader, event: h11.InformationalResponse,
                      upstream: Upstream, body: asyncio.Task[None] | None) -> None:
        """101 Switching Protocols: from here on, bytes both ways as they come."""
        if body is not None:
            await body
        writer.write(conn.send(event) or b"")
        leftover_up, _ = upstream.conn.trailing_data
        leftover_client, _ = conn.trailing_data
        if leftover_up:
            writer.write(leftover_up)
        await writer.drain()
        if leftover_client:
            await upstream.pipe.write(leftover_client)

        await splice(reader, writer, upstream.pipe)
