"""Bind requests: what an agent asks for, checked against its credential's ACL and against the
options this edge can enforce. Pure: the server does the allocation and the I/O.

Only TCP binds are served so far; HTTP, HTTPS and TLS binds, and options the edge cannot
enforce yet (IP restrictions, PROXY protocol, traffic policy), are refused with a clear error
instead of being accepted and silently ignored.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from edgeway.catalog import checks
from edgeway.errors import Invalid


class BindRefused(Exception):
    pass


@dataclass(frozen=True)
class BindRequest:
    id: str
    proto: str
    addr: str
    forwards_to: str
    metadata: str
    opts: dict[str, Any]  # as sent, echoed in the reply (the Rust SDK decodes it back)


def parse(message: dict[str, Any], folded: dict[str, Any]) -> BindRequest:
    opts_raw = next((v for k, v in message.items() if k.lower() == "opts"), None) or {}
    opts = folded.get("opts") or {}
    extra = folded.get("extra") or {}
    proto = str(folded.get("proto") or "")
    if proto != "tcp":
        raise BindRefused(f"{proto or 'this'} tunnels are not served by this Edgeway server yet; "
                          "TCP tunnels are")
    for name, label in (("iprestriction", "IP restrictions"), ("trafficpolicy", "traffic policy"),
                        ("policy", "traffic policy")):
        if opts.get(name):
            raise BindRefused(f"{label} on agent tunnels is not enforced by this edge yet; "
                              "refusing rather than ignoring it")
    if int(opts.get("proxyproto") or 0):
        raise BindRefused("the PROXY protocol header is not supported by this edge yet")
    return BindRequest(str(folded.get("id") or ""), proto, str(opts.get("addr") or ""),
                       str(folded.get("forwardsto") or ""), str(extra.get("metadata") or ""),
                       opts_raw if isinstance(opts_raw, dict) else {})


def _matches(rule: str, target: str) -> bool:
    if rule == target:
        return True
    host, _, port = target.rpartition(":")
    r_host, _, r_port = rule.rpartition(":")
    if r_port == port and r_host.startswith("*."):
        return host.endswith(r_host[1:])
    return False


def acl_allows(acl: list[str], target: str) -> bool:
    """``*`` or no rules allow everything; ``bind:<target>`` allows that target, a leading
    ``*.`` in a rule's host matching any subdomain."""
    if not acl or "*" in acl:
        return True
    return any(rule.startswith("bind:") and _matches(rule[5:], target) for rule in acl)


def requested_port(addr: str, host: str) -> int | None:
    """The port of a requested ``host:port`` address on this edge, or None for any port."""
    if not addr:
        return None
    want_host, sep, port = addr.rpartition(":")
    if not sep or not (port.isascii() and port.isdigit()):
        raise BindRefused(f"'{addr}' is not a host:port address")
    try:
        checks.host("Addr", want_host)
    except Invalid as exc:
        raise BindRefused(exc.msg) from None
    if want_host not in (host, "localhost", "127.0.0.1"):
        raise BindRefused(f"'{addr}' is not an address of this edge ({host})")
    return int(port)
