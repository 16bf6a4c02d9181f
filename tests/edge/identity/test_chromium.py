"""Logins in a real browser: Debian's Chromium driven by Playwright (never a downloaded one),
through the edge and a real tunnel: an OAuth login at the local code_host_a provider (its
sign-in form filled and sent) and a SAML login at the pysaml2 IdP, whose auto-posting form
carries the response to the ACS in a cross-site POST (the login's state cookie is
SameSite=None for that)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from tests.edge.identity.conftest import Identity
from tests.edge.identity.saml_idp import Idp
from tests.edge.identity.test_oauth import oauth_site
from tests.edge.identity.test_saml import saml_site

CHROMIUM = "/usr/bin/chromium"


@pytest.fixture
def chromium() -> Iterator[Browser]:
    """A fresh browser per test (Playwright's sync API keeps an event loop running while it
    lives: the database fixtures of the next backend cannot start under it)."""
    if shutil.which(CHROMIUM) is None:
        pytest.fail("Debian's chromium is missing (scripts/test installs it)")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=[
            "--no-sandbox",  # (tests run as root)
            # the edge's names, and the providers' loopback addresses, all on this machine
            "--host-resolver-rules=MAP *.example.com 127.0.0.1, "
            "MAP *.edgeway.localhost 127.0.0.1"])
        try:
            yield browser
        finally:
            browser.close()


def seen(page: Page) -> dict[str, Any]:
    """The upstream's /headers answer shown in the page: the identity headers it got."""
    shown = json.loads(page.inner_text("body"))
    return {k: v for k, v in shown["headers"] if k.startswith("edgeway-auth-")}


def test_oauth_and_saml_logins_in_chromium(ids: Identity, idp: Idp, chromium: Browser) -> None:
    oauth = oauth_site(ids, "chrome-gh.example.com", "code_host_a", teams=["acme/ops"])
    sp = saml_site(ids, idp, "chrome-saml.example.com")
    context = chromium.new_context(ignore_https_errors=True)  # (the platform CA's certificates)
    try:
        page = context.new_page()
        page.goto(f"{oauth}/headers?from=chromium")
        assert page.url.startswith(ids.code_host.url)  # at the provider's sign-in form
        page.fill("input[name=login]", "alice")
        page.click("button[type=submit]")
        page.wait_for_url(f"{oauth}/headers?from=chromium")
        assert seen(page) == {"edgeway-auth-user-id": "1", "edgeway-auth-user-name": "Alice",
                              "edgeway-auth-user-email": "alice@acme.example"}
        cookies = {c["name"]: c for c in context.cookies(oauth)}
        session = cookies["__Host-edgeway.session"]  # (kept by the browser: the prefix's rules
        assert session["httpOnly"] and session["secure"]  # are met)

        page.goto(f"{sp.site}/headers")
        assert page.url.startswith(idp.base)  # at the IdP, with a signed AuthnRequest
        page.fill("input[name=login]", "bob")
        page.click("button[type=submit]")  # its answer posts itself to the ACS
        page.wait_for_url(f"{sp.site}/headers")
        assert seen(page)["edgeway-auth-user-email"] == "bob@corp.example"
        page.goto(f"{sp.site}/.edgeway/saml/logout")  # single logout, through the IdP
        assert page.url.startswith(f"{sp.route['saml']['single_logout_url']}?SAMLResponse=")
        assert page.inner_text("body").strip() == "Signed out."
        page.goto(f"{sp.site}/headers")
        assert page.url.startswith(idp.base)  # no session left: back to the IdP
    finally:
        context.close()
