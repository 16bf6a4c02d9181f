"""Pure member checks and the translation of decoding errors into named members."""

from __future__ import annotations

import contextlib
import ipaddress
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from edgeway.api.http import decode
from edgeway.catalog import BY_COLLECTION, checks
from edgeway.catalog.shapes import shapes
from edgeway.errors import ApiError, Invalid


@given(st.ip_addresses(), st.data())
def test_cidr_accepts_aligned_and_suggests_for_misaligned(addr: Any, data: Any) -> None:
    bits = data.draw(st.integers(0, addr.max_prefixlen))
    net = ipaddress.ip_network(f"{addr}/{bits}", strict=False)
    assert checks.cidr("cidr", str(net)) == str(net)
    if net.network_address != addr:
        with pytest.raises(Invalid) as err:
            checks.cidr("cidr", f"{addr}/{bits}")
        assert str(net) in err.value.msg and err.value.code == 1409


@pytest.mark.parametrize(("name", "out"), [
    ("Example.COM.", "example.com"), ("bücher.example", "xn--bcher-kva.example"),
    ("*.Site.Example.com", "*.site.example.com"),
])
def test_domain_names_normalise(name: str, out: str) -> None:
    assert checks.domain_name("d", name, wildcard=True) == out


@given(st.text(max_size=80))
def test_domain_check_never_crashes(text: str) -> None:
    try:
        out = checks.domain_name("d", text, wildcard=True)
    except Invalid as err:
        assert err.member == "d"
    else:
        assert out == out.lower() and ".." not in out


@given(st.lists(st.text(max_size=40), max_size=5))
def test_acl_check_never_crashes(rules: list[str]) -> None:
    try:
        out = checks.acl_rules(rules)
    except Invalid as err:
        assert err.member.startswith("acl[") and err.code == 600
    else:
        assert all(r == "*" or r.startswith("bind:") for r in out)


def _error(kind: str, body: bytes, update: bool = False) -> ApiError:
    s = shapes(BY_COLLECTION[kind])
    with pytest.raises(ApiError) as err:
        decode(body, s.update if update else s.create, {})
    return err.value


def test_decode_errors_name_the_member() -> None:
    err = _error("event_destinations", b'{"target": {"monitoring": {"api_key": 5}}}')
    assert "target.monitoring.api_key" in err.msg
    err = _error("ip_policies", b'{"colour": "red"}')
    assert err.code == 214 and "colour" in err.msg and "description" in err.msg
    err = _error("ip_policy_rules", b'{"cidr": "10.0.0.0/8", "action": "allow"}')
    assert "ip_policy_id" in err.msg and err.code == 1405
    err = _error("credentials", b'{"acl": ["*", 3]}')
    assert "acl[1]" in err.msg
    err = _error("ip_policies", b"\xff\xfe")
    assert err.code == 213


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(),
                    lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner),
                    max_leaves=10))
def test_decode_never_raises_anything_but_api_errors(value: Any) -> None:
    body = msgspec.json.encode(value)
    for kind in ("event_destinations", "reserved_domains", "ip_restrictions"):
        with contextlib.suppress(ApiError):
            decode(body, shapes(BY_COLLECTION[kind]).create, {})


def test_tcp_edges_refuse_privileged_ports_the_server_cannot_bind() -> None:
    from datetime import UTC, datetime

    from edgeway.catalog.edges import _tcp_hostports
    from edgeway.catalog.model import Context
    from edgeway.pki.seal import Sealer
    from edgeway.settings import Settings

    settings = Settings(lowest_port=1024)
    ctx = Context(settings, datetime.now(UTC), "", True, Sealer(b"k" * 32))
    assert _tcp_hostports(["db.example.com:1024"], ctx) == ["db.example.com:1024"]
    with pytest.raises(Invalid) as err:
        _tcp_hostports(["db.example.com:1024", "db.example.com:80"], ctx)
    assert "'hostports[1]'" in err.value.msg and "privileged" in err.value.msg \
        and "CAP_NET_BIND_SERVICE" in err.value.msg
