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
from typing import Protocol

from edgeway.edge import fast, h1, traffic
from edgeway.edge.answers import Retry, bad_gateway, fixed, local_answer
from edgeway.edge.backends import Static
from edgeway.edge.client import Deadline, certified_client, drain, next_event, read_body
from edgeway.edge.forwarding import Forwarder, replayable
from edgeway.edge.h1 import BadMessage, End, Request, RequestParser
from edgeway.edge.hooks import (
    Close,
    Exchange,
    Hook,
    Local,
    Refuse,
    Services,
    Takeover,
    accepted,
)
from edgeway.edge.hosts import directed, misdirected, request_host, uncertified
from edgeway.edge.login.gate import LoginGate
from edgeway.edge.modules.rate_limits import RateLimits
from edgeway.edge.modules.sns import SnsVerifier
from edgeway.edge.pages import Fixed, page
from edgeway.edge.pipeline import Plan
from edgeway.edge.pool import Pool
from edgeway.edge.router import Decision
from edgeway.edge.snapshot import Cloud, Edge
from edgeway.events.traffic import TrafficSink
from edgeway.recent import RecentTraffic
from edgeway.restrictions import Restrictions
from edgeway.tunnel.pipes import UpstreamGone
from edgeway.tunnel.registry import Tunnel

HEAD_TIMEOUT = 30.0  # to receive a whole request head, from its first byte (or the connection)
IDLE_TIMEOUT = 75.0  # between requests on a kept-alive connection
RETRIES = 2  # safe requests whose tunnel died before answering go to another live one
Headers = h1.Headers


class Routing(Protocol):
    """What the HTTP edge asks of its router (``EdgeRouter``; a test's may script it)."""

    async def http(self, req: Request, ip: str, scheme: str, https_port: int,
                   tls_edge: Edge | None = None) -> Decision: ...

    def quick(self, req: Request, ip: str, scheme: str, https_port: int,
              tls_edge: Edge | None = None) -> Decision | None: ...

    def internal(self, host: str, scheme: str) -> Tunnel | Cloud | None: ...

    def guarded(self, target: Tunnel | Cloud) -> bool: ...

    def agent_client_cas(self, host: str) -> str: ...

    def bind_plan(self, tunnel: Tunnel) -> Plan: ...


class HttpEdge:
    def __init__(self, router: Routing, scheme: str, https_port: int = 443,
                 login: LoginGate | None = None, pool: Pool | None = None,
                 restrictions: Restrictions | None = None,
                 sns: SnsVerifier | None = None) -> None:
        self.router, self.scheme, self.https_port = router, scheme, https_port
        self.restrictions = restrictions  # IP restrictions of type endpoints
        self.login = login
        # what hooks reach: the login flow, SNS certificates (fetched and cached), the
        # traffic policies' rate-limit windows, the internal endpoints forward-internal reaches
        self.services = Services(login, sns or SnsVerifier(), RateLimits(),
                                 lambda host, scheme: router.internal(host, scheme),
                                 lambda target: router.guarded(target))
        self.pool = pool if pool is not None else Pool()  # (an empty Pool is falsy)
        self.upstreams = Forwarder(self.pool, scheme)
        self.events: TrafficSink | None = None  # set when traffic events are delivered
        self.recent: RecentTraffic | None = None  # set by ``edgeway serve``: the dashboard's
        self.region = ""  # this server's (set by ``edgeway serve``: conn.server_region)

    # -- one public connection -------------------------------------------------------------

    async def run(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                  peer: tuple[str, int], tls_edge: Edge | None = None,
                  certified: tuple[str, ...] | None = None, sni: str = "") -> None:
        """One public connection (the arguments are ``serve``'s): its requests answered by
        ``fast.Connection`` from the transport's callbacks, and by ``serve`` those it hands
        over (and the connection back once they are answered)."""
        conn = fast.Connection(self, reader, writer, peer, tls_edge, certified, sni,
                               HEAD_TIMEOUT, IDLE_TIMEOUT)
        try:
            while await conn.handed():
                if not await self.serve(reader, writer, peer, tls_edge, certified, sni, conn):
                    return
                conn.take_back()
        finally:
            conn.close()

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    peer: tuple[str, int], tls_edge: Edge | None = None,
                    certified: tuple[str, ...] | None = None, sni: str = "",
                    conn: fast.Connection | None = None) -> bool:
        """One public connection; ``tls_edge``: the HTTPS edge its TLS server name chose
        (whose client certificate check, if any, the handshake passed); ``certified``: the
        names of the certificate it was handshaken with (None: plain HTTP); ``sni``: the
        server name it was made with. A request for another host is misdirected (domain
        fronting, ``hosts.directed``): 421. With ``conn``, the request it handed over (in
        its parser) is answered, then True gives the connection back (False: it ended)."""
        if conn is not None:  # (what it found of the connection)
            parser, local, client_cert = conn.parser, conn.local, conn.client_cert
        else:
            parser = RequestParser()
            local = accepted(writer.get_extra_info("sockname"), self.region)
            client_cert = certified_client(writer)
        deadline = Deadline(writer.transport)
        wait = HEAD_TIMEOUT  # a new connection is for a request: its head within 30 s
        try:
            while True:
                try:
                    event = await next_event(parser, reader, deadline, wait, HEAD_TIMEOUT)
                except BadMessage as exc:
                    await fixed(writer, None, page(
                        exc.status, "Bad request", str(exc), 4000), close=True)
                    return False
                if not isinstance(event, Request):
                    return False  # the client closed, or was too slow
                restrictions = self.restrictions
                if restrictions is not None and not restrictions.none("endpoints") and \
                        await restrictions.refusing("endpoints", peer[0]) is not None:
                    # (each request: one enforced while a kept-alive connection is open
                    # applies to its next request)
                    await fixed(writer, event, page(403, "Forbidden", "Your IP address may "
                                                    "not access this site.", 4003), close=True)
                    return False
                if certified is not None and self.unfit(
                        sni, certified, client_cert, host := request_host(event.headers)):
                    answered = await fixed(writer, event, misdirected(host, sni, certified)
                                           if not directed(sni, certified, host)
                                           else uncertified(host))
                    if not (answered and await drain(parser, reader, deadline, HEAD_TIMEOUT)):
                        return False
                elif not await self._answer(parser, reader, writer, event, peer, deadline,
                                            tls_edge, local, conn.decided(event)
                                            if conn is not None else None):
                    return False
                parser.resume()
                if conn is not None:
                    return True
                wait = HEAD_TIMEOUT if parser.mid_message else IDLE_TIMEOUT
        except (ConnectionError, OSError, BadMessage):
            return False
        finally:
            deadline.cancel()
            if conn is None:  # (else ``run`` closes it once it ended)
                with contextlib.suppress(ConnectionError, OSError, RuntimeError):
                    writer.close()

    def unfit(self, sni: str, certified: tuple[str, ...], client_cert: bool, host: str
              ) -> bool:
        """A request on a TLS connection not fit for its host: another name than the
        certificate's or the server name's (domain fronting: 421), or no client certificate
        where the host's agent endpoint asks for one."""
        return not directed(sni, certified, host) or (
            not client_cert and bool(self.router.agent_client_cas(host)))

    async def _answer(self, parser: RequestParser, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter, req: Request, peer: tuple[str, int],
                      deadline: Deadline, tls_edge: Edge | None, local: Local,
                      decided: Decision | None = None) -> bool:
        """Answer one request; whether the public connection may carry another. The route's
        request hooks run in order (``edge/pipeline.py``); the first verdict answers. Its
        traffic event, when subscribed, is queued once it is answered (or given up on).
        ``decided``: the router's decision for it, made already."""
        started = time.monotonic()
        decision = decided if decided is not None else await self.router.http(
            req, peer[0], self.scheme, self.https_port, tls_edge)
        x = Exchange(req, peer[0], peer[1], self.scheme, self.services,
                     partial(read_body, parser, reader), writer.write, local)
        try:
            hooks: tuple[Hook, ...] | None = decision.plan.requests
            while hooks is not None:
                pending, hooks = hooks, None
                for hook in pending:
                    verdict = await hook.request(x)
                    if verdict is None:
                        continue
                    if isinstance(verdict, Takeover):
                        if not isinstance(decision.target, Tunnel | Static):
                            continue  # (a fixed answer has no pipe to carry a connection to)
                        return await self._takeover(verdict, parser, reader, writer, x.req,
                                                    decision, peer)
                    if isinstance(verdict, Close):
                        return False
                    x.status, x.sent = verdict.status, len(verdict.body)
                    keep = await fixed(writer, x.req, verdict)
                    return keep and (x.body is not None or
                                     await drain(parser, reader, deadline, HEAD_TIMEOUT))
                if x.forward is not None:  # forward-internal: that endpoint's hooks next
                    decision, hooks = self._internal(decision, x)
            return await self._forward(parser, reader, writer, x, decision, peer, deadline,
                                       tls_edge)
        finally:
            self.record(x, req, decision, started)

    def record(self, x: Exchange, req: Request, decision: Decision, started: float) -> None:
        """A request answered (or given up on): its traffic event, when subscribed, and
        the dashboard's recent traffic."""
        events, recent = self.events, self.recent
        if events is not None and events.wants(traffic.HTTP):
            traffic.emit_http(events, x, req, decision, started)
        if recent is None:
            return
        target = decision.target
        if decision.edge_id:
            key, label = decision.edge_id, ""
        elif isinstance(target, Tunnel):
            key, label = target.id, target.url
        else:
            return
        recent.served(key, req.method, req.target, x.status, x.ip, x.port,
                      time.monotonic() - started, self.scheme, decision.route_id, label)

    def _internal(self, decision: Decision, x: Exchange
                  ) -> tuple[Decision, tuple[Hook, ...]]:
        """A request a traffic policy forwarded to an internal endpoint (``x.forward``): its
        tunnel becomes the target (an internal cloud endpoint's: its 404 when its policy
        neither answers nor forwards), and its plan's hooks join the route's (its request
        hooks to run now: a refusal of its ``check`` first; its response hooks, then the
        route's)."""
        target, x.forward = x.forward, None
        if isinstance(target, Cloud):  # its policy answers, or forwards on
            inner, to, proto = target.plan, page(
                404, "Nothing answered", f"The traffic policy of the internal cloud endpoint "
                f"{target.id} did not answer or forward this request.", 4021), x.scheme
        else:
            inner, to, proto = self.router.bind_plan(target), target, target.proto
        refusal = inner.check(x.ip, x.req.headers)
        plan = Plan(decision.plan.hooks + inner.hooks, decision.plan.backend_id)
        forwarded = Decision(to, proto, "", plan, decision.edge_id, decision.route_id,
                             internal=True)
        return forwarded, ((Refuse(refusal),) if refusal is not None else inner.requests)

    async def _takeover(self, verdict: Takeover, parser: RequestParser,
                        reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                        req: Request, decision: Decision, peer: tuple[str, int]) -> bool:
        try:
            pipe = (await self.upstreams.open(decision, peer)).pipe
        except UpstreamGone as exc:
            await bad_gateway(writer, req, str(exc))
            return False
        await verdict.run(reader, writer, req, parser.upgraded, pipe)
        return False

    async def _forward(self, parser: RequestParser, reader: asyncio.StreamReader,
                       writer: asyncio.StreamWriter, x: Exchange, decision: Decision,
                       peer: tuple[str, int], deadline: Deadline, tls_edge: Edge | None
                       ) -> bool:
        """The request to its target: a fixed answer, or an upstream (again on another live
        tunnel when its agent vanished before answering a safe request)."""
        plan = decision.plan  # (its response hooks stay this request's across retries)
        taken = x.body is not None  # the request's End was read (its body whole, or none)
        for attempt in range(RETRIES + 1):
            if isinstance(decision.target, Fixed):
                keep = await fixed(writer, x.req, await local_answer(x, plan, decision.target))
                return keep and (taken or await drain(parser, reader, deadline, HEAD_TIMEOUT))
            if not taken and not x.req.body:  # once: a retry must not read the next request
                if not isinstance(parser.next_event(), End):
                    raise BadMessage(400, "a request without a body had one")
                taken = True
            retry = attempt < RETRIES and replayable(x.req, decision) and not decision.internal
            try:
                return await self.upstreams.proxy(parser, reader, writer, x, decision, peer,
                                                  deadline, retry)
            except Retry:  # that tunnel's agent is gone: ask the router again, and answer
                # what it says now (another tunnel, or its page when no backend is left:
                # 4009)
                decision = replace(await self.router.http(
                    x.req, peer[0], self.scheme, self.https_port, tls_edge), plan=plan)
                if isinstance(decision.target, Fixed) and decision.target.status == 404:
                    # the name's only tunnel vanished under this request: "agent lost", not
                    # "nothing bound"
                    x.status = 502
                    await bad_gateway(writer, x.req, "the tunnel's agent went away")
                    return False
        return False  # not reached: the last attempt does not retry
