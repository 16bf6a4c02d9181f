"""restrict-ips naming IP policies by id (``ip_policies``), as ngrok's action does: the
policies' rules join the action's own ``allow``/``deny`` CIDRs, a change to a policy's rules
reaches the traffic at once (edge routes and agents' binds alike), and a policy that does not
exist is refused, never taken as "no rules"."""

from __future__ import annotations

import ipaddress
import json
import time
from collections.abc import Callable
from typing import Any

import httpx

from edgeway.edge.hooks import Compiling, Unenforced
from edgeway.edge.modules import traffic_policy as tp
from tests.edge.agents import EdgeClient, agent
from tests.edge.test_edges import made, route
from tests.server import Server

LOOPBACK = "127.0.0.0/8"


def restrict(*ids: str, **cfg: Any) -> str:
    return json.dumps({"on_http_request": [{"actions": [
        {"type": "restrict-ips", "config": {"ip_policies": list(ids), **cfg}}]}]})


def compiled(text: str, rules: dict[str, list[tuple[str, str]]]) -> tp.Policy | Unenforced:
    return tp.compile({"value": text}, Compiling(
        {pid: [(action, ipaddress.ip_network(cidr)) for action, cidr in pairs]
         for pid, pairs in rules.items()}, "route-1"))


def admitted(policy: tp.Policy | Unenforced, ip: str) -> bool:
    assert isinstance(policy, tp.Policy), policy
    env = tp.request_env(b"GET", b"/", [], "h", "https", ip, 1, False)
    return policy.on_request(env, [], b"/", tp.RateLimits(), 0.0).status == 0


def test_the_policies_rules_join_the_actions_own() -> None:
    rules = {"ipp_office": [("allow", "10.0.0.0/8"), ("deny", "10.9.0.0/16")],
             "ipp_vpn": [("allow", "192.0.2.0/24")], "ipp_empty": []}
    both = compiled(restrict("ipp_office", "ipp_vpn", deny=["192.0.2.66/32"]), rules)
    assert admitted(both, "10.1.2.3") and admitted(both, "192.0.2.1")
    assert not admitted(both, "10.9.1.1")  # the office policy's deny rule
    assert not admitted(both, "192.0.2.66")  # the action's own deny
    assert not admitted(both, "198.51.100.1")  # in no allowed network
    assert not admitted(compiled(restrict("ipp_empty"), rules), "10.1.2.3")  # no rules: no one
    soft = compiled(restrict("ipp_vpn", enforce=False), rules)
    assert admitted(soft, "198.51.100.1")  # only logged


def test_a_policy_that_does_not_exist_is_refused_by_name() -> None:
    for text in (restrict("ipp_gone"), restrict("ipp_here", "ipp_gone")):
        policy = compiled(text, {"ipp_here": [("allow", "0.0.0.0/0")]})
        assert isinstance(policy, Unenforced) and "IP policy ipp_gone does not exist" \
            in policy.what
    policy = tp.compile({"value": json.dumps({"on_http_request": [{"actions": [
        {"type": "restrict-ips", "config": {"ip_policies": "ipp_here"}}]}]})}, "route-1")
    assert isinstance(policy, Unenforced) and "a list of IP policy ids" in policy.what


def until(check: Callable[[], bool], what: str, seconds: float = 15) -> None:
    """Wait for ``check`` to hold (polled every 50 ms), failing with ``what`` after
    ``seconds``: a change reaches the traffic when the edge's snapshot reloads."""
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_routes_and_binds_follow_their_ip_policies(srv: Server, token: str,
                                                   service: int) -> None:
    host = "ipp.example.com"
    with srv.client() as api:
        office = made(api, "/ip_policies", {"description": "office"})["id"]
        made(api, "/ip_policy_rules", {"ip_policy_id": office, "cidr": LOOPBACK,
                                       "action": "allow"})
        made(api, "/reserved_domains", {"domain": host})
        edge = made(api, "/edges/https", {"hostports": [f"{host}:443"]})
        svc = made(api, "/backends/static", {"address": f"127.0.0.1:{service}"})
        route(api, edge["id"], "path_prefix", "/", svc["id"],
              traffic_policy={"value": restrict(office)})
        a = agent(srv, token,
                  {"kind": "https", "forward": f"http://127.0.0.1:{service}",
                   "policy": restrict(office)},
                  {"kind": "https", "forward": f"http://127.0.0.1:{service}",
                   "policy": restrict("ipp_0000000000000000000000000")})
        try:
            url = a.listeners[0]["url"]
            refused = a.listeners[1].get("error", "")
            assert "IP policy ipp_0000000000000000000000000 does not exist" in refused
            with EdgeClient(srv) as web:
                def statuses() -> tuple[int, int]:
                    return (web.get(f"https://{host}/x").status_code,
                            web.get(f"{url}/x").status_code)
                assert statuses() == (200, 200)
                deny = made(api, "/ip_policy_rules", {"ip_policy_id": office,
                                                      "cidr": "127.0.0.1/32",
                                                      "action": "deny"})["id"]
                until(lambda: statuses() == (403, 403), "the deny rule reached the traffic")
                assert api.delete(f"/ip_policy_rules/{deny}").status_code == 204
                until(lambda: statuses() == (200, 200), "the deny rule's removal too")
        finally:
            a.stop()


def test_an_edge_naming_a_deleted_policy_is_refused_not_opened(srv: Server,
                                                               service: int) -> None:
    host = "ipp-gone.example.com"
    with srv.client() as api:
        gone = made(api, "/ip_policies", {"description": "soon gone"})["id"]
        made(api, "/reserved_domains", {"domain": host})
        edge = made(api, "/edges/https", {"hostports": [f"{host}:443"]})
        svc = made(api, "/backends/static", {"address": f"127.0.0.1:{service}"})
        route(api, edge["id"], "path_prefix", "/", svc["id"],
              traffic_policy={"value": restrict(gone, allow=["0.0.0.0/0"])})
        with EdgeClient(srv) as web:
            until(lambda: web.get(f"https://{host}/").status_code == 200, "the route served")
            assert api.delete(f"/ip_policies/{gone}").status_code == 204

            def refused() -> bool:
                r: httpx.Response = web.get(f"https://{host}/")
                return r.status_code == 503 and f"IP policy {gone} does not exist" in r.text
            until(refused, "the route refused once its IP policy is gone")
