"""The dashboard's overview says what needs attention, read through the API: an event
destination whose deliveries fail (its last error, dead letters) and an uploaded certificate
that expires within 30 days; on a fresh server it says all is well; the live part's
refreshes do not read any of it."""

from __future__ import annotations

import re
import secrets

import httpx

from tests.dashboard.visitor import signed_in
from tests.domains.tlsprobe import UploadCA
from tests.events.conftest import delivery, made, subscribed, wait_for
from tests.server import Server


def _section(page: httpx.Response, id_: str) -> str:
    """The text of the element of id ``id_`` (a ``div`` or ``section``), or ""."""
    found = re.search(rf'<(div|section)[^>]* id="{id_}"[^>]*>(.*?)</\1>', page.text, re.S)
    return found.group(2) if found else ""


def test_failing_deliveries_and_expiring_certificates_need_attention(
        esrv: Server, api: httpx.Client) -> None:
    tags = f"run:{secrets.token_hex(4)}"
    target = {"monitoring": {"api_key": "wrong-key", "tags": tags}}
    chain, key = UploadCA().leaf("soon.attention.example", days=10)
    cert = made(api, "/tls_certificates", {"certificate_pem": chain, "private_key_pem": key})
    try:
        with subscribed(api, target, [{"type": "ip_policy_created.v0"}]) as dest:
            made(api, "/ip_policies", {"description": "attention"})
            state = wait_for("a dead letter", lambda: d if (
                d := delivery(api, dest["id"]))["dead_letters"] >= 1 else None)
            with signed_in(esrv) as browser:
                page = browser.get("/dashboard/")
                assert page.status_code == 200
                failing = _section(page, "needs-deliveries")
                assert f'href="/dashboard/event_destinations/{dest["id"]}"' in failing, page.text
                assert "403" in failing and state["last_error"][:40].replace(
                    "'", "&#39;").replace('"', "&#34;") in failing
                expiring = _section(page, "needs-expiring")
                assert f'href="/dashboard/tls_certificates/{cert["id"]}"' in expiring
                assert "soon.attention.example" in expiring
                assert re.search(r"expires in (9|10) days", expiring), expiring
                assert 'id="all-well"' not in page.text
                # (the live part's refresh: only the sessions)
                polled = browser.get("/dashboard/", headers={"HX-Request": "true",
                                                             "X-Poll": "1"})
                assert polled.status_code == 200 and 'id="live-section"' in polled.text
                assert 'id="needs"' not in polled.text
        with signed_in(esrv) as browser:  # (fixed: deleted, it is no longer listed)
            assert dest["id"] not in _section(browser.get("/dashboard/"), "needs")
    finally:
        api.delete(f"/tls_certificates/{cert['id']}")


def test_a_fresh_server_needs_no_attention(own_server: Server) -> None:
    with signed_in(own_server) as browser:
        page = browser.get("/dashboard/")
        assert 'id="all-well"' in page.text and "needs-deliveries" not in page.text
