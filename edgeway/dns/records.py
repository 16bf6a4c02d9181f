"""What the built-in DNS serves, read from the store: the zones of the base domain and of
every agent ingress domain, with

* SOA and NS (the ``ns_targets``) at each apex, and the name servers' addresses when they
  lie under the base domain;
* ``tunnel.<base>`` and ``tunnel.<region>.<zone>`` A/AAAA: the public addresses; in a cluster
  (``edgeway.nodes``) those of the live nodes, of that region's for a region name (of every
  region's while it has none: a region that lost its nodes fails over);
* the ``cname_target`` of every reserved domain (in a cluster: the nodes of the region its
  tunnels are in), reserved domains under the base domain or inside an ingress zone
  (wildcards for one label), and the hosts of endpoints under the base domain: A/AAAA;
* the TXT records of pending dns-01 challenges (``acme_challenges`` rows ``dns:<name>``),
  at the ``acme_challenge_cname_target`` of a reserved domain or at ``_acme-challenge.<name>``
  inside a zone; an ``acme_challenge_cname_target`` without a pending challenge exists with
  no TXT (NOERROR, empty).
"""

from __future__ import annotations

import ipaddress

from edgeway import catalog
from edgeway.dns.zones import Records, Zones
from edgeway.settings import Settings
from edgeway.store import nodes
from edgeway.store.acme import AcmeStore
from edgeway.store.db import Database
from edgeway.store.repo import Repo


def _addresses(ips: tuple[str, ...]) -> dict[str, list[str]]:
    v4 = [ip for ip in ips if ipaddress.ip_address(ip).version == 4]
    v6 = [ip for ip in ips if ipaddress.ip_address(ip).version == 6]
    return {"A": v4, "AAAA": v6}


def _apex(records: Records, apex: str, settings: Settings) -> None:
    primary = settings.ns_targets[0]
    records.setdefault(apex, {}).update({  # (the serial is the zones')
        "SOA": [f"{primary}. hostmaster.{settings.base_domain}. {{serial}} 3600 600 86400 60"],
        "NS": list(settings.ns_targets)})


class _Regions:
    """The addresses to answer: the live nodes' by region, or (no cluster, or no node with a
    public address) the platform's own."""

    def __init__(self, live: list[nodes.Node], own: tuple[str, ...]) -> None:
        self.by_region: dict[str, list[str]] = {}
        for node in live:
            self.by_region.setdefault(node.region, []).extend(node.public_ips)
        self.everywhere = _addresses(
            tuple(dict.fromkeys(ip for ips in self.by_region.values() for ip in ips)) or own)

    def of(self, region: str) -> dict[str, list[str]]:
        ips = self.by_region.get(region)
        return _addresses(tuple(dict.fromkeys(ips))) if ips else self.everywhere


def _wildcard_match(domain: str, host: str) -> bool:
    return host == domain or (domain.startswith("*.") and host.endswith(domain[1:]) \
        and host.count(".") == domain.count("."))


async def load(db: Database, settings: Settings, serial: int) -> Zones:
    repo = Repo(db.reader())
    base = settings.base_domain
    ingresses = [str(doc["domain"]) for _id, doc in
                 await repo.all_docs(catalog.BY_COLLECTION["agent_ingresses"])]
    apexes = tuple(sorted({base, *ingresses}, key=len, reverse=True))
    zones = Zones(apexes, {}, serial)
    records = zones.records
    regions = _Regions(await nodes.live(db), settings.public_ips)
    endpoints = await repo.all_docs(catalog.BY_COLLECTION["endpoints"])

    def host(name: str, addr: dict[str, list[str]] = regions.everywhere) -> None:
        if zones.zone_of(name) is not None:
            records.setdefault(name, {}).update(addr)

    for apex in apexes:
        _apex(records, apex, settings)
        host(f"tunnel.{apex}")
        for region in settings.regions:
            host(f"tunnel.{region}.{apex}", regions.of(region))
    for ns in settings.ns_targets:
        host(ns)
    for _id, doc in await repo.all_docs(catalog.BY_COLLECTION["reserved_domains"]):
        domain = str(doc["domain"])
        host(domain)
        if doc.get("cname_target"):
            near = next((str(e.get("region")) for _i, e in endpoints
                         if _wildcard_match(domain, str(e.get("host") or ""))), "")
            host(str(doc["cname_target"]), regions.of(near) if near else regions.everywhere)
        target = doc.get("acme_challenge_cname_target")
        if target and zones.zone_of(target):
            records.setdefault(str(target), {}).setdefault("TXT", [])
    for _id, doc in endpoints:
        if doc.get("host") and str(doc["host"]).endswith("." + base):
            host(str(doc["host"]))
    for name, value in await AcmeStore(db).dns_challenges():
        if zones.zone_of(name) is not None:
            records.setdefault(name, {}).setdefault("TXT", []).append(value)
    return zones
