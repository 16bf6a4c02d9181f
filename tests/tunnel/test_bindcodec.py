"""A bound tunnel's request as the other nodes of a cluster read it back: every member of
``BindRequest`` survives the round trip (a member added to it but not to the codec would
serve the tunnel without that option on the other nodes: a TLS tunnel's termination, an HTTPS
tunnel's mutual TLS); a record stored before a member existed reads with its default."""

from __future__ import annotations

import dataclasses
import ipaddress

from edgeway.tunnel import bindcodec
from edgeway.tunnel.binds import BindRequest, HeaderChanges


def test_every_member_survives_the_round_trip() -> None:
    full = BindRequest(
        "tn_1", "tls", "host:1", "a.example.com", "tcp://127.0.0.1:9", "meta",
        {"Domain": "a.example.com"}, {"site": "a"}, True,
        (ipaddress.ip_network("10.0.0.0/8"),), (ipaddress.ip_network("10.1.0.0/16"),),
        HeaderChanges((("x-a", "1"),), ("x-b",)), HeaderChanges((("x-c", "2"),), ()),
        (("user", "password"),), True, {"traffic_policy": {"value": "{}"}},
        "-----BEGIN CERTIFICATE-----\n...", ("CERT PEM", "KEY PEM"))
    defaults = BindRequest("", "", "", "", "", "", {})
    assert all(getattr(full, f.name) != getattr(defaults, f.name)
               for f in dataclasses.fields(BindRequest)), "set every member above"
    assert bindcodec.decode(bindcodec.encode(full)) == full


def test_a_record_from_before_the_tls_members_reads_with_their_defaults() -> None:
    old = bindcodec.encode(BindRequest("tn_2", "https", "", "b.example.com", "", "", {}))
    del old["client_cas"], old["termination"]
    back = bindcodec.decode(old)
    assert back.client_cas == "" and back.termination is None
