"""A cookie-keeping client that behaves as a browser does in a login: cookies kept per host
(``Max-Age=0`` deletes; ``SameSite`` decides what a cross-site POST carries), redirects
followed (GET after 302/303, the method kept after 307), forms read and submitted. Public
edge names go through the edge's HTTPS listener (``EdgeClient``: the name as TLS server name
and Host); loopback addresses (the test providers) are dialled directly."""

from __future__ import annotations

from html.parser import HTMLParser
from typing import Any
from urllib.parse import urljoin, urlsplit

import httpx

from tests.edge.agents import EdgeClient
from tests.server import Server, trust


class _Form(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.action, self.method = "", "get"
        self.fields: dict[str, str] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "form" and not self.action:
            self.action, self.method = a.get("action", ""), a.get("method", "get").lower()
        elif tag == "input" and a.get("name"):
            self.fields[a["name"]] = a.get("value", "")


def form(page: httpx.Response) -> tuple[str, str, dict[str, str]]:
    """The first form of an HTML page: its absolute action, method and fields."""
    parser = _Form()
    parser.feed(page.text)
    return urljoin(str(page.url), parser.action), parser.method, parser.fields


CHROME = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) " \
         "Chrome/120.0.0.0 Safari/537.36"


class Browser:
    def __init__(self, srv: Server, user_agent: str = CHROME) -> None:
        self.user_agent = user_agent  # sent with every request
        self.edge = EdgeClient(srv)
        self.direct = httpx.Client(timeout=30, verify=trust())
        self.jar: dict[str, dict[str, tuple[str, str]]] = {}  # host -> name -> value, SameSite
        self.history: list[httpx.Response] = []

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.edge.__exit__()
        self.direct.close()

    def cookie(self, host: str, name: str) -> str | None:
        found = self.jar.get(host, {}).get(name)
        return found[0] if found else None

    def _store(self, host: str, r: httpx.Response) -> None:
        for line in r.headers.get_list("set-cookie"):
            pair, *attrs = [p.strip() for p in line.split(";")]
            name, _, value = pair.partition("=")
            flags = {a.split("=", 1)[0].lower(): a.partition("=")[2] for a in attrs}
            if flags.get("max-age") == "0":
                self.jar.get(host, {}).pop(name, None)
            else:
                self.jar.setdefault(host, {})[name] = (value, flags.get("samesite", "lax"))

    def request(self, method: str, url: str, cross_site: bool = False, **kw: Any
                ) -> httpx.Response:
        """One exchange; ``cross_site``: started by another site's page (a SameSite=Lax
        cookie rides along only on a top-level GET)."""
        host = urlsplit(url).hostname or ""
        carried = [f"{k}={v}" for k, (v, same) in self.jar.get(host, {}).items()
                   if not cross_site or same.lower() == "none" or method == "GET"]
        headers = {"User-Agent": self.user_agent, **kw.pop("headers", {}),
                   **({"Cookie": "; ".join(carried)} if carried else {})}
        self.edge.cookies.clear()  # (httpx's own jars would send every host's cookies to
        self.direct.cookies.clear()  # the listener's address: only this jar decides)
        if host in ("127.0.0.1", "localhost"):
            r = self.direct.request(method, url, headers=headers, **kw)
        else:
            r = self.edge.request(method, url, headers=headers, **kw)
        self._store(host, r)
        self.history.append(r)
        return r

    def go(self, url: str, method: str = "GET", hops: int = 12, cross_site: bool = False,
           **kw: Any) -> httpx.Response:
        """Follow redirects from ``url`` to a page that is not one."""
        r = self.request(method, url, cross_site, **kw)
        for _ in range(hops):
            if r.status_code not in (301, 302, 303, 307, 308):
                return r
            previous = urlsplit(url).hostname
            url = urljoin(url, r.headers["location"])
            keep = r.status_code in (307, 308)
            cross = urlsplit(url).hostname != previous
            r = self.request(method if keep else "GET", url, cross_site=cross,
                             **(kw if keep else {}))
        raise AssertionError(f"more than {hops} redirects, last at {url}")

    def submit(self, page: httpx.Response, **fields: str) -> httpx.Response:
        """Fill the page's first form and send it, following where it leads (a form posted
        to another site is a cross-site request)."""
        action, method, values = form(page)
        values |= fields
        cross = urlsplit(action).hostname != page.url.host
        if method == "post":
            return self.go(action, "POST", data=values, cross_site=cross)
        return self.go(f"{action}?{httpx.QueryParams(values)}", cross_site=cross)
