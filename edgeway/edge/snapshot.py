"""The routing snapshot: the edges, routes, backends, IP policy rules, reserved domains and
certificates as loaded from the store, their modules compiled (``pipeline``), immutable
once built. ``load`` builds one; the router (``edge.router``) keeps the current one and
decides with it."""

from __future__ import annotations

import ipaddress
import itertools
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from typing import Any

import structlog

from edgeway import catalog
from edgeway.catalog import abuse, modules
from edgeway.catalog.checks import internal
from edgeway.catalog.edges import MODULES_OF
from edgeway.catalog.modules import saml
from edgeway.catalog.modules.policy import modern
from edgeway.edge import certificates, pipeline
from edgeway.edge.backends import Backend, compile_backend
from edgeway.edge.hooks import Compiling
from edgeway.edge.modules import mutual_tls, secrets
from edgeway.edge.modules.circuit_breaker import Breakers
from edgeway.edge.modules.policy_env import endpoint_vars
from edgeway.edge.pipeline import Plan
from edgeway.ippolicy import Network
from edgeway.pki.platform_ca import ServedCert
from edgeway.pki.seal import Sealer
from edgeway.store.db import Database
from edgeway.store.repo import Repo

log = structlog.get_logger()
BACKEND_COLLECTIONS = ("backends/tunnel_group", "backends/failover", "backends/weighted",
                       "backends/static", "backends/http_response")


@dataclass
class Route:
    id: str
    exact: bool
    host: str
    path: str
    plan: Plan


@dataclass
class Edge:
    id: str
    kind: str  # https, tls or tcp
    doc: dict[str, Any]
    plan: Plan
    routes: list[Route] = field(default_factory=list)
    # the TLS server options of its names (mutual_tls, min_version), made with the snapshot;
    # None: a certificate authority it names is gone (its connections are refused)
    tls: mutual_tls.TlsOptions | None = field(default_factory=mutual_tls.TlsOptions)


@dataclass(frozen=True)
class Cloud:
    """A cloud endpoint: its traffic policy is all it does (``plan``; its target is the
    edge's answer when the policy answers nothing). Pooled ones of one URL are one of them
    with the others in ``pool`` (all of them, itself first): ``pick`` takes them in turn."""
    id: str
    scheme: str
    plan: Plan
    hostport: str = ""  # a TCP one's address (host:port)
    pool: tuple[Cloud, ...] = ()
    _turn: Iterator[int] = field(default_factory=itertools.count, compare=False, repr=False)

    def pick(self) -> Cloud:
        """The endpoint that takes the next request or connection (round robin over the
        pool)."""
        return self.pool[next(self._turn) % len(self.pool)] if self.pool else self

    def joined(self, other: Cloud) -> Cloud:
        """This pool with ``other`` in it too."""
        return replace(self, pool=(self.pool or (self,)) + (other,))


@dataclass
class Snapshot:
    https: dict[str, Edge] = field(default_factory=dict)  # host -> edge
    tls: dict[str, Edge] = field(default_factory=dict)  # host -> edge
    tcp: dict[int, Edge] = field(default_factory=dict)  # port -> edge
    cloud: dict[str, Cloud] = field(default_factory=dict)  # host -> cloud endpoint
    # internal (.internal) cloud endpoints, by host: reached through forward-internal only
    internal: dict[str, Cloud] = field(default_factory=dict)
    tcp_cloud: dict[int, Cloud] = field(default_factory=dict)  # port -> TCP cloud endpoint
    tls_cloud: dict[str, Cloud] = field(default_factory=dict)  # host -> TLS cloud endpoint
    backends: dict[str, Backend] = field(default_factory=dict)  # compiled, by id
    rules: dict[str, list[tuple[str, Network]]] = field(default_factory=dict)
    domains: set[str] = field(default_factory=set)  # reserved domain names
    cas: dict[str, str] = field(default_factory=dict)  # certificate authority id -> PEM
    breakers: Breakers = field(default_factory=Breakers)  # the routes' circuit breakers
    # name (a reserved domain, an ingress region domain) -> its uploaded or issued certificate
    certificates: dict[str, ServedCert] = field(default_factory=dict)
    secrets: dict[tuple[str, str], str] = field(default_factory=dict)  # (vault, name) -> value
    # host name, or host:port of a TCP address -> the abuse report that banned it
    banned: dict[str, str] = field(default_factory=dict)
    loaded: float = 0.0


def _opened(collection: str, id_: str, doc: dict[str, Any],
            sealer: Sealer | None) -> dict[str, Any]:
    """An edge's or route's stored document with its modules' secrets opened; one that
    cannot be opened gets a value no one knows (what checks it refuses), and an error log."""
    if sealer is None:
        return doc
    out, failed = modules.opened(doc, sealer, MODULES_OF[collection])
    if failed:
        log.error("module_secret_unreadable", id=id_, members=failed,
                  why="sealed with another platform secret key, or damaged")
    return out


def _hosts(doc: dict[str, Any]) -> list[tuple[str, int]]:
    out = []
    for hp in doc.get("hostports") or []:
        host, _, port = hp.rpartition(":")
        out.append((host, int(port)))
    return out


async def load(db: Database, breakers: Breakers | None = None,
               sealer: Sealer | None = None) -> Snapshot:
    """The snapshot now in the store; circuit breakers keep their counts from ``breakers``
    (the last snapshot's) while their configuration stays the same; vault secrets and the
    modules' secrets are unsealed with ``sealer``."""
    repo = Repo(db.reader())
    snap = Snapshot(loaded=time.monotonic(), breakers=Breakers(breakers),
                    secrets=await secrets.load(repo, sealer))
    for id_, _doc in await repo.all_docs(catalog.BY_COLLECTION["ip_policies"]):
        snap.rules[id_] = []  # (every policy, those without rules too: they match no one)
    for _id, doc in await repo.all_docs(catalog.BY_COLLECTION["ip_policy_rules"]):
        snap.rules.setdefault(doc.get("ip_policy_id", ""), []).append(
            (doc.get("action", "deny"), ipaddress.ip_network(doc["cidr"], strict=False)))
    snap.banned = abuse.banned(await repo.all_docs(catalog.BY_COLLECTION["abuse_reports"]))
    domains = await repo.all_docs(catalog.BY_COLLECTION["reserved_domains"])
    snap.domains = {doc.get("domain", "") for _id, doc in domains}
    snap.certificates = await certificates.served(db, domains)
    snap.cas = {id_: str(doc.get("ca_pem", "")) for id_, doc in
                await repo.all_docs(catalog.BY_COLLECTION["certificate_authorities"])}
    by_id: dict[str, Edge] = {}
    for collection, kind in (("edges/https", "https"), ("edges/tls", "tls"),
                             ("edges/tcp", "tcp")):
        for id_, stored in await repo.all_docs(catalog.BY_COLLECTION[collection]):
            doc = _opened(collection, id_, stored, sealer)
            first = str((doc.get("hostports") or [""])[0])
            plan = pipeline.compile_doc(doc, Compiling(
                snap.rules, id_, snap.breakers, snap.secrets, terminates=kind == "tcp",
                variables=endpoint_vars(id_, f"{kind}://{first}") if kind != "https" else {}))
            edge = by_id[id_] = Edge(id_, kind, doc, plan, tls=mutual_tls.options(
                plan.client_cas, plan.min_tls_version, snap.cas))
            for host, port in _hosts(doc):
                if kind == "tcp":
                    snap.tcp[port] = edge
                else:
                    getattr(snap, kind)[host] = edge
    for id_, stored in await repo.all_docs(catalog.BY_COLLECTION["edges/https/routes"]):
        doc = _opened("edges/https/routes", id_, stored, sealer)
        parent = by_id.get(doc.get("edge_id", ""))
        if parent is None:
            continue
        match = doc.get("match", "")
        host, path = ("", match) if match.startswith("/") else \
            (match.split("/", 1)[0], "/" + match.split("/", 1)[1] if "/" in match else "/")
        own = saml.route_host(parent.doc, doc)  # (where its SAML service provider lives)
        parent.routes.append(Route(id_, doc.get("match_type") == "exact_path", host, path,
                                   pipeline.compile_doc(doc, Compiling(snap.rules, id_,
                                                                       snap.breakers,
                                                                       snap.secrets, own))))
    for id_, doc in await repo.claimants(catalog.BY_COLLECTION["endpoints"]):
        if doc.get("type") == "cloud":
            scheme, host = str(doc.get("scheme", "")), str(doc.get("host", ""))
            text = modern("traffic_policy", str(doc.get("traffic_policy", "")),
                          "tcp_edge" if scheme == "tcp" else "tls_edge" if scheme == "tls"
                          else "http_endpoint")
            cloud = Cloud(id_, scheme, pipeline.compile_doc(
                {"traffic_policy": {"value": text}},
                Compiling(snap.rules, id_, snap.breakers, snap.secrets,
                          terminates=scheme != "http",
                          endpoint=scheme if scheme in ("http", "https") else "",
                          variables=endpoint_vars(id_, str(doc.get("url", ""))))),
                str(doc.get("hostport", "")))
            where: dict[Any, Cloud] = snap.tcp_cloud if scheme == "tcp" else \
                snap.tls_cloud if scheme == "tls" else \
                snap.internal if internal(host) else snap.cloud
            key = int(doc.get("port") or 0) if scheme == "tcp" else host
            held = where.get(key)
            where[key] = held.joined(cloud) if held is not None and held.scheme == scheme \
                else held if held is not None and held.scheme == "https" else cloud
    for collection in BACKEND_COLLECTIONS:
        for id_, doc in await repo.all_docs(catalog.BY_COLLECTION[collection]):
            snap.backends[id_] = compile_backend(collection, doc)
    return snap
