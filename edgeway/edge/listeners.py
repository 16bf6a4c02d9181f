"""The public listeners: plain HTTP; HTTPS and TLS on one port, told apart by the SNI of the
ClientHello (read without consuming it); and a TCP listener per TCP edge hostport, kept in
step with the routing snapshot (``edge.tcp_edges``).

On the TLS port, a name bound by a TLS tunnel or served by a TLS edge gets the raw TLS stream
passed through (or terminated here when the edge says so); any other name gets TLS terminated
with a certificate from the platform CA and is served as HTTPS.

With ``--proxy-protocol``, every one of these listeners reads the PROXY header of a trusted
load balancer's connection before anything else (before the ClientHello on the TLS port), and
its handlers get the client the header names as their peer (``edgeway.proxied``).

With ``--workers``, a connection every tunnel of which another worker of this machine holds
is handed to it as the socket (``offer``: ``edgeway.nodes.handoff``), before a byte of it is
consumed; a connection handed here is served by ``take``.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections.abc import Coroutine, Sequence
from typing import Any

import structlog

from edgeway import caps, proxied
from edgeway.accept import Acceptor, Peer, open_streams
from edgeway.caps import Door
from edgeway.config import listen_socket
from edgeway.edge import connections, handover
from edgeway.edge.handover import agents, behind, head_host, peek_head, peek_hello
from edgeway.edge.http import HttpEdge
from edgeway.edge.login.gate import LoginGate
from edgeway.edge.modules.mutual_tls import TlsOptions
from edgeway.edge.modules.sns import SnsVerifier
from edgeway.edge.modules.terminate_tls import TerminateTls
from edgeway.edge.pool import Pool
from edgeway.edge.router import EdgeRouter
from edgeway.edge.snapshot import Cloud, Edge, Snapshot
from edgeway.edge.tcp_edges import TcpEdges, forward
from edgeway.edge.terminating import Terminator
from edgeway.pki.platform_ca import EdgeCerts
from edgeway.restrictions import Restrictions
from edgeway.tunnel.registry import Tunnel
from edgeway.tunnel.tcp import CLOSE_WAIT, Offer

log = structlog.get_logger()
class PublicListeners:
    def __init__(self, router: EdgeRouter, certs: EdgeCerts, base_domain: str, tcp_host: str,
                 http_port: int, https_port: int, login: LoginGate,
                 restrictions: Restrictions | None = None,
                 sns: SnsVerifier | None = None) -> None:
        self.router, self.certs, self.tcp_host = router, certs, tcp_host
        self.base_domain = base_domain
        self.restrictions = restrictions  # IP restrictions of type endpoints
        self.pool = Pool()  # idle upstreams, for requests from either listener
        sns = sns or SnsVerifier()
        self.http = HttpEdge(router, "http", https_port, pool=self.pool,  # HTTPS edges (and
                             restrictions=restrictions, sns=sns)          # logins) need TLS
        self.https = HttpEdge(router, "https", https_port, login, self.pool,
                              restrictions, sns)
        router.bounce = login.bounce
        self._servers: list[Acceptor] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self.terminator = Terminator(router, certs, base_domain)
        self.tcp = TcpEdges(router, tcp_host, self._refused, self.terminator)
        self._watch: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()
        # hands a connection to the worker holding every tunnel it may reach (``edgeway
        # serve --workers``); None: each is served where it arrived
        self.offer: Offer | None = None
        self._doors: dict[str, Door] = {}

    async def start(self, http: tuple[str, int] | None, https: tuple[str, int] | None,
                    reuse_port: bool = False) -> None:
        await self.router.settled()
        if self.restrictions is not None:
            await self.restrictions.of("endpoints")  # (kept while the database is away)
        if http is not None:
            plain = listen_socket("public HTTP listener", *http, reuse_port)
            door = caps.process().door("public HTTP listener",
                                       refusal=caps.http_refusal(caps.text_body))
            self._doors["http"] = door
            self._servers.append(Acceptor(plain, door, self._http_socket,
                                          proxied.trust()).start())
        if https is not None:  # (no answer before a TLS handshake: refused ones are closed)
            sock = listen_socket("public HTTPS/TLS listener", *https, reuse_port)
            door = caps.process().door("public HTTPS/TLS listener")
            self._doors["tls"] = door
            self._servers.append(Acceptor(sock, door, self._tls_connection,
                                          proxied.trust()).start())
        await self.tcp.sync()
        self._watch = asyncio.create_task(self._follow())

    def changed(self, _collection: str) -> None:
        self._changed.set()

    async def stop(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
        for server in self._servers:
            server.close()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:  # (their ends run before the events stop: traffic events are sent)
            await asyncio.wait(tasks, timeout=CLOSE_WAIT)
        await self.tcp.close()
        self.pool.close()
        if self.https.login is not None:
            await self.https.login.close()

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _follow(self) -> None:
        """Keep TCP edge listeners in step with the snapshot (API changes, other nodes)."""
        while True:
            changed = True
            try:
                await asyncio.wait_for(self._changed.wait(), self.router.max_age)
            except TimeoutError:
                changed = False
            self._changed.clear()
            try:  # a change: the load a request may already have done serves us too
                await (self.router.settled() if changed else self.router.refresh())
                await self.tcp.sync()
            except Exception:  # a failed reload must not end the follower
                log.exception("edge_reload_failed")

    async def _refused(self, peer: tuple[str, int]) -> bool:
        """An IP restriction of type endpoints refuses the public client at ``peer``."""
        return self.restrictions is not None and \
            await self.restrictions.refusing("endpoints", peer[0]) is not None

    # -- plain HTTP ------------------------------------------------------------------------

    async def _http_socket(self, sock: socket.socket, peer: Peer, handed: bool = False
                           ) -> None:
        if self.offer is not None and not handed \
                and (host := head_host(await peek_head(sock, handover.PEEK_TIMEOUT))) \
                and await self.offer(sock, "http", peer, "",
                                     agents(self.router.registry, host, "http")):
            return
        try:
            reader, writer = await open_streams(sock)
        except (ConnectionError, OSError):
            return
        try:
            await self.http.run(reader, writer, peer)
        finally:
            with contextlib.suppress(ConnectionError, OSError, RuntimeError):
                writer.close()

    async def take(self, sock: socket.socket, kind: str, ref: str, peer: Peer) -> None:
        """A connection another worker accepted on one of these listeners, served here as
        if accepted here (its tunnels are held here): ``kind`` http, tls or tcp_edge (whose
        port is ``ref``)."""
        if kind == "tcp_edge":
            await self.tcp.take(sock, ref, peer)
            return
        door = self._doors.get(kind)
        ticket = door.admit(peer) if door is not None else None
        if ticket is None:
            if door is not None:
                door.refuse(sock)
            else:
                sock.close()
            return
        try:
            if kind == "http":
                await self._http_socket(sock, peer, handed=True)  # (never handed on again:
            else:  # a worker that sees the tunnel moving back serves it through the link)
                await self._tls_connection(sock, peer, handed=True)
        finally:
            ticket.release()

    # -- TLS: SNI routing, passthrough or termination ----------------------------------------

    async def _tls_connection(self, sock: socket.socket, peer: Peer, handed: bool = False
                              ) -> None:
        """One connection to the TLS port (ended by ``stop``, which waits for its end)."""
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await self._tls_client(sock, peer, handed)
        finally:
            self._tasks.discard(task)

    async def _tls_client(self, sock: socket.socket, peer: tuple[str, int], handed: bool
                          ) -> None:
        try:
            hello = await peek_hello(sock)
            if hello is None:
                sock.close()
                return
            name = hello.server_name or ""
            snap = await self.router.current()
            if name in snap.banned:  # (taken down: closed, as a refused TLS connection is)
                sock.close()
                return
            cloud = snap.tls_cloud.get(name)
            if cloud is not None:
                if await self._refused(peer):
                    sock.close()
                else:
                    await self._tls_cloud(sock, peer, cloud.pick(), name)
                return
            edge = snap.tls.get(name)
            bound = [t for t in self.router.registry.for_host(name) if t.proto == "tls"] \
                if edge is not None else await self.router.registry.tls_back(name)
            if (edge is not None or bound) and await self._refused(peer):
                sock.close()  # TLS edges and tunnels: closed (HTTPS gets a 403 page)
                return
            if self.offer is not None and not handed \
                    and (reach := self._reach(snap, name, edge, bound)) \
                    and await self.offer(sock, "tls", peer, "", reach):
                return
            if edge is not None:
                await self._tls_edge(sock, peer, edge, name)
            elif bound:
                await self._tls_tunnel(sock, peer, bound)
            else:
                https_edge = snap.https.get(name)
                options = https_edge.tls if https_edge else \
                    TlsOptions(client_cas=self.router.agent_client_cas(name))
                admitted, term = (True, None) if https_edge else \
                    self.terminator.https_endpoint(snap, name, peer,
                                                   self.router.local(sock.getsockname()))
                if options is None or not admitted:  # (a certificate authority it names is
                    sock.close()                     # gone; its on_tcp_connect refused it)
                    return
                cert_name = self.router.certificate_name(name, self.base_domain)
                context = self.terminator.context(term, name, options.client_cas) \
                    if term is not None else \
                    self.certs.context(cert_name, True, options.client_cas,
                                       options.min_version) if cert_name \
                    else self.certs.default
                reader, writer = await open_streams(sock, context)
                await self.https.run(reader, writer, peer, https_edge,
                                     (cert_name,) if cert_name else self.certs.default_names,
                                     name)
        except (ConnectionError, OSError, ssl.SSLError, TimeoutError):
            with contextlib.suppress(OSError):
                sock.close()

    async def _tls_tunnel(self, sock: socket.socket, peer: tuple[str, int],
                          bound: list[Tunnel]) -> None:
        """A TLS tunnel's connection: passed through, or terminated here with the agent's
        certificate (and its client certificate check) when it asked for that."""
        tunnel = self.router.registry.pick(bound)
        target = connections.to_tunnel(self.router, tunnel, *peer, sock.getsockname()) \
            if tunnel else None
        if tunnel is None or target is None:
            sock.close()  # (its traffic policy's on_tcp_connect refused it)
            return
        context = self.terminator.tunnel(tunnel)
        reader, writer = await open_streams(sock, context)
        if target is not tunnel:  # (forwarded to an internal TCP endpoint: its bytes)
            await forward(reader, writer, peer, target, "tcp", "", False)
            return
        await forward(reader, writer, peer, tunnel, "tls", "", context is None)

    async def _tls_cloud(self, sock: socket.socket, peer: tuple[str, int], cloud: Cloud,
                         name: str) -> None:
        """A TLS cloud endpoint's connection: its traffic policy closes it or forwards it to
        an internal TCP endpoint, after terminating TLS when it has terminate-tls (else the
        TLS bytes themselves); one it does neither with is closed (nothing else serves the
        name)."""
        target = connections.decide(self.router, cloud.plan, *peer,
                                    self.router.local(sock.getsockname()))
        if not isinstance(target, Tunnel):
            if target is True:
                log.info("tls_cloud_endpoint_unanswered", endpoint=cloud.id, client=peer[0])
            sock.close()
            return
        term = cloud.plan.find(TerminateTls)
        context = self.terminator.context(term, name) if term is not None else None
        reader, writer = await open_streams(sock, context)
        await forward(reader, writer, peer, target, "tcp", "", False)

    def _reach(self, snap: Snapshot, name: str, edge: Edge | None, bound: list[Tunnel]
               ) -> Sequence[Tunnel] | None:
        """The tunnels a TLS connection for ``name`` may reach."""
        registry = self.router.registry
        if edge is not None:
            return behind(snap, registry, edge)
        if bound:
            return bound
        https_edge = snap.https.get(name)
        return behind(snap, registry, https_edge, name) if https_edge is not None \
            else agents(registry, name, "https")

    async def _tls_edge(self, sock: socket.socket, peer: tuple[str, int], edge: Edge,
                        name: str) -> None:
        snap = self.router.snapshot
        verdict = connections.decide(self.router, edge.plan, *peer,
                                     self.router.local(sock.getsockname()))
        if verdict is False:
            sock.close()
            return
        target = self.router.target(snap, edge.plan) if verdict is True else verdict
        terminate = (edge.doc.get("tls_termination") or {}).get("terminate_at") == "edge"
        options = edge.tls
        if options is None or (options.client_cas and not terminate):
            sock.close()  # a client certificate cannot be checked on a stream passed through
            return
        cert_name = self.router.certificate_name(name, self.base_domain) or name
        context = self.certs.context(cert_name, False, options.client_cas,
                                     options.min_version) if terminate else None
        reader, writer = await open_streams(sock, context)
        if verdict is not True:  # (forwarded to an internal TCP endpoint: its bytes)
            await forward(reader, writer, peer, target, "tcp", "", False)
            return
        await forward(reader, writer, peer, target, "tls", "tls", not terminate)
