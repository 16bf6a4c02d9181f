"""The dashboard as a person sees it, in Debian's Chromium (Playwright): sign in with a key,
create an API key and see it once, a form error next to its input, what a read-only key is
offered, CSRF, sign-out, a page of another site posting a form, a 390-pixel-wide screen in
the dark, a name and password; and nothing requested from any host but the server."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.dashboard.browser import chromium, expect, page_of, sign_in
from tests.server import Server, start


@pytest.fixture(scope="module")
def chrome() -> Iterator[Any]:
    with chromium() as browser:
        yield browser


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = start(Path(tmp_path_factory.mktemp("dashboard")))
    yield server
    assert server.stop() == 0


def test_sign_in_and_create_an_api_key_shown_once(chrome: Any, srv: Server) -> None:
    with page_of(chrome, srv) as page:
        sign_in(page, srv)
        cookie = next(c for c in page.context.cookies() if c["name"] == "edgeway_session")
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict", cookie
        assert cookie["path"] == "/dashboard" and cookie["expires"] == -1, cookie
        assert page.evaluate("document.cookie") == ""  # (no script can read it)
        page.click("text=API keys")
        page.click("#create summary")
        page.select_option("#in-role", "read_only")
        page.fill("#in-description", "made in the browser")
        page.click("#create-submit")
        token = page.locator("#token")
        expect(token).to_be_visible()
        shown = token.inner_text()
        assert re.fullmatch(r"[0-9A-Za-z]{27}_[0-9A-Za-z]{32}", shown), shown
        expect(page.locator("#shown")).to_contain_text("only this once")
        page.goto(srv.base_url + "/dashboard/api_keys")
        expect(page.locator("#items")).to_contain_text("made in the browser")
        assert shown not in page.content()
    with srv.client(shown) as api:
        assert api.get("/api_keys").status_code == 200
        assert api.post("/ip_policies", json={}).status_code == 403


def test_a_form_error_is_shown_next_to_its_field(chrome: Any, srv: Server) -> None:
    with srv.client() as api:
        policy = api.post("/ip_policies", json={}).json()["id"]
    with page_of(chrome, srv) as page:
        sign_in(page, srv)
        page.goto(srv.base_url + "/dashboard/ip_policy_rules")
        page.click("#create summary")
        page.fill("#in-cidr", "10.0.0.300/8")
        page.fill("#in-ip_policy_id", policy)
        page.select_option("#in-action", "deny")
        page.click("#create-submit")
        error = page.locator("#field-cidr .error")
        expect(error).to_contain_text("cidr")
        expect(error).to_contain_text("ERR_EDGEWAY_")
        expect(page.locator("#in-cidr")).to_have_attribute("aria-invalid", "true")
        expect(page.locator("#in-cidr")).to_have_value("10.0.0.300/8")
        assert page.locator("#field-action .error").count() == 0
        page.fill("#in-cidr", "10.0.0.0/8")
        page.click("#create-submit")
        expect(page.locator("#notice")).to_contain_text("Created ipr_")
        expect(page.locator("#items")).to_contain_text("10.0.0.0/8")


def test_a_read_only_key_sees_no_button_that_would_be_refused(chrome: Any, srv: Server
                                                              ) -> None:
    with srv.client() as api:
        ro = api.post("/api_keys", json={"role": "read_only"}).json()
        api.post("/ip_policies", json={"description": "visible to all"})
    with page_of(chrome, srv) as page:
        sign_in(page, srv, ro["token"])
        expect(page.locator("#role")).to_have_text("read_only")
        for where in ("api_keys", "ip_policies", "credentials", "edges_https"):
            page.goto(f"{srv.base_url}/dashboard/{where}")
            expect(page.locator("h1")).to_be_visible()
            assert page.locator("#create").count() == 0, where
            assert page.locator("button.danger").count() == 0, where
        expect(page.locator("body")).not_to_contain_text("Traceback")
        page.goto(srv.base_url + "/dashboard/ip_policies")
        expect(page.locator("#items")).to_contain_text("visible to all")


def test_a_form_without_its_csrf_token_is_refused(chrome: Any, srv: Server) -> None:
    with srv.client() as api:
        before = len(api.get("/ip_policies").json()["ip_policies"])
    with page_of(chrome, srv) as page:
        sign_in(page, srv)
        page.goto(srv.base_url + "/dashboard/ip_policies")
        page.click("#create summary")
        page.fill("#in-description", "forged")
        page.evaluate("document.querySelector('#create form input[name=csrf]').remove()")
        page.click("#create-submit")
        expect(page.locator("#problem")).to_contain_text("CSRF token")
        expect(page.locator("#problem .status")).to_have_text("403")
    with srv.client() as api:
        assert len(api.get("/ip_policies").json()["ip_policies"]) == before


def test_sign_out(chrome: Any, srv: Server) -> None:
    with page_of(chrome, srv) as page:
        sign_in(page, srv)
        page.click("#signout")
        expect(page.locator("#notice")).to_have_text("Signed out.")
        assert not [c for c in page.context.cookies() if c["name"] == "edgeway_session"]
        page.goto(srv.base_url + "/dashboard/api_keys")
        expect(page.locator("#signin")).to_be_visible()
        assert "/dashboard/signin?next=" in page.url
        page.fill("#key", srv.token)
        page.click("#signin")  # (back where it was sent from)
        expect(page.locator("h1")).to_have_text("API keys")


class _Attacker(BaseHTTPRequestHandler):
    target = ""

    def do_GET(self) -> None:
        body = (f'<form id="f" method="post" action="{self.target}">'
                '<input name="role" value="admin"><input name="csrf" value="x"></form>'
                "<script>document.getElementById('f').submit()</script>").encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_args: Any) -> None:
        pass


def test_a_page_of_another_site_cannot_post_a_form(chrome: Any, srv: Server) -> None:
    """A signed-in browser visiting another site (localhost is another site than 127.0.0.1)
    that posts a form to the dashboard: the browser sends no session cookie (SameSite=Strict)
    and the dashboard refuses the post."""
    with srv.client() as api:
        before = len(api.get("/api_keys").json()["keys"])
    handler = type("Attacker", (_Attacker,), {"target": srv.base_url + "/dashboard/api_keys"})
    evil = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=evil.serve_forever, daemon=True).start()
    context = chrome.new_context()
    try:
        page = context.new_page()
        sign_in(page, srv)
        answers: list[Any] = []
        page.on("response", lambda r: answers.append(r) if r.request.method == "POST" else None)
        page.goto(f"http://localhost:{evil.server_address[1]}/")
        expect(page.locator("#problem")).to_be_visible()
        assert answers and answers[0].status == 403
        assert "edgeway_session" not in (answers[0].request.headers.get("cookie") or "")
        page.goto(srv.base_url + "/dashboard/")  # (still signed in: nothing was changed)
        expect(page.locator("h1")).to_have_text("Overview")
    finally:
        context.close()
        evil.shutdown()
        evil.server_close()
    with srv.client() as api:
        assert len(api.get("/api_keys").json()["keys"]) == before


def test_usable_on_a_narrow_dark_screen(chrome: Any, srv: Server) -> None:
    with page_of(chrome, srv, width=390, dark=True) as page:
        sign_in(page, srv)
        background = page.evaluate("getComputedStyle(document.body).backgroundColor")
        assert sum(map(int, re.findall(r"\d+", background)[:3])) < 150, background
        for where in ("", "api_keys", "ip_policy_rules", "sessions", "tunnel_sessions", "site",
                      "counts"):
            page.goto(f"{srv.base_url}/dashboard/{where}")
            wide = page.evaluate("document.documentElement.scrollWidth")
            assert wide <= 390, (where, wide)
        page.goto(srv.base_url + "/dashboard/api_keys")
        page.click("#create summary")
        page.click("#create-submit")
        expect(page.locator("#token")).to_be_visible()
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
        page.locator("nav summary").click()  # (the menu folds under the page)
        expect(page.locator("nav a", has_text="IP policies")).to_be_hidden()


def test_sign_in_with_a_name_and_password(chrome: Any, srv: Server) -> None:
    done = subprocess.run([sys.executable, "-m", "edgeway", "users", "set-password", "carol",
                           "--role", "read_only", "--data-dir", str(srv.data_dir)],
                          input="a long enough password\n", capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    with page_of(chrome, srv) as page:
        page.goto(srv.base_url + "/dashboard/")
        page.click("text=Sign in with a name and password")
        page.fill("#name", "carol")
        page.fill("#password", "not her password")
        page.click("#signin-password")
        expect(page.locator("#password-error")).to_contain_text("name or the password")
        expect(page.locator("#name")).to_have_value("carol")
        page.fill("#password", "a long enough password")
        page.click("#signin-password")
        expect(page.locator("h1")).to_have_text("Overview")
        expect(page.locator("#role")).to_have_text("read_only")


def test_the_overview_loads_its_counts_and_dns_checks_in_place(chrome: Any, srv: Server) -> None:
    with page_of(chrome, srv) as page:
        sign_in(page, srv)
        expect(page.locator("#counts .n").first).to_be_visible()
        expect(page.locator("#counts-link")).to_have_count(0)
        expect(page.locator("section#dns-failing")).to_be_visible()
        key = page.locator("#counts li", has_text="API keys").locator(".n")
        assert int(key.inner_text().rstrip("+")) >= 1


def test_a_cloud_endpoint_is_made_in_the_dashboard_and_an_agents_is_read_only(
        chrome: Any, srv: Server) -> None:
    from tests.edge.agents import EdgeClient, agent
    host = "dash-cloud.example.com"
    with srv.client() as api:
        assert api.post("/reserved_domains", json={"domain": host}).status_code == 201
        token = api.post("/credentials", json={}).json()["token"]
    policy = ('{"on_http_request": [{"actions": [{"type": "custom-response", "config": '
              '{"status_code": 200, "content": "made in the dashboard"}}]}]}')
    sdk = agent(srv, token, {"kind": "https", "forward": "http://127.0.0.1:9"})
    try:
        with page_of(chrome, srv) as page:
            sign_in(page, srv)
            page.goto(srv.base_url + "/dashboard/endpoints")
            page.click("#create summary")
            page.fill("#in-url", f"https://{host}")
            page.fill("#in-traffic_policy", policy)
            page.fill("#in-description", "front door")
            page.click("#create-submit")
            expect(page.locator("#notice")).to_contain_text("Created ep_")
            made = re.search(r"ep_\w+", page.locator("#notice").inner_text())
            assert made is not None
            with EdgeClient(srv) as web:
                r = web.get(f"https://{host}/")
                assert (r.status_code, r.text) == (200, "made in the dashboard")
            page.goto(f"{srv.base_url}/dashboard/endpoints/{made[0]}")
            expect(page.locator("#edit summary")).to_be_visible()
            expect(page.locator("#delete")).to_be_visible()
            assert page.locator("#fixed").count() == 0
            # the agent's endpoint: what it is, why it cannot be changed, and nothing offered
            with srv.client() as api:
                ours = next(e for e in api.get("/endpoints").json()["endpoints"]
                            if e["url"] == sdk.urls[0])
            page.goto(f"{srv.base_url}/dashboard/endpoints/{ours['id']}")
            expect(page.locator("#fixed")).to_contain_text("an agent's")
            expect(page.locator("#members")).to_contain_text(sdk.urls[0])
            assert page.locator("#edit").count() == 0 and page.locator("#delete").count() == 0
    finally:
        sdk.stop()
