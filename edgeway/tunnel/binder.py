"""Binding tunnels for agent sessions: TCP ports from the pool, HTTP(S) and TLS host names,
labeled tunnels; their records in the store; unbinding, stopping and dropping them.

A tunnel id is issued bound to the credential that bound it first (``ids.bound_id``): an agent
re-binding it after a reconnect, or after this server restarted, gets the same address, and
any other credential presenting it is refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Any

import structlog

from edgeway import catalog, ids
from edgeway.platform import Platform
from edgeway.store import domains
from edgeway.store.repo import Repo
from edgeway.tunnel import binds, restrict, rpc
from edgeway.tunnel.binds import BindRefused
from edgeway.tunnel.muxado.aio import MuxConnection, MuxStream, StreamClosed
from edgeway.tunnel.muxado.session import StreamError
from edgeway.tunnel.pipes import StreamPipe, splice
from edgeway.tunnel.ports import PortPool
from edgeway.tunnel.registry import Registry, Tunnel
from edgeway.tunnel.rpc import StreamType
from edgeway.tunnel.tcp import TcpListener, client_addr

log = structlog.get_logger()
TUNNELS = catalog.BY_COLLECTION["tunnels"]
ENDPOINTS = catalog.BY_COLLECTION["endpoints"]
LISTEN_TRIES = 16  # free ports tried when the system refuses one (another process holds it)


@dataclass
class AgentConnection:
    conn: MuxConnection
    peer: str
    id: str = ""
    last_beat: float = 0.0
    deadline: float = 10.0  # seconds without a heartbeat that end the session
    acl: list[str] = field(default_factory=list)
    credential: str = ""
    revoked: bool = False  # ended because its credential was deleted or deactivated
    client_cert: bool = False  # presented a client certificate (checked in the handshake)
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    tunnels: dict[str, Tunnel] = field(default_factory=dict)


def now_text() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _with_port(scheme: str, host: str, port: int, default: int) -> str:
    return f"{scheme}://{host}" if port == default else f"{scheme}://{host}:{port}"


def _acl_text(acl: list[str]) -> str:
    return ", ".join(acl) or "*"


class Binder:
    def __init__(self, platform: Platform, tcp_host: str, tcp_ports: tuple[int, int],
                 grace: float, node: str, http_port: int, https_port: int) -> None:
        self.platform, self.node = platform, node
        self.tcp_host = tcp_host
        self.ports = PortPool(tcp_ports[0], tcp_ports[1], grace)
        self.http_port, self.https_port = http_port, https_port
        self.registry = Registry()
        self.listeners: dict[str, TcpListener] = {}  # tunnel id -> its public TCP listener
        # host name -> the edge serving it (set by the edge, to refuse agent binds of them)
        self.edge_host: Callable[[str], str | None] = lambda _host: None
        # Set by the edge: why a bind asks for what it cannot enforce (None: it can), and
        # whether a TCP tunnel's traffic policy admits a connection from (ip, port).
        self.check_bind: Callable[[binds.BindRequest], str | None] = lambda _req: None
        self.tcp_admits: Callable[[Tunnel, str, int], bool] = lambda _t, _ip, _port: True
        self.sessions: dict[str, AgentConnection] = {}

    @staticmethod
    def _now() -> float:
        return asyncio.get_running_loop().time()

    def _stable(self, session: AgentConnection, tunnel_id: str) -> int:
        """A number derived from the credential and tunnel id: a re-bind after a restart of
        this server gets the same generated name and, when free, the same port."""
        digest = self.platform.sealer.mac(f"{session.credential}/{tunnel_id}".encode())
        return int.from_bytes(digest[:8], "big")

    def tunnel_id(self, session: AgentConnection, asked: str) -> str:
        """The id of a bind: a new one bound to the session's credential, or the one asked
        for when that credential was issued it."""
        mac = self.platform.sealer.mac
        if not asked.startswith(f"{TUNNELS.prefix}_"):
            return ids.bound_id(TUNNELS.prefix, mac, session.credential)
        if not ids.bound_to(asked, TUNNELS.prefix, mac, session.credential):
            raise BindRefused(f"the tunnel id {asked} belongs to another credential (or was "
                              "not issued by this server); bind without an id for a new one")
        return asked

    # -- TCP ----------------------------------------------------------------------------

    async def _listen(self, session: AgentConnection, tunnel: Tunnel) -> None:
        now, ports = self._now(), self.ports
        asked = binds.requested_port(tunnel.req.addr, self.tcp_host) or \
            ports.held(tunnel.id, now)
        if asked is not None:
            target = f"{self.tcp_host}:{asked}"
            if not binds.acl_allows(session.acl, target):
                raise BindRefused(f"the credential's ACL ({_acl_text(session.acl)}) does not "
                                  f"allow binding {target}")
            if not ports.take(tunnel.id, asked, now):
                raise BindRefused(f"the address {target} is already bound")
            try:
                await self._open(tunnel, asked)
            except OSError as exc:
                ports.release(tunnel.id, asked)
                raise BindRefused(f"cannot listen on {target}: {exc.strerror}") from None
            return
        allowed = binds.acl_ports(session.acl, self.tcp_host)
        preferred = ports.low + self._stable(session, tunnel.id) % (ports.high - ports.low + 1)
        for _ in range(LISTEN_TRIES):
            port = ports.take_any(tunnel.id, preferred, allowed, now)
            if port is None:
                break
            try:
                await self._open(tunnel, port)
                return
            except OSError as exc:
                log.warning("tcp_port_unavailable", port=port, error=exc.strerror)
                ports.block(tunnel.id, port, now)
        raise BindRefused(f"no TCP address this credential may bind is free (ports "
                          f"{ports.low}-{ports.high}, ACL: {_acl_text(session.acl)})")

    async def _open(self, tunnel: Tunnel, port: int) -> None:
        listener = TcpListener(self.tcp_host, port, partial(self._tcp_client, tunnel), tunnel.id)
        await listener.start()
        tunnel.port, tunnel.url = port, f"tcp://{self.tcp_host}:{port}"
        self.listeners[tunnel.id] = listener

    async def _tcp_client(self, tunnel: Tunnel, reader: asyncio.StreamReader,
                          writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername") or ("", 0)
        if not restrict.allowed(tunnel.req, peer[0]) \
                or not self.tcp_admits(tunnel, peer[0], peer[1]) \
                or await self.platform.restrictions.refusing("endpoints", peer[0]):
            return  # closed: a TCP client gets no page
        try:
            stream = await tunnel.open(client_addr(peer), "tcp")
        except (StreamError, StreamClosed):
            return  # the agent is going away: a closed connection, not a hang
        await splice(reader, writer, StreamPipe(stream))

    # -- HTTP(S) and TLS names ---------------------------------------------------------------

    async def _domain(self, session: AgentConnection, req: binds.BindRequest,
                      tunnel_id: str) -> tuple[str, str]:
        """The public host name of an HTTP or TLS bind and the reserved domain it uses."""
        base = self.platform.settings.base_domain
        host = req.domain
        if not host:
            digest = self._stable(session, tunnel_id)
            host = f"{digest:016x}"[:12] + f".{base}"
        if not binds.acl_allows(session.acl, host):
            raise BindRefused(f"the credential's ACL ({_acl_text(session.acl)}) does not "
                              f"allow binding {host}")
        domain_id = ""
        if host.startswith("*.") and _generated(host, base):
            raise BindRefused(f"'{host}' would take every name of the platform's base domain: "
                              "bind a wildcard of a domain you reserved")
        if not _generated(host, base):
            cover = await domains.covering(Repo(self.platform.db.reader()), host)
            if not cover:
                raise BindRefused(f"the domain '{host}' is not reserved: reserve it (POST "
                                  "/reserved_domains), or a wildcard domain covering it, first")
            if not _covered(cover, host):
                raise BindRefused(f"the wildcard domain '{host}' is not reserved: reserve it "
                                  "(POST /reserved_domains) first; a wildcard covers one label")
            domain_id = cover.get(host) or next(iter(cover.values()))
        edge = self.edge_host(host)
        if edge:
            raise BindRefused(f"the domain '{host}' is served by the edge {edge}")
        for other in self.registry.by_host.get(host, []):
            if other.id == tunnel_id:
                continue
            family = {"http": "http", "https": "http"}
            if family.get(other.proto, other.proto) != family.get(req.proto, req.proto):
                raise BindRefused(f"the domain '{host}' is bound by a {other.proto} tunnel")
            if not (req.pooled and other.req.pooled):
                raise BindRefused(f"the domain '{host}' is already bound by another tunnel; "
                                  "bind it with pooling enabled from every agent to share it")
        return host, domain_id

    def _url(self, proto: str, host: str) -> str:
        if proto == "http":
            return _with_port("http", host, self.http_port, 80)
        return _with_port(proto, host, self.https_port, 443)

    # -- binding -----------------------------------------------------------------------------

    async def bind(self, session: AgentConnection, stream: MuxStream, labeled: bool) -> None:
        message = await rpc.read_message(stream)
        folded = rpc.folded(message)
        opts = next((v for k, v in message.items() if k.lower() == "opts"), None) or {}
        domain_id = ""
        try:
            req = binds.parse_labeled(folded) if labeled else \
                binds.parse(message, folded, self.platform.settings.base_domain)
            if (why := self.check_bind(req)) is not None:
                raise BindRefused(why)
            if labeled and not binds.acl_allows_labels(session.acl, req.labels):
                raise BindRefused(f"the credential's ACL ({_acl_text(session.acl)}) does "
                                  f"not allow the labels {req.labels}")
            tunnel_id = self.tunnel_id(session, req.id)
            await self._take_over(session, tunnel_id)
            tunnel = Tunnel(tunnel_id, session.conn, req, credential=session.credential,
                            session_id=session.id)
            if not labeled and req.proto == "tcp":
                await self._listen(session, tunnel)
            elif not labeled:
                tunnel.host, domain_id = await self._domain(session, req, tunnel_id)
                tunnel.url = self._url(req.proto, tunnel.host)
        except BindRefused as exc:
            await rpc.reply(stream, {"Id": str(folded.get("id") or ""), "URL": "",
                                     "Proto": str(folded.get("proto") or ""), "Opts": opts,
                                     "Extra": {"Token": ""},
                                     "Error": rpc.error_text(str(exc), 8000)})
            return
        self.registry.add(tunnel)
        session.tunnels[tunnel_id] = tunnel
        await self._record_tunnel(session, tunnel, domain_id)
        if labeled:
            await rpc.reply(stream, {"Id": tunnel_id})
        else:
            await rpc.reply(stream, {"Id": tunnel_id, "URL": tunnel.url, "Proto": req.proto,
                                     "Opts": req.opts, "Extra": {"Token": ""}})

    async def _take_over(self, session: AgentConnection, tunnel_id: str) -> None:
        """A re-bind of a tunnel id still held by an older session of the same credential (the
        agent reconnected before that session timed out) moves the tunnel to the new one."""
        old = self.registry.by_id.get(tunnel_id)
        if old is None:
            return
        if old.credential != session.credential:  # (ids are bound to their credential)
            raise BindRefused(f"the tunnel id {tunnel_id} belongs to another credential")
        holder = session if old.conn is session.conn else self.sessions.get(old.session_id)
        if holder is not None:
            await self.drop(holder, tunnel_id, clean=False)

    async def _record_tunnel(self, session: AgentConnection, tunnel: Tunnel,
                             domain_id: str) -> None:
        base = self.platform.settings.public_url
        req = tunnel.req
        session_ref = {"id": session.id, "uri": f"{base}/tunnel_sessions/{session.id}"}
        tunnel_ref = {"id": tunnel.id, "uri": f"{base}/tunnels/{tunnel.id}"}
        endpoint: dict[str, Any] | None = None
        if tunnel.url:
            endpoint_id = ids.new_id(ENDPOINTS.prefix)
            scheme, _, hostport = tunnel.url.partition("://")
            host, _, port = hostport.rpartition(":") if ":" in hostport else (hostport, "", "")
            default = {"http": 80, "https": 443, "tls": 443}.get(scheme, 0)
            endpoint = {
                "region": self.platform.settings.regions[0], "updated_at": now_text(),
                "created_at": now_text(), "public_url": tunnel.url, "url": tunnel.url,
                "proto": req.proto, "scheme": scheme, "host": host,
                "port": int(port) if port else default,
                "hostport": f"{host}:{port or default}", "type": "ephemeral",
                "metadata": req.metadata, "description": "",
                "domain": {"id": domain_id, "uri": f"{base}/reserved_domains/{domain_id}"}
                if domain_id else None,
                "tcp_addr": None, "tunnel": tunnel_ref, "edge": None,
                "upstream_url": req.forwards_to, "upstream_protocol": "",
                "principal": None, "traffic_policy": "",
                "bindings": ["public"], "tunnel_session": session_ref, "name": "",
                "pooling_enabled": req.pooled, "node": self.node}
        doc: dict[str, Any] = {
            "public_url": tunnel.url, "started_at": now_text(), "created_at": now_text(),
            "metadata": req.metadata, "proto": req.proto,
            "region": self.platform.settings.regions[0], "tunnel_session": session_ref,
            "endpoint": {"id": endpoint_id, "uri": f"{base}/endpoints/{endpoint_id}"}
            if endpoint else None,
            "labels": req.labels, "backends": [], "forwards_to": req.forwards_to,
            "node": self.node}
        async with self.platform.db.write() as tx:
            await Repo(tx).insert(TUNNELS, tunnel.id, doc)
            if endpoint is not None:
                await Repo(tx).insert(ENDPOINTS, endpoint_id, endpoint)
        tunnel.endpoint_id = endpoint_id if endpoint else ""

    # -- ending tunnels ----------------------------------------------------------------------

    async def unbind(self, session: AgentConnection, stream: MuxStream) -> None:
        tunnel_id = str(rpc.folded(await rpc.read_message(stream)).get("id") or "")
        await self.drop(session, tunnel_id, clean=True)
        await rpc.reply(stream, {})

    async def drop(self, session: AgentConnection, tunnel_id: str, clean: bool) -> None:
        """End one tunnel of ``session``: a clean end frees its TCP port at once, otherwise
        the port waits the grace period for the agent to re-bind it."""
        tunnel = session.tunnels.pop(tunnel_id, None)
        if tunnel is None:
            return
        self.registry.remove(tunnel)
        listener = self.listeners.pop(tunnel_id, None)
        if listener is not None:
            await listener.close()
        if tunnel.port:
            if clean:
                self.ports.release(tunnel_id, tunnel.port)
            else:
                self.ports.hold(tunnel_id, tunnel.port, self._now())
        with contextlib.suppress(Exception):
            async with self.platform.db.write() as tx:
                await Repo(tx).delete(TUNNELS, tunnel_id)
                if tunnel.endpoint_id:
                    await Repo(tx).delete(ENDPOINTS, tunnel.endpoint_id)

    async def stop_tunnel(self, tunnel_id: str, message: str, code: int) -> bool:
        """Tell the agent to close one tunnel (StopTunnel; no reply) and drop it here."""
        tunnel = self.registry.by_id.get(tunnel_id)
        session = self.sessions.get(tunnel.session_id) if tunnel else None
        if tunnel is None or session is None:
            return False
        with contextlib.suppress(StreamClosed, StreamError):
            stream = await session.conn.open_stream()
            await stream.write(struct.pack(">I", StreamType.STOP_TUNNEL) + json.dumps(
                {"Id": tunnel_id, "Message": message,
                 "ErrorCode": f"ERR_NGROK_{code}"}).encode(), eof=True)
        await self.drop(session, tunnel_id, clean=True)
        log.info("tunnel_stopped", tunnel=tunnel_id, reason=message)
        return True

    async def revalidate(self) -> None:
        """Stop agent tunnels whose reserved domain is gone (StopTunnel reaches the agent)."""
        base = self.platform.settings.base_domain
        repo = Repo(self.platform.db.reader())
        for tunnel in list(self.registry.by_id.values()):
            host = tunnel.host
            if not host or _generated(host, base):
                continue
            if not _covered(await domains.covering(repo, host), host):
                await self.stop_tunnel(tunnel.id, f"the reserved domain for {host} was "
                                       "deleted", 8001)

    async def reauthorize(self, session: AgentConnection, acl: list[str]) -> None:
        """The session's credential has a new ACL: it applies to later binds, and the
        tunnels it no longer allows are stopped."""
        session.acl = acl
        for tunnel in list(session.tunnels.values()):
            if tunnel.labels:
                allowed = binds.acl_allows_labels(acl, tunnel.labels)
            else:
                allowed = binds.acl_allows(acl, tunnel.host or
                                           f"{self.tcp_host}:{tunnel.port}")
            if not allowed:
                await self.stop_tunnel(tunnel.id, "the credential's ACL no longer allows "
                                       "this tunnel", 8002)


def _covered(cover: dict[str, str], host: str) -> bool:
    """Whether reserved domains ``cover`` (see ``domains.covering``) let ``host`` be bound:
    a wildcard name only by itself (a wildcard covers one label, not another wildcard)."""
    return host in cover if host.startswith("*.") else bool(cover)


def _generated(host: str, base: str) -> bool:
    """A name directly under the platform's base domain: nothing to reserve."""
    return host.endswith(f".{base}") and host.count(".") == base.count(".") + 1
