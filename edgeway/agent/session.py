"""The agent's side of the tunnel protocol: dial ``server_addr`` over TLS, authenticate, keep
heartbeats going, bind tunnels, and for every proxy stream the server opens dial the tunnel's
local address and splice (through an inspection tap, ``edgeway.agent.inspect``, for HTTP
tunnels with ``inspect`` on). When the connection drops the agent redials with capped
exponential back-off (0.5 s doubling to 30 s) and re-binds the tunnels started from the
config with their old ids, so they come back with the same URLs. Tunnels started through the
local API are not re-bound: as the spec says, they do not survive a network outage.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import platform
import secrets
import ssl
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog

from edgeway import __version__
from edgeway.agent.captures import Store
from edgeway.agent.config import AgentConfig, TunnelConfig
from edgeway.agent.inspect import Tap, splice_tapped
from edgeway.agent.settings import server_host
from edgeway.tunnel import rpc
from edgeway.tunnel.muxado.aio import MuxConnection
from edgeway.tunnel.muxado.events import StreamError
from edgeway.tunnel.muxado.stream import MuxStream, StreamClosed
from edgeway.tunnel.pipes import StreamPipe, splice
from edgeway.tunnel.rpc import StreamType

log = structlog.get_logger()
MAX_BACKOFF = 30.0


class BindFailed(Exception):
    """The server refused a bind; the message is its reason."""


class NotConnected(Exception):
    pass


@dataclass
class LocalTunnel:
    config: TunnelConfig
    from_config: bool
    id: str = ""
    url: str = ""
    proto: str = ""
    requests: int = 0  # proxied connections so far


def _host_header(c: TunnelConfig, opts: dict[str, Any]) -> None:
    """``host_header``, applied by the edge: ``rewrite`` to the local address (ForwardsTo),
    or a given host; ``preserve`` (the default) passes the client's on."""
    if c.host_header == "rewrite":
        opts["HostHeaderRewrite"] = True
    elif c.host_header not in ("", "preserve"):
        opts["RequestHeaders"] = {"Add": [f"Host: {c.host_header}"], "Remove": ["Host"]}


def _bind_message(t: LocalTunnel) -> tuple[int, dict[str, Any]]:
    c = t.config
    if c.labels:
        return StreamType.START_TUNNEL_WITH_LABEL, {
            "Labels": c.labels, "ForwardsTo": c.addr.url(), "ForwardsProto": "",
            "Metadata": c.metadata}
    opts: dict[str, Any]
    if c.proto == "tcp":
        proto, opts = "tcp", {"Addr": c.remote_addr}
        if c.traffic_policy:
            opts["TrafficPolicy"] = c.traffic_policy
    else:
        opts = {"Domain": c.domain, "Subdomain": c.subdomain, "Hostname": ""}
        proto = "tls" if c.proto == "tls" else (
            "http" if tuple(c.schemes) == ("http",) else "https")
        if c.basic_auth:
            opts["BasicAuth"] = {"Credentials": [
                {"Username": u, "CleartextPassword": p} for u, p in c.basic_auth]}
        if c.traffic_policy and c.proto == "http":
            opts["TrafficPolicy"] = c.traffic_policy
        if c.proto == "http":
            _host_header(c, opts)
    return StreamType.BIND, {"Id": t.id, "Proto": proto, "ForwardsTo": c.addr.url(),
                             "ForwardsProto": "", "Opts": opts,
                             "Extra": {"Token": "", "Metadata": c.metadata}}


def _local_tls() -> ssl.SSLContext:
    """Local https:// upstreams usually have self-signed certificates: not verified."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


LOCAL_TLS = _local_tls()


def _context(root_cas: str, cert: str = "", key: str = "") -> ssl.SSLContext:
    if root_cas in ("trusted", "host", ""):
        ctx = ssl.create_default_context()
    else:
        ctx = ssl.create_default_context(cafile=root_cas)
    if cert:
        ctx.load_cert_chain(cert, key)
    return ctx


def _refused(exc: BaseException, server: str) -> ssl.SSLError | None:
    """A TLS alert refusing our client certificate (or its absence), with what to do."""
    text = str(exc)
    if not isinstance(exc, ssl.SSLError) or not ("CERTIFICATE_REQUIRED" in text
                                                 or "UNKNOWN_CA" in text):
        return None
    return ssl.SSLError(f"{server} refused the TLS handshake: the server requires an agent "
                        "client certificate issued by its agent certificate authority "
                        f"(client_cert and client_key in the config; {exc.reason or text})")


class AgentSession:
    def __init__(self, config: AgentConfig, resolve: dict[str, str] | None = None,
                 on_change: Callable[[], None] | None = None) -> None:
        self.config = config
        self.resolve = resolve or {}
        self.tunnels: dict[str, LocalTunnel] = {}
        self.status = "connecting"
        self.error = ""
        self.session_id = ""
        self.cookie = ""
        self.latency = 0.0
        self._conn: MuxConnection | None = None
        self._authed = False  # the current connection's Auth was answered
        self._online = asyncio.Event()
        self._stop = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._on_change = on_change or (lambda: None)
        # captured HTTP exchanges (edgeway.agent.inspect); None: inspect_db_size -1
        self.inspector = Store(config.inspect_db_size) if config.inspect_db_size != -1 else None

    # -- public ------------------------------------------------------------------------------

    async def run(self, names: list[str]) -> None:
        """Connect (and reconnect) until ``stop``; bind the named config tunnels each time."""
        for name in names:
            self.tunnels[name] = LocalTunnel(self.config.tunnels[name], from_config=True)
        delay = 0.5
        while not self._stop.is_set():
            started = asyncio.get_running_loop().time()
            try:
                await self._session()
            except (OSError, ssl.SSLError, TimeoutError, rpc.RPCError, StreamClosed,
                    StreamError, asyncio.IncompleteReadError, NotConnected) as exc:
                self.error = self._untrusted() or str(exc) or type(exc).__name__
                log.warning("session_lost", error=self.error)
            self._set_offline()
            if self._stop.is_set():
                break
            if asyncio.get_running_loop().time() - started > 30:
                delay = 0.5  # it was up for a while: start the back-off over
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), delay)
            delay = min(MAX_BACKOFF, delay * 2)

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
        if config.name in self.tunnels:
            raise BindFailed(f"a tunnel named '{config.name}' is already running")
        tunnel = LocalTunnel(config, from_config)
        await self._bind(self._conn, tunnel)
        self.tunnels[config.name] = tunnel
        self._on_change()
        return tunnel

    async def stop_tunnel(self, name: str) -> bool:
        tunnel = self.tunnels.pop(name, None)
        if tunnel is None:
            return False
        if self._conn is not None and tunnel.id:
            with contextlib.suppress(StreamClosed, StreamError, rpc.RPCError,
                                     asyncio.IncompleteReadError):
                stream = await self._conn.open_stream()
                await stream.write(struct.pack(">I", StreamType.UNBIND)
                                   + json.dumps({"Id": tunnel.id}).encode())
                await asyncio.wait_for(rpc.read_message(stream), 10)
        self._on_change()
        return True

    # -- one session -------------------------------------------------------------------------

    async def _dial(self) -> MuxConnection:
        opts = self.config.options
        host = server_host(self.config.server_addr, opts.region)
        port = int(self.config.server_addr.rpartition(":")[2])
        target = self.resolve.get(host, host)
        context = _context(self.config.root_cas, opts.client_cert, opts.client_key)
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(
                target, port, ssl=context, server_hostname=host), opts.connect_timeout)
        except TimeoutError:
            raise TimeoutError(f"no TLS connection to {host}:{port} within "
                               f"{opts.connect_timeout:g}s (connect_timeout)") from None
        except ssl.SSLError as exc:  # (TLS 1.2: the server refuses in the handshake)
            raise _refused(exc, self.config.server_addr) or exc from None
        return MuxConnection(reader, writer, client=True)

    async def _session(self) -> None:
        self._conn, self._authed = None, False
        conn = self._conn = await self._dial()
        try:
            await self._auth(conn)
            self._authed = True
            beat = asyncio.create_task(self._heartbeat(conn))
            serve = asyncio.create_task(self._accept(conn))
            for tunnel in list(self.tunnels.values()):
                if not tunnel.from_config:  # started through the API: not re-bound
                    del self.tunnels[tunnel.config.name]
                    continue
                try:
                    await self._bind(conn, tunnel)
                except BindFailed as exc:
                    tunnel.url, tunnel.proto = "", ""
                    log.warning("bind_refused", tunnel=tunnel.config.name, error=str(exc))
            self.status = "online"
            self._online.set()
            self._on_change()
            await conn.closed.wait()
            beat.cancel()
            serve.cancel()
        finally:
            await conn.close()

    async def _call(self, conn: MuxConnection, kind: int, body: dict[str, Any]
                    ) -> dict[str, Any]:
        stream = await conn.open_stream()
        await stream.write(struct.pack(">I", kind) + json.dumps(body).encode())
        answer = await asyncio.wait_for(rpc.read_message(stream), 15)
        return answer

    async def _auth(self, conn: MuxConnection) -> None:
        c = self.config
        answer = rpc.folded(await self._call(conn, StreamType.AUTH, {
            "Version": ["3", "2"], "ClientId": self.session_id, "Extra": {
                "OS": platform.system().lower(), "Arch": platform.machine(),
                "Authtoken": c.authtoken, "Version": __version__, "Hostname": "",
                "UserAgent": f"edgeway-agent/{__version__}", "Metadata": c.metadata,
                "Cookie": self.cookie, "HeartbeatInterval": int(c.heartbeat_interval * 1e9),
                "HeartbeatTolerance": int(c.heartbeat_tolerance * 1e9),
                "ClientType": "edgeway-agent", "StopUnsupportedError": "",
                "RestartUnsupportedError": "",
                "UpdateUnsupportedError": "the Edgeway agent is updated with its package"}}))
        if answer.get("error"):
            self._stop.set()  # a refused token does not get better by retrying
            self.status, self.error = "refused", str(answer["error"]).split("\n")[0]
            raise NotConnected(self.error)
        self.session_id = str(answer.get("clientid") or "")
        self.cookie = str((answer.get("extra") or {}).get("cookie") or "")

    async def _bind(self, conn: MuxConnection, tunnel: LocalTunnel) -> None:
        kind, body = _bind_message(tunnel)
        answer = rpc.folded(await self._call(conn, kind, body))
        if answer.get("error"):
            raise BindFailed(str(answer["error"]).split("\nERR_")[0])
        tunnel.id = str(answer.get("id") or "")
        tunnel.url = str(answer.get("url") or "")
        tunnel.proto = str(answer.get("proto") or "")
        log.info("tunnel_bound", tunnel=tunnel.config.name, url=tunnel.url,
                 addr=tunnel.config.addr.url())

    async def _heartbeat(self, conn: MuxConnection) -> None:
        """Beat every interval; no echo within the tolerance ends the session."""
        stream = await conn.open_stream()
        await stream.write(struct.pack(">I", StreamType.HEARTBEAT))
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.config.heartbeat_interval)
            beat = secrets.token_bytes(4)
            sent = loop.time()
            await stream.write(beat)
            try:
                echo = await asyncio.wait_for(stream.readexactly(4),
                                              self.config.heartbeat_tolerance)
            except (TimeoutError, asyncio.IncompleteReadError, StreamClosed):
                log.warning("heartbeat_missed")
                await conn.close()
                return
            if echo == beat:
                self.latency = loop.time() - sent

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
                msg = rpc.folded(await rpc.read_message(stream))
                for name, t in list(self.tunnels.items()):
                    if t.id == msg.get("id"):
                        del self.tunnels[name]
                        log.warning("tunnel_stopped_by_server", tunnel=name,
                                    message=msg.get("message"))
                        self._on_change()
            else:
                stream.reset()
        except (StreamClosed, StreamError, asyncio.IncompleteReadError, rpc.RPCError):
            stream.reset()

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
        (size,) = struct.unpack("<q", await stream.readexactly(8))
        if not 0 < size <= 1 << 16:
            raise rpc.RPCError("bad proxy header length")
        header = rpc.folded(json.loads(await stream.readexactly(size)))
        tunnel = next((t for t in self.tunnels.values() if t.id == header.get("id")), None)
        if tunnel is None:
            stream.reset()
            return
        tunnel.requests += 1
        self._on_change()
        addr = tunnel.config.addr
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(
                addr.host, addr.port, ssl=LOCAL_TLS if addr.scheme == "https" else None), 10)
        except (OSError, TimeoutError, ssl.SSLError) as exc:
            if tunnel.config.proto == "http":  # the client gets a page saying why
                body = (f"The Edgeway agent could not reach {addr.url()}: {exc}\n").encode()
                await stream.write(b"HTTP/1.1 502 Bad Gateway\r\nContent-Type: text/plain\r\n"
                                   + f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
                                   .encode() + body, eof=True)
            else:
                stream.reset()
            return
        store, c = self.inspector, tunnel.config
        if store is not None and c.proto == "http" and c.inspect:
            tap = Tap(store, c.name, str(header.get("clientaddr") or ""))
            await splice_tapped(reader, writer, stream, tap)
        else:
            await splice(reader, writer, StreamPipe(stream))
