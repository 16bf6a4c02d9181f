"""The tunnel listener: agents dial it over TLS, speak muxado, authenticate with a
credential's token, keep the session alive with heartbeats and bind tunnels (TCP ports, HTTP(S)
and TLS host names, labeled tunnels for edges). Sessions, tunnels and endpoints are recorded in
the store while they last; the edge (``edgeway.edge``) finds live tunnels in the registry."""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Callable, Coroutine
from typing import Any

import structlog

from edgeway import caps, catalog, ids
from edgeway.accept import Acceptor
from edgeway.config import listen_socket
from edgeway.pki.platform_ca import EdgeCerts, TunnelTLS
from edgeway.platform import Platform
from edgeway.restrictions import KINDS as RESTRICTION_KINDS
from edgeway.store.db import DatabaseUnavailable
from edgeway.store.repo import Changes, Repo
from edgeway.tlsobject import direct
from edgeway.tunnel import auth, commands, records, revocation, rpc
from edgeway.tunnel.admission import Admission
from edgeway.tunnel.binder import Binder
from edgeway.tunnel.connection import AgentConnection
from edgeway.tunnel.muxado.aio import MuxConnection
from edgeway.tunnel.muxado.events import StreamError
from edgeway.tunnel.muxado.stream import MuxStream, StreamClosed
from edgeway.tunnel.rpc import StreamType

log = structlog.get_logger()
SESSIONS = catalog.BY_COLLECTION["tunnel_sessions"]
TUNNELS = catalog.BY_COLLECTION["tunnels"]
ENDPOINTS = catalog.BY_COLLECTION["endpoints"]
INGRESSES = catalog.BY_COLLECTION["agent_ingresses"]
RPC_TIMEOUT = 30.0  # for an RPC's type and its whole exchange
HANDSHAKE_TIMEOUT = 10.0  # TLS
# Streams the server keeps open towards one agent at most (more wait for one to end): the
# Rust SDK ends its session beyond 512, counting its own streams and those it is still
# finishing; the margin covers both.
AGENT_STREAMS = 448
# A TCP port of a tunnel whose session dropped (no GOAWAY) stays its own this long: the SDKs
# reconnect within seconds, the Edgeway agent within its backoff's 30 s.
TCP_GRACE = 120.0
RECHECK_EVERY = 10.0  # seconds: credentials changed through another node reach us this late
DRAIN_TIMEOUT = 10.0  # seconds a stopping server gives its agents' sessions to end


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
                 http_port: int = 80, https_port: int = 443,
                 tcp_grace: float = TCP_GRACE, client_cas: str = "", tcp_name: str = ""
                 ) -> None:
        self.platform = platform
        self.node = node  # rows this node writes carry it; only they are its to clean up
        self.admission = Admission(platform)
        self.binder = Binder(platform, tcp_host, tcp_ports, tcp_grace, node, http_port,
                             https_port, tcp_name)
        self.registry = self.binder.registry
        self.sessions: dict[str, AgentConnection] = self.binder.sessions
        self.context = direct(ssl.create_default_context(ssl.Purpose.CLIENT_AUTH))
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self.context.load_cert_chain(tls.cert, tls.key)
        self.context.sni_callback = self._sni
        # --agent-client-cas: a certificate they did not issue fails the handshake; an agent
        # without one is refused at Auth, where the reason reaches it (a TLS 1.3 alert is
        # read as a bare end of stream by many clients). The region domains' certificates,
        # chosen by SNI, ask for one the same way.
        self.client_cas = client_cas
        if client_cas:
            self.context.load_verify_locations(cadata=client_cas)
            self.context.verify_mode = ssl.CERT_OPTIONAL
        # region domains of agent ingresses: agents dialing them get a certificate for them
        self.ingress_names: set[str] = set()
        self.certs: EdgeCerts | None = None
        self._server: Acceptor | None = None
        self._background: set[asyncio.Task[None]] = set()
        self._connections: dict[asyncio.Task[Any], AgentConnection] = {}  # (with their tasks)
        self.changes: Callable[[], Changes | None] = lambda: None  # session events' writer

    async def start(self, host: str, port: int, reuse_port: bool = False) -> None:
        async with self.platform.db.write() as tx:  # this node's sessions of a previous run
            repo = Repo(tx, self.changes())
            for kind in (SESSIONS, TUNNELS, ENDPOINTS):
                for id_, doc in await repo.all_docs(kind):
                    if doc.get("node") == self.node:
                        await repo.delete(kind, id_)
        await self.load_ingress_names()
        await self.binder.tcp.load_reserved()
        await self.platform.restrictions.of("agent")  # (kept while the database is away)
        self._server = Acceptor.streams(
            listen_socket("tunnel listener", host, port, reuse_port),
            caps.process().door("tunnel listener", own=True), self._connection,
            self.context, HANDSHAKE_TIMEOUT).start()
        self._spawn(self._recheck_every(RECHECK_EVERY))

    def _sni(self, sslobj: ssl.SSLObject, name: str | None, _ctx: ssl.SSLContext) -> None:
        if name and self.certs is not None and name.lower() in self.ingress_names:
            sslobj.context = self.certs.context(name.lower(), http=False,
                                                client_cas=self.client_cas, optional=True)

    def changed(self, collection: str) -> None:
        """The API wrote ``collection``: follow agent ingresses, reserved domains, and the
        credentials (and their bot users) of live sessions."""
        if collection == "agent_ingresses":
            self._spawn(self.load_ingress_names())
        elif collection == "reserved_domains":
            self._spawn(self.binder.revalidate())
        elif collection in ("reserved_addrs", "abuse_reports"):
            self._spawn(self.binder.tcp.load_reserved())
        elif collection in ("credentials", "bot_users", "service_users", *RESTRICTION_KINDS):
            self._spawn(self.recheck())

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(_warned(coro))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def load_ingress_names(self) -> None:
        docs = await Repo(self.platform.db.reader()).all_docs(INGRESSES)
        self.ingress_names = {d.lower() for _, doc in docs for d in doc.get("region_domains")
                              or []}

    async def stop_tunnel(self, tunnel_id: str, message: str, code: int) -> bool:
        return await self.binder.stop_tunnel(tunnel_id, message, code)

    async def recheck(self) -> None:
        """End the sessions whose credential (or its bot user) was deleted or deactivated;
        apply a changed ACL to the others."""
        await revocation.recheck(self.admission, self.binder, list(self.sessions.values()))

    async def _recheck_every(self, seconds: float) -> None:
        """Writes made through another node's API reach this one's sessions too."""
        while True:
            await asyncio.sleep(seconds)
            await _warned(self.binder.tcp.load_reserved())
            if self.sessions:
                await _warned(self.recheck())

    async def reconnect_all(self) -> None:
        """End every agent's session (a GOAWAY each): they reconnect and bind again, their
        tunnels recorded anew (a cluster removed this node's rows: ``nodes.lease``)."""
        for session in list(self.sessions.values()):
            await session.conn.close()

    async def stop(self, drain: float = DRAIN_TIMEOUT) -> None:
        """Stop listening, then end every agent's connection at once (a GOAWAY each: the
        SDKs reconnect, to another node when there is one) and let their ends run (tunnels
        dropped, rows deleted) for at most ``drain`` seconds; what is left then is cut off.
        Closing one waits up to a second for the agent's TLS close: one after the other,
        60 agents took a minute."""
        for task in list(self._background):
            task.cancel()
        if self._server is not None:
            self._server.close()
        began = asyncio.get_running_loop().time()
        handlers = list(self._connections)
        closes = [asyncio.create_task(session.conn.close())
                  for session in list(self._connections.values())]
        left: set[asyncio.Task[Any]] = set()
        if handlers:
            _, left = await asyncio.wait([*closes, *handlers], timeout=drain)
        for task in left:
            task.cancel()  # (a cut close aborts its transport)
        if handlers:
            log.info("agent_sessions_drained", connections=len(handlers),
                     cut=len(left.intersection(handlers)),
                     seconds=round(asyncio.get_running_loop().time() - began, 3))
        if self._server is not None:
            await self._server.wait_closed()

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                          peer: tuple[str, int]) -> None:
        conn = MuxConnection(reader, writer, client=False, max_open=AGENT_STREAMS)
        session = AgentConnection(conn, str(peer[0]))
        auth.pre_auth(session)
        session.client_cert = bool(writer.get_extra_info("peercert"))
        if (this := asyncio.current_task()) is not None:  # (for stop: see there)
            self._connections[this] = session
            this.add_done_callback(self._connections.pop)
        watchdog = asyncio.create_task(self._watch(session))
        try:
            while (stream := await session.conn.accept()) is not None:
                task = asyncio.create_task(self._stream(session, stream))
                session.tasks.add(task)
                task.add_done_callback(session.tasks.discard)
        finally:
            watchdog.cancel()
            # Accepting ends with the connection or with the peer's GOAWAY (it opens no more
            # streams, and the SDKs close their side right after): the connection ends here
            # either way, or a peer that sent one, authenticated or not, would hold it open.
            await session.conn.close()
            await self._ended(session)

    async def _stream(self, session: AgentConnection, stream: MuxStream) -> None:
        """One stream the agent opened: a heartbeat, or an RPC, whose stream is closed once
        answered (an agent that never closes its half gets it reset after a while), so
        that RPCs do not use up the session's streams."""
        kind = -1
        try:
            # (asyncio.timeout, not wait_for: the task wait_for makes would hold the error
            # that ends it, whose traceback holds that task: a cycle with the connection in
            # it, freed only by a full collection, which an idle server may not run for long)
            async with asyncio.timeout(RPC_TIMEOUT):
                kind = await rpc.read_type(stream)
            if kind == StreamType.HEARTBEAT:
                await self._heartbeat(session, stream)
                return
            async with asyncio.timeout(RPC_TIMEOUT):
                await self._call(session, stream, kind)
        except (StreamClosed, StreamError, asyncio.IncompleteReadError, rpc.RPCError,
                TimeoutError) as exc:
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
        except Exception:  # a fault of ours: logged, and the agent is not left waiting
            log.exception("agent_rpc_failed", session=session.id, kind=kind)
            stream.reset()
        finally:
            stream.close()

    async def _call(self, session: AgentConnection, stream: MuxStream, kind: int) -> None:
        """One RPC the agent opened a stream for (its type read already)."""
        if kind == StreamType.AUTH:
            await self._auth(session, stream)
        elif not session.id:
            stream.reset()  # nothing but Auth (and heartbeats) before it
        elif kind in (StreamType.BIND, StreamType.START_TUNNEL_WITH_LABEL):
            await self.binder.bind(session, stream, labeled=kind != StreamType.BIND)
        elif kind == StreamType.UNBIND:
            await self.binder.unbind(session, stream)
        elif kind == StreamType.SRV_INFO:
            await rpc.read_message(stream)
            await rpc.reply(stream, {"Region": self.platform.settings.region})
        else:
            await rpc.reply(stream, {"Error": rpc.error_text(
                f"stream type {kind} is not supported by this server", 9999)})

    async def _auth(self, session: AgentConnection, stream: MuxStream) -> None:
        accepted = await auth.admit(self.admission, self.client_cas, session, stream)
        if accepted is None:
            return
        version, extra = accepted
        # the classic ngrok 2 agent binds https and http with no name for one tunnel
        session.twins = str(extra.get("version") or "").startswith("2.")
        session.id = await self._record(session, extra)
        self.sessions[session.id] = session
        await auth.welcome(stream, version, session.id, self.platform.settings.region)

    async def _record(self, session: AgentConnection, extra: dict[str, Any]) -> str:
        sid = ids.new_id(SESSIONS.prefix)
        doc = records.session_doc(self.platform.settings, self.node, session.peer,
                                  session.credential, extra)
        async with self.platform.db.write() as tx:
            await Repo(tx, self.changes()).insert(SESSIONS, sid, doc)
        log.info("agent_session_start", session=sid, credential=session.credential)
        return sid

    async def command(self, session_id: str, kind: int,
                      body: dict[str, Any], timeout: float = 10.0) -> str | None:
        """Send Stop, Restart or Update to the agent of ``session_id``: None if this node
        holds no such session, else the agent's error text ("" when it accepted)."""
        session = self.sessions.get(session_id)
        return None if session is None else await commands.send(session, kind, body, timeout)

    async def _heartbeat(self, session: AgentConnection, stream: MuxStream) -> None:
        loop = asyncio.get_running_loop()
        while True:
            beat = await stream.readexactly(4)
            session.last_beat = loop.time()
            await stream.write(beat)

    async def _watch(self, session: AgentConnection) -> None:
        """Drop a session whose heartbeats stopped (or that never authenticated)."""
        loop = asyncio.get_running_loop()
        session.last_beat = loop.time()
        while True:
            await asyncio.sleep(min(1.0, session.deadline / 4))
            if loop.time() - session.last_beat > session.deadline:
                log.info("agent_session_timeout", session=session.id)
                await session.conn.close()
                return

    async def _ended(self, session: AgentConnection) -> None:
        """The connection is closed: its RPCs in flight see that and finish (a bind is not
        cancelled half-way, which could leave a port taken or a row behind; within
        ``RPC_TIMEOUT``, as every RPC), then its tunnels end and its row goes."""
        if session.tasks:
            await asyncio.wait(list(session.tasks), timeout=RPC_TIMEOUT)
        for task in list(session.tasks):
            task.cancel()
        # Its ports are free at once when the agent said goodbye (GOAWAY) or its credential
        # was revoked; else they wait the grace period for the agent to reconnect.
        clean = session.revoked or session.conn.peer_goaway is not None
        for tunnel_id in list(session.tunnels):
            await self.binder.drop(session, tunnel_id, clean)
        if session.id and self.sessions.pop(session.id, None) is not None:
            with contextlib.suppress(Exception):
                async with self.platform.db.write() as tx:
                    await Repo(tx, self.changes()).delete(SESSIONS, session.id)
            log.info("agent_session_stop", session=session.id, goodbye=clean)

