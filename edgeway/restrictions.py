"""IP restrictions: enforced ones refuse the traffic of their type from addresses their
policies do not allow; unenforced ones only log what they would refuse. ``api``: management
calls (the API answers 403, ERR 220); ``agent``: agent sessions (refused at Auth);
``endpoints``: public connections to every edge and agent endpoint (403 for HTTP, closed for
TCP and TLS); ``dashboard``: kept for the dashboard. Below the API, the tunnel listener and
the edge, which share one ``Restrictions``.

A restriction allows an address when the joined rules of its policies do, with the one meaning
of IP policies (``edgeway.ippolicy``: an allow rule must match and no deny rule; a deleted
policy counts as a policy with no rules); every restriction of the type must allow it. The
address is the TCP peer's (an IPv4-mapped IPv6 address counts as its IPv4 one); forwarding
headers are never trusted. The compiled rules are cached for ``ttl`` seconds and dropped at
once by any write to IP policies, rules or restrictions in this process.
"""

from __future__ import annotations

import ipaddress
import time
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import structlog

from edgeway import catalog
from edgeway.ippolicy import Address, Network, address, permits, split
from edgeway.reloads import Reload
from edgeway.store.db import Database, DatabaseUnavailable
from edgeway.store.repo import Repo

log = structlog.get_logger()
KINDS = frozenset({"ip_restrictions", "ip_policies", "ip_policy_rules"})


@dataclass(frozen=True)
class Restriction:
    id: str
    enforced: bool
    allow: tuple[Network, ...]
    deny: tuple[Network, ...]

    def permits(self, addr: Address) -> bool:
        return permits(addr, self.allow, self.deny)


@dataclass
class Restrictions:
    """The compiled restrictions of each type, cached (see the module's docstring)."""
    db: Database
    ttl: float = 5.0
    _cached: dict[str, tuple[tuple[Restriction, ...], float]] = field(default_factory=dict)
    _last: dict[str, tuple[Restriction, ...]] = field(default_factory=dict)
    _log_times: dict[str, float] = field(default_factory=dict)

    _reloads: dict[str, Reload] = field(default_factory=dict)

    def invalidate(self) -> None:
        self._cached.clear()
        for reload in self._reloads.values():
            reload.changed()

    async def of(self, kind: str) -> tuple[Restriction, ...]:
        """The restrictions of type ``kind``. Expired ones keep applying while they are read
        again; after a change of this process the read is waited for, but only for a moment
        (``reloads``): traffic never waits on a database that does not answer, and while it
        is out of reach the last ones loaded keep applying. Only the first read is waited
        for in full (it raises ``DatabaseUnavailable`` when it fails)."""
        hit = self._cached.get(kind)
        if hit is not None and hit[1] > time.monotonic():
            return hit[0]
        if kind not in self._last:
            found = await compile_all(Repo(self.db.reader()), kind)
            self._cached[kind] = (found, time.monotonic() + self.ttl)
            self._last[kind] = found
            return found
        reload = self._reloads.get(kind)
        if reload is None:
            reload = self._reloads[kind] = Reload(partial(self._load, kind), "ip_restrictions")
        if hit is None:  # a change of this process
            await reload.settle()
        else:  # expired
            reload.changed()
            reload.start()
        return self._last[kind]

    async def _load(self, kind: str) -> bool:
        wanted = self._reloads[kind].wanted
        try:
            found = await compile_all(Repo(self.db.reader()), kind)
        except DatabaseUnavailable:
            log.warning("ip_restrictions_stale", type=kind)
            self._cached[kind] = (self._last[kind], time.monotonic() + self.ttl)
            return False
        self._last[kind] = found
        if self._reloads[kind].wanted == wanted:  # (no change arrived while it read)
            self._cached[kind] = (found, time.monotonic() + self.ttl)
        return True

    def none(self, kind: str) -> bool:
        """Known without a wait: no restriction of ``kind`` is in force (``refusing`` would
        find none for any client). For the per-request check, without a coroutine."""
        restrictions = self._cached.get(kind)
        return restrictions is not None and not restrictions[0] \
            and restrictions[1] > time.monotonic()

    async def refusing(self, kind: str, client: str | None) -> Restriction | None:
        """The enforced restriction of ``kind`` that refuses ``client``, if any; unenforced
        ones that would refuse it are logged (once a minute per restriction and address)."""
        if self.none(kind):
            return None  # (the common case, without a coroutine switch)
        addr = address(client)
        for r in await self.of(kind):
            if addr is not None and r.permits(addr):
                continue
            if r.enforced:
                return r
            self._warn(r.id, kind, client)
        return None

    def _warn(self, rid: str, kind: str, client: str | None) -> None:
        key = f"{rid}/{client}"
        if self._log_times.get(key, 0) < time.monotonic():
            if len(self._log_times) > 10_000:
                self._log_times.clear()
            self._log_times[key] = time.monotonic() + 60
            log.warning("ip_restriction_would_refuse", restriction=rid, type=kind,
                        client=client)


async def compile_all(repo: Repo, kind: str = "api") -> tuple[Restriction, ...]:
    """The restrictions of type ``kind`` as ``repo`` sees them (a transaction: with its
    writes)."""
    docs = await repo.all_docs(catalog.BY_COLLECTION["ip_restrictions"])
    found = [(id_, d) for id_, d in docs if d["type"] == kind]
    policy_ids = sorted({p for _, d in found for p in d["ip_policy_ids"]})
    rules = await repo.docs_where(catalog.BY_COLLECTION["ip_policy_rules"],
                                  "ip_policy_id", policy_ids)
    return tuple(_compile(id_, d, rules) for id_, d in found)


def _compile(id_: str, doc: dict[str, Any],
             rules: list[tuple[str, dict[str, Any]]]) -> Restriction:
    policies = set(doc["ip_policy_ids"])
    mine = [r for _, r in rules if r["ip_policy_id"] in policies]
    allow, deny = split((r["action"], ipaddress.ip_network(r["cidr"])) for r in mine)
    return Restriction(id_, bool(doc["enforced"]), allow, deny)
