"""Debian's Chromium driven by Playwright for the dashboard's tests (never a downloaded
browser): a page that records every host it sends a request to, and signs in as a person
does."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

import pytest

from tests.server import Server

playwright = pytest.importorskip("playwright.sync_api", reason="scripts/test installs it")
CHROMIUM = "/usr/bin/chromium"
if not (os.access(CHROMIUM, os.X_OK) or shutil.which("chromium")):
    pytest.skip("Debian's chromium is not installed (scripts/test installs it)",
                allow_module_level=True)
expect = playwright.expect


@contextmanager
def chromium() -> Iterator[Any]:
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield browser
        finally:
            browser.close()


@contextmanager
def page_of(browser: Any, srv: Server, width: int = 1280, dark: bool = False
            ) -> Iterator[Any]:
    """A page in a context of its own (its own cookies), accepting the confirmations the
    dashboard asks; at the end, every request it made must have gone to ``srv`` only."""
    context = browser.new_context(viewport={"width": width, "height": 900},
                                  color_scheme="dark" if dark else "light")
    page = context.new_page()
    hosts: set[str] = set()
    page.on("request", lambda req: hosts.add(urlsplit(req.url).netloc))
    page.on("dialog", lambda dialog: dialog.accept())
    try:
        yield page
    finally:
        context.close()
    assert hosts <= {urlsplit(srv.base_url).netloc}, hosts


def sign_in(page: Any, srv: Server, token: str | None = None) -> None:
    page.goto(srv.base_url + "/")  # (a browser at the root is sent to the dashboard)
    expect(page.locator("#signin")).to_be_visible()
    page.fill("#key", token or srv.token)
    page.click("#signin")
    expect(page.locator("h1")).to_have_text("Overview")
