"""Edges and HTTPS routes: hostports, nesting, PATCH semantics and every module path."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.api.samples import created, uniq
from tests.api.samples_edges import reserved, tcp_port, tunnel_group
from tests.server import Server


def https_edge(api: httpx.Client, **body: Any) -> dict[str, Any]:
    return created(api, "/edges/https", {"hostports": [f"{reserved(api)}:443"], **body})


def route(api: httpx.Client, edge: str, **body: Any) -> httpx.Response:
    return api.post(f"/edges/https/{edge}/routes",
                    json={"match_type": "path_prefix", "match": "/", **body})


def test_tcp_edges_refuse_ports_they_cannot_serve(server: Server, api: httpx.Client) -> None:
    port = tcp_port()
    first = created(api, "/edges/tcp", {"hostports": [f"a.{uniq()}.example.com:{port}"]})
    r = api.post("/edges/tcp", json={"hostports": [f"b.{uniq()}.example.com:{port}"]})
    assert r.status_code == 400 and f"port {port} is already served by the TCP edge " \
        f"'{first['id']}'" in r.json()["msg"], r.text
    api_port = int(server.base_url.rsplit(":", 1)[1])
    for bad, why in ((server.tunnel_port, "this server's tunnel listener"),
                     (api_port, "this server's management API"),
                     (server.http_port, "this server's public HTTP listener"),
                     (server.https_port, "this server's public HTTPS listener"),
                     (20500, "in the range of agent TCP tunnels (20000-20999)")):
        body = {"hostports": [f"db.example.com:{tcp_port()}", f"db.example.com:{bad}"]}
        r = api.post("/edges/tcp", json=body)
        assert r.status_code == 400, r.text
        err = r.json()
        assert err["error_code"].endswith("_7105") and "hostports[1]" in err["msg"] \
            and why in err["msg"], err
        r = api.patch(f"/edges/tcp/{first['id']}", json=body)
        assert r.status_code == 400 and why in r.json()["msg"]
    assert api.get(f"/edges/tcp/{first['id']}").json()["hostports"] == first["hostports"]


def test_hostports_are_validated_and_claimed(api: httpx.Client) -> None:
    for bad in ("example.com", "a.example.com:0", "a.example.com:x", ":443", "bad_host:443"):
        r = api.post("/edges/tcp", json={"hostports": [bad]})
        assert r.status_code == 400 and "hostports[0]" in r.json()["msg"], bad
    hp = f"tcp.{uniq()}.example.com:{tcp_port()}"
    first = created(api, "/edges/tcp", {"hostports": [hp.upper()]})
    assert first["hostports"] == [hp]
    r = api.post("/edges/tcp", json={"hostports": [hp]})
    assert r.status_code == 400 and first["id"] in r.json()["msg"]
    assert r.json()["error_code"].endswith("_7122")
    other = created(api, "/edges/tcp", {"hostports": [f"x.{uniq()}.example.com:{tcp_port()}"]})
    r = api.patch(f"/edges/tcp/{other['id']}", json={"hostports": [hp]})
    assert r.status_code == 400
    assert api.patch(f"/edges/tcp/{first['id']}", json={"hostports": []}).status_code == 200
    r = api.patch(f"/edges/tcp/{other['id']}", json={"hostports": [hp]})
    assert r.status_code == 200
    assert api.delete(f"/edges/tcp/{other['id']}").status_code == 204
    assert api.post("/edges/tcp", json={"hostports": [hp]}).status_code == 201


def test_https_and_tls_hosts_must_be_reserved(api: httpx.Client) -> None:
    r = api.post("/edges/https", json={"hostports": [f"nope.{uniq()}.example.com:443"]})
    assert r.status_code == 400 and r.json()["error_code"].endswith("_7121")
    wild = reserved(api, wildcard=True)
    host = "shop" + wild[1:]
    edge = created(api, "/edges/tls", {"hostports": [f"{host}:443"]})
    rd = api.get("/reserved_domains", params={"limit": 5}).json()["reserved_domains"]
    rid = next(d["id"] for d in rd if d["domain"] == wild)
    r = api.delete(f"/reserved_domains/{rid}")
    assert r.status_code == 400 and edge["id"] in r.json()["msg"]
    assert api.delete(f"/edges/tls/{edge['id']}").status_code == 204
    assert api.delete(f"/reserved_domains/{rid}").status_code == 204
    hp = f"{reserved(api)}:443"
    created(api, "/edges/https", {"hostports": [hp]})
    assert api.post("/edges/tls", json={"hostports": [hp]}).status_code == 400


def test_routes_live_under_their_edge(api: httpx.Client, server: Any) -> None:
    edge = https_edge(api)
    r = route(api, edge["id"], match="/blog", description="blog")
    assert r.status_code == 201, r.text
    rt = r.json()
    assert rt["id"].startswith("edghtsrt_") and rt["edge_id"] == edge["id"]
    assert rt["uri"] == f"{server.base_url}/edges/https/{edge['id']}/routes/{rt['id']}"
    assert rt["backend"] is None and rt["saml"] is None
    got = api.get(f"/edges/https/{edge['id']}").json()
    assert [x["id"] for x in got["routes"]] == [rt["id"]]
    assert got["routes"][0] == rt
    dup = route(api, edge["id"], match="/blog")
    assert dup.status_code == 400 and dup.json()["error_code"].endswith("_7126")
    assert route(api, edge["id"], match="/blog", match_type="exact_path").status_code == 201
    other = https_edge(api)
    wrong = api.get(f"/edges/https/{other['id']}/routes/{rt['id']}")
    assert wrong.status_code == 404 and other["id"] in wrong.json()["msg"]
    assert api.patch(f"/edges/https/{other['id']}/routes/{rt['id']}",
                     json={}).status_code == 404
    missing = route(api, "edghts_" + "0" * 27)
    assert missing.status_code == 404
    assert api.delete(f"/edges/https/{edge['id']}").status_code == 204
    assert api.get(f"/edges/https/{edge['id']}/routes/{rt['id']}").status_code == 404


@pytest.mark.parametrize(("match", "ok"), [
    ("/", True), ("/blog", True), ("app.example.com", True), ("app.example.com/blog", True),
    ("blog", False), ("/a b", False), ("/x?y=1", False), ("bad_host/x", False),
])
def test_route_match_shapes(api: httpx.Client, match: str, ok: bool) -> None:
    r = route(api, https_edge(api)["id"], match=match)
    assert (r.status_code == 201) is ok, r.text
    if not ok:
        assert "match" in r.json()["msg"]


def test_route_match_type_and_python_client_update_defaults(api: httpx.Client) -> None:
    edge = https_edge(api)
    r = route(api, edge["id"], match_type="prefix")
    assert r.status_code == 400 and "match_type" in r.json()["msg"]
    rt = route(api, edge["id"], match="/a", description="keep").json()
    r = api.patch(f"/edges/https/{edge['id']}/routes/{rt['id']}",
                  json={"match_type": "", "match": "", "description": "", "metadata": ""})
    assert r.status_code == 200
    assert (r.json()["match"], r.json()["description"]) == ("/a", "keep")


def test_patch_replaces_supplied_modules_and_keeps_the_rest(api: httpx.Client) -> None:
    edge = https_edge(api)
    rt = route(api, edge["id"], compression={},
               request_headers={"add": {"X-A": "1"}, "remove": ["X-B"]}).json()
    assert rt["compression"] == {"enabled": True}
    url = f"/edges/https/{edge['id']}/routes/{rt['id']}"
    r = api.patch(url, json={"request_headers": {"add": {"X-C": "3"}}, "compression": None})
    assert r.status_code == 200
    body = r.json()
    assert body["request_headers"] == {"enabled": True, "add": {"X-C": "3"}, "remove": []}
    assert body["compression"] == {"enabled": True}
    assert api.delete(url + "/compression").status_code == 204
    assert api.get(url).json()["compression"] is None


def _module_paths(api: httpx.Client) -> list[tuple[str, str, dict[str, Any]]]:
    """Every module path of the API with a valid body."""
    edge = https_edge(api)
    rt = route(api, edge["id"]).json()
    tcp = created(api, "/edges/tcp", {})
    tls = created(api, "/edges/tls", {})
    backend = tunnel_group(api)
    policy = created(api, "/ip_policies", {})["id"]
    from tests.certs import make_cert
    ca = created(api, "/certificate_authorities", {"ca_pem": make_cert()})["id"]
    bodies = module_bodies(backend, policy, ca)
    out = []
    for base, names in (
        (f"/edges/https/{edge['id']}", ("mutual_tls", "tls_termination")),
        (f"/edges/https/{edge['id']}/routes/{rt['id']}", (
            "backend", "ip_restriction", "circuit_breaker", "compression", "request_headers",
            "response_headers", "webhook_verification", "oauth", "saml", "oidc",
            "websocket_tcp_converter", "user_agent_filter", "traffic_policy")),
        (f"/edges/tcp/{tcp['id']}", ("backend", "ip_restriction", "traffic_policy")),
        (f"/edges/tls/{tls['id']}", ("backend", "ip_restriction", "tls_termination",
                                     "traffic_policy")),
    ):
        out += [(base, name, bodies[name]) for name in names]
    return out


def module_bodies(backend: str, policy: str, ca: str) -> dict[str, dict[str, Any]]:
    from tests.api.test_modules import IDP_METADATA
    return {
        "backend": {"backend_id": backend}, "ip_restriction": {"ip_policy_ids": [policy]},
        "mutual_tls": {"certificate_authority_ids": [ca]},
        "tls_termination": {"min_version": "1.2"},
        "circuit_breaker": {"error_threshold_percentage": 0.25}, "compression": {},
        "request_headers": {"add": {"X-A": "b"}}, "response_headers": {"remove": ["Server"]},
        "webhook_verification": {"provider": "GitHub", "secret": "s"},
        "oauth": {"provider": {"code_host_a": {"client_id": "c", "client_secret": "s"}}},
        "saml": {"idp_metadata": IDP_METADATA},
        "oidc": {"issuer": "https://idp.example.com", "client_id": "c", "client_secret": "s"},
        "websocket_tcp_converter": {}, "user_agent_filter": {"deny": ["(?i)curl"]},
        "traffic_policy": {"value": '{"on_tcp_connect": [{"actions": [{"type": "deny"}]}]}'},
    }


def test_every_module_path(api: httpx.Client) -> None:
    paths = _module_paths(api)
    assert len(paths) == 22  # and the TLS edge's mutual_tls: test_tls_edge_mutual_tls_path
    for base, name, body in paths:
        url = f"{base}/{name}"
        if name == "traffic_policy" and "routes" in base:
            body = {"value": '{"on_http_request": [{"actions": [{"type": "deny"}]}]}'}
        assert api.get(url).status_code == 404, url
        r = api.put(url, json=body)
        assert r.status_code == 200, (url, r.text)
        shown = r.json()
        assert shown["enabled"] is True
        assert api.get(url).json() == shown, url
        assert api.get(base).json()[name] == shown, url
        assert api.delete(url).status_code == 204, url
        assert api.get(url).status_code == 404, url
        assert api.get(base).json()[name] is None
        assert api.delete(url).status_code == 404


def test_tls_edge_mutual_tls_path(api: httpx.Client) -> None:
    from tests.certs import make_cert
    ca = created(api, "/certificate_authorities", {"ca_pem": make_cert()})["id"]
    tls = created(api, "/edges/tls", {"tls_termination": {}})
    url = f"/edges/tls/{tls['id']}/mutual_tls"
    shown = api.put(url, json={"certificate_authority_ids": [ca]}).json()
    assert [c["id"] for c in shown["certificate_authorities"]] == [ca]
    assert api.get(url).json() == shown
    assert api.delete(url).status_code == 204 and api.get(url).status_code == 404
    assert api.delete(f"/edges/tls/{tls['id']}/tls_termination").status_code == 204


@pytest.mark.parametrize("raw", [b"", b"{}", b"null"])
def test_empty_module_bodies(api: httpx.Client, raw: bytes) -> None:
    edge = https_edge(api)
    rt = route(api, edge["id"]).json()
    url = f"/edges/https/{edge['id']}/routes/{rt['id']}/compression"
    headers = {"Content-Type": "application/json"} if raw else {}
    r = api.put(url, content=raw, headers=headers)
    assert r.status_code == 200 and r.json() == {"enabled": True}
    r = api.put(f"/edges/https/{edge['id']}/routes/{rt['id']}/backend", content=raw,
                headers=headers)
    assert r.status_code == 400 and "backend_id" in r.json()["msg"]


def test_module_references_must_exist_and_render_as_refs(api: httpx.Client,
                                                         server: Any) -> None:
    tcp = created(api, "/edges/tcp", {})
    url = f"/edges/tcp/{tcp['id']}"
    r = api.put(url + "/backend", json={"backend_id": "bkdtg_" + "0" * 27})
    assert r.status_code == 400 and "backend.backend_id" in r.json()["msg"]
    r = api.put(url + "/ip_restriction", json={"ip_policy_ids": ["ipp_" + "0" * 27]})
    assert r.status_code == 400 and "ip_restriction.ip_policy_ids[0]" in r.json()["msg"]
    assert api.put(url + "/ip_restriction", json={"ip_policy_ids": []}).status_code == 400
    bid = tunnel_group(api)
    shown = api.put(url + "/backend", json={"backend_id": bid}).json()
    assert shown == {"enabled": True, "backend": {
        "id": bid, "uri": f"{server.base_url}/backends/tunnel_group/{bid}"}}
    r = api.delete(f"/backends/tunnel_group/{bid}")
    assert r.status_code == 400 and tcp["id"] in r.json()["msg"]
    assert api.patch(url, json={"description": "still linked"}).status_code == 200
    assert api.delete(f"/backends/tunnel_group/{bid}").status_code == 400
    api.delete(url + "/backend")
    assert api.delete(f"/backends/tunnel_group/{bid}").status_code == 204


def test_edges_and_routes_render_the_legacy_policy_member(api: httpx.Client) -> None:
    edges = [created(api, f"/edges/{k}", {}) for k in ("https", "tcp", "tls")]
    rt = route(api, edges[0]["id"]).json()
    for shown in (*edges, rt, api.get(f"/edges/https/{edges[0]['id']}").json()["routes"][0]):
        assert "policy" in shown and shown["policy"] is None, shown
    r = api.post("/edges/tcp", json={"policy": {}})
    assert r.status_code == 400 and "policy" in r.json()["msg"]
