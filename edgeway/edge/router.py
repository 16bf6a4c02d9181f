"""Routing: which tunnel, backend or page answers a public connection.

A snapshot of the edges, routes, backends and IP policies (``edge.snapshot``) is loaded
from the store and kept until a write changes one of them (made through this node, or
through another node sharing the database: ``store.pgnotify``; the next request waits for
the reload, at most a second), and refreshed every ``max_age`` seconds in the background as
a safety net. Live tunnels come from the tunnel
registry on every decision, so a tunnel that binds or goes away counts at once. While the
database is out of reach the last snapshot keeps serving (a warning says how old it is).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast
from weakref import WeakKeyDictionary

import structlog

from edgeway.catalog.runtime import CLOUD_CHANGED
from edgeway.edge import backends, certificates, pipeline, routes
from edgeway.edge.backends import Target
from edgeway.edge.h1 import Request
from edgeway.edge.hooks import Local, Rules, accepted
from edgeway.edge.hosts import request_host
from edgeway.edge.modules.policy_env import endpoint_vars
from edgeway.edge.modules.secrets import Secrets
from edgeway.edge.pages import Fixed, page
from edgeway.edge.pipeline import Plan
from edgeway.edge.snapshot import BACKEND_COLLECTIONS, Cloud, Edge, Snapshot, load
from edgeway.pki.platform_ca import ServedCert
from edgeway.pki.seal import Sealer
from edgeway.reloads import Reload
from edgeway.store.db import Database, DatabaseUnavailable
from edgeway.tunnel.binds import BindRequest
from edgeway.tunnel.registry import Registry, Tunnel

log = structlog.get_logger()
EDGE_COLLECTIONS = ("edges/https", "edges/https/routes", "edges/tls", "edges/tcp")
STALE_RETRY = 1.0  # seconds between reload attempts while the database is out of reach
QUICK_MAX = 1024  # names whose routing decision ``quick`` remembers (then it forgets them all)
WATCHED = frozenset((*EDGE_COLLECTIONS, *BACKEND_COLLECTIONS, "ip_policies",
                     "ip_policy_rules", "reserved_domains", "vaults", "vault_secrets",
                     "tls_certificates", "agent_ingresses", "managed_certificates",
                     "abuse_reports", CLOUD_CHANGED))


def _other_scheme(req: Request, scheme: str, https_port: int, host: str,
                  title: str) -> Decision:
    """A name served over the other scheme only: plain HTTP is sent to HTTPS (308), an
    HTTPS request for an http-only name is not found (404 titled ``title``)."""
    if scheme == "http":
        port = "" if https_port == 443 else f":{https_port}"
        location = f"https://{host}{port}{req.target.decode('latin-1')}"
        return Decision(page(308, "Use HTTPS", f"{host} is served over HTTPS.", 4010,
                             (("Location", location),)))
    return Decision(page(404, title, f"{host} is served over plain HTTP only.", 4004))


@dataclass
class Decision:
    target: Target
    proto: str = "http"  # the ProxyHeader's Proto
    edge: str = ""  # "https" when an HTTPS edge routed it
    plan: Plan = field(default_factory=Plan)
    edge_id: str = ""  # the HTTPS edge and route that routed it
    route_id: str = ""
    # no live tunnel answers: the host a moving one would ("" for an edge route's backend)
    missing: str | None = None
    internal: bool = False  # its target is an internal endpoint a traffic policy forwarded to


class EdgeRouter:
    def __init__(self, db: Database, registry: Registry, max_age: float = 5.0,
                 sealer: Sealer | None = None) -> None:
        self.db, self.registry, self.max_age, self.sealer = db, registry, max_age, sealer
        self.snapshot = Snapshot()
        # bumped by every change; the snapshot records what it reflects (see ``reloads``)
        self._reload = Reload(self._load, "edge_snapshot")
        self._retry_at = 0.0  # after a reload failed: no new attempt before this time
        # a tunnel's plan, and the secrets and IP policy rules it was compiled with
        self._bind_plans: WeakKeyDictionary[Tunnel, tuple[Plan, tuple[Secrets, Rules]]] = \
            WeakKeyDictionary()
        # the managed OAuth applications' callback on the login host, and the providers this
        # server has a managed application for (set by the server)
        self.bounce: Callable[[Request, str], Fixed | None] | None = None
        self.oauth_apps: tuple[str, ...] = ()
        self.region = ""  # this server's (a policy's conn.server_region)
        # ``quick``'s decisions for a name (and scheme) served by one agent's tunnel (its
        # plan's checks asked again of each request), as of one snapshot and one version of
        # the registry
        self._quick: dict[tuple[str, str], Decision] = {}
        self._quick_as_of: tuple[Snapshot, int] | None = None

    def changed(self, collection: str) -> None:
        if collection in WATCHED:
            self._reload.changed()

    async def current(self) -> Snapshot:
        """The snapshot reflecting every change this node committed before the call (a
        reload already under way when a change arrives does not count: the caller waits for
        the next one), waited for at most ``reloads.PATIENCE`` after that reload started:
        traffic never waits on a database that does not answer. While the database is out
        of reach the last snapshot keeps serving; a reload is tried again ``STALE_RETRY``
        seconds after a failed one."""
        if self._reload.stale and time.monotonic() >= self._retry_at:
            await self._reload.settle()
        return self.snapshot

    async def settled(self) -> Snapshot:
        """As ``current``, waiting for the reload in full (the store's deadline bounds it)."""
        if self._reload.stale and time.monotonic() >= self._retry_at:
            await self._reload.settle(None)
        return self.snapshot

    async def refresh(self) -> None:
        """Reload in the background of requests (changes made on other nodes)."""
        await self._reload.start()

    async def _load(self) -> bool:
        try:
            self.snapshot = await load(self.db, self.snapshot.breakers, self.sealer)
        except DatabaseUnavailable as exc:
            self._retry_at = time.monotonic() + STALE_RETRY
            log.warning("edge_snapshot_stale", error=str(exc),
                        age=round(time.monotonic() - self.snapshot.loaded, 1))
            return False
        return True

    def certificate_name(self, host: str, base_domain: str) -> str | None:
        """The name to present a certificate for when a client asks for ``host``: a wildcard
        for names under the base domain or a reserved wildcard, the name itself when it is
        reserved; None for names this platform does not serve."""
        if host in self.snapshot.certificates:  # its own certificate beats a wildcard's
            return host
        parent = host.split(".", 1)[1] if "." in host else ""
        if parent == base_domain or f"*.{parent}" in self.snapshot.domains:
            return f"*.{parent}"
        return host if host in self.snapshot.domains else None

    def served_certificate(self, name: str) -> ServedCert | None:
        """The uploaded or issued certificate for a certificate name (or the wildcard one
        label up), if there is one."""
        certs = self.snapshot.certificates
        found = certs.get(name)
        if found is None and not name.startswith("*.") and "." in name:
            found = certs.get("*." + name.split(".", 1)[1])
        return found

    def edge_host(self, host: str) -> str | None:
        """The edge serving ``host`` (from the last snapshot), if any."""
        edge = self.snapshot.https.get(host) or self.snapshot.tls.get(host)
        cloud = self.snapshot.cloud.get(host) or self.snapshot.internal.get(host) \
            or self.snapshot.tls_cloud.get(host)
        return edge.id if edge else cloud.id if cloud else None

    def internal(self, host: str, scheme: str) -> Tunnel | Cloud | None:
        """What serves the internal endpoint ``host`` (``api.internal``): an internal cloud
        endpoint, or a live tunnel of an agent's (over ``scheme`` when one is)."""
        cloud = self.snapshot.internal.get(host.rstrip(".").lower())
        return cloud.pick() if cloud is not None else self.registry.internal(host, scheme)

    def guarded(self, target: Tunnel | Cloud) -> bool:
        """Whether an internal endpoint has modules or a traffic policy of its own (which a
        traffic policy's http-request, going straight to its agent, would skip)."""
        return isinstance(target, Cloud) or bool(self.bind_plan(target).hooks)

    def banned(self, name: str) -> str | None:
        """Why ``name`` (a host, or a TCP address host:port) is not served: the abuse report
        that banned it (from the last snapshot), or None."""
        report = self.snapshot.banned.get(name)
        return f"'{name}' was taken down after the abuse report '{report}'" if report \
            else None

    def agent_client_cas(self, host: str) -> str:
        """The CA certificates (PEM) whose client certificates the HTTPS tunnels bound to
        ``host`` require (mutual TLS; of pooled tunnels, every one's); "" for none."""
        if not self.registry.mutual:  # (the common case: no such tunnel anywhere)
            return ""
        return "".join(dict.fromkeys(t.req.client_cas for t in self.registry.for_host(host)
                                     if t.proto == "https" and t.req.client_cas))

    def local(self, sockname: Any) -> Local:
        """The server side of a public connection accepted now on ``sockname``."""
        return accepted(sockname, self.region)

    def edge_port(self, port: int) -> str | None:
        """The TCP edge or cloud endpoint listening on ``port`` (from the last snapshot), if
        any."""
        edge = self.snapshot.tcp.get(port) or self.snapshot.tcp_cloud.get(port)
        return edge.id if edge else None

    # -- decisions -------------------------------------------------------------------------

    def target(self, snap: Snapshot, plan: Plan) -> Target | None:
        return backends.pick(snap.backends, plan.backend_id, self.registry) \
            if plan.backend_id else None

    async def http(self, req: Request, ip: str, scheme: str, https_port: int,
                   tls_edge: Edge | None = None) -> Decision:
        """Who answers an HTTP request arriving on the ``scheme`` listener (over TLS whose
        server name chose ``tls_edge``, if it named an HTTPS edge). When no tunnel answers
        but the one that did is moving to another node (``Registry.moved``), the request
        waits for it to be bound again, as long as it is expected."""
        decision = await self._http(req, ip, scheme, https_port, tls_edge)
        while decision.missing is not None:
            left = self.registry.until_back(decision.missing) - \
                asyncio.get_running_loop().time()
            if left <= 0:
                break
            await self.registry.change(left)
            decision = await self._http(req, ip, scheme, https_port, tls_edge)
        return decision

    async def _http(self, req: Request, ip: str, scheme: str, https_port: int,
                    tls_edge: Edge | None = None) -> Decision:
        host = request_host(req.headers)
        if req.method == b"CONNECT":
            return Decision(page(405, "Method not allowed", "CONNECT is not proxied.", 4005))
        if self.bounce is not None and scheme == "https" \
                and (bounced := self.bounce(req, host)) is not None:
            return Decision(bounced)
        if scheme == "http" and req.target.startswith(certificates.CHALLENGES) and (
                acme := await certificates.http01(self.db, req.method, req.target)
        ) is not None:
            return Decision(acme)  # a CA validating a certificate order: before any tunnel
        snap = await self.current() if self._reload.stale else self.snapshot
        return self._decide(snap, req, ip, scheme, https_port, tls_edge, host)

    def quick(self, req: Request, ip: str, scheme: str, https_port: int,
              tls_edge: Edge | None = None) -> Decision | None:
        """``http``'s decision when it needs no wait: None for what it awaits (a CONNECT, a
        bounce to HTTPS, an ACME challenge's answer, a snapshot to reload, a tunnel expected
        back), which ``http`` decides."""
        if req.method == b"CONNECT" or self._reload.stale or (
                scheme == "http" and req.target.startswith(certificates.CHALLENGES)):
            return None
        host = request_host(req.headers)
        if self.bounce is not None and scheme == "https" and self.bounce(req, host) is not None:
            return None
        snap, version = self.snapshot, self.registry.version
        as_of = self._quick_as_of
        if as_of is None or as_of[0] is not snap or as_of[1] != version:
            self._quick.clear()  # (nothing kept of an older snapshot or registry)
            self._quick_as_of = (snap, version)
        else:
            known = self._quick.get((host, scheme))
            if known is not None and cast(Tunnel, known.target).alive:
                if known.plan.checks:  # (what reads the request is asked again, in order)
                    refusal = known.plan.check(ip, req.headers)
                    if refusal is not None:
                        return Decision(refusal)
                return known
        decision = self._decide(snap, req, ip, scheme, https_port, tls_edge, host)
        if decision.missing is not None:
            return None
        if self._lasting(decision, host):
            if len(self._quick) >= QUICK_MAX:
                self._quick.clear()
            self._quick[(host, scheme)] = decision
        return decision

    def _lasting(self, decision: Decision, host: str) -> bool:
        """Whether ``decision`` is every request's for ``host`` (over its scheme) while the
        snapshot and the registry stay as they are, but for its plan's checks (which read the
        request: its address, its headers), asked again for each: an agent's tunnel, the only
        one bound to the name (several take turns), and no HTTPS edge (whose routes read the
        request's path)."""
        target = decision.target
        return isinstance(target, Tunnel) and not decision.edge and not decision.internal \
            and len(self.registry.for_host(host)) == 1

    def _decide(self, snap: Snapshot, req: Request, ip: str, scheme: str, https_port: int,
                tls_edge: Edge | None, host: str) -> Decision:
        if host in snap.banned:
            return Decision(page(403, "Taken down", f"{host} was taken down after a report of "
                                 "abuse.", 4018))
        edge = snap.https.get(host) if scheme == "https" else None
        if edge is None:
            cloud = snap.cloud.get(host)
            if cloud is not None:
                return self._cloud(cloud.pick(), req, ip, scheme, https_port, host)
            return self._agent(req, ip, scheme, https_port, host)
        if edge.plan.client_cas and not (
                tls_edge is not None and tls_edge.id == edge.id
                and tls_edge.plan.client_cas == edge.plan.client_cas):
            return Decision(page(421, "Misdirected request", f"{host} requires a client "
                                 "certificate, checked in the TLS handshake: connect with "
                                 f"{host} as the TLS server name.", 4012))
        path, route = routes.pick(edge, host, req)
        if route is None:
            return Decision(page(404, "No route", f"The edge for {host} has no route "
                                 f"matching {path}.", 4004))
        refusal = route.plan.check(ip, req.headers)
        if refusal is not None:
            return Decision(refusal)
        target = self.target(snap, route.plan)
        if target is None:
            return Decision(page(502, "No tunnel", f"No live tunnel or backend serves "
                                 f"{host}{path} right now.", 4009), missing="")
        return Decision(target, "https", "https", route.plan, edge.id, route.id)

    @staticmethod
    def _cloud(cloud: Cloud, req: Request, ip: str, scheme: str, https_port: int, host: str
               ) -> Decision:
        """A request for a cloud endpoint's name: its traffic policy decides; when nothing in
        it answers (or forwards), the edge does (404 ``ERR_EDGEWAY_4021``)."""
        if cloud.scheme != scheme:
            return _other_scheme(req, scheme, https_port, host, "Not found")
        refusal = cloud.plan.check(ip, req.headers)
        if refusal is not None:
            return Decision(refusal)
        return Decision(page(404, "Nothing answered", f"The traffic policy of the cloud "
                             f"endpoint {host} did not answer or forward this request.",
                             4021), scheme, "", cloud.plan, cloud.id)

    def _agent(self, req: Request, ip: str, scheme: str, https_port: int, host: str
               ) -> Decision:
        """A request for a name no HTTPS edge serves: an agent's tunnel bound to it."""
        tunnel = self.agent_tunnel(host, scheme)
        if tunnel is None:
            return Decision(page(404, "Tunnel not found", f"No tunnel is bound to {host}.",
                                 4004), missing=host)
        if tunnel.proto != scheme:
            return _other_scheme(req, scheme, https_port, host, "Tunnel not found")
        plan = self.bind_plan(tunnel)
        refusal = plan.check(ip, req.headers)
        if refusal is not None:
            return Decision(refusal)
        return Decision(tunnel, tunnel.proto, "", plan)

    def bind_plan(self, tunnel: Tunnel) -> Plan:
        """The plan of a tunnel's bind options (compiled once per tunnel, and again when the
        secrets or IP policies its traffic policy reads changed)."""
        snap = self.snapshot
        cached = self._bind_plans.get(tunnel)
        if cached is not None:
            seen = cached[1]
            if seen[0] is snap.secrets and seen[1] is snap.rules:
                return cached[0]
            if not pipeline.reads_snapshot(tunnel.req) or seen == (snap.secrets, snap.rules):
                # (the same plan under this snapshot's: known as such from here on)
                self._bind_plans[tunnel] = (cached[0], (snap.secrets, snap.rules))
                return cached[0]
        plan = pipeline.for_bind(tunnel.req, tunnel.id, snap.secrets, snap.rules,
                                 endpoint_vars(tunnel.endpoint_id, tunnel.url))
        self._bind_plans[tunnel] = (plan, (snap.secrets, snap.rules))
        return plan

    async def bind_refusal(self, req: BindRequest) -> str | None:
        """Why the edge cannot enforce a bind (with the secrets there are now), or None."""
        snap = await self.current()
        return pipeline.bind_refusal(req, snap.secrets, self.oauth_apps, snap.rules)

    def agent_tunnel(self, host: str, scheme: str = "") -> Tunnel | None:
        """A live tunnel bound to ``host``, over ``scheme`` when one is (a name bound over
        http and https by one agent)."""
        tunnels = self.registry.for_host(host)
        if len(tunnels) == 1:  # (most names have one tunnel: no round to pick)
            return tunnels[0] if tunnels[0].alive else None
        same = [t for t in tunnels if t.proto == scheme and t.alive]
        return self.registry.pick(same or tunnels)
