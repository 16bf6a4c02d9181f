"""The built-in authoritative DNS, asked with dnspython over UDP and TCP: the base domain's
and agent ingresses' zones (SOA, NS, region domains, CNAME targets, challenge targets),
NXDOMAIN inside them, REFUSED outside, and changes through the API answered at once."""

from __future__ import annotations

import socket

import dns.flags
import pytest

from tests.domains.conftest import BASE, Domains
from tests.domains.dnsq import query, rcode, until, values

NS = [f"ns{i}.{BASE}." for i in range(1, 5)]


@pytest.mark.parametrize("tcp", [False, True], ids=["udp", "tcp"])
def test_base_zone_apex_and_region_domains(domains: Domains, tcp: bool) -> None:
    soa = query(domains.dns_port, BASE, "SOA", tcp)
    assert rcode(soa) == "NOERROR" and soa.flags & dns.flags.AA
    mname, rname, serial = values(soa, "SOA")[0].split()[:3]
    assert (mname, rname) == (f"ns1.{BASE}.", f"hostmaster.{BASE}.") and int(serial) > 0
    assert values(query(domains.dns_port, BASE, "NS", tcp), "NS") == NS
    assert values(query(domains.dns_port, f"ns2.{BASE}", "A", tcp), "A") == ["127.0.0.1"]
    for name in (f"tunnel.{BASE}", f"tunnel.eu.{BASE}", f"tunnel.us-cal-1.{BASE}"):
        assert values(query(domains.dns_port, name, "A", tcp), "A") == ["127.0.0.1"]
        assert values(query(domains.dns_port, name, "AAAA", tcp), "AAAA") == ["::1"]
    # a name that exists, asked for a type it lacks: NOERROR, no answer, the SOA
    empty = query(domains.dns_port, f"tunnel.eu.{BASE}", "TXT", tcp)
    assert rcode(empty) == "NOERROR" and not empty.answer
    assert empty.authority[0].name.to_text() == f"{BASE}."


@pytest.mark.parametrize("tcp", [False, True], ids=["udp", "tcp"])
def test_unknown_names_and_other_zones(domains: Domains, tcp: bool) -> None:
    missing = query(domains.dns_port, f"nothing-here.{BASE}", "A", tcp)
    assert rcode(missing) == "NXDOMAIN" and missing.flags & dns.flags.AA
    assert values(missing, "A") == [] and missing.authority[0].rdtype == 6  # SOA
    assert rcode(query(domains.dns_port, f"tunnel.mars.{BASE}", "A", tcp)) == "NXDOMAIN"
    # "us.edge.test" has names under it: it exists, without records
    assert rcode(query(domains.dns_port, f"us.{BASE}", "A", tcp)) == "NOERROR"
    for other in ("example.com", "test", "edge.test.example.com"):
        refused = query(domains.dns_port, other, "A", tcp)
        assert rcode(refused) == "REFUSED" and not refused.answer


def test_reserved_domains_targets(domains: Domains) -> None:
    with domains.server.client() as api:
        plain = api.post("/reserved_domains", json={"domain": "app.dnstest.example"}).json()
        wild = api.post("/reserved_domains", json={"domain": "*.site.dnstest.example"}).json()
        under = api.post("/reserved_domains", json={"domain": f"mine.{BASE}"}).json()
    port = domains.dns_port
    for target in (plain["cname_target"], wild["cname_target"]):
        assert target.endswith(f".cname.{BASE}")
        assert values(until(port, target, "A", lambda m: bool(m.answer)), "A") == ["127.0.0.1"]
        assert values(query(port, target, "AAAA", True), "AAAA") == ["::1"]
    # the challenge target exists (no TXT until a dns-01 challenge is pending)
    acme = query(port, wild["acme_challenge_cname_target"], "TXT")
    assert rcode(acme) == "NOERROR" and not acme.answer
    assert values(until(port, f"mine.{BASE}", "A", lambda m: bool(m.answer)), "A") == \
        ["127.0.0.1"]
    # the user's own names are not in our zones
    assert rcode(query(port, "app.dnstest.example", "A")) == "REFUSED"
    with domains.server.client() as api:
        assert api.delete(f"/reserved_domains/{plain['id']}").status_code == 204
        api.delete(f"/reserved_domains/{under['id']}")
        api.delete(f"/reserved_domains/{wild['id']}")
    gone = until(port, plain["cname_target"], "A", lambda m: rcode(m) == "NXDOMAIN")
    assert rcode(gone) == "NXDOMAIN"


def test_agent_ingress_zone(domains: Domains) -> None:
    port = domains.dns_port
    zone = "connect.dnstest.example"
    with domains.server.client() as api:
        ingress = api.post("/agent_ingresses", json={"domain": zone}).json()
        rd = api.post("/reserved_domains", json={"domain": f"*.apps.{zone}"}).json()
    soa = until(port, zone, "SOA", lambda m: bool(m.answer), tcp=True)
    assert values(soa, "SOA")[0].startswith(f"ns1.{BASE}. hostmaster.{BASE}.")
    assert values(query(port, zone, "NS"), "NS") == sorted(t + "." for t in ingress["ns_targets"])
    for region_domain in ingress["region_domains"]:
        assert values(query(port, region_domain, "A"), "A") == ["127.0.0.1"]
    # a reserved wildcard inside the delegated zone: one label under it
    assert values(until(port, f"x.apps.{zone}", "A", lambda m: bool(m.answer)), "A") == \
        ["127.0.0.1"]
    assert rcode(query(port, f"y.x.apps.{zone}", "A")) == "NXDOMAIN"
    assert rcode(query(port, f"other.{zone}", "A", True)) == "NXDOMAIN"
    with domains.server.client() as api:
        api.delete(f"/reserved_domains/{rd['id']}")
        assert api.delete(f"/agent_ingresses/{ingress['id']}").status_code == 204
    assert rcode(until(port, zone, "SOA", lambda m: rcode(m) == "REFUSED")) == "REFUSED"


def test_malformed_queries_do_not_stop_it(domains: Domains) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.settimeout(2)
        s.sendto(b"\x12\x34" + b"\x01\x00" + b"\x00\x01" + b"\x00" * 6 + b"\xff\xff",
                 ("127.0.0.1", domains.dns_port))
        reply = s.recv(512)
        assert reply[:2] == b"\x12\x34" and reply[3] & 0x0F == 1  # FORMERR, same id
        s.sendto(b"\x00", ("127.0.0.1", domains.dns_port))  # too short: no answer at all
    with socket.create_connection(("127.0.0.1", domains.dns_port), timeout=3) as c:
        c.sendall(b"\x00\x05abc")  # a TCP client that stops mid-message
    assert rcode(query(domains.dns_port, BASE, "SOA", tcp=True)) == "NOERROR"
