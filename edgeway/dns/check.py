"""DNS checks: the records a user was told to create for a reserved domain (the CNAME of the
domain to its ``cname_target``; for a wildcard, the ``_acme-challenge`` CNAME to its
``acme_challenge_cname_target``) or an agent ingress (NS records to the ``ns_targets``),
resolved through the configured recursive resolver (``--dns-check-resolver``, else the
system's) and reported one by one as ``ok``, ``missing`` or ``wrong`` with the expected and
the found values. The certificate manager runs the same check before asking the CA.

Names inside the platform's own zones (the base domain, a delegated ingress domain) need no
record from the user and are not checked. A domain's CNAME may instead be A/AAAA records
to the platform's public addresses: that counts as ok.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import dns.asyncresolver
import dns.exception
import dns.nameserver
import dns.resolver

from edgeway.settings import Settings

TIMEOUT = 5.0


@dataclass
class Record:
    name: str
    type: str
    expected: list[str]
    found: list[str] = field(default_factory=list)
    status: str = "missing"  # ok, missing or wrong
    msg: str = ""


class ResolverFailed(Exception):
    """The resolver gave no usable answer (timeout, SERVFAIL): nothing is known."""


def in_zones(name: str, settings: Settings, ingress_domains: list[str]) -> bool:
    bare = name.removeprefix("*.").removeprefix("_acme-challenge.")
    return any(bare == z or bare.endswith("." + z) for z in (settings.base_domain,
                                                              *ingress_domains))


def reserved_records(doc: dict[str, Any], settings: Settings,
                     ingress_domains: list[str]) -> list[Record]:
    domain = str(doc["domain"])
    if in_zones(domain, settings, ingress_domains):
        return []
    out = []
    if doc.get("cname_target"):
        out.append(Record(domain, "CNAME", [str(doc["cname_target"])]))
    if doc.get("acme_challenge_cname_target"):
        out.append(Record("_acme-challenge." + domain.removeprefix("*."), "CNAME",
                          [str(doc["acme_challenge_cname_target"])]))
    return out


def ingress_records(doc: dict[str, Any]) -> list[Record]:
    return [Record(str(doc["domain"]), "NS", sorted(doc.get("ns_targets") or []))]


def resolver_for(servers: tuple[tuple[str, int], ...]) -> dns.asyncresolver.Resolver:
    if not servers:
        return dns.asyncresolver.Resolver()
    res = dns.asyncresolver.Resolver(configure=False)
    res.nameservers = [dns.nameserver.Do53Nameserver(host, port) for host, port in servers]
    return res


class Unresolvable(Exception):
    """A name no resolver can be asked about (dnspython refused it: over 255 octets on the
    wire, an empty label): that record cannot exist."""


async def _answer(res: dns.asyncresolver.Resolver, name: str,
                  rdtype: str) -> dns.resolver.Answer | None:
    """The resolver's answer (None: NXDOMAIN); ``ResolverFailed`` when it gave none,
    ``Unresolvable`` for a name that cannot be asked."""
    try:
        return await res.resolve(name, rdtype, raise_on_no_answer=False, lifetime=TIMEOUT,
                                 search=False)
    except dns.resolver.NXDOMAIN:
        return None
    except (dns.exception.Timeout, dns.resolver.NoNameservers) as exc:
        raise ResolverFailed(f"the resolver gave no answer for {name} {rdtype}: {exc}") \
            from None
    except dns.exception.DNSException as exc:  # (NameTooLong, EmptyLabel, YXDOMAIN, ...)
        raise Unresolvable(f"{name} cannot be looked up: {exc}") from None


async def _values(res: dns.asyncresolver.Resolver, name: str, rdtype: str) -> list[str]:
    answer = await _answer(res, name, rdtype)
    if answer is None:
        return []
    want = dns.rdatatype.from_text(rdtype)
    return sorted({rd.to_text().rstrip(".").lower() for rrset in answer.response.answer
                   if rrset.rdtype == want and rrset.name == answer.qname for rd in rrset})


async def txt(res: dns.asyncresolver.Resolver, name: str) -> list[str]:
    """The TXT values of ``name`` (each record's strings joined)."""
    try:
        answer = await _answer(res, name, "TXT")
    except Unresolvable:
        return []
    if answer is None:
        return []
    return [b"".join(rd.strings).decode() for rrset in answer.response.answer
            if rrset.rdtype == dns.rdatatype.TXT for rd in rrset]


async def addresses(res: dns.asyncresolver.Resolver, name: str) -> list[str]:
    """The A and AAAA addresses ``name`` resolves to (through its CNAMEs)."""
    out: list[str] = []
    for rdtype in ("A", "AAAA"):
        try:
            answer = await _answer(res, name, rdtype)
        except Unresolvable:
            return []
        if answer is not None:
            out += [rd.to_text() for rd in answer.rrset or ()]
    return out


async def _check(res: dns.asyncresolver.Resolver, rec: Record, ips: tuple[str, ...]) -> None:
    try:
        await _compare(res, rec, ips)
    except Unresolvable as exc:
        rec.found, rec.status, rec.msg = [], "wrong", str(exc)


async def _compare(res: dns.asyncresolver.Resolver, rec: Record,
                   ips: tuple[str, ...]) -> None:
    rec.found = await _values(res, rec.name, rec.type)
    if rec.found and (sorted(rec.found) == sorted(rec.expected)):
        rec.status, rec.msg = "ok", ""
        return
    if not rec.found and rec.type == "CNAME" and not rec.name.startswith("_acme") and ips:
        addrs = await _values(res, rec.name, "A") + await _values(res, rec.name, "AAAA")
        if addrs and set(addrs) <= set(ips):
            rec.found, rec.status = addrs, "ok"
            rec.msg = "A/AAAA records to this platform's addresses instead of the CNAME"
            return
    want = ", ".join(rec.expected)
    if not rec.found:
        rec.status = "missing"
        rec.msg = f"{rec.name} has no {rec.type} record: create one pointing to {want}"
    else:
        rec.status = "wrong"
        rec.msg = f"the {rec.type} of {rec.name} points to {', '.join(rec.found)}, " \
                  f"expected {want}"


async def run(records: list[Record], servers: tuple[tuple[str, int], ...],
              ips: tuple[str, ...]) -> list[Record]:
    """Resolve each record; ``ResolverFailed`` when the resolver cannot be used."""
    res = resolver_for(servers)
    for rec in records:
        await _check(res, rec, ips)
    return records


def report(records: list[Record], servers: tuple[tuple[str, int], ...]) -> dict[str, Any]:
    return {"ok": all(r.status == "ok" for r in records),
            "resolver": ", ".join(f"{h}:{p}" for h, p in servers) or "system",
            "records": [asdict(r) for r in records]}
