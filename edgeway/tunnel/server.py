"""The tunnel listener: agents dial it over TLS, speak muxado, authenticate with a
credential's token and keep the session alive with heartbeats. A session is recorded in
``tunnel_sessions`` while it lasts. (Binds, proxying and server commands come next.)"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import secrets
import ssl
import struct
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from edgeway import __version__, catalog, ids
from edgeway.api.platform import Platform
from edgeway.pki.platform_ca import TunnelTLS
from edgeway.store.repo import Repo
from edgeway.tunnel import binds, rpc
from edgeway.tunnel.binds import BindRefused
from edgeway.tunnel.muxado.aio import MuxConnection, MuxStream, StreamClosed
from edgeway.tunnel.rpc import StreamType
from edgeway.tunnel.tcp import TcpTunnel

log = logging.getLogger("edgeway.tunnel")
SESSIONS = catalog.BY_COLLECTION["tunnel_sessions"]
TUNNELS = catalog.BY_COLLECTION["tunnels"]
CREDENTIALS = catalog.BY_COLLECTION["credentials"]
BOTS = catalog.BY_COLLECTION["bot_users"]
PROTOCOL_VERSIONS = ("3", "2")


class AuthFailed(Exception):
    pass


@dataclass
class AgentSession:
    conn: MuxConnection
    peer: str
    id: str = ""
    last_beat: float = 0.0
    deadline: float = 30.0
    acl: list[str] = field(default_factory=list)
    credential: str = ""
    tasks: set[asyncio.Task[None]] = field(default_factory=set)
    tunnels: dict[str, TcpTunnel] = field(default_factory=dict)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class TunnelServer:
    def __init__(self, platform: Platform, tls: TunnelTLS, tcp_host: str = "127.0.0.1",
                 tcp_ports: tuple[int, int] = (20000, 20999), node: str = "") -> None:
        self.platform = platform
        self.node = node  # rows this node writes carry it; only they are its to clean up
        self.tcp_host, self.tcp_ports = tcp_host, tcp_ports
        self.tunnels: dict[str, TcpTunnel] = {}
        self.owners: dict[str, AgentSession] = {}  # tunnel id -> session holding it
        self.reserved: dict[str, int] = {}  # tunnel id -> port, kept for re-binds
        self.context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self.context.load_cert_chain(tls.cert, tls.key)
        self.sessions: dict[str, AgentSession] = {}
        self._server: asyncio.Server | None = None

    async def start(self, host: str, port: int) -> None:
        async with self.platform.db.write() as tx:  # this node's sessions of a previous run
            for kind in (SESSIONS, TUNNELS):
                for id_, doc in await Repo(tx).all_docs(kind):
                    if doc.get("node") == self.node:
                        await Repo(tx).delete(kind, id_)
        self._server = await asyncio.start_server(self._connection, host, port,
                                                  ssl=self.context)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for session in list(self.sessions.values()):
            await session.conn.close()
        if self._server is not None:
            await self._server.wait_closed()

    async def _connection(self, reader: asyncio.StreamReader,
                          writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername") or ("", 0)
        session = AgentSession(MuxConnection(reader, writer, client=False), str(peer[0]))
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
        try:
            kind = await rpc.read_type(stream)
            if kind == StreamType.AUTH:
                await self._auth(session, stream)
            elif kind == StreamType.HEARTBEAT:
                await self._heartbeat(session, stream)
            elif kind == StreamType.BIND and session.id:
                await self._bind(session, stream)
            elif kind == StreamType.UNBIND and session.id:
                await self._unbind(session, stream)
            elif not session.id:
                stream.reset()
            else:
                await rpc.reply(stream, {"Error": rpc.error_text(
                    f"stream type {kind} is not supported by this server yet", 9999)})
        except (StreamClosed, asyncio.IncompleteReadError, rpc.RPCError) as exc:
            log.info('{"event": "agent_stream_error", "error": "%s"}', exc)
            stream.reset()

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
        log.info('{"event": "agent_session_start", "session": "%s", "credential": "%s"}',
                 sid, credential)
        return sid

    def _ports(self, req: binds.BindRequest, tunnel_id: str) -> list[int]:
        """Ports to try, in order: the requested or reserved one alone, else the free ones."""
        port = binds.requested_port(req.addr, self.tcp_host) or self.reserved.get(tunnel_id)
        taken = {t.port for t in self.tunnels.values()}
        held = {p for tid, p in self.reserved.items() if tid != tunnel_id}
        if port is not None:
            if port in taken or port in held:
                raise BindRefused(f"the address {self.tcp_host}:{port} is already bound")
            return [port]
        low, high = self.tcp_ports
        return [p for p in range(low, high + 1) if p not in taken and p not in held]

    async def _listen(self, session: AgentSession, tunnel_id: str, ports: list[int]
                      ) -> TcpTunnel:
        for port in ports:
            target = f"{self.tcp_host}:{port}"
            if not binds.acl_allows(session.acl, target):
                if len(ports) == 1:
                    raise BindRefused(f"the credential's ACL ({', '.join(session.acl)}) does "
                                      f"not allow binding {target}")
                continue
            tunnel = TcpTunnel(tunnel_id, session.conn, self.tcp_host, port)
            try:
                await tunnel.start()
                return tunnel
            except OSError as exc:
                if len(ports) == 1:
                    raise BindRefused(f"cannot listen on {target}: {exc.strerror}") from None
        raise BindRefused("no TCP address this credential may bind is free "
                          f"(ports {self.tcp_ports[0]}-{self.tcp_ports[1]}, ACL: "
                          f"{', '.join(session.acl) or '*'})")

    async def _bind(self, session: AgentSession, stream: MuxStream) -> None:
        message = await rpc.read_message(stream)
        folded = rpc.folded(message)
        opts = next((v for k, v in message.items() if k.lower() == "opts"), None) or {}
        try:
            req = binds.parse(message, folded)
            tunnel_id = req.id if req.id.startswith("tn_") else ids.new_id(TUNNELS.prefix)
            await self._take_over(session, tunnel_id)
            tunnel = await self._listen(session, tunnel_id, self._ports(req, tunnel_id))
        except BindRefused as exc:
            await rpc.reply(stream, {"Id": str(folded.get("id") or ""), "URL": "",
                                     "Proto": str(folded.get("proto") or ""), "Opts": opts,
                                     "Extra": {"Token": ""},
                                     "Error": rpc.error_text(str(exc), 8000)})
            return
        self.reserved[tunnel_id] = tunnel.port
        self.tunnels[tunnel_id] = session.tunnels[tunnel_id] = tunnel
        self.owners[tunnel_id] = session
        await self._record_tunnel(session, tunnel, req)
        await rpc.reply(stream, {"Id": tunnel_id, "URL": tunnel.url, "Proto": req.proto,
                                 "Opts": req.opts, "Extra": {"Token": ""}})

    async def _take_over(self, session: AgentSession, tunnel_id: str) -> None:
        """A re-bind of a tunnel id still held by an older session of the same credential (the
        agent reconnected before that session timed out) moves the tunnel to the new one."""
        old = self.owners.get(tunnel_id)
        if old is None or old is session:
            return
        if old.credential != session.credential:
            raise BindRefused(f"the tunnel id {tunnel_id} belongs to another credential")
        await self._drop_tunnel(old, tunnel_id)

    async def _record_tunnel(self, session: AgentSession, tunnel: TcpTunnel,
                             req: binds.BindRequest) -> None:
        base = self.platform.settings.public_url
        doc: dict[str, Any] = {"public_url": tunnel.url, "started_at": _now(), "created_at": _now(),
               "metadata": req.metadata, "proto": req.proto,
               "region": self.platform.settings.regions[0],
               "tunnel_session": {"id": session.id, "uri": f"{base}/tunnel_sessions/{session.id}"},
               "endpoint": None, "labels": {}, "backends": [], "forwards_to": req.forwards_to,
               "node": self.node}
        async with self.platform.db.write() as tx:
            await Repo(tx).insert(TUNNELS, tunnel.id, doc)

    async def _unbind(self, session: AgentSession, stream: MuxStream) -> None:
        tunnel_id = str(rpc.folded(await rpc.read_message(stream)).get("id") or "")
        await self._drop_tunnel(session, tunnel_id)
        self.reserved.pop(tunnel_id, None)
        await rpc.reply(stream, {})

    async def _drop_tunnel(self, session: AgentSession, tunnel_id: str) -> None:
        tunnel = session.tunnels.pop(tunnel_id, None)
        if tunnel is None:
            return
        self.tunnels.pop(tunnel_id, None)
        self.owners.pop(tunnel_id, None)
        await tunnel.close()
        with contextlib.suppress(Exception):
            async with self.platform.db.write() as tx:
                await Repo(tx).delete(TUNNELS, tunnel_id)

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
            return "the agent closed the command stream without answering"
        except TimeoutError:
            return f"the agent did not answer within {timeout:g} s"
        return str(answer.get("error") or "")

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
                log.info('{"event": "agent_session_timeout", "session": "%s"}', session.id)
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
            log.info('{"event": "agent_session_stop", "session": "%s"}', session.id)

