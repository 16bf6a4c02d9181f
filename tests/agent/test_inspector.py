"""The web inspector in a real browser (Debian's Chromium driven by Playwright): captured
requests listed live, a JSON body pretty-printed and a binary one as hex, a replay with an
edited path and body seen by the local service, and nothing loaded from anywhere but the
agent."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from tests.agent.test_inspect import counting_upstream
from tests.edge.agents import EdgeClient
from tests.server import Server, free_port

playwright = pytest.importorskip("playwright.sync_api", reason="scripts/test installs it")
CHROMIUM = "/usr/bin/chromium"
if not (os.access(CHROMIUM, os.X_OK) or shutil.which("chromium")):
    pytest.skip("Debian's chromium is not installed (scripts/test installs it)",
                allow_module_level=True)


def test_the_inspector_lists_shows_and_replays(srv: Server, tmp_path: Path) -> None:
    from tests.agent.test_agent import run_agent, write_config

    with srv.client() as api:
        token = api.post("/credentials", json={}).json()["token"]
    web = free_port()
    with counting_upstream() as (port, seen):
        cfg = write_config(tmp_path / "a.yml", srv, token, web,
                           f"tunnels:\n  web:\n    proto: http\n    addr: {port}\n")
        agent = run_agent("web", "--config", str(cfg), web_port=web)
        try:
            url = agent.api("GET", "/api/tunnels/web").json()["public_url"]
            with EdgeClient(srv) as client:
                r = client.request("POST", url + "/count/json", content=b'{"a":1,"b":[1,2]}',
                                   headers={"Content-Type": "application/json"})
                assert r.status_code == 200
                with playwright.sync_playwright() as p:
                    browser = p.chromium.launch(executable_path=CHROMIUM,
                                                args=["--no-sandbox"])
                    page = browser.new_page()
                    origins: set[str] = set()
                    page.on("request", lambda req: origins.add(req.url.split("/")[2]))
                    page.goto(f"http://127.0.0.1:{web}/")  # redirected to /inspect/http
                    assert page.url.endswith("/inspect/http")
                    page.locator("#requests tr", has_text="/count/json").click()
                    body = page.locator("#req-body")
                    playwright.expect(body).to_contain_text('"b": [\n    1,\n    2\n  ]')
                    playwright.expect(page.locator("#req-headers")).to_contain_text(
                        "application/json")
                    playwright.expect(page.locator("#res-body")).to_contain_text(
                        "POST /count/json #1")
                    # live: a request sent now shows up without a reload
                    client.request("POST", url + "/count/bin", content=b"\x00\x01\xffbin",
                                   headers={"Content-Type": "application/octet-stream"})
                    page.locator("#requests tr", has_text="/count/bin").click()
                    playwright.expect(body).to_contain_text("00 01 ff 62 69 6e")
                    # replay with changes: the service sees the edited request
                    page.locator("#requests tr", has_text="/count/json").click()
                    page.click("#edit")
                    page.fill("#e-uri", "/count/edited")
                    page.fill("#e-body", "changed")
                    page.click("#send")
                    playwright.expect(page.locator("#notice")).to_contain_text("Replayed")
                    deadline = time.monotonic() + 30
                    while seen.get("/count/edited") != 1:
                        assert time.monotonic() < deadline, seen
                        time.sleep(0.05)
                    page.locator("#requests tr", has_text="/count/edited").click()
                    playwright.expect(page.locator("#res-body")).to_contain_text(
                        "POST /count/edited #1 changed")
                    page.click("#replay")  # as captured, once more
                    playwright.expect(page.locator("#notice")).to_contain_text("Replayed")
                    browser.close()
            deadline = time.monotonic() + 30
            while seen.get("/count/edited") != 2:
                assert time.monotonic() < deadline, seen
                time.sleep(0.05)
            assert origins == {f"127.0.0.1:{web}"}  # the page's own files only
        finally:
            agent.stop()


def test_a_page_of_another_site_cannot_start_tunnels(srv: Server, tmp_path: Path) -> None:
    """What a visited web page can send without asking (a no-cors text/plain fetch, a
    text/plain form) reaches the agent and is refused there: no tunnel is created."""
    from tests.agent.test_agent import run_agent, write_config
    from tests.stub_http import StubHandler, serving

    with srv.client() as api:
        token = api.post("/credentials", json={}).json()["token"]
    web = free_port()
    target = f"http://127.0.0.1:{web}/api/tunnels"
    body = '{"name": "evil", "proto": "tcp", "addr": "22"}'
    form = '{"name": "evil2", "proto": "tcp", "addr": "22", "metadata": "'  # + '=' + '"}'
    page_html = (
        f'<form method="post" enctype="text/plain" action="{target}">'
        f"<input name='{form}' value='\"}}'></form><script>"
        f"fetch('{target}', {{method: 'POST', mode: 'no-cors', body: '{body}',"
        " headers: {'Content-Type': 'text/plain'}}).then(() => { document.title = 'sent'; },"
        " () => { document.title = 'failed'; });</script>").encode()

    class Evil(StubHandler):
        def do_GET(self) -> None:
            self.send(200, {"Content-Type": "text/html"}, page_html)

    cfg = write_config(tmp_path / "a.yml", srv, token, web, "")
    agent = run_agent("--none", "--config", str(cfg), web_port=web)
    try:
        with serving(Evil) as evil, playwright.sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
            page = browser.new_page()
            page.goto(f"http://localhost:{evil.server_address[1]}/")
            playwright.expect(page).to_have_title("sent")  # the fetch was answered
            with page.expect_navigation():
                page.evaluate("document.forms[0].submit()")
            assert "this Origin is not allowed" in page.content()
            browser.close()
        assert agent.api("GET", "/api/tunnels").json()["tunnels"] == []
    finally:
        agent.stop()


def test_the_replay_editor_shows_only_when_asked(srv: Server, tmp_path: Path) -> None:
    """What a person sees: no editor until "Replay with changes", none after Cancel (and its
    edits gone), and Send on the form as it opened replays the request byte for byte."""
    import base64

    from tests.agent.test_agent import run_agent, write_config

    with srv.client() as api:
        token = api.post("/credentials", json={}).json()["token"]
    web = free_port()
    with counting_upstream() as (port, seen):
        cfg = write_config(tmp_path / "a.yml", srv, token, web,
                           f"tunnels:\n  web:\n    proto: http\n    addr: {port}\n")
        agent = run_agent("web", "--config", str(cfg), web_port=web)
        try:
            url = agent.api("GET", "/api/tunnels/web").json()["public_url"]
            with EdgeClient(srv) as client:  # (a CR LF a form's textarea would make LF)
                r = client.request("POST", url + "/count/form", content=b"one\r\ntwo")
                assert r.status_code == 200
            with playwright.sync_playwright() as p:
                browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
                page = browser.new_page()
                page.goto(f"http://127.0.0.1:{web}/inspect/http")
                editor = page.locator("#editor")
                page.locator("#requests tr", has_text="/count/form").click()
                playwright.expect(page.locator("#req-body")).to_contain_text("two")
                assert page.locator("#detail").is_visible()
                assert not editor.is_visible() and editor.bounding_box() is None
                page.click("#edit")
                playwright.expect(editor).to_be_visible()
                box = editor.bounding_box()
                assert box is not None and box["height"] > 50 and box["width"] > 100
                assert page.locator("#e-uri").input_value() == "/count/form"
                page.fill("#e-uri", "/count/cancelled")
                page.click("#cancel")
                playwright.expect(editor).to_be_hidden()
                assert editor.bounding_box() is None
                page.click("#edit")  # the edit is gone: the form is the capture again
                playwright.expect(editor).to_be_visible()
                assert page.locator("#e-uri").input_value() == "/count/form"
                page.click("#send")
                playwright.expect(page.locator("#notice")).to_contain_text("Replayed")
                playwright.expect(page.locator("#notice")).not_to_have_class("error")
                playwright.expect(editor).to_be_hidden()
                browser.close()
            deadline = time.monotonic() + 30
            while seen.get("/count/form") != 2:
                assert time.monotonic() < deadline, seen
                time.sleep(0.05)
            assert "/count/cancelled" not in seen
            while True:  # the upstream got the captured bytes: its answer echoes them
                replayed = [ex for ex in agent.api("GET", "/api/requests/http").json()[
                    "requests"] if ex["response"] and b"#2" in base64.b64decode(
                        ex["response"]["raw"])]
                if replayed or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            assert replayed and base64.b64decode(replayed[0]["response"]["raw"]).endswith(
                b"POST /count/form #2 one\r\ntwo")
        finally:
            agent.stop()
