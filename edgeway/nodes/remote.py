"""The other nodes' tunnels in this node's registry. Each ``tunnels`` row a live node recorded
becomes a ``Tunnel`` here whose carrier is that node (``RemoteNode``, an ``Opener``): the edge
finds it by host name, labels or id as it finds its own, compiles the same modules from the
same bind request (stored sealed in the row), and a public connection for it opens a stream of
the link to that node; a TCP tunnel's port is listened on here too. Tunnel groups, pooled
names and labeled backends thus span nodes, and a bind here that would take a name another
node's tunnel holds is refused as it is for a local one.

The set follows the ``tunnels``, ``tunnel_sessions`` and ``nodes`` changes (announced by every
node, carried by LISTEN/NOTIFY) and every heartbeat; a node that is gone takes its tunnels
along at once. A tunnel id held here (its agent reconnected to this node) is never replaced
by another node's row of it."""

from __future__ import annotations

import asyncio
import collections
import json
from collections.abc import Callable, Coroutine
from functools import partial
from typing import Any

import structlog

from edgeway import catalog
from edgeway.nodes import link
from edgeway.nodes.lease import NodeLease
from edgeway.nodes.peers import FORGET_LINGER, LinkPeers, Unreachable
from edgeway.pki.seal import Sealer, SealError
from edgeway.reloads import Reload
from edgeway.store.db import Database, DatabaseUnavailable
from edgeway.store.nodes import Node
from edgeway.store.repo import Repo
from edgeway.tunnel import bindcodec
from edgeway.tunnel.pipes import Pipe
from edgeway.tunnel.registry import MOVE_WAIT, Registry, Tunnel
from edgeway.tunnel.tcp_binds import TcpBinds

log = structlog.get_logger()
OBSERVED_MAX = 1000  # request lines waiting to go to a node, at most (more are dropped)
OBSERVED_WAIT = 5.0  # seconds a batch of them may take to be acknowledged
TARGET_MAX = 512  # bytes of a request target told (a longer one is cut)
SESSIONS = catalog.BY_COLLECTION["tunnel_sessions"]
TUNNELS = catalog.BY_COLLECTION["tunnels"]
WATCHED = frozenset({"tunnels", "tunnel_sessions", "nodes"})


class RemoteNode:
    """Another node, as the carrier of the tunnels its agents hold; one that cannot be
    reached is reported (``unreachable``): it is likely dead, its agents on their way. The
    requests served here for its observed tunnels (an SSH gateway client's, whose terminal
    shows a line per request) are sent to it in order, in batches, behind the traffic."""

    def __init__(self, node: Node, peers: LinkPeers,
                 unreachable: Callable[[str], None]) -> None:
        self.node, self.peers, self.unreachable = node, peers, unreachable
        self._closed = asyncio.Event()
        self._lines: collections.deque[list[Any]] = collections.deque()
        self._sending: asyncio.Task[None] | None = None
        self.dropped = 0  # request lines not sent (too many waiting, or the node was away)

    def observer(self, tunnel_id: str) -> Callable[[bytes, bytes, int], None]:
        """What the edge tells of each request it served for that tunnel of this node's."""
        return partial(self._observed, tunnel_id)

    def _observed(self, tunnel_id: str, method: bytes, target: bytes, status: int) -> None:
        if len(self._lines) >= OBSERVED_MAX:
            self.dropped += 1
            return
        self._lines.append([tunnel_id, method[:32].decode("latin-1"),
                            target[:TARGET_MAX].decode("latin-1"), status])
        if self._sending is None or self._sending.done():
            self._sending = asyncio.get_running_loop().create_task(self._send())

    async def _send(self) -> None:
        while self._lines and not self._closed.is_set():
            batch: list[list[Any]] = []
            size = 0
            while self._lines and size < link.HEADER_MAX // 2:
                line = self._lines.popleft()
                size += len(json.dumps(line))
                batch.append(line)
            if not await self.peers.tell(self.node, {"observed": batch}, OBSERVED_WAIT):
                self.dropped += len(batch) + len(self._lines)
                self._lines.clear()
                log.warning("observed_requests_dropped", node=self.node.id,
                            dropped=self.dropped)

    @property
    def closed(self) -> asyncio.Event:
        return self._closed

    @property
    def crowded(self) -> bool:
        return False

    async def open_pipe(self, tunnel: Tunnel, client: str, proto: str, edge: str,
                        passthrough: bool) -> Pipe:
        try:
            return await self.peers.open(self.node, link.header(tunnel.id, client, proto, edge,
                                                                passthrough))
        except Unreachable:
            self.unreachable(self.node.id)
            raise


def _ref_id(value: Any) -> str:
    return str(value.get("id") or "") if isinstance(value, dict) else ""


class RemoteTunnels:
    def __init__(self, db: Database, sealer: Sealer, registry: Registry, tcp: TcpBinds,
                 lease: NodeLease, peers: LinkPeers) -> None:
        self.db, self.sealer, self.registry, self.tcp = db, sealer, registry, tcp
        self.lease, self.peers = lease, peers
        self.nodes: dict[str, RemoteNode] = {}
        self.tunnels: dict[str, Tunnel] = {}
        # nodes whose link could not be dialed, left out until then (loop time): their lease
        # has not run out yet, but their agents are already reconnecting elsewhere
        self.suspects: dict[str, float] = {}
        # told of each tunnel left out (set by ``edgeway serve``: the edge closes the idle
        # upstreams it keeps for it, which would hold the node's drain)
        self.gone: Callable[[Tunnel], None] = lambda _tunnel: None
        self._reload = Reload(self._load, "remote tunnels")
        self._forgetting: set[asyncio.Task[None]] = set()

    def changed(self, collection: str) -> None:
        if collection in WATCHED:
            self._reload.changed()
            self._reload.start()

    async def settle(self) -> None:
        await self._reload.settle(None)

    async def serves(self, tunnel_id: str, timeout: float) -> bool:
        """Whether the tunnel of that id (another node just recorded it) is served here
        within ``timeout`` seconds: the node that bound it asks before it answers the bind,
        so that no node answers 404 for a tunnel its agent was told is up."""
        if self.local(tunnel_id) is not None:
            return True
        return await self._reloaded_until(
            lambda: tunnel_id in self.tunnels or self.local(tunnel_id) is not None, "tunnels",
            timeout)

    async def forgot(self, node_id: str, timeout: float) -> bool:
        """Whether this node stopped sending connections to ``node_id`` within ``timeout``
        seconds: that node left the cluster and asks before it lets the connections it
        carries end (none may arrive after), its tunnels now waited for here."""
        if node_id not in self.nodes:
            return True
        return await self._reloaded_until(lambda: node_id not in self.nodes, "nodes", timeout)

    async def _reloaded_until(self, done: Callable[[], bool], collection: str,
                              timeout: float) -> bool:
        """Reload (each one starting after the change another node asks about was
        committed, its TCP ports listened on) until ``done``, for ``timeout`` seconds at
        most; whether it came to be."""
        try:
            async with asyncio.timeout(timeout):
                while True:
                    self.changed(collection)
                    await self.settle()
                    if done():
                        return True
                    await asyncio.sleep(0.01)  # (not readable yet: soon again)
        except TimeoutError:
            return False

    def unreachable(self, node_id: str) -> None:
        """A node's link could not be dialed: leave its tunnels out now (requests wait for
        them to come back through another node) and for a lease, unless it answers again."""
        if node_id in self.suspects:
            return
        log.warning("node_unreachable", node=node_id)
        self.suspects[node_id] = asyncio.get_running_loop().time() + self.lease.lease
        for id_, tunnel in list(self.tunnels.items()):
            if isinstance(tunnel.conn, RemoteNode) and tunnel.conn.node.id == node_id:
                self.registry.remove(tunnel)  # (now: a retry must not pick it again)
                self.registry.moved(tunnel, MOVE_WAIT)
                self.gone(tunnel)
                del self.tunnels[id_]
                if tunnel.port and tunnel.proto == "tcp":
                    self.tcp.park(tunnel, MOVE_WAIT)
        self.changed("nodes")

    def _background(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._forgetting.add(task)
        task.add_done_callback(self._forgetting.discard)

    def local(self, tunnel_id: str) -> Tunnel | None:
        """The tunnel of that id whose agent is connected to this node, if any."""
        tunnel = self.registry.by_id.get(tunnel_id)
        return tunnel if tunnel is not None and not isinstance(tunnel.conn, RemoteNode) \
            else None

    async def _load(self) -> bool:
        try:
            live = await self.lease.load()
            repo = Repo(self.db.reader())
            now = asyncio.get_running_loop().time()
            self.suspects = {n: t for n, t in self.suspects.items() if t > now}
            others = {n for n in live if n != self.lease.me.id and n not in self.suspects}
            sessions = {i: d for i, d in await repo.all_docs(SESSIONS) if d.get("node") in others}
            rows = [(i, d) for i, d in await repo.all_docs(TUNNELS) if d.get("node") in others]
        except DatabaseUnavailable as exc:
            log.warning("remote_tunnels_stale", error=str(exc))
            return False
        for node_id in others:
            if node_id in self.nodes:
                self.nodes[node_id].node = live[node_id]  # (its address may have changed)
            else:
                self.nodes[node_id] = RemoteNode(live[node_id], self.peers, self.unreachable)
        wanted: dict[str, Tunnel] = {}
        for id_, doc in rows:
            held = self.tunnels.get(id_)
            carrier = self.nodes[str(doc["node"])]
            if held is not None and held.conn is carrier:
                wanted[id_] = held
            elif (tunnel := self._tunnel(id_, doc, sessions, carrier)) is not None:
                wanted[id_] = tunnel
        came, went = self._apply(wanted, others)
        for tunnel in went:
            await self.tcp.close(tunnel, clean=True)
        for tunnel in came:
            await self.tcp.mirror(tunnel)
        return True

    def _tunnel(self, id_: str, doc: dict[str, Any], sessions: dict[str, dict[str, Any]],
                carrier: RemoteNode) -> Tunnel | None:
        session_id = _ref_id(doc.get("tunnel_session"))
        try:
            req = bindcodec.unseal(self.sealer, str(doc.get("bind") or ""))
        except (SealError, KeyError, TypeError, ValueError) as exc:
            log.warning("remote_tunnel_unreadable", tunnel=id_, node=doc.get("node"),
                        error=str(exc) or type(exc).__name__)
            return None
        credential = _ref_id(sessions.get(session_id, {}).get("credential"))
        return Tunnel(id_, carrier, req, url=str(doc.get("public_url") or ""),
                      host=str(doc.get("host") or ""), port=int(doc.get("port") or 0),
                      credential=credential, session_id=session_id,
                      endpoint_id=_ref_id(doc.get("endpoint")),
                      observer=carrier.observer(id_) if doc.get("observed") else None)

    def _apply(self, wanted: dict[str, Tunnel], live: set[str]) -> tuple[list[Tunnel],
                                                                         list[Tunnel]]:
        """Swap the set in one pass of the event loop (no request sees half of it); the TCP
        tunnels that came and went, whose ports this node listens on for them."""
        came: list[Tunnel] = []
        went: list[Tunnel] = []
        for node_id in self.nodes:
            if node_id not in live:  # (first: no stream of it goes back to a keep-alive pool)
                self.peers.retire(node_id)
        for id_, tunnel in list(self.tunnels.items()):
            if wanted.get(id_) is not tunnel:
                self.registry.remove(tunnel)
                self.gone(tunnel)
                del self.tunnels[id_]
                if isinstance(tunnel.conn, RemoteNode) and tunnel.conn.node.id not in live:
                    self.registry.moved(tunnel, MOVE_WAIT)  # (its node left or died)
                    self.tcp.park(tunnel, MOVE_WAIT)  # (its TCP port waits for it too)
                elif tunnel.port and self.local(id_) is None:  # (a take-over closed it)
                    went.append(tunnel)
        for id_, tunnel in wanted.items():
            if id_ in self.tunnels or self.local(id_) is not None:
                continue  # (held here: this node's own, newer than that row)
            self.registry.add(tunnel)
            self.tunnels[id_] = tunnel
            if tunnel.port and tunnel.proto == "tcp":
                came.append(tunnel)
        for node_id in [n for n in self.nodes if n not in live]:
            self.nodes.pop(node_id).closed.set()
            self._background(self.peers.forget(node_id, FORGET_LINGER))
            log.info("node_tunnels_dropped", node=node_id)
        return came, went
