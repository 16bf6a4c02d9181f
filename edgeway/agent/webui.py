"""The web inspector's files, served by the local API from the package's ``web`` folder (no
CDN, nothing fetched from elsewhere: the page's Content-Security-Policy allows only this
origin). ``/`` redirects to ``/inspect/http``; the page's script and style are under
``/inspect/static/``. The page itself talks to ``/api/requests/http`` and follows
``/inspect/http/events``."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any

Send = Callable[[dict[str, Any]], Awaitable[None]]
TYPES = {".html": b"text/html; charset=utf-8", ".js": b"text/javascript; charset=utf-8",
         ".css": b"text/css; charset=utf-8"}
STATIC = "/inspect/static/"
POLICY = (b"default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
          b"connect-src 'self'; frame-ancestors 'none'")


@dataclass(frozen=True)
class Page:
    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes


def _file(name: str) -> Page | None:
    if "/" in name or name.startswith("."):
        return None
    kind = TYPES.get(name[name.rfind("."):] if "." in name else "")
    resource = resources.files("edgeway.agent").joinpath("web", name)
    if kind is None or not resource.is_file():
        return None
    return Page(200, [(b"content-type", kind), (b"cache-control", b"no-cache"),
                      (b"content-security-policy", POLICY),
                      (b"x-content-type-options", b"nosniff")], resource.read_bytes())


def page(path: str) -> Page | None:
    """What the inspector serves at ``path``, or None (not one of its paths)."""
    if path == "/" or path == "/inspect" or path == "/inspect/":
        return Page(302, [(b"location", b"/inspect/http")], b"")
    if path in ("/inspect/http", "/inspect/http/"):
        return _file("inspect.html")
    if path.startswith(STATIC):
        return _file(path[len(STATIC):]) or Page(404, [(b"content-type", b"text/plain")],
                                                 b"no such file\n")
    return None


async def send_page(send: Send, p: Page, head: bool) -> None:
    await send({"type": "http.response.start", "status": p.status, "headers": [
        *p.headers, (b"content-length", str(len(p.body)).encode())]})
    await send({"type": "http.response.body", "body": b"" if head else p.body})
