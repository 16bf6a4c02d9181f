"""The tunnel listener: agents dial it over TLS, speak muxado, authenticate with a
credential's token, keep the session alive with heartbeats and bind tunnels (TCP ports, HTTP(S)
and TLS host names, labeled tunnels for edges). Sessions, tunnels and endpoints are recorded in
the store while they last; the edge (``edgeway.edge``) finds live tunnels in the registry."""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import ssl
import struct
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Any

import structlog

from edgeway import __version__, catalog, ids
from edgeway.api import hostports
from edgeway.api.platform import Platform
from edgeway.config import listen_socket
from edgeway.pki.platform_ca import EdgeCerts, TunnelTLS
from edgeway.store.db import DatabaseUnavailable
from edgeway.store.repo import Repo
from edgeway.tunnel import binds, restrict, rpc
from edgeway.tunnel.binds import BindRefused
from edgeway.tunnel.muxado.aio import MuxConnection, MuxStream, StreamClosed
from edgeway.tunnel.muxado.session import StreamError
from edgeway.tunnel.pipes import StreamPipe, splice
from edgeway.tunnel.registry import Registry, Tunnel
from edgeway.tunnel.rpc import StreamType
from edgeway.tunnel.tcp import TcpListener, client_addr

log = structlog.get_logger()
SESSIONS = catalog.BY_COLLECTION["tunnel_sessions"]
TUNNELS = catalog.BY_COLLECTION["tunnels"]
ENDPOINTS = catalog.BY_COLLECTION["endpoints"]
INGRESSES = catalog.BY_COLLECTION["agent_ingresses"]
CREDENTIALS = catalog.BY_COLLECTION["credentials"]
BOTS = catalog.BY_COLLECTION["bot_users"]
PROTOCOL_VERSIONS = ("3", "2")
# Until an agent authenticated, its session may open this many streams at once (Auth, the
# heartbeat; as many more refused end it) with frames this large, and must authenticate
# within AUTH_TIMEOUT seconds: a flood of junk or SYNs costs little. After that:
# AGENT_PEER_STREAMS (RPCs: binds, ...).
PRE_AUTH_STREAMS, PRE_AUTH_FRAME, AUTH_TIMEOUT = 4, 16 * 1024, 10.0
AGENT_PEER_STREAMS = 128
RPC_TIMEOUT = 30.0  # for an RPC's type and its whole exchange
HANDSHAKE_TIMEOUT = 10.0  # TLS
# Streams the server keeps open towards one agent at most (more wait for one to end): the
# Rust SDK ends its session beyond 512, counting its own streams and those it is still
# finishing; the margin covers both.
AGENT_STREAMS = 448


class AuthFailed(Exception):
    pass


@dataclass
class AgentSession:
    conn: MuxConnection
    peer: str
    id: str = ""
    last_beat: float = 0.0
    deadline: float = AUTH_TIMEOUT  # then the heartbeat interval plus tolerance
    acl: list[str] = field(default_factory=list)
    credential: str = ""
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    tunnels: dict[str, Tunnel] = field(default_factory=dict)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _with_port(scheme: str, host: str, port: int, default: int) -> str:
    return f"{scheme}://{host}" if port == default else f"{scheme}://{host}:{port}"


async def _warned(coro: Coroutine[Any, Any, None]) -> None:
    """A background reload: a database out of reach is a warning (the next change loads
    again), not a crashed task."""
    try:
        await coro
    except DatabaseUnavailable as exc:
        log.warning("tunnel_reload_failed", error=str(exc))


class TunnelServer:
    def __init__(self, platform: Platform, tls: TunnelTLS, tcp_host: str = "127.0.0.1",
                 tcp_ports: tuple[int, int] = (20000, 20999), node: str = "",
                 http_port: int = 80, https_port: int = 443) -> None:
        self.platform = platform
        self.node = node  # rows this node writes carry it; only they are its to clean up
        self.tcp_host, self.tcp_ports = tcp_host, tcp_ports
        self.http_port, self.https_port = http_port, https_port
        self.registry = Registry()
        self.listeners: dict[str, TcpListener] = {}  # tunnel id -> its public TCP listener
        self.reserved: dict[str, int] = {}  # tunnel id -> port, kept for re-binds
        # host name -> the edge serving it (set by the edge, to refuse agent binds of them)
        self.edge_host: Callable[[str], str | None] = lambda _host: None
        # Set by the edge: why a bind asks for what it cannot enforce (None: it can), and
        # whether a TCP tunnel's traffic policy admits a connection from (ip, port).
        self.check_bind: Callable[[binds.BindRequest], str | None] = lambda _req: None
        self.tcp_admits: Callable[[Tunnel, str, int], bool] = lambda _t, _ip, _port: True
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self.context.load_cert_chain(tls.cert, tls.key)
        self.context.sni_callback = self._sni
        # region domains of agent ingresses: agents dialing them get a certificate for them
        self.ingress_names: set[str] = set()
        self.certs: EdgeCerts | None = None
        self.sessions: dict[str, AgentSession] = {}
        self._server: asyncio.Server | None = None
        self._background: set[asyncio.Task[None]] = set()

    async def start(self, host: str, port: int, reuse_port: bool = False) -> None:
        async with self.platform.db.write() as tx:  # this node's sessions of a previous run
            for kind in (SESSIONS, TUNNELS, ENDPOINTS):
                for id_, doc in await Repo(tx).all_docs(kind):
                    if doc.get("node") == self.node:
                        await Repo(tx).delete(kind, id_)
        await self.load_ingress_names()
        self._server = await asyncio.start_server(
            self._connection, sock=listen_socket("tunnel listener", host, port, reuse_port),
            ssl=self.context, ssl_handshake_timeout=HANDSHAKE_TIMEOUT)

    def _sni(self, sslobj: ssl.SSLObject, name: str | None, _ctx: ssl.SSLContext) -> None:
        if name and self.certs is not None and name.lower() in self.ingress_names:
            sslobj.context = self.certs.context(name.lower(), http=False)

    def changed(self, collection: str) -> None:
        """The API wrote ``collection``: follow agent ingresses and reserved domains."""
        if collection == "agent_ingresses":
            self._spawn(self.load_ingress_names())
        elif collection == "reserved_domains":
            self._spawn(self.revalidate())

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(_warned(coro))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def load_ingress_names(self) -> None:
        docs = await Repo(self.platform.db.reader()).all_docs(INGRESSES)
        self.ingress_names = {d.lower() for _, doc in docs for d in doc.get("region_domains")
                              or []}

    async def revalidate(self) -> None:
        """Stop agent tunnels whose reserved domain is gone (StopTunnel reaches the agent)."""
        base = self.platform.settings.base_domain
        repo = Repo(self.platform.db.reader())
        for tunnel in list(self.registry.by_id.values()):
            host = tunnel.host
            if not host or (host.endswith(f".{base}")
                            and host.count(".") == base.count(".") + 1):
                continue
            if not await hostports.covering(repo, host):
                await self.stop_tunnel(tunnel.id, f"the reserved domain for {host} was "
                                       "deleted", 8001)

    async def stop(self) -> None:
        for task in list(self._background):
            task.cancel()
        if self._server is not None:
            self._server.close()
        for session in list(self.sessions.values()):
            await session.conn.close()
        if self._server is not None:
            await self._server.wait_closed()

    async def _connection(self, reader: asyncio.StreamReader,
                          writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername") or ("", 0)
        conn = MuxConnection(reader, writer, client=False, max_open=AGENT_STREAMS)
        rules = conn.session
        rules.max_peer_streams, rules.max_frame = PRE_AUTH_STREAMS, PRE_AUTH_FRAME
        rules.max_refused = PRE_AUTH_STREAMS
        session = AgentSession(conn, str(peer[0]))
        watchdog = asyncio.create_task(self._watch(session))
        try:
            while (stream := await session.conn.accept()) is not None:
                task = asyncio.create_task(self._stream(session, stream))
                session.tasks.add(task)
                task.add_done_callback(session.tasks.discard)
        finally:
            watchdog.cancel()
            await self._ended(session)

    async def _stream(self, session: AgentSession, stream: MuxStream) -> None:
        kind = -1
        try:
            kind = await asyncio.wait_for(rpc.read_type(stream), RPC_TIMEOUT)
            if kind == StreamType.HEARTBEAT:
                await self._heartbeat(session, stream)
                return
            async with asyncio.timeout(RPC_TIMEOUT):
                await self._call(session, stream, kind)
        except (StreamClosed, asyncio.IncompleteReadError, rpc.RPCError, TimeoutError) as exc:
            if not session.conn.closed.is_set():  # (a session that ends ends its streams)
                log.info("agent_stream_error", session=session.id,
                         error=str(exc) or type(exc).__name__)
            stream.reset()
        except DatabaseUnavailable as exc:  # agents reconnect: they authenticate, re-bind
            log.warning("agent_session_store_unavailable", session=session.id, error=str(exc))
            if kind == StreamType.AUTH:  # an agent's first connect shows why it failed
                with contextlib.suppress(StreamClosed, StreamError):
                    await rpc.reply(stream, {"Version": "3", "ClientId": "", "Error":
                                             "the server cannot reach its database; retry"})
            await session.conn.close()

    async def _call(self, session: AgentSession, stream: MuxStream, kind: int) -> None:
        """One RPC the agent opened a stream for (its type read already)."""
        if kind == StreamType.AUTH:
            await self._auth(session, stream)
        elif not session.id:
            stream.reset()  # nothing but Auth (and heartbeats) before it
        elif kind in (StreamType.BIND, StreamType.START_TUNNEL_WITH_LABEL):
            await self._bind(session, stream, labeled=kind != StreamType.BIND)
        elif kind == StreamType.UNBIND:
            await self._unbind(session, stream)
        elif kind == StreamType.SRV_INFO:
            await rpc.read_message(stream)
            await rpc.reply(stream, {"Region": self.platform.settings.regions[0]})
        else:
            await rpc.reply(stream, {"Error": rpc.error_text(
                f"stream type {kind} is not supported by this server", 9999)})

    async def _auth(self, session: AgentSession, stream: MuxStream) -> None:
        req = rpc.folded(await rpc.read_message(stream))
        extra = req.get("extra") or {}
        version = next((v for v in req.get("version") or [] if v in PROTOCOL_VERSIONS), "")
        try:
            if not version:
                raise AuthFailed("no supported protocol version (this server speaks 3 and 2)")
            credential, session.acl = await self._credential(str(extra.get("authtoken") or ""))
            session.credential = credential
        except AuthFailed as exc:
            await rpc.reply(stream, {"Version": version or "3", "ClientId": "",
                                     "Error": rpc.error_text(str(exc), 107)})
            await session.conn.close()
            return
        interval = int(extra.get("heartbeatinterval") or 10_000_000_000) / 1e9
        tolerance = int(extra.get("heartbeattolerance") or 15_000_000_000) / 1e9
        session.deadline = max(1.0, interval + tolerance)
        session.last_beat = asyncio.get_running_loop().time()
        rules = session.conn.session
        rules.max_peer_streams, rules.max_frame, rules.max_refused = AGENT_PEER_STREAMS, None, None
        session.id = await self._record(session, credential, extra)
        self.sessions[session.id] = session
        await rpc.reply(stream, {"Version": version, "ClientId": session.id, "Extra": {
            "Version": __version__, "Region": self.platform.settings.regions[0],
            "Cookie": secrets.token_urlsafe(16), "AccountName": "edgeway",
            "SessionDuration": 0, "PlanName": "", "Banner": ""}})

    async def _credential(self, token: str) -> tuple[str, list[str]]:
        if not token:
            raise AuthFailed("authentication failed: no authtoken was sent")
        repo = Repo(self.platform.db.reader())
        item = await repo.by_token(CREDENTIALS, ids.token_hash(token))
        if item is None:
            raise AuthFailed("authentication failed: the authtoken is not valid (unknown or "
                             "deleted credential)")
        owner = item.doc.get("owner_id", "")
        if owner.startswith("bot_"):
            bot = await repo.get(BOTS, owner)
            if bot is None or not bot.get("active", True):
                raise AuthFailed("authentication failed: the authtoken's bot user is inactive")
        return item.id, list(item.doc.get("acl") or [])

    async def _record(self, session: AgentSession, credential: str,
                      extra: dict[str, Any]) -> str:
        sid = ids.new_id(SESSIONS.prefix)
        doc = {"agent_version": str(extra.get("version") or ""), "credential": {
            "id": credential, "uri": f"{self.platform.settings.public_url}/credentials/"
                                     f"{credential}"},
            "ip": session.peer, "metadata": str(extra.get("metadata") or ""),
            "os": str(extra.get("os") or ""), "region": self.platform.settings.regions[0],
            "started_at": _now(), "transport": "ngrok/v2", "created_at": _now(),
            "node": self.node}
        async with self.platform.db.write() as tx:
            await Repo(tx).insert(SESSIONS, sid, doc)
        log.info("agent_session_start", session=sid, credential=credential)
        return sid

    def _stable(self, session: AgentSession, tunnel_id: str) -> int:
        """A number derived from the credential and tunnel id: a re-bind after a restart of
        this server gets the same generated name and, when free, the same port."""
        digest = self.platform.sealer.mac(f"{session.credential}/{tunnel_id}".encode())
        return int.from_bytes(digest[:8], "big")

    def _ports(self, req: binds.BindRequest, session: AgentSession,
               tunnel_id: str) -> list[int]:
        """Ports to try, in order: the requested or reserved one alone, else the free ones
        starting from the one derived from the tunnel id."""
        port = binds.requested_port(req.addr, self.tcp_host) or self.reserved.get(tunnel_id)
        taken = {t.port for t in self.registry.by_id.values() if t.port}
        held = {p for tid, p in self.reserved.items() if tid != tunnel_id}
        if port is not None:
            if port in taken or port in held:
                raise BindRefused(f"the address {self.tcp_host}:{port} is already bound")
            return [port]
        low, high = self.tcp_ports
        size = high - low + 1
        first = self._stable(session, tunnel_id) % size
        return [low + (first + i) % size for i in range(size)
                if low + (first + i) % size not in taken | held]

    async def _listen(self, session: AgentSession, tunnel: Tunnel, ports: list[int]) -> None:
        for port in ports:
            target = f"{self.tcp_host}:{port}"
            if not binds.acl_allows(session.acl, target):
                if len(ports) == 1:
                    raise BindRefused(f"the credential's ACL ({', '.join(session.acl)}) does "
                                      f"not allow binding {target}")
                continue
            listener = TcpListener(self.tcp_host, port, partial(self._tcp_client, tunnel))
            try:
                await listener.start()
            except OSError as exc:
                if len(ports) == 1:
                    raise BindRefused(f"cannot listen on {target}: {exc.strerror}") from None
                continue
            tunnel.port, tunnel.url = port, f"tcp://{target}"
            self.listeners[tunnel.id] = listener
            return
        raise BindRefused("no TCP address this credential may bind is free "
                          f"(ports {self.tcp_ports[0]}-{self.tcp_ports[1]}, ACL: "
                          f"{', '.join(session.acl) or '*'})")

    async def _tcp_client(self, tunnel: Tunnel, reader: asyncio.StreamReader,
                          writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername") or ("", 0)
        if not restrict.allowed(tunnel.req, peer[0]) \
                or not self.tcp_admits(tunnel, peer[0], peer[1]):
            return  # closed: a TCP client gets no page
        try:
            stream = await tunnel.open(client_addr(peer), "tcp")
        except (StreamError, StreamClosed):
            return  # the agent is going away: a closed connection, not a hang
        await splice(reader, writer, StreamPipe(stream))

    async def _domain(self, session: AgentSession, req: binds.BindRequest,
                      tunnel_id: str) -> tuple[str, str]:
        """The public host name of an HTTP or TLS bind and the reserved domain it uses."""
        base = self.platform.settings.base_domain
        host = req.domain
        if not host:
            digest = self._stable(session, tunnel_id)
            host = f"{digest:016x}"[:12] + f".{base}"
        if not binds.acl_allows(session.acl, host):
            raise BindRefused(f"the credential's ACL ({', '.join(session.acl)}) does not "
                              f"allow binding {host}")
        domain_id = ""
        if host.endswith(f".{base}") and host.count(".") == base.count(".") + 1:
            pass  # a name under the platform's base domain: nothing to reserve
        else:
            cover = await hostports.covering(Repo(self.platform.db.reader()), host)
            if not cover:
                raise BindRefused(f"the domain '{host}' is not reserved: reserve it (POST "
                                  "/reserved_domains), or a wildcard domain covering it, first")
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

    async def _bind(self, session: AgentSession, stream: MuxStream, labeled: bool) -> None:
        message = await rpc.read_message(stream)
        folded = rpc.folded(message)
        opts = next((v for k, v in message.items() if k.lower() == "opts"), None) or {}
        domain_id = ""
        try:
            req = binds.parse_labeled(folded) if labeled else \
                binds.parse(message, folded, self.platform.settings.base_domain)
            if (why := self.check_bind(req)) is not None:
                raise BindRefused(why)
            tunnel_id = req.id if req.id.startswith("tn_") else ids.new_id(TUNNELS.prefix)
            await self._take_over(session, tunnel_id)
            tunnel = Tunnel(tunnel_id, session.conn, req, credential=session.credential,
                            session_id=session.id)
            if labeled:
                if not binds.acl_allows_labels(session.acl, req.labels):
                    raise BindRefused(f"the credential's ACL ({', '.join(session.acl)}) does "
                                      f"not allow the labels {req.labels}")
            elif req.proto == "tcp":
                await self._listen(session, tunnel, self._ports(req, session, tunnel_id))
                self.reserved[tunnel_id] = tunnel.port
            else:
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

    async def _take_over(self, session: AgentSession, tunnel_id: str) -> None:
        """A re-bind of a tunnel id still held by an older session of the same credential (the
        agent reconnected before that session timed out) moves the tunnel to the new one."""
        old = self.registry.by_id.get(tunnel_id)
        if old is None or old.conn is session.conn:
            if old is not None:
                await self._drop_tunnel(session, tunnel_id)
            return
        if old.credential != session.credential:
            raise BindRefused(f"the tunnel id {tunnel_id} belongs to another credential")
        holder = self.sessions.get(old.session_id)
        if holder is not None:
            await self._drop_tunnel(holder, tunnel_id)

    async def _record_tunnel(self, session: AgentSession, tunnel: Tunnel,
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
                "region": self.platform.settings.regions[0], "updated_at": _now(),
                "created_at": _now(), "public_url": tunnel.url, "url": tunnel.url,
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
            "public_url": tunnel.url, "started_at": _now(), "created_at": _now(),
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

    async def _unbind(self, session: AgentSession, stream: MuxStream) -> None:
        tunnel_id = str(rpc.folded(await rpc.read_message(stream)).get("id") or "")
        await self._drop_tunnel(session, tunnel_id)
        self.reserved.pop(tunnel_id, None)
        await rpc.reply(stream, {})

    async def _drop_tunnel(self, session: AgentSession, tunnel_id: str) -> None:
        tunnel = session.tunnels.pop(tunnel_id, None)
        if tunnel is None:
            return
        self.registry.remove(tunnel)
        listener = self.listeners.pop(tunnel_id, None)
        if listener is not None:
            await listener.close()
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
        await self._drop_tunnel(session, tunnel_id)
        self.reserved.pop(tunnel_id, None)
        log.info("tunnel_stopped", tunnel=tunnel_id, reason=message)
        return True

    async def command(self, session_id: str, kind: int,
                      body: dict[str, Any], timeout: float = 10.0) -> str | None:
        """Send Stop, Restart or Update to the agent of ``session_id``: None if this node
        holds no such session, else the agent's error text ("" when it accepted)."""
        session = self.sessions.get(session_id)
        if session is None:
            return None
        try:
            stream = await session.conn.open_stream()
            await stream.write(struct.pack(">I", kind) + json.dumps(body).encode())
            answer = rpc.folded(await asyncio.wait_for(rpc.read_message(stream), timeout))
        except (StreamClosed, rpc.RPCError, asyncio.IncompleteReadError):
            if kind == StreamType.STOP and await self._ends(session):
                return ""  # it stopped before its answer went out: what was asked happened
            return "the agent closed the command stream without answering"
        except TimeoutError:
            return f"the agent did not answer within {timeout:g} s"
        return str(answer.get("error") or "")

    @staticmethod
    async def _ends(session: AgentSession, within: float = 2.0) -> bool:
        """Whether the session's connection is gone, or goes within ``within`` seconds."""
        try:
            await asyncio.wait_for(session.conn.closed.wait(), within)
        except TimeoutError:
            return False
        return True

    async def _heartbeat(self, session: AgentSession, stream: MuxStream) -> None:
        loop = asyncio.get_running_loop()
        while True:
            beat = await stream.readexactly(4)
            session.last_beat = loop.time()
            await stream.write(beat)

    async def _watch(self, session: AgentSession) -> None:
        """Drop a session whose heartbeats stopped (or that never authenticated)."""
        loop = asyncio.get_running_loop()
        session.last_beat = loop.time()
        while True:
            await asyncio.sleep(min(1.0, session.deadline / 4))
            if loop.time() - session.last_beat > session.deadline:
                log.info("agent_session_timeout", session=session.id)
                await session.conn.close()
                return

    async def _ended(self, session: AgentSession) -> None:
        for task in list(session.tasks):
            task.cancel()
        for tunnel_id in list(session.tunnels):
            await self._drop_tunnel(session, tunnel_id)
        if session.id and self.sessions.pop(session.id, None) is not None:
            with contextlib.suppress(Exception):
                async with self.platform.db.write() as tx:
                    await Repo(tx).delete(SESSIONS, session.id)
            log.info("agent_session_stop", session=session.id)

