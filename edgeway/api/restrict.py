"""IP restrictions of type ``api``: enforced ones refuse management calls from addresses their
policies do not allow; unenforced ones only log what they would refuse.

An address is allowed when it falls in an ``allow`` rule of the restriction's policies and in
no ``deny`` rule (a deleted policy counts as a policy with no rules). The address is the TCP
peer's; forwarding headers are never trusted. The compiled rules are cached for ``ttl`` seconds
and dropped at once by any write to IP policies, rules or restrictions in this process.
"""

from __future__ import annotations

import ipaddress
import time
from dataclasses import dataclass, field
from typing import Any

import structlog

from edgeway import catalog
from edgeway.errors import Forbidden
from edgeway.store.db import Database
from edgeway.store.repo import Repo

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address
log = structlog.get_logger()
KINDS = frozenset({"ip_restrictions", "ip_policies", "ip_policy_rules"})


@dataclass(frozen=True)
class Restriction:
    id: str
    enforced: bool
    allow: tuple[Network, ...]
    deny: tuple[Network, ...]

    def permits(self, addr: Address) -> bool:
        return any(addr in n for n in self.allow) and not any(addr in n for n in self.deny)


@dataclass
class ApiRestrictions:
    db: Database
    ttl: float = 5.0
    _cached: tuple[Restriction, ...] | None = None
    _expires: float = 0.0
    _log_times: dict[str, float] = field(default_factory=dict)

    def invalidate(self) -> None:
        self._cached = None

    async def _load(self) -> tuple[Restriction, ...]:
        if self._cached is not None and self._expires > time.monotonic():
            return self._cached
        self._cached = await compile_all(Repo(self.db.reader()))
        self._expires = time.monotonic() + self.ttl
        return self._cached

    async def check(self, client: str | None) -> None:
        restrictions = await self._load()
        if not restrictions:
            return
        try:
            addr = ipaddress.ip_address(client or "")
        except ValueError:
            addr = None
        for r in restrictions:
            if addr is not None and r.permits(addr):
                continue
            if r.enforced:
                raise Forbidden(f"The address {client} is not allowed to call the API by IP "
                                f"restriction '{r.id}'.", 220)
            self._warn(r.id, client)

    def _warn(self, rid: str, client: str | None) -> None:
        key = f"{rid}/{client}"
        if self._log_times.get(key, 0) < time.monotonic():
            self._log_times[key] = time.monotonic() + 60
            log.warning("ip_restriction_would_refuse", restriction=rid, client=client)


async def compile_all(repo: Repo) -> tuple[Restriction, ...]:
    """The ``api`` restrictions as ``repo`` sees them (a transaction: with its writes)."""
    docs = await repo.all_docs(catalog.BY_COLLECTION["ip_restrictions"])
    found = [(id_, d) for id_, d in docs if d["type"] == "api"]
    policy_ids = sorted({p for _, d in found for p in d["ip_policy_ids"]})
    rules = await repo.docs_where(catalog.BY_COLLECTION["ip_policy_rules"],
                                  "ip_policy_id", policy_ids)
    return tuple(_compile(id_, d, rules) for id_, d in found)


def _compile(id_: str, doc: dict[str, Any],
             rules: list[tuple[str, dict[str, Any]]]) -> Restriction:
    policies = set(doc["ip_policy_ids"])
    mine = [r for _, r in rules if r["ip_policy_id"] in policies]
    nets = {a: tuple(ipaddress.ip_network(r["cidr"]) for r in mine if r["action"] == a)
            for a in ("allow", "deny")}
    return Restriction(id_, bool(doc["enforced"]), nets["allow"], nets["deny"])
