"""Edges configured through the API, serving real traffic: HTTPS edge routes (exact beats
prefix, longest prefix wins) to tunnel groups of labeled SDK tunnels, failover, weighted,
static and http_response backends, route modules at the edge, snapshot rebuilds on API
changes; TCP edges by port and TLS edges by SNI."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import websockets

from tests.edge import tls_upstream, upstream
from tests.edge.agents import EdgeClient, agent, ca_context
from tests.server import Server, free_port


def made(api: httpx.Client, path: str, body: dict[str, Any]) -> dict[str, Any]:
    r = api.post(path, json=body)
    assert r.status_code == 201, r.text
    out: dict[str, Any] = r.json()
    return out


def route(api: httpx.Client, edge: str, match_type: str, match: str, backend: str,
          **modules: Any) -> dict[str, Any]:
    return made(api, f"/edges/https/{edge}/routes", {
        "match_type": match_type, "match": match, "backend": {"backend_id": backend},
        **modules})


@pytest.fixture(scope="module")
def two_services() -> Iterator[tuple[int, int]]:
    with upstream.running("one") as a, upstream.running("two") as b:
        yield a, b


def test_https_edge_routes_to_tunnel_groups_and_backends(
        srv: Server, token: str, two_services: tuple[int, int]) -> None:
    one, two = two_services
    with srv.client() as api:
        made(api, "/reserved_domains", {"domain": "app.example.com"})
        edge = made(api, "/edges/https", {"hostports": ["app.example.com:443"]})
        group = made(api, "/backends/tunnel_group", {"labels": {"svc": "web"}})
        empty = made(api, "/backends/tunnel_group", {"labels": {"svc": "nobody"}})
        teapot = made(api, "/backends/http_response", {"status_code": 418, "body": "teapot",
                                                       "headers": {"X-Kind": "fixed"}})
        fallback = made(api, "/backends/http_response", {"body": "fallback"})
        failover = made(api, "/backends/failover", {"backends": [empty["id"],
                                                                 fallback["id"]]})
        weighted = made(api, "/backends/weighted", {"backends": {teapot["id"]: 0,
                                                                 fallback["id"]: 5}})
        static = made(api, "/backends/static", {"address": f"127.0.0.1:{one}"})
        route(api, edge["id"], "path_prefix", "/", group["id"],
              request_headers={"add": {"X-Edge": "yes"}, "remove": ["x-secret"]},
              response_headers={"add": {"X-Served-By": "edgeway"}})
        api_route = route(api, edge["id"], "path_prefix", "/api", teapot["id"])
        route(api, edge["id"], "exact_path", "/api/exact", failover["id"])
        route(api, edge["id"], "path_prefix", "/api/weighted", weighted["id"])
        route(api, edge["id"], "path_prefix", "/static", static["id"])
    a = agent(srv, token, {"kind": "labeled", "labels": {"svc": "web", "zone": "a"},
                           "forward": f"http://127.0.0.1:{one}"})
    b = agent(srv, token, {"kind": "labeled", "labels": {"svc": "web", "zone": "b"},
                           "forward": f"http://127.0.0.1:{two}"})
    base = "https://app.example.com"
    try:
        with EdgeClient(srv) as web:
            seen = {web.get(f"{base}/page").text for _ in range(20)}
            assert seen == {"one /page", "two /page"}  # spread across the group's tunnels
            r = web.get(f"{base}/headers", headers={"X-Secret": "s"})
            got = dict(r.json()["headers"])
            assert got["x-edge"] == "yes" and "x-secret" not in got
            assert got["x-forwarded-proto"] == "https"
            assert r.headers["x-served-by"] == "edgeway"
            r = web.get(f"{base}/api/things")  # the longest prefix wins over "/"
            assert (r.status_code, r.text, r.headers["x-kind"]) == (418, "teapot", "fixed")
            assert web.get(f"{base}/api/exact").text == "fallback"  # exact beats prefixes
            assert web.get(f"{base}/api/exact/more").text == "teapot"
            assert {web.get(f"{base}/api/weighted").text for _ in range(10)} == {"fallback"}
            assert web.get(f"{base}/static/x").text == "one /static/x"
            with srv.client() as api:
                shown = api.get(f"/backends/tunnel_group/{group['id']}").json()
                assert len(shown["tunnels"]) == 2
                # the next request sees a change made through the API (no restart)
                api.patch(f"/backends/http_response/{teapot['id']}", json={"body": "changed"})
                assert web.get(f"{base}/api/things").text == "changed"
                api.delete(f"/edges/https/{edge['id']}/routes/{api_route['id']}")
                assert web.get(f"{base}/api/things").text in ("one /api/things",
                                                               "two /api/things")
            a.kill()  # a dead tunnel is skipped
            assert {web.get(f"{base}/page").text for _ in range(10)} == {"two /page"}
            b.kill()
            r = web.get(f"{base}/page")
            assert r.status_code == 502 and r.headers["edgeway-error-code"] == "ERR_EDGEWAY_4009"
    finally:
        for x in (a, b):
            if x.proc.poll() is None:
                x.stop()


def test_websocket_and_sse_through_an_edge_route(srv: Server, token: str, service: int) -> None:
    with srv.client() as api:
        made(api, "/reserved_domains", {"domain": "live.example.com"})
        edge = made(api, "/edges/https", {"hostports": ["live.example.com:443"]})
        group = made(api, "/backends/tunnel_group", {"labels": {"svc": "live"}})
        route(api, edge["id"], "path_prefix", "/", group["id"])
    a = agent(srv, token, {"kind": "labeled", "labels": {"svc": "live"},
                           "forward": f"http://127.0.0.1:{service}"})
    try:
        async def talk() -> str:
            async with websockets.connect(
                    "wss://live.example.com/ws", host="127.0.0.1", port=srv.https_port,
                    ssl=ca_context(srv), server_hostname="live.example.com") as ws:
                await ws.send("hi")
                return str(await ws.recv())
        assert asyncio.run(talk()) == "svc:hi"
        with EdgeClient(srv) as web, upstream.gated() as (query, saw), web.http.stream(
                "GET", f"https://127.0.0.1:{srv.https_port}/sse?{query}",
                headers={"Host": "live.example.com"},
                extensions={"sni_hostname": "live.example.com"}) as r:
            assert upstream.events(r.iter_lines(), saw) == ["data: 0", "data: 1",
                                                             "data: 2"]
    finally:
        a.stop()


def test_route_modules_are_enforced(srv: Server, token: str, service: int) -> None:
    with srv.client() as api:
        made(api, "/reserved_domains", {"domain": "guarded.example.com"})
        edge = made(api, "/edges/https", {"hostports": ["guarded.example.com:443"]})
        hello = made(api, "/backends/http_response", {"body": "hello"})
        loopback = made(api, "/ip_policies", {"description": "loopback"})
        made(api, "/ip_policy_rules", {"ip_policy_id": loopback["id"], "cidr": "127.0.0.0/8",
                                       "action": "deny"})
        route(api, edge["id"], "path_prefix", "/open", hello["id"])
        route(api, edge["id"], "path_prefix", "/denied", hello["id"],
              ip_restriction={"ip_policy_ids": [loopback["id"]]})
        route(api, edge["id"], "path_prefix", "/bots", hello["id"],
              user_agent_filter={"deny": ["(?i)curl"]})
        route(api, edge["id"], "path_prefix", "/login", hello["id"], oauth={
            "provider": {"code_host_a": {"client_id": "i", "client_secret": "s"}}})
    base = "https://guarded.example.com"
    with EdgeClient(srv) as web:
        assert web.get(f"{base}/open").text == "hello"
        assert web.get(f"{base}/nowhere").status_code == 404
        r = web.get(f"{base}/denied")
        assert r.status_code == 403 and r.headers["edgeway-error-code"] == "ERR_EDGEWAY_4003"
        assert web.get(f"{base}/bots", headers={"User-Agent": "curl/8"}).status_code == 403
        assert web.get(f"{base}/bots", headers={"User-Agent": "Firefox"}).text == "hello"
        r = web.get(f"{base}/login")  # never let through: sent to log in
        assert r.status_code == 302
        assert r.headers["location"].startswith("https://github.com/login/oauth/authorize?")
        with srv.client() as api:  # the policy now allows us: the next request passes
            rules = api.get("/ip_policy_rules").json()["ip_policy_rules"]
            deny = next(r for r in rules if r["ip_policy"]["id"] == loopback["id"])
            assert api.delete(f"/ip_policy_rules/{deny['id']}").status_code == 204
            made(api, "/ip_policy_rules", {"ip_policy_id": loopback["id"],
                                           "cidr": "127.0.0.1/32", "action": "allow"})
        assert web.get(f"{base}/denied").text == "hello"


def test_tcp_edge_serves_its_port(srv: Server, token: str, echo_port: int) -> None:
    port = free_port()
    with srv.client() as api:
        group = made(api, "/backends/tunnel_group", {"labels": {"svc": "db"}})
        edge = made(api, "/edges/tcp", {"hostports": [f"db.edgeway.localhost:{port}"],
                                        "backend": {"backend_id": group["id"]}})
    a = agent(srv, token, {"kind": "labeled", "labels": {"svc": "db"},
                           "forward": f"tcp://127.0.0.1:{echo_port}"})
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
                    s.sendall(b"ping over a tcp edge")
                    assert s.recv(100) == b"ping over a tcp edge"
                break
            except (ConnectionRefusedError, AssertionError):
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        with srv.client() as api:
            api.delete(f"/edges/tcp/{edge['id']}")
        deadline = time.monotonic() + 10  # the listener goes with the edge
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
            except ConnectionRefusedError:
                break
            time.sleep(0.1)
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
    finally:
        a.stop()


def test_tls_edge_and_tls_tunnel_pass_tls_through(srv: Server, token: str,
                                                   tmp_path: Path) -> None:
    with tls_upstream.running("secure.example.com", tmp_path) as (edge_up, edge_cert), \
            tls_upstream.running("raw.example.org", tmp_path) as (bind_up, bind_cert):
        with srv.client() as api:
            made(api, "/reserved_domains", {"domain": "secure.example.com"})
            made(api, "/reserved_domains", {"domain": "raw.example.org"})
            group = made(api, "/backends/tunnel_group", {"labels": {"svc": "secure"}})
            made(api, "/edges/tls", {"hostports": ["secure.example.com:443"],
                                     "backend": {"backend_id": group["id"]}})
        a = agent(srv, token,
                  {"kind": "labeled", "labels": {"svc": "secure"},
                   "forward": f"tcp://127.0.0.1:{edge_up}"},
                  {"kind": "tls", "domain": "raw.example.org",
                   "forward": f"tcp://127.0.0.1:{bind_up}"})
        try:
            assert a.listeners[1]["url"] == f"tls://raw.example.org:{srv.https_port}"
            # the handshakes verify against the upstreams' own certificates: not terminated
            assert tls_upstream.ask(srv.https_port, "secure.example.com", edge_cert,
                                    b"hello\n") == b"secure.example.com got hello\n"
            assert tls_upstream.ask(srv.https_port, "raw.example.org", bind_cert,
                                    b"hi\n") == b"raw.example.org got hi\n"
        finally:
            a.stop()


def test_compression_and_circuit_breaker_modules(srv: Server, token: str,
                                                 service: int) -> None:
    with srv.client() as api:
        made(api, "/reserved_domains", {"domain": "zip.example.com"})
        edge = made(api, "/edges/https", {"hostports": ["zip.example.com:443"]})
        group = made(api, "/backends/tunnel_group", {"labels": {"svc": "zip"}})
        failing = made(api, "/backends/http_response", {"status_code": 500, "body": "boom"})
        route(api, edge["id"], "path_prefix", "/", group["id"], compression={})
        route(api, edge["id"], "path_prefix", "/flaky", failing["id"], circuit_breaker={
            "volume_threshold": 3, "error_threshold_percentage": 0.5, "tripped_duration": 60})
    a = agent(srv, token, {"kind": "labeled", "labels": {"svc": "zip"},
                           "forward": f"http://127.0.0.1:{service}"})
    base = "https://zip.example.com"
    try:
        with EdgeClient(srv) as web:
            r = web.get(f"{base}/headers", headers={"Accept-Encoding": "gzip"})
            assert r.headers["content-encoding"] == "gzip" and "accept-encoding" in \
                r.headers["vary"].lower()
            assert r.json()["path"] == "/headers"  # httpx decoded the gzip body
            r = web.get(f"{base}/headers", headers={"Accept-Encoding": "identity"})
            assert "content-encoding" not in r.headers and r.json()["path"] == "/headers"
            # a compressed event stream still arrives event by event
            parts = {"Host": "zip.example.com", "Accept-Encoding": "gzip"}
            with upstream.gated() as (query, saw), web.http.stream(
                    "GET", f"https://127.0.0.1:{srv.https_port}/sse?{query}", headers=parts,
                    extensions={"sni_hostname": "zip.example.com"}) as r:
                assert r.headers["content-encoding"] == "gzip"
                assert upstream.events(r.iter_lines(), saw) == ["data: 0", "data: 1",
                                                                 "data: 2"]
            assert [web.get(f"{base}/flaky").status_code for _ in range(3)] == [500] * 3
            r = web.get(f"{base}/flaky")  # tripped: the edge answers for a while
            assert r.status_code == 503 and r.headers["edgeway-error-code"] == "ERR_EDGEWAY_4011"
            assert r.headers["retry-after"] == "60"
    finally:
        a.stop()
