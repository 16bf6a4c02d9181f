"""A node of a cluster, as ``edgeway serve`` runs it with ``--node-addr``: its shared CA, its
lease, its link listener, its links to the others and their tunnels in its registry."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import structlog

from edgeway import catalog
from edgeway.config import NodesConfig
from edgeway.nodes import ca, tls
from edgeway.nodes.handoff import Handoff, sibling_path
from edgeway.nodes.lease import NodeLease
from edgeway.nodes.link import ASK_WAIT, LinkServer
from edgeway.nodes.peers import LinkPeers
from edgeway.nodes.remote import RemoteNode, RemoteTunnels
from edgeway.platform import Platform
from edgeway.store.db import DatabaseUnavailable
from edgeway.store.nodes import Node
from edgeway.store.repo import Repo
from edgeway.tunnel.pipes import UpstreamGone
from edgeway.tunnel.registry import Tunnel
from edgeway.tunnel.server import TunnelServer

log = structlog.get_logger()
SESSIONS = catalog.BY_COLLECTION["tunnel_sessions"]


async def share_ca(platform: Platform, data_dir: Path) -> None:
    """Before any certificate is issued: the cluster's CA becomes this node's."""
    await ca.share(platform.db, data_dir, platform.sealer)


def _holder(tunnel: Tunnel) -> str | None:
    """The hand-off socket of the sibling worker holding ``tunnel``, if one does."""
    conn = tunnel.conn
    return sibling_path(conn.node.addr) if isinstance(conn, RemoteNode) else None


class Cluster:
    def __init__(self, cfg: NodesConfig, platform: Platform, data_dir: Path,
                 tunnels: TunnelServer, drain: float) -> None:
        assert cfg.addr is not None
        self.cfg, self.platform, self.tunnels, self.drain = cfg, platform, tunnels, drain
        server_ctx, client_ctx = tls.contexts(data_dir, platform.sealer, tunnels.node)
        me = Node(tunnels.node, cfg.addr, platform.settings.region,
                  platform.settings.public_ips)
        self.lease = NodeLease(platform.db, me, cfg.lease, platform.changed,
                               tunnels.reconnect_all)
        self.peers = LinkPeers(client_ctx)
        self.remote = RemoteTunnels(platform.db, platform.sealer, tunnels.registry,
                                    tunnels.binder.tcp, self.lease, self.peers)
        self.server = LinkServer(server_ctx, self.remote.local, tunnels,
                                 {"serves": self.remote.serves, "left": self.remote.forgot})
        own = sibling_path(cfg.addr)  # a worker of this machine: connections handed over
        self.handoff = Handoff(own, _holder) if own is not None else None

    async def start(self, reuse_port: bool) -> None:
        assert self.cfg.addr is not None
        self.server.start(self.cfg.addr, reuse_port)
        if self.handoff is not None:
            self.handoff.start()
        self.tunnels.binder.clustered = True
        self.tunnels.binder.spread = self.spread
        self.platform.watchers.append(self.remote.changed)
        self.lease.tick = lambda: self.remote.changed("nodes")  # (the safety net)
        await self.lease.join()
        self.lease.start()
        self.remote.changed("nodes")
        await self.remote.settle()

    async def spread(self, tunnel_id: str) -> None:
        """Until every other live node serves a tunnel this one just recorded (``ASK_WAIT``
        at most: a node that does not answer by then is left to follow on its own)."""
        try:
            live = await self.lease.load()  # (a node that joined a moment ago too)
        except DatabaseUnavailable:
            live = self.lease.live
        await self._ask(live, "serves", tunnel_id)

    async def _ask(self, live: dict[str, Node], question: str, about: str) -> None:
        others = [n for n in live.values()
                  if n.id != self.lease.me.id and n.id not in self.remote.suspects]
        answers = await asyncio.gather(*(self.peers.ask(n, question, about, ASK_WAIT)
                                         for n in others))
        late = [n.id for n, yes in zip(others, answers, strict=True) if not yes]
        if late:
            log.warning("nodes_late", question=question, about=about, nodes=late)

    async def command(self, session_id: str, kind: int, body: dict[str, Any],
                      timeout: float = 10.0) -> str | None:
        """An agent command to a session another node holds (the API's stop and restart):
        None when no live node holds it."""
        doc = await Repo(self.platform.db.reader()).get(SESSIONS, session_id)
        node = self.lease.live.get(str((doc or {}).get("node") or ""))
        if node is None or node.id == self.lease.me.id:
            return None
        try:
            return await self.peers.command(node, session_id, kind, body, timeout)
        except UpstreamGone as exc:
            return str(exc)

    async def leave(self) -> None:
        """A clean stop, before the agents are told to go: stop being sent connections (the
        others hold new requests for this node's tunnels until the agents bound them again
        elsewhere), then let those carried here end (``--drain-timeout`` at most)."""
        live = dict(self.lease.live)
        await self.lease.leave()
        await self._ask(live, "left", self.lease.me.id)  # (then nothing more arrives)
        cut = await self.server.idle(self.drain)
        log.info("node_left", node=self.lease.me.id, carried=self.server.carried,
                 carried_cut=cut)

    async def stop(self) -> None:
        if self.handoff is not None:
            await self.handoff.stop()
        await self.server.stop()
        await self.peers.close()
