"""The agent's side of the tunnel protocol: dial ``server_addr`` (``edgeway.agent.dial``),
authenticate, keep heartbeats going, bind tunnels, and serve every proxy stream the server
opens (``edgeway.agent.proxy``). When the connection drops the agent redials with capped
exponential back-off (0.5 s doubling to 30 s) and re-binds the tunnels started from the
config with their old ids, so they come back with the same URLs; across agent restarts the
ids are kept on disk (``edgeway.agent.state``). Tunnels started through the local API are not
re-bound: as the spec says, they do not survive a network outage.

A bind the server refuses leaves the tunnel listed with the reason (``LocalTunnel.error``);
the session's last failure is ``error``, and ``hint`` says what to do about it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import struct
from collections import deque
from collections.abc import Callable
from typing import Any

import structlog

from edgeway.agent import dial, heartbeat, proxy
from edgeway.agent.bindmsg import auth_message, bind_message
from edgeway.agent.captures import Exchange, Store
from edgeway.agent.config import AgentConfig, TunnelConfig
from edgeway.agent.proxy import LocalTunnel
from edgeway.agent.state import TunnelIds
from edgeway.tunnel import rpc
from edgeway.tunnel.muxado.aio import MuxConnection
from edgeway.tunnel.muxado.events import StreamError
from edgeway.tunnel.muxado.stream import MuxStream, StreamClosed
from edgeway.tunnel.rpc import StreamType

log = structlog.get_logger()
MAX_BACKOFF = 30.0
RECENT = 20  # HTTP exchanges kept for the console
LOST = (OSError, ssl.SSLError, TimeoutError, rpc.RPCError, StreamClosed, StreamError,
        asyncio.IncompleteReadError)

__all__ = ["LOST", "AgentSession", "BindFailed", "LocalTunnel", "NotConnected"]


class BindFailed(Exception):
    """The server refused a bind; the message is its reason."""


class NotConnected(Exception):
    pass


class AgentSession:
    def __init__(self, config: AgentConfig, resolve: dict[str, str] | None = None,
                 on_change: Callable[[], None] | None = None,
                 ids: TunnelIds | None = None) -> None:
        self.config = config
        self.resolve = resolve or {}
        self.tunnels: dict[str, LocalTunnel] = {}
        self.status = "connecting"
        self.error = ""
        self.session_id = ""
        self.cookie = ""
        self.latency = 0.0  # seconds: the last heartbeat's round trip
        self.recent: deque[tuple[str, Exchange]] = deque(maxlen=RECENT)
        self.ids = ids  # where config tunnels keep their ids across restarts
        self._conn: MuxConnection | None = None
        self._authed = False  # the current connection's Auth was answered
        self._first = True  # no session has bound the config tunnels yet
        self._online = asyncio.Event()
        self._stop = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._starting: set[str] = set()  # names of tunnels the local API is binding
        self._on_change = on_change or (lambda: None)
        # captured HTTP exchanges (edgeway.agent.inspect); None: inspect_db_size -1
        self.inspector = Store(config.inspect_db_size) if config.inspect_db_size != -1 else None

    @property
    def hint(self) -> str:
        return dial.hint(self.error, self.config) if self.error else ""

    # -- public ------------------------------------------------------------------------------

    def add(self, names: list[str]) -> None:
        """List the named config tunnels (bound once the session is up)."""
        if self.ids is not None:
            self.ids.sweep()
        for name in names:
            tunnel = LocalTunnel(self.config.tunnels[name], from_config=True)
            tunnel.id = self.ids.get(name) if self.ids is not None else ""
            self.tunnels[name] = tunnel

    async def run(self, names: list[str] | None = None) -> None:
        """Connect (and reconnect) until ``stop``; bind the config tunnels (``add``, or
        ``names``) each time. When the server refuses every one of them in the first session,
        the agent stops: ``status`` "refused", ``error`` the reasons."""
        if names is not None:
            self.add(names)
        delay = 0.5
        while not self._stop.is_set():
            started = asyncio.get_running_loop().time()
            try:
                await self._session()
            except (*LOST, NotConnected) as exc:
                self.error = self._untrusted() or str(exc) or type(exc).__name__
                log.warning("session_lost", error=self.error, hint=self.hint or None)
                self._on_change()
            self._set_offline()
            if self._stop.is_set():
                break
            if asyncio.get_running_loop().time() - started > 30:
                delay = 0.5  # it was up for a while: start the back-off over
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), delay)
            delay = min(MAX_BACKOFF, delay * 2)
        if self.ids is not None:
            self.ids.release()

    def _untrusted(self) -> str:
        """With TLS 1.3 a server checks our certificate after our side of the handshake is
        done: when it does not trust it, the connection just ends before Auth is answered."""
        cert = self.config.options.client_cert
        if self._authed or self._conn is None or not cert:
            return ""
        return (f"{self.config.server_addr} ended the connection before answering Auth: most "
                "likely it requires an agent client certificate and does not trust client_cert "
                f"({cert}); it must be issued by the server's agent certificate authority")

    async def stop(self) -> None:
        self._stop.set()
        if self._conn is not None:
            await self._conn.close()

    async def wait_online(self, timeout: float) -> bool:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._online.wait(), timeout)
        return self._online.is_set()

    async def start_tunnel(self, config: TunnelConfig, from_config: bool = False) -> LocalTunnel:
        """Bind a tunnel now (the local API). BindFailed with the server's reason."""
        if not self._online.is_set() or self._conn is None:
            raise NotConnected("a successful tunnel session has not yet been established")
        if config.name in self.tunnels or config.name in self._starting:
            raise BindFailed(f"a tunnel named '{config.name}' is already running")
        tunnel = LocalTunnel(config, from_config)
        self._starting.add(config.name)  # (a second start of the name while this binds)
        try:
            await self._bind(self._conn, tunnel)
        finally:
            self._starting.discard(config.name)
        self.tunnels[config.name] = tunnel
        self._on_change()
        return tunnel

    async def stop_tunnel(self, name: str) -> bool:
        tunnel = self.tunnels.pop(name, None)
        if tunnel is None:
            return False
        if tunnel.from_config and self.ids is not None:
            self.ids.release(name)
        if self._conn is not None and tunnel.id and not tunnel.error:
            with contextlib.suppress(StreamClosed, StreamError, rpc.RPCError,
                                     asyncio.IncompleteReadError, TimeoutError):
                await self._call(self._conn, StreamType.UNBIND, {"Id": tunnel.id})
        self._on_change()
        return True

    # -- one session -------------------------------------------------------------------------

    async def _session(self) -> None:
        self._conn, self._authed = None, False
        conn = self._conn = await dial.dial(self.config, self.resolve)
        tasks: list[asyncio.Task[None]] = []
        try:
            await self._auth(conn)
            self._authed = True
            tasks += [asyncio.create_task(heartbeat.beat(conn, self.config, self._latency)),
                      asyncio.create_task(self._accept(conn))]
            for tunnel in list(self.tunnels.values()):
                if not tunnel.from_config:  # started through the API: not re-bound
                    del self.tunnels[tunnel.config.name]
                    continue
                with contextlib.suppress(BindFailed):  # (the tunnel shows the reason)
                    await self._bind(conn, tunnel)
            if self._all_refused():
                return
            self.status, self.error = "online", ""
            self._online.set()
            self._on_change()
            await conn.closed.wait()
        finally:  # (however the session ended: a bind that failed too)
            for task in tasks:
                task.cancel()
            await conn.close()

    def _all_refused(self) -> bool:
        """In the first session, the server refused every config tunnel (and there was one):
        the agent stops, as the ngrok agent does, instead of serving nothing."""
        first, self._first = self._first, False
        if not first or not self.tunnels or any(not t.error for t in self.tunnels.values()):
            return False
        self._stop.set()
        self.status = "refused"
        self.error = "; ".join(f"the server refused tunnel {name}: {t.error}"
                               for name, t in self.tunnels.items())
        log.error("tunnels_refused", error=self.error)
        self._on_change()
        return True

    async def _call(self, conn: MuxConnection, kind: int, body: dict[str, Any]
                    ) -> dict[str, Any]:
        """One RPC on a stream of its own, closed after (the server counts the streams a
        session holds)."""
        stream = await conn.open_stream()
        try:
            await stream.write(struct.pack(">I", kind) + json.dumps(body).encode())
            answer = await asyncio.wait_for(rpc.read_message(stream), 15)
        finally:
            stream.close()
        return answer

    async def _auth(self, conn: MuxConnection) -> None:
        answer = rpc.folded(await self._call(conn, StreamType.AUTH, auth_message(
            self.config, self.session_id, self.cookie)))
        if answer.get("error"):
            self._stop.set()  # a refused token does not get better by retrying
            self.status, self.error = "refused", str(answer["error"]).split("\n")[0]
            raise NotConnected(self.error)
        self.session_id = str(answer.get("clientid") or "")
        self.cookie = str((answer.get("extra") or {}).get("cookie") or "")

    async def _bind(self, conn: MuxConnection, tunnel: LocalTunnel) -> None:
        answer = rpc.folded(await self._call(conn, *bind_message(tunnel.config, tunnel.id)))
        error = str(answer.get("error") or "").split("\nERR_")[0]
        if error and tunnel.id and tunnel.id in error:  # a saved id this credential cannot use
            tunnel.id = ""
            answer = rpc.folded(await self._call(conn, *bind_message(tunnel.config, "")))
            error = str(answer.get("error") or "").split("\nERR_")[0]
        if error:
            tunnel.url, tunnel.proto, tunnel.error, tunnel.bound = "", "", error, False
            log.warning("bind_refused", tunnel=tunnel.config.name, error=error)
            self._on_change()
            raise BindFailed(error)
        tunnel.id = str(answer.get("id") or "")
        tunnel.url = str(answer.get("url") or "")
        tunnel.proto, tunnel.error, tunnel.bound = str(answer.get("proto") or ""), "", True
        if tunnel.from_config and self.ids is not None:
            self.ids.put(tunnel.config.name, tunnel.id)
        log.info("tunnel_bound", tunnel=tunnel.config.name, url=tunnel.url,
                 addr=tunnel.config.addr.url())

    def _latency(self, seconds: float) -> None:
        self.latency = seconds
        self._on_change()

    def _set_offline(self) -> None:
        if self._online.is_set() or self.status == "online":
            self._online.clear()
            self.status = "reconnecting" if not self._stop.is_set() else "stopped"
            self._on_change()

    # -- streams the server opens -------------------------------------------------------------

    async def _accept(self, conn: MuxConnection) -> None:
        while (stream := await conn.accept()) is not None:
            task = asyncio.create_task(self._stream(conn, stream))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _stream(self, conn: MuxConnection, stream: MuxStream) -> None:
        kind = -1
        try:
            kind = await rpc.read_type(stream)
            if kind == StreamType.PROXY:
                await self._proxy(stream)
            elif kind == StreamType.HEARTBEAT:
                while True:
                    await stream.write(await stream.readexactly(4))
            elif kind in (StreamType.STOP, StreamType.RESTART, StreamType.UPDATE):
                await rpc.read_message(stream)
                await self._command(conn, stream, kind)
            elif kind == StreamType.STOP_TUNNEL:
                self._stopped(rpc.folded(await rpc.read_message(stream)))
            else:
                stream.reset()
        except (StreamClosed, StreamError, asyncio.IncompleteReadError, rpc.RPCError):
            stream.reset()
        finally:
            if kind != StreamType.PROXY:  # (a command's stream: the server counts them)
                stream.close()

    def _stopped(self, msg: dict[str, Any]) -> None:
        for name, t in list(self.tunnels.items()):
            if t.id == msg.get("id"):
                del self.tunnels[name]
                if t.from_config and self.ids is not None:
                    self.ids.release(name)
                log.warning("tunnel_stopped_by_server", tunnel=name, message=msg.get("message"))
                self._on_change()

    async def _command(self, conn: MuxConnection, stream: MuxStream, kind: int) -> None:
        if kind == StreamType.UPDATE:
            await rpc.reply(stream, {"Error": "the Edgeway agent is updated with its package"})
            return
        await rpc.reply(stream, {})
        if kind == StreamType.STOP:
            log.info("stopped_by_server")
            self._stop.set()
        else:
            log.info("restart_requested_by_server")
        await asyncio.sleep(0.1)  # let the reply leave before the session goes
        await conn.close()

    async def _proxy(self, stream: MuxStream) -> None:
        header = await proxy.read_header(stream)
        tunnel = next((t for t in self.tunnels.values() if t.id == header.get("id")), None)
        if tunnel is None:
            stream.reset()
            return
        await proxy.serve(stream, tunnel, str(header.get("clientaddr") or ""),
                          self.inspector, self.recent.append, self._on_change)
