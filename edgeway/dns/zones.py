"""Answers of the built-in authoritative DNS, sans-I/O: a ``Zones`` value holds every record
this server serves, and ``answer`` turns a query's wire bytes into the response's.

Zones are the platform's base domain and each agent ingress domain. Names are lower case,
without the trailing dot. A name ``*.x`` covers exactly one label under ``x`` (as reserved
wildcard domains do), when no record exists for the name itself. Inside a zone, a name
without records is NXDOMAIN unless it has names below it (an empty non-terminal: NOERROR
with no answer); a name outside every zone is REFUSED. Answers are authoritative (AA), with
the zone's SOA in the authority section when there is no answer.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import dns.exception
import dns.flags
import dns.message
import dns.name
import dns.opcode
import dns.rcode
import dns.rdataclass
import dns.rdatatype
import dns.rrset

TTL = 60
UDP_PAYLOAD = 512  # without EDNS

Records = dict[str, dict[str, list[str]]]  # name -> type (A, AAAA, TXT, NS, SOA) -> values


@dataclass(frozen=True)
class Zones:
    apexes: tuple[str, ...] = ()  # longest first
    records: Records = field(default_factory=dict)
    serial: int = 1

    def zone_of(self, name: str) -> str | None:
        for apex in self.apexes:
            if name == apex or name.endswith("." + apex):
                return apex
        return None

    def lookup(self, name: str, apex: str) -> dict[str, list[str]] | None:
        """The records of ``name`` (or of the wildcard one label up, inside the zone)."""
        found = self.records.get(name)
        if found is not None:
            return found
        parent = name.split(".", 1)[1] if "." in name and name != apex else ""
        if parent and (parent == apex or parent.endswith("." + apex)):
            return self.records.get("*." + parent)
        return None

    def has_below(self, name: str) -> bool:
        suffix = "." + name
        return any(n.endswith(suffix) for n in self.records)


def _text(name: str, rdtype: str, value: str) -> str:
    if rdtype == "TXT":
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if rdtype in ("NS", "CNAME"):
        return value.rstrip(".") + "."
    return value


def _rrset(qname: dns.name.Name, rdtype: str, values: list[str]) -> dns.rrset.RRset:
    return dns.rrset.from_text_list(qname, TTL, "IN", rdtype,
                                    [_text(qname.to_text(), rdtype, v) for v in values])


def _values(zones: Zones, rdtype: str, values: list[str]) -> list[str]:
    return [v.format(serial=zones.serial) for v in values] if rdtype == "SOA" else values


def _soa(zones: Zones, apex: str) -> dns.rrset.RRset:
    return _rrset(dns.name.from_text(apex), "SOA",
                  _values(zones, "SOA", zones.records[apex]["SOA"]))


def _fill(zones: Zones, response: dns.message.Message, qname: dns.name.Name,
          qtype: dns.rdatatype.RdataType) -> None:
    name = qname.to_text(omit_final_dot=True).lower()
    apex = zones.zone_of(name)
    if apex is None:
        response.set_rcode(dns.rcode.REFUSED)
        return
    response.flags |= dns.flags.AA
    found = zones.lookup(name, apex)
    if found is None and not zones.has_below(name):
        response.set_rcode(dns.rcode.NXDOMAIN)
        response.authority.append(_soa(zones, apex))
        return
    wanted = dns.rdatatype.to_text(qtype)
    for rdtype, values in (found or {}).items():
        if values and (rdtype == wanted or qtype == dns.rdatatype.ANY):
            response.answer.append(_rrset(qname, rdtype, _values(zones, rdtype, values)))
    if not response.answer:
        response.authority.append(_soa(zones, apex))


def _error(wire: bytes, rcode: dns.rcode.Rcode) -> bytes | None:
    """A bare response to a query too malformed to parse: its id, QR and the rcode."""
    if len(wire) < 12:
        return None
    flags = (int.from_bytes(wire[2:4], "big") & 0x7900) | 0x8000 | int(rcode)
    return wire[:2] + flags.to_bytes(2, "big") + bytes(8)


def answer(zones: Zones, wire: bytes, tcp: bool) -> bytes | None:
    """The response to the query ``wire``; None when nothing should be sent (not a query)."""
    try:
        query = dns.message.from_wire(wire)
    except dns.message.ShortHeader:
        return None
    except dns.exception.DNSException:
        return _error(wire, dns.rcode.FORMERR)
    if query.flags & dns.flags.QR:
        return None
    response = dns.message.make_response(query)
    response.flags &= ~dns.flags.RA
    if query.opcode() != dns.opcode.QUERY:
        response.set_rcode(dns.rcode.NOTIMP)
    elif len(query.question) != 1 or query.question[0].rdclass not in (
            dns.rdataclass.IN, dns.rdataclass.ANY):
        response.set_rcode(dns.rcode.FORMERR if len(query.question) != 1
                           else dns.rcode.REFUSED)
    else:
        question = query.question[0]
        _fill(zones, response, question.name, question.rdtype)
    limit = 65535 if tcp else max(UDP_PAYLOAD, query.payload if query.edns >= 0 else 0)
    try:
        return response.to_wire(max_size=limit)
    except dns.exception.TooBig:
        truncated = dns.message.make_response(query)
        truncated.flags |= dns.flags.TC | (response.flags & dns.flags.AA)
        return truncated.to_wire(max_size=limit)
