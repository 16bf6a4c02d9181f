"""Forwarding one request to its upstream (``edge/http.py`` decides which): an idle upstream
connection of the target from the pool or a new one (an agent's proxy stream, or a static
backend's socket), the request head as the upstream gets it (hop-by-hop headers dropped, the
``X-Forwarded-*`` set, the route's upstream hooks), the body pumped beside the answer, and the
answer relayed (``relay.py``); the upstream is then pooled, closed or aborted. A request that
may go again raises ``Retry`` when it failed before anything reached the client.
"""

from __future__ import annotations

import asyncio
import contextlib

from edgeway.edge import h1
from edgeway.edge.answers import DONE, FAILED, REUSE, Fate, Retry, bad_gateway, fixed
from edgeway.edge.backends import Static
from edgeway.edge.client import BODY_TIMEOUT, ClientWatch, Deadline, pump_body
from edgeway.edge.h1 import Request, RequestParser, header
from edgeway.edge.hooks import Exchange
from edgeway.edge.pages import page
from edgeway.edge.pool import Pool, Upstream
from edgeway.edge.relay import Relay
from edgeway.edge.router import Decision
from edgeway.tunnel.muxado.events import StreamError
from edgeway.tunnel.muxado.stream import StreamClosed
from edgeway.tunnel.pipes import SocketPipe, UpstreamGone
from edgeway.tunnel.registry import Busy, Tunnel

FORWARDED = frozenset((b"x-forwarded-for", b"x-forwarded-proto", b"x-forwarded-host"))


class AgentBusy(UpstreamGone):
    """The agent session has no stream free (all in flight) and none became free in time."""


def replayable(req: Request, decision: Decision) -> bool:
    """A safe, bodiless request routed to a tunnel may be sent again if its agent vanished
    before answering (nothing reached the client yet)."""
    return req.method in (b"GET", b"HEAD", b"OPTIONS") and isinstance(decision.target, Tunnel) \
        and not req.body


class Forwarder:
    """The upstream side of the public connections of one scheme (``http`` or ``https``)."""

    def __init__(self, pool: Pool, scheme: str) -> None:
        self.pool, self.scheme = pool, scheme
        self.proto = scheme.encode()

    async def open(self, decision: Decision, peer: tuple[str, int]) -> Upstream:
        target = decision.target
        client = f"[{peer[0]}]:{peer[1]}" if ":" in peer[0] else f"{peer[0]}:{peer[1]}"
        if isinstance(target, Tunnel):
            if target.conn.crowded:  # idle streams of that session go first
                self.pool.reclaim(target.conn)
            try:
                pipe = await target.open(client, decision.proto, decision.edge)
            except Busy as busy:  # (a name of its own per clause: compiled, each is typed)
                raise AgentBusy(str(busy)) from None
            except (StreamClosed, StreamError) as exc:
                raise UpstreamGone(f"the agent is gone ({exc})") from None
            return Upstream(target.key, pipe)
        assert isinstance(target, Static)
        pipe = await SocketPipe.dial(target.host, target.port, target.tls)
        return Upstream(f"static:{target.host}:{target.port}", pipe)

    def request_head(self, x: Exchange, decision: Decision) -> bytes:
        req = x.req
        headers = req.headers
        names = h1.lowered(headers)  # (once: this runs per request)
        forwarded_for = b""
        if b"x-forwarded-for" in names:
            for (_, value), name in zip(headers, names, strict=True):
                if name == b"x-forwarded-for":
                    forwarded_for = value + b", "
        out = h1.end_to_end(headers, drop=FORWARDED, names=names)
        if b"transfer-encoding" in names and h1.chunked(headers):
            out.append((b"Transfer-Encoding", b"chunked"))
        if req.upgrade:
            out += [(b"Connection", b"Upgrade"), (b"Upgrade", header(headers, b"upgrade"))]
        host = headers[names.index(b"host")][1] if b"host" in names else b""
        out += [(b"X-Forwarded-For", forwarded_for + x.ip.encode()),
                (b"X-Forwarded-Proto", self.proto), (b"X-Forwarded-Host", host)]
        for hook in decision.plan.upstreams:
            out = hook.upstream(x, out)
        return h1.head(b"%b %b HTTP/1.1\r\n" % (req.method, req.target), out)

    async def proxy(self, parser: RequestParser, reader: asyncio.StreamReader,
                     writer: asyncio.StreamWriter, x: Exchange, decision: Decision,
                     peer: tuple[str, int], deadline: Deadline, retry: bool) -> bool:
        """Forward the request (its body from the client as it comes, or ``x.body``, read
        already) on an idle upstream of the target or a new one, and relay the answer. A
        kept-alive upstream that closed meanwhile (its idle timeout) fails before answering:
        the request goes again on a new one when it was not delivered or is safe to repeat.
        """
        target = decision.target
        assert isinstance(target, Tunnel | Static)
        key = target.key if isinstance(target, Tunnel) else f"static:{target.host}:{target.port}"
        req = x.req
        head = self.request_head(x, decision) + (x.body or b"")
        pump = req.body and x.body is None
        upstream = self.pool.take(key)
        if upstream is not None:
            try:
                return await self._exchange(parser, reader, writer, x, decision, upstream,
                                            head, pump, deadline, replayable(req, decision),
                                            True)
            except Retry:
                pass
        try:
            upstream = await self.open(decision, peer)
        except AgentBusy as busy:  # (a name of its own per clause: compiled, each is typed)
            x.status = 503
            await fixed(writer, req, page(503, "Agent busy", f"The tunnel's agent is busy: "
                                          f"{busy}. Try again.", 4503, (("Retry-After", "1"),)),
                        close=True)
            return False
        except UpstreamGone as exc:
            if retry:
                raise Retry from None
            x.status = 502
            await bad_gateway(writer, req, str(exc))
            return False
        return await self._exchange(parser, reader, writer, x, decision, upstream, head,
                                    pump, deadline, retry, False)

    async def _exchange(self, parser: RequestParser, reader: asyncio.StreamReader,
                        writer: asyncio.StreamWriter, x: Exchange, decision: Decision,
                        upstream: Upstream, head: bytes, pump: bool, deadline: Deadline,
                        retry: bool, reused: bool) -> bool:
        """One request and its answer on ``upstream``, which is then pooled, ended or
        aborted. ``Retry`` if it failed before anything was delivered to the client and the
        request may go again (``retry``; a head not even written on a ``reused`` one)."""
        fate: Fate = FAILED
        req = x.req
        body = watch = None
        try:
            try:
                if not upstream.pipe.write_nowait(head):
                    await upstream.pipe.write(head)
            except UpstreamGone as exc:
                if retry or reused:
                    raise Retry from None
                x.status = 502
                await bad_gateway(writer, req, str(exc))
                return False
            if pump:
                body = asyncio.create_task(pump_body(parser, reader, x, upstream.pipe,
                                                     deadline, BODY_TIMEOUT))
            elif not req.upgrade:  # (after a 101 the splice reads the client)
                watch = deadline.watch
                if watch is None:
                    watch = deadline.watch = ClientWatch(parser, reader)
                watch.begin(upstream.pipe)
            target = decision.target
            keep, fate = await Relay(parser, writer, reader, x, decision.plan, upstream, body,
                                     retry, watch, target.observer
                                     if isinstance(target, Tunnel) else None).run()
            return keep
        finally:
            if watch is not None and watch.end():
                await watch.stop()
            if body is not None and not body.done():
                body.cancel()
                with contextlib.suppress(BaseException):
                    await body
            if fate == REUSE:
                self.pool.put(upstream)
            elif fate == DONE:
                upstream.pipe.close()
            else:
                upstream.pipe.abort()
