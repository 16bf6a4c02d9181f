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
import time
from dataclasses import replace
from functools import partial
from typing import Any

from edgeway.catalog.modules.policy import REQ, RES
from edgeway.edge import h1, wstcp
from edgeway.edge.answers import (
    DONE,
    FAILED,
    REUSE,
    Fate,
    Retry,
    bad_gateway,
    fixed,
    relay_response,
)
from edgeway.edge.client import ClientWatch, Deadline, next_event, read_body
from edgeway.edge.h1 import BadMessage, End, Framer, Request, RequestParser, header
from edgeway.edge.hosts import covered, misdirected, request_host
from edgeway.edge.modules import traffic_policy
from edgeway.edge.modules.sns import SnsVerifier
from edgeway.edge.modules.webhook_verification import MAX_BODY as MAX_WEBHOOK_BODY
from edgeway.edge.modules.webhook_verification import Verifier
from edgeway.edge.oidc_login import OidcGate
from edgeway.edge.pages import Fixed, page
from edgeway.edge.pool import Pool, Upstream
from edgeway.edge.router import Decision, Edge, EdgeRouter, Static
from edgeway.restrictions import Restrictions
from edgeway.tunnel.muxado.aio import StreamClosed
from edgeway.tunnel.muxado.session import StreamError
from edgeway.tunnel.pipes import SocketPipe, StreamPipe, UpstreamGone
from edgeway.tunnel.registry import Busy, Tunnel

HEAD_TIMEOUT = 30.0  # to receive a whole request head, from its first byte (or the connection)
IDLE_TIMEOUT = 75.0  # between requests on a kept-alive connection
BODY_TIMEOUT = 60.0  # between two reads of a request body
DRAIN_LIMIT = 1 << 20
RETRIES = 2  # safe requests whose tunnel died before answering go to another live one
FORWARDED = frozenset((b"x-forwarded-for", b"x-forwarded-proto", b"x-forwarded-host"))
Headers = h1.Headers


def _respond(policy: traffic_policy.Policy, env: dict[str, Any], status: int,
             headers: Headers) -> Headers:
    return policy.on_response(traffic_policy.response_env(env, status, headers), headers)


class AgentBusy(UpstreamGone):
    """The agent session has no stream free (all in flight) and none became free in time."""


def _replayable(req: Request, decision: Decision) -> bool:
    """A safe, bodiless request routed to a tunnel may be sent again if its agent vanished
    before answering (nothing reached the client yet)."""
    return req.method in (b"GET", b"HEAD", b"OPTIONS") and isinstance(decision.target, Tunnel) \
        and not req.body


class HttpEdge:
    def __init__(self, router: EdgeRouter, scheme: str, https_port: int = 443,
                 login: OidcGate | None = None, pool: Pool | None = None,
                 restrictions: Restrictions | None = None,
                 sns: SnsVerifier | None = None) -> None:
        self.router, self.scheme, self.https_port = router, scheme, https_port
        self.sns = sns or SnsVerifier()  # (SNS signatures: certificates fetched and cached)
        self.restrictions = restrictions  # IP restrictions of type endpoints
        self.login = login
        self.limits = traffic_policy.RateLimits()
        self.pool = pool or Pool()

    # -- one public connection -------------------------------------------------------------

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    peer: tuple[str, int], tls_edge: Edge | None = None,
                    certified: tuple[str, ...] | None = None) -> None:
        """One public connection; ``tls_edge``: the HTTPS edge its TLS server name chose
        (whose client certificate check, if any, the handshake passed); ``certified``: the
        names of the certificate it was handshaken with (None: plain HTTP). A request for a
        host that certificate does not cover is misdirected (domain fronting): 421."""
        parser = RequestParser()
        deadline = Deadline(writer.transport)
        wait = HEAD_TIMEOUT  # a new connection is for a request: its head within 30 s
        refused = self.restrictions is not None and \
            await self.restrictions.refusing("endpoints", peer[0]) is not None
        try:
            while True:
                try:
                    event = await next_event(parser, reader, deadline, wait, HEAD_TIMEOUT)
                except BadMessage as exc:
                    await fixed(writer, None, page(
                        exc.status, "Bad request", str(exc), 4000), close=True)
                    return
                if not isinstance(event, Request):
                    return  # the client closed, or was too slow
                if refused:  # (an IP restriction of type endpoints)
                    await fixed(writer, event, page(403, "Forbidden", "Your IP address may "
                                                    "not access this site.", 4003), close=True)
                    return
                if certified is not None and not covered(
                        certified, host := request_host(event.headers)):
                    answered = await fixed(writer, event, misdirected(host, certified))
                    if not (answered and await self._drain(parser, reader, deadline)):
                        return
                elif not await self._answer(parser, reader, writer, event, peer, deadline,
                                            tls_edge):
                    return
                parser.resume()
                wait = HEAD_TIMEOUT if parser.mid_message else IDLE_TIMEOUT
        except (ConnectionError, OSError, BadMessage):
            pass
        finally:
            deadline.cancel()
            with contextlib.suppress(ConnectionError, OSError, RuntimeError):
                writer.close()

    async def _answer(self, parser: RequestParser, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter, req: Request, peer: tuple[str, int],
                      deadline: Deadline, tls_edge: Edge | None) -> bool:
        """Answer one request; whether the public connection may carry another."""
        decision = await self._decide(req, peer, tls_edge)
        if decision.plan.websocket_tcp and wstcp.wants(req) \
                and isinstance(decision.target, Tunnel | Static):
            try:
                pipe = (await self._open(decision, peer)).pipe
            except UpstreamGone as exc:
                await bad_gateway(writer, req, str(exc))
                return False
            await wstcp.convert(reader, writer, req, parser.upgraded, pipe)
            return False
        policy = decision.plan.policy
        if policy is not None:
            env = traffic_policy.request_env(
                req.method, req.target, req.headers, header(req.headers, b"host").decode(
                    "latin-1"), self.scheme, peer[0], peer[1], req.http10)
            if policy.has(REQ):
                out = policy.on_request(env, req.headers, req.target, self.limits,
                                        time.monotonic())
                if out.close:
                    return False
                if out.status:
                    keep = await fixed(writer, req, Fixed(out.status, tuple(
                        out.answer_headers), out.body))
                    return keep and await self._drain(parser, reader, deadline)
                req = replace(req, headers=out.headers, target=out.target)
            if policy.has(RES):
                decision = replace(decision, respond=partial(_respond, policy, env))
        if decision.plan.oidc is not None:  # (only HTTPS edges have routes, and a login)
            outcome = await self.login.check(decision.plan.oidc, req) if self.login else \
                page(503, "Not available", "Logins need HTTPS.", 4008)
            if isinstance(outcome, Fixed):
                keep = await fixed(writer, req, outcome)
                return keep and await self._drain(parser, reader, deadline)
            req, renew = outcome
            decision = replace(decision, set_headers=renew)
        body: bytes | None = None  # read whole already (webhook verification)
        if decision.plan.webhook is not None:
            checked = await self._verify(parser, reader, writer, req, decision.plan.webhook,
                                         deadline)
            if isinstance(checked, bool):
                return checked
            req, body = checked
        taken = body is not None  # the request's End was read (its body whole, or none)
        for attempt in range(RETRIES + 1):
            if isinstance(decision.target, Fixed):
                if decision.breaker is not None:  # an http_response backend
                    decision.breaker.record(decision.target.status >= 500)
                answer = decision.target
                if decision.set_headers:
                    answer = replace(answer, headers=answer.headers + decision.set_headers)
                if decision.respond is not None:  # the policy's on_http_response
                    changed = decision.respond(answer.status, [
                        (k.encode("latin-1"), v.encode("latin-1")) for k, v in answer.headers])
                    answer = replace(answer, headers=tuple(
                        (k.decode("latin-1"), v.decode("latin-1")) for k, v in changed))
                keep = await fixed(writer, req, answer)
                return keep and (taken or await self._drain(parser, reader, deadline))
            if not taken and not req.body:  # once: a retry must not read the next request
                if not isinstance(parser.next_event(), End):
                    raise BadMessage(400, "a request without a body had one")
                taken = True
            retry = attempt < RETRIES and _replayable(req, decision)
            try:
                return await self._proxy(parser, reader, writer, req, decision, peer,
                                         deadline, retry, body)
            except Retry:  # that tunnel's agent is gone: ask the router again, and answer
                # what it says now (another tunnel, or its page when no backend is left:
                # 4009); what the policy and the login add to the response stays
                decision = replace(await self._decide(req, peer, tls_edge),
                                   set_headers=decision.set_headers, respond=decision.respond)
                if isinstance(decision.target, Fixed) and decision.target.status == 404:
                    # the name's only tunnel vanished under this request: "agent lost", not
                    # "nothing bound"
                    await bad_gateway(writer, req, "the tunnel's agent went away")
                    return False
        return False  # not reached: the last attempt does not retry

    async def _verify(self, parser: RequestParser, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter, req: Request, webhook: Verifier,
                      deadline: Deadline) -> tuple[Request, bytes] | bool:
        """Read the body whole and check its webhook signature: the request to forward and its
        body, or (answered here) whether the connection may carry another request."""
        challenged = webhook.answer(req.method, req.target)
        if challenged is not None:  # the sender's set-up request: answered here
            keep = await fixed(writer, req, Fixed(*challenged))
            return keep and await self._drain(parser, reader, deadline)
        length = header(req.headers, b"content-length")
        too_long = length.isdigit() and int(length) > MAX_WEBHOOK_BODY  # known before reading
        if req.body and not too_long and not req.http10 \
                and header(req.headers, b"expect").lower() == b"100-continue":
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        body = None if too_long else await read_body(parser, reader, MAX_WEBHOOK_BODY)
        if body is None:
            await fixed(writer, req, page(
                413, "Payload too large", "Webhook bodies are verified whole, up to "
                f"{MAX_WEBHOOK_BODY} bytes.", 4013), close=True)
            return False
        url = b"%b://%b%b" % (self.scheme.encode(), header(req.headers, b"host"), req.target)
        valid = await self.sns.verify(body) if webhook.provider == "sns" else \
            webhook.verify(req.headers, body, time.time(), req.method, url)
        if not valid:
            return await fixed(writer, req, page(
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

    async def _decide(self, req: Request, peer: tuple[str, int], tls_edge: Edge | None
                      ) -> Decision:
        return await self.router.http(req, peer[0], self.scheme, self.https_port, tls_edge)

    # -- proxying --------------------------------------------------------------------------

    async def _open(self, decision: Decision, peer: tuple[str, int]) -> Upstream:
        target = decision.target
        client = f"[{peer[0]}]:{peer[1]}" if ":" in peer[0] else f"{peer[0]}:{peer[1]}"
        if isinstance(target, Tunnel):
            if target.conn.crowded:  # idle streams of that session go first
                self.pool.reclaim(target.conn)
            try:
                stream = await target.open(client, decision.proto, decision.edge)
            except Busy as exc:
                raise AgentBusy(str(exc)) from None
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
                     peer: tuple[str, int], deadline: Deadline, retry: bool,
                     whole: bytes | None = None) -> bool:
        """Forward the request (its body from the client as it comes, or ``whole``, read
        already) on an idle upstream of the target or a new one, and relay the answer. A
        kept-alive upstream that closed meanwhile (its idle timeout) fails before answering:
        the request goes again on a new one when it was not delivered or is safe to repeat.
        """
        target = decision.target
        assert isinstance(target, Tunnel | Static)
        key = target.id if isinstance(target, Tunnel) else f"static:{target.host}:{target.port}"
        head = self._request_head(req, decision, peer) + (whole or b"")
        pump = req.body and whole is None
        upstream = self.pool.take(key)
        if upstream is not None:
            try:
                return await self._exchange(parser, reader, writer, req, decision, upstream,
                                            head, pump, deadline, _replayable(req, decision),
                                            True)
            except Retry:
                pass
        try:
            upstream = await self._open(decision, peer)
        except AgentBusy as exc:
            await fixed(writer, req, page(503, "Agent busy", f"The tunnel's agent is busy: "
                                          f"{exc}. Try again.", 4503, (("Retry-After", "1"),)),
                        close=True)
            return False
        except UpstreamGone as exc:
            if retry:
                raise Retry from None
            await bad_gateway(writer, req, str(exc))
            return False
        return await self._exchange(parser, reader, writer, req, decision, upstream, head,
                                    pump, deadline, retry, False)

    async def _exchange(self, parser: RequestParser, reader: asyncio.StreamReader,
                        writer: asyncio.StreamWriter, req: Request, decision: Decision,
                        upstream: Upstream, head: bytes, pump: bool, deadline: Deadline,
                        retry: bool, reused: bool) -> bool:
        """One request and its answer on ``upstream``, which is then pooled, ended or
        aborted. ``Retry`` if it failed before anything was delivered to the client and the
        request may go again (``retry``; a head not even written on a ``reused`` one)."""
        fate: Fate = FAILED
        body = watch = None
        try:
            try:
                await upstream.pipe.write(head)
            except UpstreamGone as exc:
                if retry or reused:
                    raise Retry from None
                await bad_gateway(writer, req, str(exc))
                return False
            if pump:
                body = asyncio.create_task(self._pump_body(parser, reader, req, upstream,
                                                           deadline))
            elif not req.upgrade:  # (after a 101 the splice reads the client)
                watch = ClientWatch(parser, reader, upstream.pipe)
            keep, fate = await relay_response(parser, writer, reader, req, decision, upstream,
                                              body, retry, watch)
            return keep
        finally:
            if watch is not None:
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

    @staticmethod
    async def _pump_body(parser: RequestParser, reader: asyncio.StreamReader, req: Request,
                         upstream: Upstream, deadline: Deadline) -> None:
        """The request body from the client to the upstream. If it fails (malformed, the
        client left or stalled ``BODY_TIMEOUT`` seconds), the upstream is aborted: it will
        not get a whole request, and the relay waiting for its answer learns at once."""
        framer = Framer(h1.chunked(req.headers))
        try:
            while True:
                event = await next_event(parser, reader, deadline, BODY_TIMEOUT)
                if isinstance(event, bytes):
                    await upstream.pipe.write(framer.data(event))
                elif isinstance(event, End):
                    if framer.chunked:
                        await upstream.pipe.write(framer.end(event.trailers))
                    return
                else:
                    raise UpstreamGone("the client closed the connection mid-request")
        except BaseException:
            upstream.pipe.abort()
            raise
