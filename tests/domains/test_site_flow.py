"""The spec's site-to-site flow done in the dashboard, in Debian's Chromium, against the
built-in DNS, the test resolver standing for the internet's DNS, and Pebble: an API key made
and signed in with (step 1); the agent ingress created, its NS records checked missing, then
ok once "created" (steps 2, 3, 5); the wildcard domain reserved, its two CNAMEs checked the
same way, its certificate and the ingress's issued (steps 4, 5); the bot user (6); the
authtoken, its ACL checked rule by rule as it is typed (7); the config file and the CA file
downloaded, the agent started with them (8), its session on the overview, and its API
answering through the edge at ``agent-api.<site>`` behind the password the file holds."""

from __future__ import annotations

import re
import ssl
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

import httpx
import pytest

from tests.dashboard.browser import chromium, expect, page_of, sign_in
from tests.domains.conftest import Domains
from tests.server import free_port

INGRESS = "connect.s2s.example"
WILDCARD = "*.site1.s2s.example"
ISSUE = 120  # seconds: two orders, one at a time, each waiting for DNS


def _issued(page: Any, base: str, which: str) -> None:
    """Reload the page until the certificate of ``which`` is issued."""
    deadline = time.monotonic() + ISSUE
    while True:
        page.goto(base)
        text = page.locator(f"#{which}-cert").inner_text()
        if "issued" in text:
            return
        assert time.monotonic() < deadline, f"{which}: {text}"
        page.wait_for_timeout(500)  # (the pause of a poll with a deadline)


def _agent(workdir: Path, log: IO[str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "edgeway", "start", "agent-api", "--config", "edgeway.yml",
         "--resolve", f"tunnel.us.{INGRESS}:127.0.0.1", "--log", "stderr"],
        cwd=workdir, stdout=subprocess.DEVNULL, stderr=log, text=True)


def test_the_site_to_site_flow_in_the_browser(domains: Domains, tmp_path: Path) -> None:
    srv, resolver = domains.server, domains.resolver
    resolver.undelegated.add(INGRESS)
    with chromium() as chrome, page_of(chrome, srv) as page:
        # 1. an API key, made in the dashboard and shown once; then signed in with it
        sign_in(page, srv)
        page.goto(srv.base_url + "/dashboard/api_keys")
        page.click("#create summary")
        page.fill("#in-description", "site1 operator")
        page.click("#create-submit")
        key = page.locator("#token").inner_text().strip()
        page.click("#signout")
        sign_in(page, srv, key)
        page.get_by_role("link", name="Site to site").click()
        expect(page.locator("h1")).to_have_text("Site to site")

        # 2, 3, 5. the agent ingress; its NS records missing until the user makes them
        page.fill("#in-ingress_domain", "not a domain")
        page.click("#create-ingress")
        expect(page.locator("#err-ingress_domain")).to_contain_text("ERR_EDGEWAY_448")
        page.fill("#in-ingress_domain", INGRESS)
        page.click("#create-ingress")
        expect(page.locator("#ns-records tbody tr")).to_have_count(4)
        page.click("#check-ingress")
        expect(page.locator("#ingress-check-summary")).to_contain_text("missing or wrong")
        resolver.undelegated.discard(INGRESS)
        page.click("#check-ingress")
        expect(page.locator("#ingress-check-summary")).to_contain_text("Every record")

        # 4, 5. the wildcard domain and its CNAMEs
        page.fill("#in-wildcard", WILDCARD)
        page.click("#create-domain")
        expect(page.locator("#cname-records tbody tr")).to_have_count(2)
        page.click("#check-domain")
        expect(page.locator("#domain-check-summary")).to_contain_text("missing or wrong")
        resolver.cnames[WILDCARD] = page.locator("#cname-1").inner_text()
        resolver.cnames["_acme-challenge.site1.s2s.example"] = \
            page.locator("#cname-2").inner_text()
        page.click("#check-domain")
        expect(page.locator("#domain-check-summary")).to_contain_text("Every record")
        flow = page.url.split("#")[0].replace("&check=domain", "")
        _issued(page, flow, "domain")
        _issued(page, flow, "ingress")

        # 6. the bot user
        page.fill("#in-bot_name", "site1-agents")
        page.click("#create-bot")
        expect(page.locator("#bot")).to_contain_text("site1-agents")

        # 7. the authtoken: its ACL checked as it is typed, then made
        acl = page.locator("#in-acl")
        expect(acl).to_have_value(f"bind:{WILDCARD}")
        acl.fill(f"bind:{WILDCARD}\nbind:not a name")
        expect(page.locator("#acl-check .rule-bad")).to_contain_text("not a rule")
        acl.fill(f"bind:{WILDCARD}")
        expect(page.locator("#acl-check .rule-bad")).to_have_count(0)
        expect(page.locator("#acl-check .rule-ok")).to_have_count(1)
        page.click("#create-authtoken")
        expect(page.locator("#agent-file")).to_be_visible()
        expect(page.locator("#start-command")).to_have_text(
            "edgeway start agent-api --config edgeway.yml")

        # 8. the files, downloaded; the agent started with them
        with page.expect_download() as config_dl:
            page.click("#download-config")
        with page.expect_download() as ca_dl:
            page.click("#download-ca")
        assert config_dl.value.suggested_filename == "edgeway.yml"
        assert ca_dl.value.suggested_filename == "ca.pem"
        text = Path(config_dl.value.path()).read_text()
        assert f"server_addr: tunnel.us.{INGRESS}:{srv.tunnel_port}" in text
        assert "root_cas: ca.pem" in text and "agent-api.site1.s2s.example" in text
        password = re.search(r"- agent:(\S+)", text)
        assert password is not None, text
        web = free_port()  # (not 4040: tests run side by side)
        (tmp_path / "edgeway.yml").write_text(text.replace("4040", str(web)))
        ca_dl.value.save_as(tmp_path / "ca.pem")
        with (tmp_path / "agent.log").open("w") as log:
            agent = _agent(tmp_path, log)
        try:
            # its session and tunnel on the overview
            page.get_by_role("link", name="Overview").click()
            expect(page.locator("#live .url")).to_have_text(
                f"https://agent-api.site1.s2s.example:{srv.https_port}", timeout=30_000)
            # its API through the edge, behind the password, with Pebble's certificate
            ctx = ssl.create_default_context(cadata=domains.pebble.root())
            with httpx.Client(verify=ctx, timeout=30) as client:
                url = f"https://127.0.0.1:{srv.https_port}/api/tunnels"
                ext = {"sni_hostname": "agent-api.site1.s2s.example"}
                head = {"Host": "agent-api.site1.s2s.example"}
                assert client.get(url, headers=head, extensions=ext).status_code == 401
                r = client.get(url, headers=head, extensions=ext,
                               auth=("agent", password.group(1)))
                assert r.status_code == 200, r.text
                assert [t["name"] for t in r.json()["tunnels"]] == ["agent-api"]
        finally:
            agent.terminate()
            agent.wait(15)
        said = (tmp_path / "agent.log").read_text()
        assert "Traceback" not in said, said


@pytest.fixture(autouse=True)
def _forget_records(domains: Domains) -> Any:
    yield
    domains.resolver.undelegated.discard(INGRESS)
