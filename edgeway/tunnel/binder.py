"""Binding tunnels for agent sessions and the SSH gateway's connections (``Holder``s: TCP
ports through ``tcp_binds``, HTTP(S) and TLS host names through ``names``, labeled tunnels),
recording them (``records``); unbinding, stopping and dropping them. ``bind`` answers an
agent's Bind RPC; ``place`` is the binding itself, for any way in.

A tunnel id is issued bound to the credential that bound it first (``ids.bound_id``): an agent
re-binding it after a reconnect, or after this server restarted, gets the same address, and
any other credential presenting it is refused.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Awaitable, Callable

import structlog

from edgeway import catalog, ids
from edgeway.catalog import checks
from edgeway.platform import Platform
from edgeway.store import domains
from edgeway.store.repo import Repo
from edgeway.tunnel import acl, bindcodec, binds, names, records, rpc
from edgeway.tunnel.binds import BindRefused
from edgeway.tunnel.connection import AgentConnection, Holder
from edgeway.tunnel.muxado.stream import MuxStream
from edgeway.tunnel.registry import MOVE_WAIT, Registry, Tunnel
from edgeway.tunnel.tcp_binds import TcpBinds

log = structlog.get_logger()
TUNNELS = catalog.BY_COLLECTION["tunnels"]
ENDPOINTS = catalog.BY_COLLECTION["endpoints"]


TWINS = {"http": "https", "https": "http"}
TWINS_KEPT = 1000


async def _enforceable(_req: binds.BindRequest) -> str | None:
    return None


async def _spread_nowhere(_tunnel_id: str) -> None:
    return None


class Binder:
    def __init__(self, platform: Platform, tcp_host: str, tcp_ports: tuple[int, int],
                 grace: float, node: str, http_port: int, https_port: int,
                 tcp_name: str = "") -> None:
        self.platform, self.node = platform, node
        self.tcp = TcpBinds(platform, tcp_host, tcp_ports, grace, tcp_name)
        self.http_port, self.https_port = http_port, https_port
        self.registry = Registry()
        # host name -> the edge serving it (set by the edge, to refuse agent binds of them)
        self.edge_host: Callable[[str], str | None] = lambda _host: None
        # Set by the edge: why a name (or a TCP address) is taken down, or None
        self.banned: Callable[[str], str | None] = lambda _name: None
        # Set by the edge: why a bind asks for what it cannot enforce (None: it can).
        self.check_bind: Callable[[binds.BindRequest], Awaitable[str | None]] = _enforceable
        self.sessions: dict[str, AgentConnection] = {}
        self.others: dict[str, Holder] = {}  # sessions of other ways in (the SSH gateway)
        self.clustered = False  # other nodes serve this one's tunnels (``edgeway.nodes``)
        # set with ``clustered``: until the other nodes serve a tunnel just recorded
        self.spread: Callable[[str], Awaitable[None]] = _spread_nowhere
        # generated names offered to the other scheme's twin bind of a session (``_twin``)
        self._twins: dict[tuple[str, str, str], str] = {}

    def holder(self, session_id: str) -> Holder | None:
        return self.sessions.get(session_id) or self.others.get(session_id)

    def _stable(self, session: Holder, tunnel_id: str) -> int:
        """A number derived from the credential and tunnel id: a re-bind after a restart of
        this server gets the same generated name and, when free, the same port."""
        digest = self.platform.sealer.mac(f"{session.credential}/{tunnel_id}".encode())
        return int.from_bytes(digest[:8], "big")

    def tunnel_id(self, session: Holder, asked: str) -> str:
        """The id of a bind: a new one bound to the session's credential, or the one asked
        for when that credential was issued it."""
        mac = self.platform.sealer.mac
        if not asked.startswith(f"{TUNNELS.prefix}_"):
            return ids.bound_id(TUNNELS.prefix, mac, session.credential)
        if not ids.bound_to(asked, TUNNELS.prefix, mac, session.credential):
            raise BindRefused(f"the tunnel id {asked} belongs to another credential (or was "
                              "not issued by this server); bind without an id for a new one")
        return asked

    # -- HTTP(S) and TLS names ---------------------------------------------------------------

    async def _domain(self, session: Holder, req: binds.BindRequest,
                      tunnel_id: str) -> tuple[str, str]:
        """The public host name of an HTTP or TLS bind and the reserved domain it uses."""
        base = self.platform.settings.base_domain
        host = req.domain or self._twin(session, req, tunnel_id) or \
            f"{self._stable(session, tunnel_id):016x}"[:12] + f".{base}"
        acl.require(session.acl, host)
        if checks.internal(host):  # (reached only through forward-internal: not reserved)
            names.check_internal(host, req.proto)
            if (cloud := self.edge_host(host)) is not None:
                raise BindRefused(f"the internal name '{host}' is served by the cloud "
                                  f"endpoint {cloud}")
            names.check_free(host, tunnel_id, req, self.registry.by_host.get(host, []),
                             session.id)
            return host, ""
        domain_id = await names.reserved_domain(Repo(self.platform.db.reader()), host, base)
        edge = self.edge_host(host)
        if edge:
            what = "cloud endpoint" if edge.startswith("ep_") else "edge"
            raise BindRefused(f"the domain '{host}' is served by the {what} {edge}")
        if (why := self.banned(host)) is not None:
            raise BindRefused(why)
        names.check_free(host, tunnel_id, req, self.registry.by_host.get(host, []), session.id)
        return host, domain_id

    def _inner(self, session: Holder, req: binds.BindRequest, tunnel: Tunnel,
               addr: str) -> None:
        """An internal TCP endpoint (``db.internal:5432``): no listener, no reserved address;
        reached only through a traffic policy's forward-internal, claimed as a name is (one
        tunnel, or pooled ones)."""
        acl.require(session.acl, addr)
        for other in self.registry.by_inner.get(addr, []):
            if other.id != tunnel.id and not (req.pooled and other.req.pooled):
                raise BindRefused(f"the internal address '{addr}' is already bound by another "
                                  "tunnel; bind it with pooling enabled from every agent to "
                                  "share it")
        tunnel.url = f"tcp://{addr}"

    def _twin(self, session: Holder, req: binds.BindRequest, tunnel_id: str) -> str:
        """The generated name of this bind's twin: the classic ngrok 2 agent (a session with
        ``twins``) binds ``https`` and ``http`` with the same options and no name, and ngrok
        gave both one name. A name made for one of them is offered once to the other scheme's
        bind with the same options in the same session ("" when there is none)."""
        if req.proto not in TWINS or req.id or not getattr(session, "twins", False):
            return ""
        shape = json.dumps(req.opts, sort_keys=True, default=str)
        offered = self._twins.pop((session.id, req.proto, shape), "")
        if offered and all(t.session_id == session.id and t.req.proto != req.proto
                           for t in self.registry.by_host.get(offered, [])):
            return offered
        if len(self._twins) >= TWINS_KEPT:  # (never taken: the oldest go)
            del self._twins[next(iter(self._twins))]
        base = self.platform.settings.base_domain
        host = f"{self._stable(session, tunnel_id):016x}"[:12] + f".{base}"
        self._twins[(session.id, TWINS[req.proto], shape)] = host
        return host

    # -- binding -----------------------------------------------------------------------------

    async def bind(self, session: AgentConnection, stream: MuxStream, labeled: bool) -> None:
        message = await rpc.read_message(stream)
        folded = rpc.folded(message)
        opts = next((v for k, v in message.items() if k.lower() == "opts"), None) or {}
        try:
            req = binds.parse_labeled(folded) if labeled else \
                binds.parse(message, folded, self.platform.settings.base_domain)
            tunnel = await self.place(session, req)
        except BindRefused as exc:
            await rpc.reply(stream, {"Id": str(folded.get("id") or ""), "URL": "",
                                     "Proto": str(folded.get("proto") or ""), "Opts": opts,
                                     "Extra": {"Token": ""},
                                     "Error": rpc.error_text(str(exc), 8000)})
            return
        if labeled:
            await rpc.reply(stream, {"Id": tunnel.id})
        else:
            await rpc.reply(stream, {"Id": tunnel.id, "URL": tunnel.url, "Proto": req.proto,
                                     "Opts": req.opts, "Extra": {"Token": ""}})

    async def place(self, session: Holder, req: binds.BindRequest,
                    observer: Callable[[bytes, bytes, int], None] | None = None) -> Tunnel:
        """Bind ``req`` (labeled when it has labels) for ``session`` within its ACL, and
        record it; BindRefused says why it cannot be. ``observer``: see ``Tunnel``."""
        domain_id = ""
        if (why := await self.check_bind(req)) is not None:
            raise BindRefused(why)
        if req.labels:
            acl.require_labels(session.acl, req.labels)
        tunnel_id = self.tunnel_id(session, req.id)
        await self._take_over(session, tunnel_id)
        tunnel = Tunnel(tunnel_id, session.conn, req, credential=session.credential,
                        session_id=session.id, observer=observer)
        if not req.labels and req.proto == "tcp":
            if (inner := names.internal_tcp(req.addr)) is not None:
                self._inner(session, req, tunnel, inner)
            else:
                await self.tcp.listen(session.acl, tunnel, self._stable(session, tunnel_id))
        elif not req.labels:
            tunnel.host, domain_id = await self._domain(session, req, tunnel_id)
            tunnel.url = names.url(req.proto, tunnel.host, self.http_port, self.https_port)
        self.registry.add(tunnel)
        session.tunnels[tunnel_id] = tunnel
        await self._record_tunnel(session, tunnel, domain_id)
        return tunnel

    async def _take_over(self, session: Holder, tunnel_id: str) -> None:
        """A re-bind of a tunnel id still held by an older session of the same credential (the
        agent reconnected before that session timed out) moves the tunnel to the new one."""
        old = self.registry.by_id.get(tunnel_id)
        if old is None:
            return
        holder = session if old.conn is session.conn else self.holder(old.session_id)
        if holder is None:  # bound through another node (a cluster's): its agent came here
            self.registry.moved(old, MOVE_WAIT)  # (requests wait the few ms to its re-bind)
            self.registry.remove(old)  # (and the id is this credential's: ``tunnel_id``)
            self.tcp.park(old, MOVE_WAIT)  # (its port, served here too, waits for it)
            await self._delete_rows(old, theirs=True)
            return
        if old.credential != session.credential:  # (ids are bound to their credential)
            raise BindRefused(f"the tunnel id {tunnel_id} belongs to another credential")
        await self.drop(holder, tunnel_id, clean=False)

    async def _record_tunnel(self, session: Holder, tunnel: Tunnel,
                             domain_id: str) -> None:
        settings, node = self.platform.settings, self.node
        endpoint_id = ids.new_id(ENDPOINTS.prefix) if tunnel.url else ""
        async with self.platform.db.write() as tx:
            if self.clustered:  # (another node's row of it, whose agent came here)
                await Repo(tx).delete(TUNNELS, tunnel.id)
            await Repo(tx).insert(TUNNELS, tunnel.id, records.tunnel_doc(
                settings, node, session.id, tunnel, endpoint_id,
                bindcodec.seal(self.platform.sealer, tunnel.req)))
            if endpoint_id:
                await Repo(tx).insert(ENDPOINTS, endpoint_id, records.endpoint_doc(
                    settings, node, session.id, tunnel, domain_id))
        tunnel.endpoint_id = endpoint_id
        self._announce(tunnel)
        if self.clustered:  # (the agent is answered once any node serves it)
            await self.spread(tunnel.id)

    # -- ending tunnels ----------------------------------------------------------------------

    async def unbind(self, session: AgentConnection, stream: MuxStream) -> None:
        tunnel_id = str(rpc.folded(await rpc.read_message(stream)).get("id") or "")
        await self.drop(session, tunnel_id, clean=True)
        await rpc.reply(stream, {})

    async def drop(self, session: Holder, tunnel_id: str, clean: bool) -> None:
        """End one tunnel of ``session``: a clean end frees its TCP port at once, otherwise
        the port waits the grace period for the agent to re-bind it."""
        tunnel = session.tunnels.pop(tunnel_id, None)
        if tunnel is None:
            return
        self.registry.remove(tunnel)
        await self.tcp.close(tunnel, clean)
        with contextlib.suppress(Exception):
            await self._delete_rows(tunnel)

    async def _delete_rows(self, tunnel: Tunnel, theirs: bool = False) -> None:
        """Delete a tunnel's rows: this node's (in a cluster, the tunnel's row is left alone
        when another node recorded it since: its agent reconnected there), or with
        ``theirs`` another node's (its agent came here)."""
        async with self.platform.db.write() as tx:
            doc = await Repo(tx).get(TUNNELS, tunnel.id) if self.clustered else None
            if theirs or doc is None or doc.get("node") == self.node:
                await Repo(tx).delete(TUNNELS, tunnel.id)
            if tunnel.endpoint_id:
                await Repo(tx).delete(ENDPOINTS, tunnel.endpoint_id)
        self._announce(tunnel)

    def _announce(self, tunnel: Tunnel) -> None:
        """A tunnel was recorded or deleted: the built-in DNS answers its name (endpoints),
        and the other nodes of a cluster serve it (tunnels)."""
        if tunnel.endpoint_id:
            self.platform.changed(ENDPOINTS.collection)
        if self.clustered:
            self.platform.changed(TUNNELS.collection)

    async def stop_tunnel(self, tunnel_id: str, message: str, code: int) -> bool:
        """Tell the client to close one tunnel (an agent: StopTunnel, no reply) and drop it
        here."""
        tunnel = self.registry.by_id.get(tunnel_id)
        session = self.holder(tunnel.session_id) if tunnel else None
        if tunnel is None or session is None:
            return False
        await session.stopping(tunnel_id, message, code)
        await self.drop(session, tunnel_id, clean=True)
        log.info("tunnel_stopped", tunnel=tunnel_id, reason=message)
        return True

    async def revalidate(self) -> None:
        """Stop agent tunnels whose reserved domain is gone (StopTunnel reaches the agent)."""
        base = self.platform.settings.base_domain
        repo = Repo(self.platform.db.reader())
        for tunnel in list(self.registry.by_id.values()):
            host = tunnel.host
            if not host or names.generated(host, base):
                continue
            if not names.covered(await domains.covering(repo, host), host):
                await self.stop_tunnel(tunnel.id, f"the reserved domain for {host} was "
                                       "deleted", 8001)

    async def reauthorize(self, session: Holder, rules: list[str]) -> None:
        """The session's credential has a new ACL: it applies to later binds, and the
        tunnels it no longer allows are stopped."""
        session.acl = rules
        for tunnel in list(session.tunnels.values()):
            if tunnel.labels:
                allowed = acl.allows_labels(rules, tunnel.labels)
            else:
                allowed = acl.allows(rules, tunnel.host or tunnel.inner
                                     or f"{self.tcp.name}:{tunnel.port}")
            if not allowed:
                await self.stop_tunnel(tunnel.id, "the credential's ACL no longer allows "
                                       "this tunnel", 8002)

