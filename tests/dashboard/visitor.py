"""A browser's requests to the dashboard over HTTP, without a browser: cookies kept, forms
posted with the CSRF token their page carried (for the hostile cases a browser would not
make; ``test_browser`` drives a real one)."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from contextlib import contextmanager

import httpx

from tests.server import Server, trust

CSRF = re.compile(r'name="csrf" value="([^"]*)"')
ORIGIN_HEADERS = {"Accept": "text/html"}


def csrf_of(page: httpx.Response) -> str:
    found = CSRF.search(page.text)
    assert found, page.text[:2000]
    return html.unescape(found.group(1))


def visitor(srv: Server, local_address: str | None = None) -> httpx.Client:
    transport = httpx.HTTPTransport(local_address=local_address, verify=trust()) \
        if local_address else None
    return httpx.Client(base_url=srv.base_url, headers=ORIGIN_HEADERS, timeout=30,
                        transport=transport, verify=trust())


def sign_in(client: httpx.Client, token: str) -> httpx.Response:
    """Sign in with ``token``; the answer to the sign-in form (303 when it worked)."""
    form = client.get("/dashboard/signin")
    assert form.status_code == 200, form.text
    return client.post("/dashboard/signin", data={"csrf": csrf_of(form), "key": token,
                                                   "next": "/dashboard/"})


@contextmanager
def signed_in(srv: Server, token: str | None = None, local_address: str | None = None
              ) -> Iterator[httpx.Client]:
    with visitor(srv, local_address) as client:
        r = sign_in(client, token or srv.token)
        assert r.status_code == 303 and r.headers["location"] == "/dashboard/", r.text
        yield client


def post(client: httpx.Client, page: str, action: str, data: dict[str, str]
         ) -> httpx.Response:
    """Post ``data`` to ``action`` with the CSRF token of ``page`` (as its form would)."""
    token = csrf_of(client.get(page))
    return client.post(action, data={"csrf": token, **data})
