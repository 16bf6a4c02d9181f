"""Conventions every operation shares: auth, version header, bodies, errors, paging, ids."""

from __future__ import annotations

import json
import socket
import uuid
from typing import Any

import httpx
import pytest

from tests.conftest import CORS_ORIGIN
from tests.server import Server, trust


def code(r: httpx.Response) -> str:
    return str(r.json().get("error_code", ""))


def test_auth_failures_are_403_with_the_error_body(server: Server) -> None:
    with httpx.Client(base_url=server.base_url, headers={"Edgeway-Version": "2"},
                      verify=trust()) as c:
        cases = {
            None: "_200",
            "Basic abc": "_201",
            "Bearer": "_201",
            "Bearer garbage": "_202",
            f"Bearer {'A' * 27}_nothing": "_203",
            f"Bearer ak_{'A' * 27}": "_208",
        }
        for header, suffix in cases.items():
            headers = {"Authorization": header} if header else {}
            r = c.get("/ip_policies", headers=headers)
            assert r.status_code == 403, header
            body = r.json()
            assert body["status_code"] == 403 and code(r).endswith(suffix), (header, body)
            assert body["details"]["operation_id"] == r.headers["edgeway-operation-id"]


def test_an_agent_authtoken_is_not_an_api_key(api: httpx.Client, server: Server) -> None:
    token = api.post("/credentials", json={}).json()["token"]
    with server.client(token) as c:
        r = c.get("/ip_policies")
    assert r.status_code == 403 and code(r).endswith("_206")


def test_a_deleted_api_key_stops_working_at_once(api: httpx.Client, server: Server) -> None:
    key = api.post("/api_keys", json={"description": "short-lived"}).json()
    with server.client(key["token"]) as c:
        assert c.get("/ip_policies").status_code == 200
        assert api.delete(f"/api_keys/{key['id']}").status_code == 204
        assert c.get("/ip_policies").status_code == 403


def test_version_header(server: Server) -> None:
    auth = {"Authorization": f"Bearer {server.token}"}
    with httpx.Client(base_url=server.base_url, headers=auth, verify=trust()) as c:
        r = c.get("/ip_policies")
        assert r.status_code == 400 and code(r).endswith("_218")
        assert "Edgeway-Version" in r.json()["msg"]
        assert c.get("/ip_policies", headers={"Service-Version": "2"}).status_code == 200
        assert c.get("/ip_policies", headers={"edgeway-version": "2"}).status_code == 200
        r = c.get("/ip_policies", headers={"Edgeway-Version": "3"})
        assert r.status_code == 400 and code(r).endswith("_217")


def test_body_rules(api: httpx.Client) -> None:
    r = api.post("/ip_policies", content=b'{"description":"x"}')
    assert r.status_code == 400 and code(r).endswith("_216")
    r = api.post("/ip_policies", content=b'{"description":"x"}',
                 headers={"Content-Type": "text/plain"})
    assert r.status_code == 400 and code(r).endswith("_210")
    json_ct = {"Content-Type": "application/json"}
    r = api.post("/ip_policies", content=b'{"description":', headers=json_ct)
    assert r.status_code == 400 and code(r).endswith("_213")
    r = api.post("/ip_policies", content=b"[1, 2]", headers=json_ct)
    assert r.status_code == 400 and "object" in r.json()["msg"]
    r = api.request("GET", "/ip_policies", content=b"{}", headers=json_ct)
    assert r.status_code == 400 and code(r).endswith("_211")
    r = api.post("/ip_policies", content=b" " * (2 << 20), headers=json_ct)
    assert r.status_code == 413
    ok = api.post("/ip_policies", content=b'{"description":"utf8"}',
                  headers={"Content-Type": "application/json; charset=utf-8"})
    assert ok.status_code == 201


@pytest.mark.parametrize("version", ["Edgeway-Version", "Ngrok-Version"])
def test_a_deeply_nested_body_is_a_400(server: Server, version: str) -> None:
    """The vendor's dialect renames members in a walk over the body (it holds a name it
    renames, "github"): a wrong member a few hundred levels deep is named, a body too deep to
    decode is refused as such. Edgeway's own dialect decodes into the expected shape, which
    stops at the first wrong member."""
    vendor = version == "Ngrok-Version"
    headers = {version: "2", "Authorization": f"Bearer {server.token}",
               "Content-Type": "application/json"}
    with httpx.Client(base_url=server.base_url, headers=headers, verify=trust()) as c:
        for depth in (500, 100_000):
            body = b'{"description":' + b"[" * depth + b"]" * depth + b',"x":"github"}'
            r = c.post("/ip_policies", content=body)
            assert r.status_code == 400, (depth, r.text)
            got = r.json()
            if vendor and depth > 500:
                assert got["error_code"] == "ERR_NGROK_213"
                assert got["msg"] == ("The request body is not valid here: its arrays and "
                                      "objects are nested too deeply (no request member nests "
                                      "more than a few levels).")
            else:
                assert got["error_code"] == ("ERR_NGROK_215" if vendor else "ERR_EDGEWAY_215")
                assert got["details"]["member"] == "description", got


def _raw_post(server: Server, path: str, head: str) -> tuple[int, dict[str, Any]]:
    """POST ``path`` over a socket of its own: ``head`` holds the framing headers (or none:
    no body at all), the status and the JSON body answered."""
    host, port = server.base_url.removeprefix("http://").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(f"POST {path} HTTP/1.1\r\nHost: {host}\r\nEdgeway-Version: 2\r\n"
                     f"Authorization: Bearer {server.token}\r\nConnection: close\r\n"
                     f"{head}\r\n".encode())
        raw = b"".join(iter(lambda: sock.recv(65536), b""))
    top, _, body = raw.partition(b"\r\n\r\n")
    return int(top.split()[1]), json.loads(body)


@pytest.mark.parametrize("body", [b"", b" ", b"\r\n\t  \n"], ids=["empty", "space", "blank"])
def test_an_empty_or_blank_body_on_create_is_not_json(api: httpx.Client, server: Server,
                                                      body: bytes) -> None:
    sub = api.post("/event_subscriptions", json={}).json()["id"]
    creates = ["/ip_policies", "/credentials", "/reserved_domains", "/bot_users",
               "/tls_certificates", "/vaults", f"/event_subscriptions/{sub}/sources"]
    for path in creates:
        listing = path if not path.endswith("/sources") else f"/event_subscriptions/{sub}"
        before = api.get(listing).json()
        for ctype in ({"Content-Type": "application/json"}, {}):
            r = api.post(path, content=body, headers=ctype)
            assert r.status_code == 400, (path, body, r.text)
            got = r.json()
            assert code(r) == "ERR_EDGEWAY_213" and got["status_code"] == 400, got
            assert "not valid JSON" in got["msg"] and "empty" in got["msg"], got
            assert got["details"]["operation_id"] == r.headers["edgeway-operation-id"]
        assert api.get(listing).json() == before, path  # nothing was made
    # no body at all (no length, not chunked), or a declared length of 0: the same
    for head in ("", "Content-Length: 0\r\n", "Content-Type: application/json\r\n"
                 "Transfer-Encoding: chunked\r\n\r\n0\r\n"):
        status, got = _raw_post(server, "/ip_policies", head)
        assert (status, got["error_code"]) == (400, "ERR_EDGEWAY_213"), (head, got)
    # an object is still one, however spaced; {} asks for every default
    r = api.post("/ip_policies", content=b" \n{ } \n", headers={"Content-Type":
                                                                  "application/json"})
    assert r.status_code == 201 and r.json()["description"] == "", r.text
    r = api.post("/bot_users", json={})
    assert r.status_code == 400 and "name" in r.json()["msg"]


def test_the_vendor_dialect_refuses_an_empty_create_body_with_its_code(server: Server) -> None:
    headers = {"Ngrok-Version": "2", "Authorization": f"Bearer {server.token}",
               "Content-Type": "application/json"}
    with httpx.Client(base_url=server.base_url, headers=headers, verify=trust()) as c:
        r = c.post("/ip_policies", content=b"  ")
        assert r.status_code == 400 and r.json()["error_code"] == "ERR_NGROK_213", r.text


def test_missing_required_member_is_named(api: httpx.Client) -> None:
    r = api.post("/ip_policy_rules", json={"cidr": "10.0.0.0/8", "action": "allow"})
    assert r.status_code == 400
    assert "ip_policy_id" in r.json()["msg"] and r.json()["details"]["member"] == "ip_policy_id"


def test_unknown_path_and_method(api: httpx.Client) -> None:
    r = api.get("/no_such_collection")
    assert r.status_code == 404
    assert r.json()["details"]["path"] == "/no_such_collection"
    assert r.json()["error_code"] == "ERR_EDGEWAY_254"
    r = api.put("/ip_policies")
    assert r.status_code == 405 and "POST" in r.headers["allow"]
    assert r.json()["status_code"] == 405 and r.json()["error_code"] == "ERR_EDGEWAY_255"


def test_paging_parameters(api: httpx.Client) -> None:
    for limit, suffix in (("0", "_233"), ("101", "_233"), ("abc", "_244"), ("-1", "_244"),
                          ("²", "_244"), ("١٢", "_244"), ("", "_244"), (" 5", "_244")):
        r = api.get("/ip_policies", params={"limit": limit})
        assert r.status_code == 400 and code(r).endswith(suffix), limit
    r = api.get("/ip_policies", params={"color": "red"})
    assert r.status_code == 400 and code(r).endswith("_231") and "color" in r.json()["msg"]
    r = api.get("/ip_policies?limit=1&limit=2")
    assert r.status_code == 400 and code(r).endswith("_232")
    r = api.get("/ip_policies", params={"before_id": "rd_" + "A" * 27})
    assert r.status_code == 400 and "ipp_" in r.json()["msg"]
    assert api.get("/ip_policies", params={"limit": "100"}).status_code == 200


def test_default_page_is_100_and_a_short_last_page_has_no_next(api: httpx.Client) -> None:
    for _ in range(101):
        assert api.post("/bot_users", json={"name": "pager"}).status_code == 201
    page = api.get("/bot_users").json()
    assert len(page["bot_users"]) == 100 and page["next_page_uri"] is not None
    rest = api.get(page["next_page_uri"]).json()
    assert rest["next_page_uri"] is None
    assert {b["id"] for b in rest["bot_users"]}.isdisjoint(b["id"] for b in page["bot_users"])


def test_openapi_describes_every_route(api: httpx.Client, server: Server) -> None:
    doc = api.get("/openapi.json").json()
    assert doc["openapi"].startswith("3.1")
    assert doc["servers"] == [{"url": server.base_url}]
    for path in ("/ip_policies", "/ip_policies/{id}", "/api_keys", "/credentials/{id}",
                 "/event_subscriptions/{id}/sources/{type}", "/tunnel_sessions"):
        assert path in doc["paths"], path
    ops = [op for item in doc["paths"].values() for op in item.values()]
    assert len({op["operationId"] for op in ops}) == len(ops)
    rd = doc["components"]["schemas"]["ReservedDomain"]
    assert "acme_challenge_cname_target" in rd["required"]


def test_one_structured_log_line_per_request(api: httpx.Client, server: Server) -> None:
    r = api.get("/ip_policies", params={"limit": "7"})
    op = r.headers["edgeway-operation-id"]
    lines = [json.loads(x) for x in server.log().splitlines() if op in x]
    assert len(lines) == 1
    assert lines[0] | {"ms": 0, "ts": ""} == {
        "event": "request", "level": "info", "ts": "", "method": "GET", "path": "/ip_policies",
        "status": 200, "ms": 0, "client": "127.0.0.1", "operation_id": op}
    assert lines[0]["ts"].endswith("Z")


def test_openapi_lists_exactly_the_served_operations(api: httpx.Client) -> None:
    from edgeway.api.app import routes

    doc = api.get("/openapi.json").json()
    documented = {(p, m.upper()) for p, item in doc["paths"].items() for m in item}
    served = {(p, m) for p, m, _ in routes()} - {("/", "GET"), ("/openapi.json", "GET")}
    assert documented == served
    assert len(served) > 200


def test_cors_preflight_and_answers_for_allowed_origins_only(server: Server) -> None:
    preflight = {"Origin": CORS_ORIGIN, "Access-Control-Request-Method": "PATCH",
                 "Access-Control-Request-Headers": "authorization, content-type, edgeway-version"}
    with httpx.Client(base_url=server.base_url, timeout=30, verify=trust()) as anon:
        r = anon.options("/ip_policies/ipp_x", headers=preflight)
        assert r.status_code == 200, r.text
        assert r.headers["access-control-allow-origin"] == CORS_ORIGIN
        assert "PATCH" in r.headers["access-control-allow-methods"]
        assert "edgeway-version" in r.headers["access-control-allow-headers"].lower()
        r = anon.options("/ip_policies", headers={**preflight, "Origin": "https://evil.example"})
        assert r.status_code == 400 and "access-control-allow-origin" not in r.headers
    with server.client() as api:
        r = api.get("/ip_policies", headers={"Origin": CORS_ORIGIN})
        assert r.status_code == 200
        assert r.headers["access-control-allow-origin"] == CORS_ORIGIN
        assert "edgeway-operation-id" in r.headers["access-control-expose-headers"].lower()
        r = api.get("/ip_policies", headers={"Origin": "https://evil.example"})
        assert r.status_code == 200 and "access-control-allow-origin" not in r.headers


def test_no_cors_unless_configured() -> None:
    from edgeway.cli import parser
    from edgeway.serve_cli import server_config

    cfg = server_config(parser().parse_args(["serve"]))
    assert cfg.cors_origins == ()
    cfg = server_config(parser().parse_args(
        ["serve", "--api-cors-origins", "HTTPS://Console.Example.com:8443/,*"]))
    assert cfg.cors_origins == ("https://console.example.com:8443", "*")


def test_the_vendor_dialect_ignores_unknown_query_parameters(server: Server) -> None:
    headers = {"Ngrok-Version": "2", "Authorization": f"Bearer {server.token}"}
    with httpx.Client(base_url=server.base_url, headers=headers, verify=trust()) as vendor, \
            server.client() as api:
        made = api.post("/ip_policies", json={"description": "queried"}).json()["id"]
        r = vendor.get("/ip_policies", params={"color": "red", "limit": "1"})
        assert r.status_code == 200 and len(r.json()["ip_policies"]) == 1
        assert r.json()["ip_policies"][0]["id"] == made  # (limit still applies)
        r = vendor.get("/ip_policies", params={"limit": "0"})  # (known ones stay checked)
        assert r.status_code == 400 and r.json()["error_code"] == "ERR_NGROK_233"
        r = api.get("/ip_policies", params={"color": "red"})  # (Edgeway's dialect: strict)
        assert r.status_code == 400 and r.json()["error_code"] == "ERR_EDGEWAY_231"


@pytest.mark.parametrize("version", ["Edgeway-Version", "Ngrok-Version"])
def test_ids_the_path_already_gives_are_accepted_in_bodies_when_they_agree(
        server: Server, version: str) -> None:
    headers = {version: "2", "Authorization": f"Bearer {server.token}"}
    with httpx.Client(base_url=server.base_url, headers=headers, verify=trust()) as c:
        policy = c.post("/ip_policies", json={}).json()["id"]
        r = c.patch(f"/ip_policies/{policy}", json={"id": policy, "description": "same id"})
        assert r.status_code == 200 and r.json()["description"] == "same id", r.text
        other = c.post("/ip_policies", json={}).json()["id"]
        r = c.patch(f"/ip_policies/{policy}", json={"id": other, "description": "moved"})
        assert r.status_code == 400 and r.json()["details"]["member"] == "id", r.text
        assert other in r.json()["msg"] or policy in r.json()["msg"]
        assert c.get(f"/ip_policies/{policy}").json()["description"] == "same id"
        domain = c.post("/reserved_domains", json={
            "domain": f"echo-{uuid.uuid4().hex[:8]}.example.com"}).json()["domain"]
        edge = c.post("/edges/https", json={"hostports": [f"{domain}:443"]}).json()["id"]
        route = c.post(f"/edges/https/{edge}/routes", json={
            "edge_id": edge, "match_type": "path_prefix", "match": "/"})
        assert route.status_code == 201 and route.json()["edge_id"] == edge, route.text
        r = c.patch(f"/edges/https/{edge}/routes/{route.json()['id']}", json={
            "id": route.json()["id"], "edge_id": edge, "match": "/v2"})
        assert r.status_code == 200 and r.json()["match"] == "/v2", r.text
        r = c.post(f"/edges/https/{edge}/routes", json={
            "edge_id": "edghts_" + "A" * 27, "match_type": "path_prefix", "match": "/x"})
        assert r.status_code == 400 and r.json()["details"]["member"] == "edge_id", r.text
        assert len(c.get(f"/edges/https/{edge}").json()["routes"]) == 1
