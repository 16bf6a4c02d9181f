"""The dashboard's overview says what needs attention, read through the API: an event
destination whose deliveries fail (its last error, dead letters) and an uploaded certificate
that expires within 30 days; on a fresh server it says all is well; the live part's
refreshes do not read any of it."""

from __future__ import annotations

import re
import secrets

import httpx

from tests.dashboard.visitor import post, signed_in
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
                _destination_page(browser, dest["id"], state["last_error"])
            read_only = made(api, "/api_keys", {"role": "read_only"})
            with signed_in(esrv, read_only["token"]) as browser:  # (no button it may not use)
                page = browser.get(f"/dashboard/event_destinations/{dest['id']}")
                dead = _section(page, "delivery")  # (sent again above: none dead now)
                assert 'id="dead-h"' in dead and 'id="send-test"' not in dead
                assert 'id="send-again"' not in dead
                forged = post(browser, f"/dashboard/event_destinations/{dest['id']}",
                              f"/dashboard/event_destinations/{dest['id']}/verify", {})
                assert forged.status_code == 403, forged.text
            api.delete(f"/api_keys/{read_only['id']}")
        with signed_in(esrv) as browser:  # (fixed: deleted, it is no longer listed)
            assert dest["id"] not in _section(browser.get("/dashboard/"), "needs")
    finally:
        api.delete(f"/tls_certificates/{cert['id']}")


def _destination_page(browser: httpx.Client, dest: str, error: str) -> None:
    """The destination's page: its dead letters; a test event sent and the target's answer
    shown (the wrong key: refused); every dead letter queued again."""
    page_path = f"/dashboard/event_destinations/{dest}"
    page = browser.get(page_path)
    dead = _section(page, "delivery")
    assert "ip_policy_created.v0" in dead and 'id="send-again"' in dead, page.text
    assert error[:40].replace("'", "&#39;").replace('"', "&#34;") in dead
    tested = post(browser, page_path, f"{page_path}/verify", {})
    assert tested.status_code == 200
    notice = re.search(r'id="notice">([^<]*)<', tested.text)
    assert notice and re.fullmatch(r"Test event ev_\S+ not delivered to monitoring in "
                                   r"[\d.]+ ms: .*403.*", notice.group(1)), tested.text
    again = post(browser, page_path, f"{page_path}/dead_letters/resend", {})
    assert again.status_code == 200 and re.search(r"\d+ dead letters? queued to be sent "
                                                  r"again", again.text), again.text
    forged = browser.post(f"{page_path}/verify", data={"csrf": "forged"})
    assert forged.status_code == 403


def test_a_fresh_server_needs_no_attention(own_server: Server) -> None:
    with signed_in(own_server) as browser:
        page = browser.get("/dashboard/")
        assert 'id="all-well"' in page.text and "needs-deliveries" not in page.text
