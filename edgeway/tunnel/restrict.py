"""IP restrictions on public connections: deny rules win; when there are allow rules, only
addresses they cover get through."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from edgeway.tunnel.binds import BindRequest

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def cidr_allows(ip: str, allow: Iterable[Network], deny: Iterable[Network]) -> bool:
    try:
        addr = ipaddress.ip_address(ip)
    except ValueError:
        return False
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    if any(addr.version == n.version and addr in n for n in deny):
        return False
    allow = list(allow)
    return not allow or any(addr.version == n.version and addr in n for n in allow)


def allowed(req: BindRequest, ip: str) -> bool:
    return cidr_allows(ip, req.allow, req.deny)
