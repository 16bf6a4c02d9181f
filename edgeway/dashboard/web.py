"""What a page handler sees and answers with: ``Ctx`` (the request, its signed-in caller, its
form, its CSRF token, and ``call``: an API operation in-process as that caller), the
templates (Jinja2, escaping on), and the headers every answer of the dashboard carries.

A page says what it may offer by asking the API's own rule (``can``: the role check the
operation will make), so a read-only key sees no button that its operation would refuse.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import jinja2
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.types import ASGIApp

from edgeway.api import guards, inprocess
from edgeway.api.inprocess import Answer
from edgeway.api.platform import AuthCache, Caller
from edgeway.catalog.model import Kind
from edgeway.config import DashboardConfig
from edgeway.dashboard.agentfile import AgentDial
from edgeway.dashboard.limiter import Limiter
from edgeway.errors import Forbidden
from edgeway.platform import Platform
from edgeway.store.dashboard import Session, SessionStore

PREFIX = "/dashboard"
HEADERS = {
    # nothing but this origin: no CDN, no inline script, no framing, forms post only here
    "content-security-policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
                               "img-src 'self' data:; connect-src 'self'; form-action 'self'; "
                               "frame-ancestors 'none'; base-uri 'none'",
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "same-origin",
    "cross-origin-opener-policy": "same-origin",
    "cross-origin-resource-policy": "same-origin",
}

templates = jinja2.Environment(
    loader=jinja2.PackageLoader("edgeway.dashboard", "templates"),
    autoescape=True, undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)


class Refusal(Exception):
    """A request the dashboard answers with its error page: ``status`` and why."""

    def __init__(self, status: int, title: str, reason: str, code: str = "") -> None:
        super().__init__(reason)
        self.status, self.title, self.reason, self.code = status, title, reason, code


def may(caller: Caller | None, method: str, path: str) -> bool:
    """Whether the API's role check lets ``caller`` make ``method path``."""
    if caller is None:
        return False
    try:
        guards.authorize(caller, method, path)
    except Forbidden:
        return False
    return True


@dataclass
class Shared:
    """What every request of one dashboard shares."""
    platform: Platform
    api: ASGIApp  # called in-process
    config: DashboardConfig
    sessions: SessionStore
    auth: AuthCache  # (API keys checked recently, as the API keeps them)
    limiter: Limiter
    secure: bool  # cookies only over HTTPS (the public URL is https)
    agent: AgentDial  # how agents reach this platform (the agent config file)

    def mac(self, purpose: str, secret: str) -> str:
        return self.platform.sealer.mac(f"dashboard {purpose}\0{secret}".encode()).hex()


@dataclass
class Ctx:
    request: Request
    shared: Shared
    client: str
    session: Session | None = None
    caller: Caller | None = None
    form: dict[str, str] = field(default_factory=dict)
    csrf: str = ""
    nav: Any = None
    notice: str = ""

    @property
    def params(self) -> dict[str, str]:
        out: dict[str, str] = self.request.path_params
        return out

    async def call(self, method: str, path: str, query: list[tuple[str, str]] | None = None,
                   body: Any = None) -> Answer:
        assert self.caller is not None
        return await inprocess.call(self.shared.api, self.caller, self.client, method, path, query,
                                    body)

    def can(self, method: str, path: str) -> bool:
        return may(self.caller, method, path)

    async def newest(self, kind: Kind, limit: int) -> tuple[list[dict[str, Any]], bool]:
        """The newest ``limit`` of a kind through its API list, and whether there are more
        (a refused list is the page's refusal)."""
        answer = await self.call("GET", kind.url, [("limit", str(limit))])
        if not answer.ok:
            raise api_refusal(answer)
        return answer.body[kind.list_key], answer.body.get("next_page_uri") is not None

    def page(self, template: str, status: int = 200, **values: Any) -> Response:
        body = templates.get_template(template).render(
            me=self.caller, csrf=self.csrf, can=self.can, nav=self.nav, prefix=PREFIX,
            session=self.session, notice=values.pop("notice", self.notice), **values)
        return HTMLResponse(body, status, headers={"cache-control": "no-store"})


Handler = Callable[[Ctx], Awaitable[Response]]


def polling(ctx: Ctx) -> bool:
    """A live part of a page refreshing itself (htmx, ``X-Poll``): it keeps no session alive,
    and an ended one sends the whole page to sign-in."""
    headers = ctx.request.headers
    return ctx.request.method == "GET" and "hx-request" in headers and "x-poll" in headers


def redirect(path: str) -> Response:
    """303 to ``path`` (a page of the dashboard: the only place it sends a browser)."""
    assert path.startswith(PREFIX + "/") and not path.startswith(PREFIX + "//")
    return RedirectResponse(path, 303, headers={"cache-control": "no-store"})


def error_page(ctx: Ctx | None, refusal: Refusal) -> Response:
    body = templates.get_template("error.html").render(
        me=ctx.caller if ctx else None, csrf=ctx.csrf if ctx else "",
        can=ctx.can if ctx else (lambda *_: False), nav=ctx.nav if ctx else None,
        prefix=PREFIX, session=ctx.session if ctx else None, notice="", error=refusal)
    return HTMLResponse(body, refusal.status, headers={"cache-control": "no-store"})


def api_refusal(answer: Answer) -> Refusal:
    msg, code, _member = answer.error()
    return Refusal(answer.status, "The operation was refused", msg, code)
