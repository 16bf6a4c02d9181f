"""The overview's live part in Chromium (htmx, vendored): an agent that connects shows up
without a reload, and the DNS checks load in place; the traffic page shows each request its
endpoint served, without a reload; under the dashboard's
Content-Security-Policy with nothing refused; a page
refreshing itself keeps no session alive, and the ended session sends the page to
sign-in."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.dashboard.browser import chromium, expect, page_of, sign_in
from tests.dashboard.test_browser_server import sdk_agent
from tests.edge import upstream
from tests.edge.agents import EdgeClient
from tests.server import Server, start


@pytest.fixture(scope="module")
def chrome() -> Iterator[Any]:
    with chromium() as browser:
        yield browser


def test_an_agent_appears_on_the_open_overview(chrome: Any, own_server: Server) -> None:
    srv = own_server
    with srv.client() as api:
        token = api.post("/credentials", json={}).json()["token"]
    with page_of(chrome, srv) as page, upstream.echo() as port:
        problems: list[str] = []
        page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: problems.append(str(e)))
        sign_in(page, srv)
        expect(page.locator("#no-agents")).to_be_visible()
        expect(page.locator("#all-well")).to_be_visible()  # (nothing needs attention)
        # the DNS checks, loaded in place after the page showed
        expect(page.locator("#dns-all-ok")).to_have_text("No domain or agent ingress to check.")
        expect(page.locator("#dns-checks-link")).to_have_count(0)
        page.evaluate("window.stillHere = true")  # (gone if the page were loaded again)
        with sdk_agent(srv, token, port) as url:
            expect(page.locator("#live li.card")).to_contain_text(url, timeout=20_000)
            assert page.evaluate("window.stillHere") is True
            assert problems == [], problems


def test_a_page_refreshing_itself_keeps_no_session_alive(chrome: Any, tmp_path: Path
                                                         ) -> None:
    srv = start(tmp_path / "srv", None, "--dashboard-session-ttl", "8")  # (> the refresh's 5 s)
    try:
        with page_of(chrome, srv) as page:
            sign_in(page, srv)
            polls: list[str] = []
            page.on("request", lambda r: polls.append(r.url) if r.headers.get("x-poll")
                    else None)
            expect(page.locator("#signin")).to_be_visible(timeout=40_000)
            assert "/dashboard/signin?next=%2Fdashboard%2F" in page.url
            assert len(polls) >= 2  # (it refreshed, and still the session ended)
    finally:
        assert srv.stop() == 0


def test_the_traffic_page_shows_each_request_as_it_is_served(chrome: Any, own_server: Server
                                                             ) -> None:
    """No event subscription: the page lists the requests the edge served for the agent's
    endpoint (method, path, status, client), refreshing itself as more are served."""
    srv = own_server
    with srv.client() as api:
        token = api.post("/credentials", json={}).json()["token"]
    with page_of(chrome, srv) as page, upstream.running("svc") as port:
        sign_in(page, srv)
        page.goto(f"{srv.base_url}/dashboard/traffic")
        expect(page.locator("#traffic-empty")).to_be_visible()
        with sdk_agent(srv, token, port) as url:
            with EdgeClient(srv) as web:
                assert web.get(f"{url}/first?x=1").status_code == 200
                assert web.get(f"{url}/second", headers={"Host": "elsewhere.example"}
                               ).status_code == 421  # (misdirected: no endpoint's request)
            card = page.locator("#traffic section.card", has_text=url)
            expect(card).to_be_visible(timeout=20_000)  # (without a reload)
            rows = card.locator("tbody tr")
            expect(rows).to_have_count(1)
            expect(rows.first).to_contain_text("GET /first?x=1")
            expect(rows.first.locator("td[data-label=Status]")).to_have_text("200")
            expect(rows.first.locator("td[data-label=Client]")).to_contain_text("127.0.0.1:")
            with EdgeClient(srv) as web:
                assert web.get(f"{url}/third").status_code == 200
            expect(rows).to_have_count(2, timeout=20_000)
            expect(rows.first).to_contain_text("GET /third")  # (newest first)
