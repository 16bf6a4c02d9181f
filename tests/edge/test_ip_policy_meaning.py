"""One meaning for IP policies wherever one is used, over real sockets from two loopback
addresses (ME, 127.0.0.1, and OTHER, 127.0.0.2): the ip_restriction module on a route, an
enforced ``endpoints`` IP restriction, an SDK tunnel's allow/deny CIDRs (HTTP and TCP) and the
traffic policy's restrict-ips action. An address gets through only when it matches an allow
rule and no deny rule (ngrok's documented rule): deny-only and rule-less policies let nobody
in, a deny rule beats a narrower allow rule. An SDK tunnel that binds no CIDRs asks for no
restriction (everyone gets in); one that binds deny CIDRs only is refused, as ngrok refuses
it (ERR_NGROK_393)."""

from __future__ import annotations

import ipaddress
import json
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from edgeway.edge.modules import ip_restriction
from edgeway.ippolicy import permits
from tests.edge.agents import agent, ca_context
from tests.edge.test_edges import made, route
from tests.edge.test_ip_restrictions import tcp_echoes
from tests.server import Server

ME, OTHER = "127.0.0.1", "127.0.0.2"
# name: (allow CIDRs, deny CIDRs, (ME gets in, OTHER gets in))
CASES: dict[str, tuple[list[str], list[str], tuple[bool, bool]]] = {
    "deny-only": ([], [f"{OTHER}/32"], (False, False)),
    "allow-only": ([f"{ME}/32"], [], (True, False)),
    "allow-all-deny-one": (["0.0.0.0/0", "::/0"], [f"{OTHER}/32"], (True, False)),
    "deny-beats-narrower-allow": ([f"{ME}/32", f"{OTHER}/32"], ["127.0.0.2/31"], (True, False)),
    "no-rules": ([], [], (False, False)),
}
EXPECTED = {name: case[2] for name, case in CASES.items()}
REFUSED_BIND = "deny CIDRs without any allow CIDR would refuse every address"


def gets_in(url: str, srv: Server, source: str) -> bool:
    """Whether a GET to ``url`` from ``source`` is answered 200 (else 403, or closed)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = srv.https_port if parts.scheme == "https" else srv.http_port
    raw = socket.create_connection(("127.0.0.1", port), timeout=20,
                                   source_address=(source, 0))
    sock = ca_context(srv).wrap_socket(raw, server_hostname=host) \
        if parts.scheme == "https" else raw
    with sock:
        sock.sendall(f"GET {parts.path or '/'} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
                     "Connection: close\r\n\r\n".encode())
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    status = int(data.split(b" ", 2)[1]) if data else None
    assert status in (200, 403, None), data[:300]
    return status == 200


def reached(url: str, srv: Server) -> tuple[bool, bool]:
    if url.startswith("tcp://"):
        port = int(url.rsplit(":", 1)[1])
        return tcp_echoes(port, ME), tcp_echoes(port, OTHER)
    return gets_in(url, srv, ME), gets_in(url, srv, OTHER)


def policy(api: httpx.Client, name: str, allow: list[str], deny: list[str]) -> str:
    """A new IP policy with these rules: its id."""
    pid: str = made(api, "/ip_policies", {"description": name})["id"]
    for action, cidrs in (("allow", allow), ("deny", deny)):
        for cidr in cidrs:
            made(api, "/ip_policy_rules", {"ip_policy_id": pid, "cidr": cidr, "action": action})
    return pid


def test_on_a_route_module(srv: Server) -> None:
    with srv.client() as api:
        made(api, "/reserved_domains", {"domain": "policies.example.com"})
        edge = made(api, "/edges/https", {"hostports": ["policies.example.com:443"]})
        hello = made(api, "/backends/http_response", {"body": "hello"})
        for name, (allow, deny, _) in CASES.items():
            route(api, edge["id"], "path_prefix", f"/{name}", hello["id"],
                  ip_restriction={"ip_policy_ids": [policy(api, name, allow, deny)]})
    seen = {name: reached(f"https://policies.example.com/{name}", srv) for name in CASES}
    assert seen == EXPECTED


@contextmanager
def endpoints_restriction(api: httpx.Client, pid: str) -> Iterator[None]:
    rid = made(api, "/ip_restrictions", {"type": "endpoints", "enforced": True,
                                         "ip_policy_ids": [pid]})["id"]
    try:
        yield
    finally:
        assert api.delete(f"/ip_restrictions/{rid}").status_code == 204


def test_in_an_endpoints_restriction(srv: Server, token: str, service: int,
                                     echo_port: int) -> None:
    a = agent(srv, token, {"kind": "https", "forward": f"http://127.0.0.1:{service}"},
              {"kind": "tcp", "forward": f"tcp://127.0.0.1:{echo_port}"})
    try:
        assert reached(a.urls[0], srv) == reached(a.urls[1], srv) == (True, True)
        seen: dict[str, Any] = {}
        with srv.client() as api:
            for name, (allow, deny, _) in CASES.items():
                with endpoints_restriction(api, policy(api, name, allow, deny)):
                    seen[name] = reached(a.urls[0], srv)
                    assert reached(a.urls[1], srv) == seen[name], name
        assert seen == EXPECTED
    finally:
        a.stop()


def bound(srv: Server, token: str, listeners: list[dict[str, Any]]) -> dict[str, Any]:
    """What each listener reached from ME and OTHER (by its name), or its bind error."""
    a = agent(srv, token, *listeners)
    try:
        return {ln["name"]: (reached(url, srv) if url else out.get("error", ""))
                for ln, out, url in zip(listeners, a.listeners, a.urls, strict=True)}
    finally:
        a.stop()


def test_on_sdk_tunnels_allow_and_deny_cidrs(srv: Server, token: str, service: int,
                                            echo_port: int) -> None:
    forward = {"https": f"http://127.0.0.1:{service}", "tcp": f"tcp://127.0.0.1:{echo_port}"}
    seen = bound(srv, token, [
        {"name": f"{kind}/{name}", "kind": kind, "forward": forward[kind],
         "allow_cidrs": allow, "deny_cidrs": deny}
        for kind in forward for name, (allow, deny, _) in CASES.items()])
    said = {name: "refused" if isinstance(got, str) and REFUSED_BIND in got else got
            for name, got in seen.items()}
    special: dict[str, object] = {"deny-only": "refused", "no-rules": (True, True)}
    assert said == {f"{kind}/{name}": special.get(name, ok)
                    for kind in forward for name, ok in EXPECTED.items()}, seen


def test_in_the_restrict_ips_action(srv: Server, token: str, service: int,
                                    echo_port: int) -> None:
    def restrict(phase: str, allow: list[str], deny: list[str]) -> str:
        return json.dumps({phase: [{"actions": [{"type": "restrict-ips",
                                                 "config": {"allow": allow, "deny": deny}}]}]})
    ways = (("https", "on_http_request", f"http://127.0.0.1:{service}"),
            ("tcp", "on_tcp_connect", f"tcp://127.0.0.1:{echo_port}"))
    seen = bound(srv, token, [{"name": f"{kind}/{name}", "kind": kind, "forward": forward,
                               "policy": restrict(phase, allow, deny)}
                              for kind, phase, forward in ways
                              for name, (allow, deny, _) in CASES.items()])
    assert seen == {f"{kind}/{name}": ok for kind, _, _ in ways
                    for name, ok in EXPECTED.items()}


def test_restrict_ips_with_enforce_false_lets_everyone_through(srv: Server, token: str,
                                                               service: int,
                                                               echo_port: int) -> None:
    """ngrok's ``enforce: false``: the action decides and logs, and refuses no one; any
    other value than a boolean is refused at bind, not ignored."""
    def restrict(phase: str, enforce: object) -> str:
        return json.dumps({phase: [{"actions": [{"type": "restrict-ips", "config": {
            "allow": [f"{ME}/32"], "enforce": enforce}}]}]})
    ways = (("https", "on_http_request", f"http://127.0.0.1:{service}"),
            ("tcp", "on_tcp_connect", f"tcp://127.0.0.1:{echo_port}"))
    seen = bound(srv, token, [{"name": f"{kind}/{enforce}", "kind": kind, "forward": forward,
                               "policy": restrict(phase, enforce)}
                              for kind, phase, forward in ways for enforce in (False, True)])
    assert seen == {"https/False": (True, True), "https/True": (True, False),
                    "tcp/False": (True, True), "tcp/True": (True, False)}, seen
    (refused,) = bound(srv, token, [{"name": "x", "kind": "https", "forward": ways[0][2],
                                     "policy": restrict("on_http_request", "no")}]).values()
    assert isinstance(refused, str) and "enforce 'no'" in refused, refused


def test_a_rules_remembered_verdicts_are_its_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ip_restriction module remembers each address's verdict (parsing and matching an
    address costs more than the rest of routing): the same verdict as ``permits`` for every
    address, asked twice, past the bound (then it forgets them all), for what is no address."""
    monkeypatch.setattr(ip_restriction, "SEEN_MAX", 64)
    allow = (ipaddress.ip_network("10.0.0.0/8"), ipaddress.ip_network("::/0"))
    deny = (ipaddress.ip_network("10.9.0.0/16"),)
    rule = ip_restriction.IPRule(allow, deny)
    addresses = [f"10.{i % 12}.0.{i}" for i in range(200)] + \
        ["::1", "::ffff:10.9.0.1", "::ffff:10.1.0.1", "not an address", "", "192.0.2.1"]
    for ip in addresses * 2:
        assert rule.allows(ip) == permits(ip, allow, deny), ip
        assert len(rule.seen) <= 64
    assert rule.allows("10.9.0.1") is False and rule.allows("10.8.0.1") is True
    assert rule == ip_restriction.IPRule(allow, deny)  # (what it remembers is not its value)
