"""The ip_restriction module: the rules of the attached IP policies, gathered when the
routing snapshot is built; deny rules win, and when there are allow rules only the addresses
they cover get through. Policies without any rule allow nothing. Agent binds give their CIDRs
directly (``allow``/``deny``). HTTP requests it refuses get a 403; TCP and TLS connections are
closed."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any

from edgeway.edge.h1 import Headers
from edgeway.edge.hooks import Compiling, Hook
from edgeway.edge.pages import Fixed, page
from edgeway.tunnel.restrict import Network, cidr_allows


@dataclass(frozen=True)
class IPRule(Hook):
    name = "ip_restriction"
    allow: tuple[Network, ...]
    deny: tuple[Network, ...]

    def allows(self, ip: str) -> bool:
        if not self.allow and not self.deny:
            return False
        return cidr_allows(ip, self.allow, self.deny)

    def connect(self, ip: str, port: int) -> bool:
        return self.allows(ip)

    def check(self, ip: str, headers: Headers) -> Fixed | None:
        if self.allows(ip):
            return None
        return page(403, "Forbidden", "Your IP address may not access this site.", 4003)


def compile(module: dict[str, Any], ctx: Compiling) -> IPRule:
    allow = [ipaddress.ip_network(c, strict=False) for c in module.get("allow") or []]
    deny = [ipaddress.ip_network(c, strict=False) for c in module.get("deny") or []]
    for policy in module.get("ip_policy_ids") or []:
        for action, net in ctx.rules.get(policy, []):
            (allow if action == "allow" else deny).append(net)
    return IPRule(tuple(allow), tuple(deny))
