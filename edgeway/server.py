"""``edgeway serve``: open the store, bootstrap, run the API until SIGINT/SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import structlog
import uvicorn

from edgeway import bootstrap, caps, catalog, dashboard, datadir, heap, ids, logs, proxied
from edgeway.acme.manager import CertificateManager
from edgeway.api import listener
from edgeway.api.app import build
from edgeway.api.render import render
from edgeway.catalog.modules import saml
from edgeway.config import LETS_ENCRYPT, DomainsConfig, ServerConfig, listen_socket
from edgeway.dashboard.agentfile import AgentDial
from edgeway.dns.server import DnsServer
from edgeway.early import release as release_prebound
from edgeway.edge import connections
from edgeway.edge.listeners import PublicListeners
from edgeway.edge.login import gate as login_gate
from edgeway.edge.login.gate import LoginGate
from edgeway.edge.login.sessions import AppSessions
from edgeway.edge.modules import sns
from edgeway.edge.modules.sns import SnsVerifier
from edgeway.edge.router import EdgeRouter
from edgeway.edge.traffic import TcpEvents
from edgeway.events.service import Events
from edgeway.nodes import cluster
from edgeway.nodes.handoff import Handed, Handoff
from edgeway.pki import platform_ca, seal
from edgeway.platform import AgentCommands, Platform
from edgeway.sshgw.server import SshGateway
from edgeway.store.db import Database
from edgeway.store.migrate import open_database
from edgeway.store.pgnotify import ChangeLink
from edgeway.store.repo import Repo
from edgeway.store.sealing import seal_stored
from edgeway.tunnel.server import TunnelServer
from edgeway.tunnel.tcp_binds import TcpBinds

log = structlog.get_logger()


def node_id(data_dir: Path) -> str:
    """This node's id, kept in the data directory: several nodes may share one database."""
    path = data_dir / "node.id"
    if not path.exists():
        data_dir.mkdir(parents=True, exist_ok=True)
        path.write_text(ids.new_id("node") + "\n")
    return path.read_text().strip()


def _addr(addr: tuple[str, int] | None) -> str:
    return f"{addr[0]}:{addr[1]}" if addr else "off"


class _Server(uvicorn.Server):
    """uvicorn re-raises SIGINT/SIGTERM after shutting down, so the process would die by the
    signal; we stop on them ourselves and exit 0 after a clean shutdown. ``early`` holds the
    signals that came while the server was starting (caught from its first step): the
    server stops as soon as it has started."""

    def __init__(self, config: uvicorn.Config, early: list[signal.Signals]) -> None:
        super().__init__(config)
        self.early = early

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self._stop, sig)
        if self.early:
            self._stop(self.early[0])
        try:
            yield
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)

    def _stop(self, sig: signal.Signals) -> None:
        log.info("signal", signal=sig.name)
        if self.should_exit:
            self.force_exit = True
        self.should_exit = True


def _public_trust(domains: DomainsConfig) -> bool:
    """Whether managed certificates chain to the system's CAs (Let's Encrypt in production)."""
    return domains.acme_directory == LETS_ENCRYPT and domains.acme_ca_bundle is None


async def _agent_client_cas(db: Database, ids: tuple[str, ...]) -> str:
    """The PEM bundle of ``--agent-client-cas`` ("" when not set); a ValueError naming an id
    that is not a stored certificate authority."""
    kind = catalog.BY_COLLECTION["certificate_authorities"]
    repo = Repo(db.reader())
    found = {i: doc for i in ids if (doc := await repo.get(kind, i)) is not None}
    missing = [i for i in ids if i not in found]
    if missing:
        raise ValueError(f"--agent-client-cas: no certificate authority {', '.join(missing)} "
                         "(create it with POST /certificate_authorities first)")
    return "".join(str(found[i]["ca_pem"]).rstrip("\n") + "\n" for i in ids)


class _Commands:
    """The API's commands to a tunnel session, to whichever listener holds it."""

    def __init__(self, *holders: AgentCommands) -> None:
        self.holders = holders

    async def command(self, session_id: str, kind: int, body: dict[str, Any],
                      timeout: float = 10.0) -> str | None:
        for holder in self.holders:
            answer = await holder.command(session_id, kind, body, timeout)
            if answer is not None:
                return answer
        return None


def _logins(cfg: ServerConfig, platform: Platform, https_port: int) -> LoginGate:
    """The edge's login gate: sessions in the shared database, cookies signed with a key of
    the platform, the managed OAuth applications' callback on the login host."""
    host = cfg.identity.login_host or f"login.{cfg.settings.base_domain}"
    return login_gate.build(platform.sealer.mac(b"edgeway edge logins"),
                            AppSessions(platform.db, platform.sealer, cfg.settings.public_url),
                            cfg.identity, saml.site(host, https_port), https_port)


def _stopping_already(sig: signal.Signals) -> None:
    log.info("signal", signal=sig.name, stopping=True)


async def serve(cfg: ServerConfig) -> None:
    early: list[signal.Signals] = []  # SIGINT/SIGTERM while starting: stop once started
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, early.append, sig)
    limits = caps.configure(cfg.caps)  # (before any listener takes its door)
    proxied.configure(cfg.proxy)  # (before the public listeners open)
    datadir.prepare(cfg.data_dir)
    db = await open_database(cfg.database_url, cfg.data_dir)
    try:
        await bootstrap.announce_first_start(db)
        sealer = seal.load(cfg.data_dir)
        await seal_stored(db, sealer)
        platform = Platform(cfg.settings, db, sealer)
        if cfg.nodes.addr is not None:
            await cluster.share_ca(platform, cfg.data_dir)
        tls = platform_ca.ensure(cfg.data_dir, sealer, list(cfg.tunnel_names))
        if cfg.tunnel_cert is not None:  # the operator's own certificate for agents
            tls = platform_ca.TunnelTLS(tls.ca_pem, *cfg.tunnel_cert)
        http_port = cfg.http_addr[1] if cfg.http_addr else 80
        https_port = cfg.https_addr[1] if cfg.https_addr else 443
        node = node_id(cfg.data_dir)
        tunnels = TunnelServer(platform, tls, cfg.tcp_host, cfg.tcp_ports, node, http_port,
                               https_port, cfg.tcp_grace,
                               await _agent_client_cas(db, cfg.settings.agent_client_cas),
                               cfg.tcp_name)
        events = Events(platform, node, cfg.events, render)
        tunnels.changes = events.changes
        tunnels.certs = certs = platform_ca.EdgeCerts(cfg.data_dir, sealer, tls)
        router = EdgeRouter(db, tunnels.registry, sealer=sealer)
        certs.lookup = router.served_certificate
        binder = tunnels.binder
        binder.edge_host, binder.tcp.edge_port = router.edge_host, router.edge_port
        binder.banned = binder.tcp.banned = router.banned
        binder.check_bind = router.bind_refusal
        binder.tcp.connecting = partial(connections.to_tunnel, router)
        router.oauth_apps, router.region = cfg.settings.oauth_apps, cfg.settings.region
        edge = PublicListeners(router, certs, cfg.settings.base_domain, cfg.tcp_host,
                               http_port, https_port, _logins(cfg, platform, https_port),
                               platform.restrictions,
                               SnsVerifier(cfg.sns_cert_hosts or sns.CERT_HOSTS))
        binder.tcp.terminating = edge.terminator.tunnel
        platform.watchers += [router.changed, edge.changed, tunnels.changed]
        link = ChangeLink(cfg.database_url, node, platform.local, platform.everything) \
            if cfg.database_url else None  # (nodes sharing the database hear each other)
        edge.http.events = edge.https.events = events.traffic
        edge.http.recent = edge.https.recent = platform.recent
        edge.http.region = edge.https.region = cfg.settings.region
        binder.tcp.closed = edge.tcp.closed = TcpEvents(events.traffic, router).closed
        async with contextlib.AsyncExitStack() as running:  # (stopped in reverse order,
            await events.start()  # those that started, however the start went)
            running.push_async_callback(events.stop)
            if link is not None:
                platform.publish = link.publish
                link.start()
                running.push_async_callback(link.stop)
            member = cluster.Cluster(cfg.nodes, platform, cfg.data_dir, tunnels,
                                     cfg.drain_timeout) \
                if cfg.nodes.addr is not None else None
            if member is not None:  # (the others' tunnels loaded before any bind here)
                running.push_async_callback(member.stop)
                await member.start(cfg.reuse_port)
            await tunnels.start(cfg.tunnel_host, cfg.tunnel_port, cfg.reuse_port)
            running.push_async_callback(tunnels.stop, cfg.drain_timeout)
            running.push_async_callback(edge.stop)
            await edge.start(cfg.http_addr, cfg.https_addr, cfg.reuse_port)
            if member is not None:
                member.remote.gone = lambda tunnel: edge.pool.forget(tunnel.key)
            if member is not None and member.handoff is not None:  # (workers of one machine)
                _hand_over(member.handoff, edge, binder.tcp)
            if cfg.domains.dns_addr is not None:
                dns = DnsServer(db, cfg.settings)
                platform.watchers.append(dns.changed)
                running.push_async_callback(dns.stop)
                await dns.start(*cfg.domains.dns_addr, cfg.reuse_port)
            certificates = CertificateManager(platform, cfg.domains, node)
            if cfg.domains.dns_addr is not None:
                certificates.dns_fresh = dns.reload
            running.push_async_callback(certificates.stop)
            if cfg.domains.acme_directory:
                platform.watchers.append(certificates.changed)
                certificates.start()
            platform.agents = tunnels
            if cfg.ssh_addr is not None:
                gateway = SshGateway(platform, binder, tunnels.node, cfg.data_dir,
                                     (*cfg.tunnel_names, cfg.ssh_addr[0]), cfg.ssh_host_ca,
                                     cfg.ssh_keepalive, events.changes)
                running.push_async_callback(gateway.stop)
                await gateway.start(*cfg.ssh_addr, cfg.reuse_port)
                platform.watchers.append(gateway.changed)
                platform.agents = _Commands(tunnels, gateway)
            if member is not None:  # (sessions held by other nodes, through their links)
                platform.agents = _Commands(platform.agents, member)
            if member is not None:  # (first of all when stopping: sent nothing more)
                running.push_async_callback(member.leave)
            door = limits.door("management API", own=True, refusal=listener.refusal())
            app = build(platform, cfg.cors_origins)
            if cfg.dashboard is not None:  # (on the same listener, calling the API in-process)
                app = dashboard.mount(app, platform, cfg.dashboard, AgentDial(
                    tls.ca_pem.read_text(), cfg.tunnel_port, _public_trust(cfg.domains)))
            config = uvicorn.Config(app, log_config=None, access_log=False, lifespan="off",
                                    server_header=False, ws="none",
                                    http=listener.protocol(door, cfg.api_head_timeout))
            heap.settle()  # (before the API listens: clients wait for that port)
            api_socket = listen_socket("management API", cfg.api_host, cfg.api_port,
                                       cfg.reuse_port)
            release_prebound()  # (a listener bound before the imports and not used since)
            server = _Server(config, early)
            where = "SQLite " + str(cfg.data_dir / "edgeway.db") if not cfg.database_url \
                else "PostgreSQL"
            log.info("start", api=cfg.settings.public_url,
                     tunnel=f"{cfg.tunnel_host}:{cfg.tunnel_port}", http=_addr(cfg.http_addr),
                     https=_addr(cfg.https_addr), ssh=_addr(cfg.ssh_addr), store=where,
                     descriptor_limit=limits.limit, fd_reserve=limits.reserve,
                     max_connections_per_address=limits.per_address,
                     trusted_proxies=[str(net) for net in cfg.proxy.networks]
                     if cfg.proxy else None)
            trimmer = heap.trimmer()
            chores = [asyncio.create_task(_report_suppressed())]
            if trimmer is not None:
                chores.append(asyncio.create_task(trimmer.run()))
            try:
                await server.serve(sockets=[api_socket])
            finally:
                for sig in (signal.SIGINT, signal.SIGTERM):  # (more while stopping: noted)
                    loop.add_signal_handler(sig, _stopping_already, sig)
                for chore in chores:
                    chore.cancel()
    finally:
        await db.close()
        logs.report_suppressed()
        log.info("stopped")


def _hand_over(handoff: Handoff, edge: PublicListeners, tcp: TcpBinds) -> None:
    """Connections for tunnels a sibling worker holds go to it, and those it accepted for
    tunnels held here come to the listener that would have accepted them."""
    edge.offer = edge.tcp.offer = tcp.offer = handoff.offer

    async def public(sock: socket.socket, handed: Handed) -> None:
        await edge.take(sock, handed.kind, handed.ref, handed.peer)

    async def tcp_tunnel(sock: socket.socket, handed: Handed) -> None:
        await tcp.take(sock, handed.ref, handed.peer)

    handoff.receivers.update(http=public, tls=public, tcp_edge=public, tcp=tcp_tunnel)


async def _report_suppressed(every: float = 5.0) -> None:
    """Counts of log lines a flood held back, every few seconds while there are any."""
    while True:
        await asyncio.sleep(every)
        logs.report_suppressed()
