"""TCP tunnels' public side: a port from the pool for each (the one asked for, the one a
dropped session of the same tunnel held, or a free one, preferring a stable choice per
credential and tunnel), a listener on it that splices each client into a new stream, and the
port's return to the pool when the tunnel ends (at once, or after the grace period when its
agent dropped without a goodbye). Ports of reserved addresses (``/reserved_addrs``) are
only given to binds that ask for them, and to none while a TCP edge serves the address."""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Callable
from functools import partial
from typing import Any

import structlog

from edgeway import catalog
from edgeway.accept import Peer
from edgeway.catalog import abuse
from edgeway.catalog.addrs import port_of
from edgeway.platform import Platform
from edgeway.store.repo import Repo
from edgeway.tunnel import acl, binds, restrict
from edgeway.tunnel.binds import BindRefused
from edgeway.tunnel.muxado.events import StreamError
from edgeway.tunnel.muxado.stream import StreamClosed
from edgeway.tunnel.pipes import UpstreamGone, splice
from edgeway.tunnel.ports import PortPool
from edgeway.tunnel.registry import Tunnel
from edgeway.tunnel.tcp import Closed, Offer, TcpListener, client_addr

log = structlog.get_logger()
LISTEN_TRIES = 16  # free ports tried when the system refuses one (another process holds it)


class TcpBinds:
    def __init__(self, platform: Platform, host: str, ports: tuple[int, int],
                 grace: float, name: str = "") -> None:
        self.platform, self.host = platform, host  # the address the ports are listened on
        self.name = name or host  # what the tunnels are published as (URLs, addresses, ACL)
        self.pool = PortPool(ports[0], ports[1], grace)
        self.listeners: dict[str, TcpListener] = {}  # tunnel id -> its public listener
        self.serving: dict[str, Tunnel] = {}  # tunnel id -> the tunnel its listener serves
        # tunnel id -> set when it is back: a tunnel moving to another node, whose listener
        # stays (``park``) and whose connections wait for it
        self.parked: dict[str, asyncio.Event] = {}
        # Set by the edge: the tunnel a connection from (ip, port) to a TCP tunnel's address
        # goes to (the tunnel's traffic policy may refuse it, or forward it to an internal
        # endpoint's), None when refused.
        # (the last argument: the address the connection was accepted on)
        self.connecting: Callable[[Tunnel, str, int, Any], Tunnel | None] = \
            lambda tunnel, _ip, _port, _sockname: tunnel
        # Set by the edge: the TLS a tunnel's clients speak, terminated at the edge (its
        # traffic policy's terminate-tls), or None
        self.terminating: Callable[[Tunnel], ssl.SSLContext | None] = lambda _tunnel: None
        # Set by the edge: the TCP edge serving a port (a reserved address put on an edge).
        self.edge_port: Callable[[int], str | None] = lambda _port: None
        # Set by the edge: why an address is taken down (an abuse report), or None
        self.banned: Callable[[str], str | None] = lambda _addr: None
        self.closed: Closed | None = None  # set by the server: each connection's end
        self.offer: Offer | None = None  # set by ``edgeway serve --workers``
        self._closing: set[asyncio.Task[None]] = set()

    async def load_reserved(self) -> None:
        """Follow the reserved addresses of this host, and those taken down after an abuse
        report (never handed out as a generated port), at start, on a change, and every
        recheck for changes made through another node."""
        repo = Repo(self.platform.db.reader())
        addrs = [str(doc.get("addr", "")) for _id, doc in
                 await repo.all_docs(catalog.BY_COLLECTION["reserved_addrs"])]
        addrs += abuse.banned(await repo.all_docs(catalog.BY_COLLECTION["abuse_reports"]))
        ports = {port_of(addr) for addr in addrs
                 if addr.rpartition(":")[0].strip("[]") == self.name}
        self.pool.reserve({p for p in ports if p is not None})

    @staticmethod
    def _now() -> float:
        return asyncio.get_running_loop().time()

    async def listen(self, rules: list[str], tunnel: Tunnel, stable: int) -> None:
        """Give ``tunnel`` a port the ACL ``rules`` allow and listen on it; BindRefused when
        none can be had. ``stable``: a number to pick the same free port again by."""
        now, pool = self._now(), self.pool
        asked = binds.requested_port(tunnel.req.addr, self.name) or pool.held(tunnel.id, now)
        if asked is not None:
            target = f"{self.name}:{asked}"
            acl.require(rules, target)
            if (why := self.banned(target)) is not None:
                raise BindRefused(why)
            if (edge := self.edge_port(asked)) is not None:
                raise BindRefused(
                    f"the address {target} is served by the cloud endpoint '{edge}': bind an "
                    "internal endpoint (tcp://NAME.internal:PORT) for its policy to forward to"
                    if edge.startswith("ep_") else
                    f"the address {target} is served by the TCP edge '{edge}': bind the "
                    "tunnel with labels that edge's backend follows")
            if not pool.take(tunnel.id, asked, now, tunnel.credential):
                raise BindRefused(f"the address {target} is already bound" + (
                    " (held for the reconnect of the agent that bound it, up to "
                    f"{pool.grace:g} s)" if pool.holding(asked) else ""))
            try:
                await self._open(tunnel, asked)
            except OSError as exc:
                pool.release(tunnel.id, asked)
                raise BindRefused(f"cannot listen on {target}: {exc.strerror}") from None
            return
        allowed = acl.ports(rules, self.name)
        preferred = pool.low + stable % (pool.high - pool.low + 1)
        for _ in range(LISTEN_TRIES):
            port = pool.take_any(tunnel.id, preferred, allowed, now)
            if port is None:
                break
            try:
                await self._open(tunnel, port)
                return
            except OSError as exc:
                log.warning("tcp_port_unavailable", port=port, error=exc.strerror)
                pool.block(tunnel.id, port, now)
        raise BindRefused(f"no TCP address this credential may bind is free (ports "
                          f"{pool.low}-{pool.high}, ACL: {acl.text(rules)})")

    async def close(self, tunnel: Tunnel, clean: bool) -> None:
        """Stop listening for ``tunnel``: a clean end frees its port at once, otherwise the
        port waits the grace period for the agent to re-bind it."""
        if self.serving.get(tunnel.id, tunnel) is not tunnel:
            return  # (the listener serves the tunnel of that id bound since)
        self.serving.pop(tunnel.id, None)
        back = self.parked.pop(tunnel.id, None)
        if back is not None:
            back.set()  # (its waiting connections end)
        listener = self.listeners.pop(tunnel.id, None)
        if listener is not None:
            await listener.close()
        if tunnel.port:
            if clean:
                self.pool.release(tunnel.id, tunnel.port)
            else:
                self.pool.hold(tunnel.id, tunnel.port, self._now(), tunnel.credential)

    def park(self, tunnel: Tunnel, seconds: float) -> None:
        """``tunnel`` is moving to another node (its node left or died): its listener stays
        and its port is held for it; a connection arriving meanwhile waits for it to be
        bound again (here or on another node: ``_open`` adopts the listener) for up to
        ``seconds``, after which the listener closes."""
        if self.serving.get(tunnel.id) is not tunnel or tunnel.id not in self.listeners:
            return
        del self.serving[tunnel.id]
        self.pool.hold(tunnel.id, tunnel.port, self._now(), tunnel.credential)
        back = self.parked[tunnel.id] = asyncio.Event()
        asyncio.get_running_loop().call_later(seconds, self._unpark, tunnel.id, back)

    def _unpark(self, tunnel_id: str, back: asyncio.Event) -> None:
        """A parked tunnel that did not come back in time: its listener closes (its port
        stays held for the grace period)."""
        if self.parked.get(tunnel_id) is not back:
            return
        del self.parked[tunnel_id]
        back.set()
        listener = self.listeners.pop(tunnel_id, None)
        if listener is not None:
            task = asyncio.get_running_loop().create_task(listener.close())
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)

    async def mirror(self, tunnel: Tunnel) -> None:
        """Serve another node's TCP tunnel on its port here too (a cluster: any node serves
        any tunnel); when this node cannot listen there, it says so and serves the rest.
        An internal TCP endpoint has no port: nothing to listen on."""
        if not tunnel.port:
            return
        if not self.pool.take(tunnel.id, tunnel.port, self._now(), tunnel.credential):
            log.warning("tcp_mirror_port_taken", tunnel=tunnel.id, port=tunnel.port)
            return
        try:
            await self._open(tunnel, tunnel.port)
        except OSError as exc:
            self.pool.release(tunnel.id, tunnel.port)
            log.warning("tcp_mirror_failed", tunnel=tunnel.id, port=tunnel.port,
                        error=exc.strerror)

    async def _open(self, tunnel: Tunnel, port: int) -> None:
        parked = self.listeners.get(tunnel.id) if tunnel.id in self.parked else None
        if parked is not None and parked.port == port:  # (back: the listener is its again)
            self.parked.pop(tunnel.id).set()
        else:
            if parked is not None:  # (back on another port: the parked listener goes)
                self.parked.pop(tunnel.id).set()
                await self.listeners.pop(tunnel.id).close()
            listener = TcpListener(self.host, port, partial(self._client, tunnel.id),
                                   tunnel.id, self.closed, partial(self._offer, tunnel.id),
                                   partial(self._tls, tunnel.id))
            await listener.start()
            self.listeners[tunnel.id] = listener
        tunnel.port, tunnel.url = port, f"tcp://{self.name}:{port}"
        self.serving[tunnel.id] = tunnel

    def _tls(self, tunnel_id: str) -> ssl.SSLContext | None:
        tunnel = self.serving.get(tunnel_id)
        return self.terminating(tunnel) if tunnel is not None else None

    async def _offer(self, tunnel_id: str, sock: socket.socket, peer: Peer) -> bool:
        tunnel = self.serving.get(tunnel_id)
        return self.offer is not None and tunnel is not None and tunnel_id not in self.parked \
            and await self.offer(sock, "tcp", peer, tunnel_id, (tunnel,))

    async def take(self, sock: socket.socket, tunnel_id: str, peer: Peer) -> None:
        """A connection another worker accepted on this tunnel's port (a mirror of it)."""
        listener = self.listeners.get(tunnel_id)
        if listener is None:
            sock.close()
        else:
            await listener.adopt(sock, peer)

    async def _serving(self, tunnel_id: str) -> Tunnel | None:
        """The tunnel a listener serves; while it is parked, once it is back."""
        back = self.parked.get(tunnel_id)
        if back is not None:
            await back.wait()  # (set when it is back, or when the wait is over)
        return self.serving.get(tunnel_id)

    async def _client(self, tunnel_id: str, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter, peer: tuple[str, int]) -> None:
        tunnel = await self._serving(tunnel_id)
        if tunnel is None:
            return  # (it did not come back)
        target = self.connecting(tunnel, peer[0], peer[1], writer.get_extra_info("sockname")) \
            if restrict.allowed(tunnel.req, peer[0]) else None
        if target is None or await self.platform.restrictions.refusing("endpoints", peer[0]):
            return  # closed: a TCP client gets no page
        try:
            pipe = await target.open(client_addr(peer), "tcp")
        except (StreamError, StreamClosed, UpstreamGone):
            return  # the agent is going away: a closed connection, not a hang
        await splice(reader, writer, pipe)
