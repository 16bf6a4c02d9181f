"""The ip_restriction module: the rules of the attached IP policies, gathered when the
routing snapshot is built (agent binds give their CIDRs directly, ``allow``/``deny``), decided
by ``edgeway.ippolicy.permits``: an address must match an allow rule and no deny rule, so
deny-only and rule-less policies let nobody through. HTTP requests it refuses get a 403; TCP
and TLS connections are closed."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any

from edgeway.edge.h1 import Headers
from edgeway.edge.hooks import UNKNOWN, Compiling, Connect, Hook, Inner, Local, nobody
from edgeway.edge.pages import Fixed, page
from edgeway.ippolicy import Network, permits, split

SEEN_MAX = 4096  # addresses whose verdict a rule remembers (then it forgets them all)


@dataclass(frozen=True)
class IPRule(Hook):
    name = "ip_restriction"
    allow: tuple[Network, ...]
    deny: tuple[Network, ...]
    # address -> its verdict: a rule never changes, and parsing an address and matching it
    # against networks (``ipaddress``) costs more than the rest of a request's routing
    seen: dict[str, bool] = field(default_factory=dict, compare=False, repr=False)

    def allows(self, ip: str) -> bool:
        seen = self.seen
        verdict = seen.get(ip)
        if verdict is None:
            verdict = permits(ip, self.allow, self.deny)
            if len(seen) >= SEEN_MAX:
                seen.clear()
            seen[ip] = verdict
        return verdict

    def connect(self, ip: str, port: int, inner: Inner = nobody,
                local: Local = UNKNOWN) -> Connect:
        return self.allows(ip)

    def check(self, ip: str, headers: Headers) -> Fixed | None:
        if self.allows(ip):
            return None
        return page(403, "Forbidden", "Your IP address may not access this site.", 4003)


def compile(module: dict[str, Any], ctx: Compiling) -> IPRule:
    allow, deny = split([*(("allow", ipaddress.ip_network(c, strict=False))
                           for c in module.get("allow") or []),
                         *(("deny", ipaddress.ip_network(c, strict=False))
                           for c in module.get("deny") or []),
                         *(rule for policy in module.get("ip_policy_ids") or []
                           for rule in ctx.rules.get(policy, []))])
    return IPRule(allow, deny)
