"""What an IP policy means, in one place (ngrok's documented rule): an address gets through
only when it falls in at least one allowed network and in no denied one. So a deny rule wins
over any allow rule, however narrow the allow; a policy with deny rules only lets no address
through (allow 0.0.0.0/0 and ::/0 to let every address the deny rules do not name in); a
policy with no rules matches no address. The rules of several policies applied together are
joined first. The address is the TCP peer's, or with ``--proxy-protocol`` the client's a
trusted load balancer's PROXY header gives (``edgeway.proxied``); forwarding headers such as
X-Forwarded-For are never consulted. An IPv4-mapped IPv6 address counts as its IPv4 one;
anything that is not an address is refused.

Every user of a policy decides with ``permits``: the ip_restriction module of edges and
routes, IP restrictions of every type, the allow/deny CIDRs agents bind with, and the traffic
policy's restrict-ips action. It imports nothing of Edgeway's, so every layer may use it."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Address = ipaddress.IPv4Address | ipaddress.IPv6Address

DENY_ONLY = ("deny CIDRs without any allow CIDR would refuse every address (a connection "
             "must match an allow CIDR and no deny CIDR): add the addresses to let in, or "
             "0.0.0.0/0 and ::/0 to let in every address the deny CIDRs do not name")


def address(client: str | Address | None) -> Address | None:
    """The peer address (IPv4-mapped IPv6 as IPv4); None when there is none or it is not one."""
    if isinstance(client, ipaddress.IPv4Address | ipaddress.IPv6Address):
        addr: Address = client
    else:
        try:
            addr = ipaddress.ip_address(client or "")
        except ValueError:
            return None
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        return addr.ipv4_mapped
    return addr


def _within(addr: Address, networks: Iterable[Network]) -> bool:
    return any(addr.version == n.version and addr in n for n in networks)


def permits(client: str | Address | None, allow: Iterable[Network],
            deny: Iterable[Network]) -> bool:
    """Whether ``client`` is in an ``allow`` network and in no ``deny`` one (see above)."""
    addr = address(client)
    return addr is not None and _within(addr, allow) and not _within(addr, deny)


def split(rules: Iterable[tuple[str, Network]]) -> tuple[tuple[Network, ...],
                                                          tuple[Network, ...]]:
    """``(action, network)`` rules as their allowed and their denied networks."""
    allow: list[Network] = []
    deny: list[Network] = []
    for action, net in rules:
        (allow if action == "allow" else deny).append(net)
    return tuple(allow), tuple(deny)
