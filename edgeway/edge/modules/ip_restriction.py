"""The ip_restriction module: the rules of the attached IP policies, gathered when the
routing snapshot is built; deny rules win, and when there are allow rules only the addresses
they cover get through. Policies without any rule allow nothing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from edgeway.tunnel.restrict import Network, cidr_allows


@dataclass(frozen=True)
class IPRule:
    allow: tuple[Network, ...]
    deny: tuple[Network, ...]

    def allows(self, ip: str) -> bool:
        if not self.allow and not self.deny:
            return False
        return cidr_allows(ip, self.allow, self.deny)


def compile(module: dict[str, Any], rules: dict[str, list[tuple[str, Network]]]) -> IPRule:
    allow: list[Network] = []
    deny: list[Network] = []
    for policy in module.get("ip_policy_ids") or []:
        for action, net in rules.get(policy, []):
            (allow if action == "allow" else deny).append(net)
    return IPRule(tuple(allow), tuple(deny))
