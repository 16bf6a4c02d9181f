"""Dashboard pages over real HTTP: the same operations as the API with the signed-in key's
role (a read-only key is offered no write, and a forged one is refused by the operation),
the API's messages next to the input they name, filters and paging as the API's, the
``dashboard`` IP restrictions, ``--no-dashboard`` and the browser's redirect from ``/``."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest

from tests.dashboard.visitor import csrf_of, post, signed_in, visitor
from tests.server import Server, start, trust


def field_error(page: httpx.Response, name: str) -> str:
    """The error shown in the form next to input ``name`` ("" when there is none)."""
    block = re.search(rf'<div class="field[^"]*" id="field-{name}">(.*?)</div>', page.text,
                      re.S)
    assert block, f"no input {name}"
    found = re.search(r'<p class="error"[^>]*>(.*?)</p>', block.group(1), re.S)
    return found.group(1) if found else ""


def test_a_form_error_is_the_apis_next_to_its_input(server: Server) -> None:
    with server.client() as api:
        policy = api.post("/ip_policies", json={}).json()["id"]
        said = api.post("/ip_policy_rules", json={"ip_policy_id": policy, "cidr": "10.0.0.1/8",
                                                  "action": "allow"}).json()
    with signed_in(server) as browser:
        r = post(browser, "/dashboard/ip_policy_rules", "/dashboard/ip_policy_rules",
                 {"ip_policy_id": policy, "cidr": "10.0.0.1/8", "action": "allow"})
        assert r.status_code == 400
        shown = field_error(r, "cidr")
        assert said["msg"].replace("'", "&#39;") in shown and said["error_code"] in shown, shown
        assert field_error(r, "action") == "" and 'value="10.0.0.1/8"' in r.text
        r = post(browser, "/dashboard/ip_policy_rules", "/dashboard/ip_policy_rules",
                 {"cidr": "10.0.0.0/8", "action": "allow"})
        assert "ERR_EDGEWAY_1405" in field_error(r, "ip_policy_id")
        r = post(browser, "/dashboard/event_destinations", "/dashboard/event_destinations",
                 {"target": "{not json"})
        assert r.status_code == 400 and "not valid JSON" in field_error(r, "target")


def test_lists_filter_and_page_as_the_api_does(server: Server) -> None:
    with server.client() as api:
        made = [api.post("/ip_policies", json={"description": f"paging {i}"}).json()["id"]
                for i in range(3)]
    with signed_in(server) as browser:
        first = browser.get("/dashboard/ip_policies", params={"limit": "2"})
        rows = re.findall(r'<tr id="row-([^"]+)"', first.text)
        assert len(rows) == 2 and rows == sorted(rows, reverse=True)  # newest first
        older = re.search(r'<a href="([^"]+)" id="next"', first.text)
        assert older and "before_id" in older.group(1)
        second = browser.get(older.group(1).replace("&amp;", "&"))
        assert re.findall(r'<tr id="row-([^"]+)"', second.text)[0] < rows[-1]
        picked = browser.get("/dashboard/ip_policies",
                             params={"filter": 'obj.description == "paging 1"'})
        assert re.findall(r'<tr id="row-([^"]+)"', picked.text) == [made[1]]
        bad = browser.get("/dashboard/ip_policies", params={"filter": "obj.nope =="})
        assert bad.status_code == 200 and 'id="filter-error"' in bad.text
        assert "ERR_EDGEWAY_250" in bad.text
        shown = browser.get(f"/dashboard/ip_policies/{made[0]}")
        assert shown.status_code == 200 and "paging 0" in shown.text
        missing = browser.get("/dashboard/ip_policies/ipp_" + "0" * 27)
        assert missing.status_code == 404 and "was not found" in missing.text
        assert browser.get("/dashboard/no_such_kind").status_code == 404


def test_a_read_only_key_is_offered_no_write_and_a_forged_one_is_refused(
        server: Server) -> None:
    with server.client() as api:
        ro = api.post("/api_keys", json={"role": "read_only"}).json()
        policy = api.post("/ip_policies", json={}).json()["id"]
        before = {k["id"] for k in api.get("/api_keys").json()["keys"]}
    with signed_in(server, ro["token"]) as browser:
        for page in ("/dashboard/api_keys", "/dashboard/ip_policies", "/dashboard/",
                     f"/dashboard/ip_policies/{policy}"):
            r = browser.get(page)
            assert r.status_code == 200 and 'id="role">read_only' in r.text, page
            assert 'id="create"' not in r.text and "Revoke</button>" not in r.text
            assert "Delete</button>" not in r.text
        r = post(browser, "/dashboard/api_keys", "/dashboard/api_keys", {"role": "admin"})
        assert r.status_code == 403 and "ERR_EDGEWAY_260" in r.text, r.text
        r = post(browser, "/dashboard/ip_policies", f"/dashboard/ip_policies/{policy}/delete",
                 {})
        assert r.status_code == 403 and "ERR_EDGEWAY_260" in r.text
    with server.client() as api:
        assert {k["id"] for k in api.get("/api_keys").json()["keys"]} == before
        assert api.get(f"/ip_policies/{policy}").status_code == 200
        assert api.delete(f"/api_keys/{ro['id']}").status_code == 204


def test_an_operator_is_offered_what_its_role_may_do(server: Server) -> None:
    with server.client() as api:
        op = api.post("/api_keys", json={"role": "operator"}).json()
    with signed_in(server, op["token"]) as browser:
        assert 'id="create"' not in browser.get("/dashboard/api_keys").text
        assert 'id="create"' in browser.get("/dashboard/ip_policies").text
        r = post(browser, "/dashboard/ip_policies", "/dashboard/ip_policies",
                 {"description": "by an operator"})
        assert r.status_code == 303 and "created=ipp_" in r.headers["location"]
        assert "by an operator" in browser.get(r.headers["location"]).text
    with server.client() as api:
        assert api.delete(f"/api_keys/{op['id']}").status_code == 204


def test_a_key_is_shown_once_on_the_answer_to_its_create(server: Server) -> None:
    with signed_in(server) as browser:
        r = post(browser, "/dashboard/api_keys", "/dashboard/api_keys",
                 {"role": "read_only", "description": "shown once"})
        assert r.status_code == 201 and r.headers["cache-control"] == "no-store"
        token = re.search(r'<code id="token">([^<]+)</code>', r.text)
        assert token
        again = browser.get("/dashboard/api_keys")
        assert "shown once" in again.text and token.group(1) not in again.text
        with server.client(token.group(1)) as api:
            mine = api.get("/api_keys").json()["keys"]
            made = next(k for k in mine if k["description"] == "shown once")
            assert made["role"] == "read_only"
        r = post(browser, "/dashboard/api_keys", f"/dashboard/api_keys/{made['id']}/delete",
                 {})
        assert r.status_code == 303 and f"deleted={made['id']}" in r.headers["location"]
        with server.client(token.group(1)) as api:
            assert api.get("/api_keys").status_code == 403


def test_a_dashboard_restriction_refuses_other_addresses(own_server: Server) -> None:
    with own_server.client() as api:
        policy = api.post("/ip_policies", json={}).json()["id"]
        api.post("/ip_policy_rules", json={"ip_policy_id": policy, "cidr": "127.0.0.2/32",
                                           "action": "allow"})
        rid = api.post("/ip_restrictions", json={"type": "dashboard", "enforced": True,
                                                 "ip_policy_ids": [policy]}).json()["id"]
    with visitor(own_server) as refused, visitor(own_server, "127.0.0.2") as allowed:
        for page in ("/dashboard/", "/dashboard/signin", "/dashboard/static/dashboard.css",
                     "/dashboard/nothing"):
            r = refused.get(page)
            assert r.status_code == 403 and rid in r.text and "127.0.0.1" in r.text, page
        assert allowed.get("/dashboard/signin").status_code == 200
    with own_server.client() as api:  # (the API is another restriction type's)
        assert api.get("/ip_policies").status_code == 200
    assert "dashboard_refused" in own_server.log()


def test_no_dashboard_leaves_the_api_as_it_was(tmp_path: Path) -> None:
    srv = start(tmp_path / "srv", None, "--no-dashboard")
    try:
        with visitor(srv) as browser:
            r = browser.get("/dashboard/")
            assert r.status_code == 404 and r.json()["error_code"] == "ERR_EDGEWAY_254"
            r = browser.get("/")
            assert r.status_code == 200 and r.json()["name"] == "edgeway"
    finally:
        assert srv.stop() == 0


def test_a_browser_is_sent_from_the_root_to_the_dashboard(server: Server) -> None:
    with httpx.Client(base_url=server.base_url, verify=trust()) as client:
        r = client.get("/", headers={"Accept": "text/html,application/xhtml+xml"})
        assert r.status_code == 303 and r.headers["location"] == "/dashboard/"
        assert client.get("/").json()["name"] == "edgeway"  # (an API client: as before)
        r = client.get("/dashboard/static/dashboard.css")
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/css")
        for asset in ("dashboard.css", "dashboard.js"):
            text = client.get(f"/dashboard/static/{asset}").text
            assert not re.search(r"https?://|@import|url\(", text), asset
        for name in ("app.py", "%2e%2e%2fapp.py", "..%2f__init__.py"):
            r = client.get(f"/dashboard/static/{name}")
            assert r.status_code in (404, 405) and "import" not in r.text, name
        r = client.delete("/dashboard/")
        assert r.status_code == 405


@pytest.mark.parametrize("path", ["/dashboard//evil.example", "//evil.example/dashboard/",
                                  "https://evil.example/dashboard/", "/dashboard/\\evil",
                                  "/dashboard/\x00x", "javascript:alert(1)"])
def test_sign_in_never_sends_a_browser_elsewhere(server: Server, path: str) -> None:
    with visitor(server) as browser:
        form = browser.get("/dashboard/signin")
        r = browser.post("/dashboard/signin", data={"csrf": csrf_of(form), "key": server.token,
                                                    "next": path})
        assert r.status_code == 303 and r.headers["location"] == "/dashboard/"


def test_an_https_edge_page_lists_creates_and_edits_its_routes(server: Server) -> None:
    with server.client() as api:
        edge = api.post("/edges/https", json={"description": "routed"}).json()["id"]
    page = f"/dashboard/edges_https/{edge}"
    with signed_in(server) as browser:
        shown = browser.get(page)
        assert shown.status_code == 200 and 'id="create-routes"' in shown.text
        r = post(browser, page, f"{page}/routes", {"match_type": "path_prefix",
                                                   "match": "/api", "description": "first"})
        assert r.status_code == 303, r.text
        route_page = r.headers["location"]
        route = route_page.rsplit("/", 1)[1]
        assert route_page == f"{page}/routes/{route}" and route.startswith("edghtsrt_")
        assert f'id="child-{route}"' in browser.get(page).text
        r = post(browser, page, f"{page}/routes", {"match_type": "path_prefix",
                                                   "match": "/api"})
        assert r.status_code == 400 and "ERR_EDGEWAY_7126" in r.text  # (the same match)
        assert 'id="create-routes" open' in r.text
        r = post(browser, route_page, route_page, {"description": "renamed",
                                                    "match_type": "path_prefix",
                                                    "match": "/api"})
        assert r.status_code == 303 and r.headers["location"] == f"{route_page}?updated=1"
        with server.client() as api:
            stored = api.get(f"/edges/https/{edge}/routes/{route}").json()
            assert stored["description"] == "renamed" and stored["match"] == "/api"
        r = post(browser, route_page, f"{route_page}/delete", {})
        assert r.status_code == 303 and r.headers["location"] == f"{page}?deleted={route}"
        assert browser.get(f"{page}/routes/{route}").status_code == 404
        assert browser.get(f"{page}/nothing/{route}").status_code == 404
    with server.client() as api:
        assert api.get(f"/edges/https/{edge}").json()["routes"] == []
        assert api.delete(f"/edges/https/{edge}").status_code == 204


def test_the_counts_are_the_apis_and_the_overview_loads_them_in_place(server: Server) -> None:
    with server.client() as api:
        while len(api.get("/ip_policies", params={"limit": "100"}).json()["ip_policies"]) < 100:
            api.post("/ip_policies", json={"description": "counted"})
        api.post("/ip_policies", json={"description": "one more"})
        vaults = len(api.get("/vaults", params={"limit": "100"}).json()["vaults"])
    with signed_in(server) as browser:
        overview = browser.get("/dashboard/")
        assert 'hx-get="/dashboard/counts"' in overview.text
        assert 'href="/dashboard/counts" id="counts-link"' in overview.text  # (without scripts)
        page = browser.get("/dashboard/counts").text
        shown = dict(re.findall(r'<a href="/dashboard/([a-z_]+)">[^<]+</a> '
                                r'<span class="n">([^<]+)</span>', page))
        assert shown["ip_policies"] == "100+" and shown["vaults"] == str(vaults), shown
        assert "tunnels" not in shown  # (the live kinds are the overview's own)
