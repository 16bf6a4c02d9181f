"""The dashboard in Chromium against servers of the tests' own: a live agent on the overview
stopped with its button (and no button for a read-only key), a session that ends after its
time unused, a ``dashboard`` IP restriction refusing the browser, a reserved domain's DNS
check, and the edit form."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.dashboard.browser import chromium, expect, page_of, sign_in
from tests.domains import resolver
from tests.edge import upstream
from tests.server import Server, start

AGENT = textwrap.dedent("""
    import asyncio, sys, ngrok
    async def main():
        stopped = asyncio.Event()
        loop = asyncio.get_running_loop()
        def on_stop():
            print("STOP", flush=True)
            loop.call_soon_threadsafe(stopped.set)
        s = await (ngrok.SessionBuilder().authtoken(sys.argv[1]).server_addr(sys.argv[2])
                   .ca_cert(bytearray(open(sys.argv[3], "rb").read()))
                   .handle_stop_command(on_stop).connect())
        listener = await s.http_endpoint().listen_and_forward(sys.argv[4])
        print(listener.url(), flush=True)
        await asyncio.wait_for(stopped.wait(), 120)
        await s.close()
    asyncio.run(main())
""")


@contextmanager
def sdk_agent(srv: Server, token: str, port: int) -> Iterator[str]:
    """The official SDK as an agent of ``srv`` forwarding to ``port``: its URL, while it runs."""
    proc = subprocess.Popen([sys.executable, "-c", AGENT, token, f"localhost:{srv.tunnel_port}",
                             str(srv.data_dir / "ca.pem"), f"http://127.0.0.1:{port}"],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    try:
        yield proc.stdout.readline().strip()
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()


@pytest.fixture(scope="module")
def chrome() -> Iterator[Any]:
    with chromium() as browser:
        yield browser


def test_the_overview_shows_a_live_agent_and_stops_it(chrome: Any, own_server: Server) -> None:
    srv = own_server
    with srv.client() as api:
        token = api.post("/credentials", json={}).json()["token"]
        ro = api.post("/api_keys", json={"role": "read_only"}).json()["token"]
    with upstream.echo() as port:
        proc = subprocess.Popen([sys.executable, "-c", AGENT, token,
                                 f"localhost:{srv.tunnel_port}", str(srv.data_dir / "ca.pem"),
                                 f"http://127.0.0.1:{port}"], stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        try:
            url = proc.stdout.readline().strip()
            assert url.startswith("https://"), url
            with page_of(chrome, srv) as reader:
                sign_in(reader, srv, ro)
                card = reader.locator("#live li.card")
                expect(card).to_contain_text(url)
                assert reader.locator("#live button").count() == 0
            with page_of(chrome, srv) as page:
                sign_in(page, srv)
                card = page.locator("#live li.card")
                expect(card).to_have_count(1)
                expect(card).to_contain_text(url)
                expect(card).to_contain_text("127.0.0.1")
                card.locator("button", has_text="Stop").click()
                expect(page.locator("#notice")).to_have_text("Sent stop to the agent.")
                assert proc.stdout.readline().strip() == "STOP"
                proc.wait(30)
                deadline = time.monotonic() + 30
                while page.locator("#live li.card").count():
                    assert time.monotonic() < deadline, "the stopped session is still listed"
                    page.reload()
                expect(page.locator("#no-agents")).to_be_visible()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            proc.stdout.close()


def test_an_unused_session_expires(chrome: Any, tmp_path: Path) -> None:
    ttl = 6.0
    srv = start(tmp_path / "srv", None, "--dashboard-session-ttl", f"{ttl:g}")
    try:
        with page_of(chrome, srv) as page, page_of(chrome, srv) as watcher:
            sign_in(page, srv)
            sign_in(watcher, srv)  # (another browser watches the sessions page)
            until = time.monotonic() + ttl + 1  # both used more often than their time
            while time.monotonic() < until:
                page.goto(srv.base_url + "/dashboard/ip_policies")
                expect(page.locator("h1")).to_have_text("IP policies")
                watcher.goto(srv.base_url + "/dashboard/sessions")
                expect(watcher.locator("#sessions tbody tr")).to_have_count(2)
            deadline = time.monotonic() + 30  # now only the watcher is used
            while watcher.locator("#sessions tbody tr").count() != 1:
                assert time.monotonic() < deadline, "the unused session did not expire"
                time.sleep(0.2)
                watcher.reload()
            page.goto(srv.base_url + "/dashboard/ip_policies")
            expect(page.locator("#signin")).to_be_visible()
            assert "/dashboard/signin?next=" in page.url
    finally:
        assert srv.stop() == 0


def test_a_dashboard_restriction_refuses_the_browser(chrome: Any, own_server: Server) -> None:
    srv = own_server
    with page_of(chrome, srv) as page:
        sign_in(page, srv)
        with srv.client() as api:  # (the browser is 127.0.0.1; only 127.0.0.2 may come)
            policy = api.post("/ip_policies", json={}).json()["id"]
            api.post("/ip_policy_rules", json={"ip_policy_id": policy,
                                               "cidr": "127.0.0.2/32", "action": "allow"})
            rid = api.post("/ip_restrictions", json={
                "type": "dashboard", "enforced": True, "ip_policy_ids": [policy]}).json()["id"]
        page.reload()
        expect(page.locator("#problem .status")).to_have_text("403")
        expect(page.locator("#reason")).to_contain_text(rid)
        expect(page.locator("#reason")).to_contain_text("127.0.0.1")
        assert page.locator("#main a", has_text="API keys").count() == 0
        with srv.client() as api:
            assert api.patch(f"/ip_restrictions/{rid}",
                             json={"enforced": False}).status_code == 200
        page.reload()  # (not enforced: it only logs)
        expect(page.locator("h1")).to_have_text("Overview")
    assert "dashboard_refused" in srv.log()


def test_check_status_shows_each_dns_record(chrome: Any, tmp_path: Path) -> None:
    dns_port, resolver_port = resolver.udp_and_tcp_port(), resolver.udp_and_tcp_port()
    with resolver.running(("127.0.0.1", dns_port), resolver_port) as res:
        srv = start(tmp_path / "srv", None, "--base-domain", "edge.test", "--dns-addr",
                    f"127.0.0.1:{dns_port}", "--public-ip", "127.0.0.1",
                    "--dns-check-resolver", f"127.0.0.1:{resolver_port}")
        try:
            with srv.client() as api:
                rd = api.post("/reserved_domains", json={
                    "domain": "app.check.example",
                    "certificate_management_policy": None}).json()
            with page_of(chrome, srv) as page:
                sign_in(page, srv)
                page.goto(f"{srv.base_url}/dashboard/reserved_domains")
                page.click(f"text={rd['id']}")
                page.click("#check")
                row = page.locator("#records tbody tr")
                expect(row).to_have_count(1)
                expect(row).to_contain_text("missing")
                expect(row).to_contain_text(rd["cname_target"])
                expect(page.locator("#check-summary")).to_contain_text("missing or wrong")
                res.cnames["app.check.example"] = rd["cname_target"]
                page.click("#check")
                expect(row).to_contain_text("ok")
                expect(page.locator("#check-summary")).to_contain_text("Every record")
        finally:
            assert srv.stop() == 0


def test_edit_a_resource_with_the_apis_rules(chrome: Any, own_server: Server) -> None:
    srv = own_server
    with srv.client() as api:
        policy = api.post("/ip_policies", json={"description": "before"}).json()["id"]
        ro = api.post("/api_keys", json={"role": "read_only"}).json()["token"]
    with page_of(chrome, srv) as page:
        sign_in(page, srv)
        page.goto(f"{srv.base_url}/dashboard/ip_policies/{policy}")
        page.click("#edit summary")
        expect(page.locator("#in-description")).to_have_value("before")
        page.fill("#in-description", "x" * 300)
        page.click("#edit-submit")
        expect(page.locator("#field-description .error")).to_contain_text("<= 255")
        page.fill("#in-description", "after")
        page.fill("#in-metadata", '{"site": 1}')
        page.click("#edit-submit")
        expect(page.locator("#notice")).to_have_text("Saved.")
        expect(page.locator("#members")).to_contain_text("after")
        page.click("#edit summary")
        page.fill("#in-description", "")  # (emptied: sent as empty, not left out)
        page.click("#edit-submit")
        expect(page.locator("#notice")).to_have_text("Saved.")
    with srv.client() as api:
        shown = api.get(f"/ip_policies/{policy}").json()
        assert shown["description"] == "" and shown["metadata"] == '{"site": 1}'
    with page_of(chrome, srv) as page:
        sign_in(page, srv, ro)
        page.goto(f"{srv.base_url}/dashboard/ip_policies/{policy}")
        expect(page.locator("#members")).to_contain_text(policy)
        assert page.locator("#edit").count() == 0
