"""Every page of the dashboard through axe-core (the accessibility checker, from npm) in
Debian's Chromium, wide and light, then (the pages of each layout) phone-sized and dark: no
violation of the WCAG 2.x A and AA rules (and axe's best practices) that axe tests. The pages
are filled first (a table of each kind, a detail page with its edit form, a failing DNS check,
a form refused with the API's message, the site-to-site page empty and filled) so that what
is checked is what people see. The main pages' screenshots, each size and scheme, are left in
``artifacts/screenshots`` for people to look at."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from edgeway.dashboard.nav import GROUPS
from tests.dashboard.browser import chromium, expect, sign_in
from tests.edge.agents import EdgeClient
from tests.server import Server

AXE = Path(__file__).parents[1] / "vendor" / "peers" / "node_modules" / "axe-core" / "axe.min.js"
if not AXE.is_file():
    pytest.skip("axe-core is not installed (scripts/test installs it with npm)",
                allow_module_level=True)
SHOTS = Path(__file__).parents[2] / "artifacts" / "screenshots"
RULES = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa", "best-practice"]


@pytest.fixture(scope="module")
def chrome() -> Iterator[Any]:
    with chromium() as browser:
        yield browser


def violations(page: Any) -> list[str]:
    """axe's findings on the page as shown: rule, impact and the first elements."""
    page.add_script_tag(content=AXE.read_text())
    found = page.evaluate("""async (tags) => (await axe.run(document,
        {runOnly: {type: 'tag', values: tags}})).violations.map(v =>
        `${v.id} (${v.impact}): ${v.help} at ${v.nodes.slice(0, 3).map(n =>
        n.target.join(' ')).join(', ')}`)""", RULES)
    return list(found)


def _filled(srv: Server) -> dict[str, str]:
    with srv.client() as api:
        policy = api.post("/ip_policies", json={"description": "office"}).json()["id"]
        api.post("/ip_policy_rules", json={"ip_policy_id": policy, "cidr": "10.0.0.0/8",
                                           "action": "allow"})
        domain = api.post("/reserved_domains", json={
            "domain": "axe.example.com", "certificate_management_policy": None}).json()["id"]
        api.post("/credentials", json={"description": "site a"})
        edge = api.post("/edges/https", json={"hostports": ["axe.example.com:443"]}).json()
        answer = api.post("/backends/http_response", json={"body": "hi", "status_code": 200,
                                                           "headers": {}}).json()
        route = api.post(f"/edges/https/{edge['id']}/routes", json={
            "match_type": "path_prefix", "match": "/",
            "backend": {"backend_id": answer["id"]}})
        assert route.status_code == 201
        assert api.put(f"/edges/https/{edge['id']}/routes/{route.json()['id']}"
                       "/request_headers", json={"add": {"X-A": "b"}}).status_code == 200
        dest = api.post("/event_destinations", json={
            "target": {"monitoring": {"api_key": "k", "tags": "axe"}}}).json()["id"]
        ingress = api.post("/agent_ingresses", json={"domain": "connect.axe.example"}).json()
        bot = api.post("/bot_users", json={"name": "axe agents"}).json()["id"]
    with EdgeClient(srv) as web:  # (a request for the traffic page to show)
        assert web.get("https://axe.example.com/seen").text == "hi"
    site = f"/site?ingress={ingress['id']}&domain={domain}&bot={bot}&check=ingress"
    return {"policy": policy, "domain": domain, "edge": edge["id"], "dest": dest, "site": site,
            "route": f"/edges_https/{edge['id']}/routes/{route.json()['id']}"}


def shot(page: Any, path: str, width: int, dark: bool) -> None:
    """A screenshot of the page as shown, in ``artifacts/screenshots`` (not committed)."""
    bare = re.sub(r"/[a-z]+_[0-9A-Za-z]{20,}", "/one", path.split("?")[0])  # (no ids)
    name = re.sub(r"[^a-z0-9]+", "-", bare.lower()).strip("-") or "overview"
    if "?" in path:
        name += "-filled"
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}-{width}{'-dark' if dark else ''}.png"),
                    full_page=True)


@pytest.mark.parametrize(("width", "dark"), [(1280, False), (390, True)])
def test_every_page_passes_axe(chrome: Any, own_server: Server, width: int,
                               dark: bool) -> None:
    made = _filled(own_server)
    context = chrome.new_context(viewport={"width": width, "height": 900},
                                 color_scheme="dark" if dark else "light",
                                 bypass_csp=True)  # (to load axe itself; the pages need none)
    page = context.new_page()
    try:
        page.goto(own_server.base_url + "/dashboard/signin")
        expect(page.locator("#signin")).to_be_visible()
        found = {"signin": violations(page)}
        sign_in(page, own_server)
        paths = ["/", "/site", made["site"], "/counts", "/sessions", "/dns_checks", "/traffic",
                 f"/ip_policies/{made['policy']}",
                 f"/reserved_domains/{made['domain']}?check=dns",
                 f"/edges_https/{made['edge']}", made["route"],
                 f"/event_destinations/{made['dest']}"]
        if not dark:  # (every list page once; the phone-sized dark run, one of them)
            paths += [f"/{e.slug}" for _, entries in GROUPS for e in entries]
        else:
            paths += ["/ip_policies", "/credentials"]
        page.goto(own_server.base_url + "/dashboard" + made["route"])  # (a module's form open)
        page.click("#module-request_headers summary")
        expect(page.locator("#m-request_headers-in-add")).to_be_visible()
        found["module form"] = violations(page)
        shot(page, "/route-module-form", width, dark)
        main = set(paths[:12])  # (the main pages: screenshots of them too)
        for path in paths:
            page.goto(own_server.base_url + "/dashboard" + path)
            expect(page.locator("h1")).to_be_visible()
            assert page.locator("h1").inner_text() != "Not found", path
            found[path] = violations(page)
            if path in main:
                shot(page, path, width, dark)
        # a form refused by the API, its message next to the input
        page.goto(own_server.base_url + "/dashboard/ip_policy_rules")
        page.click("#create summary")
        page.fill("#in-cidr", "10.0.0.1/8")
        page.click("#create-submit")
        expect(page.locator(".error").first).to_be_visible()
        found["refused form"] = violations(page)
    finally:
        context.close()
    bad = {where: v for where, v in found.items() if v}
    assert not bad, "\n".join(f"{where}: {v}" for where, v in bad.items())
