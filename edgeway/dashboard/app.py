"""The dashboard's ASGI app. Every request, in this order:

1. the ``dashboard`` IP restrictions: an address they refuse gets the 403 page with the
   restriction's id (and a log line), whatever it asked for, static files included;
2. the page it names (404 page otherwise; only GET, HEAD and POST);
3. the session of its cookie, whose API key (or user's password) is authenticated again (a
   revoked key, a new password or an expired session ends it): pages other than sign-in
   need one, else 303 to sign-in;
4. a POST must come from this site (``Origin`` and ``Sec-Fetch-Site``, when the browser
   sends them) and carry the form's CSRF token (a keyed digest of the session's secret, or
   of the sign-in cookie's before there is a session): 403 otherwise;
5. the page's handler, whose reads and writes are the API's operations (``web.Ctx.call``).
"""

from __future__ import annotations

import hmac
from urllib.parse import parse_qsl, urlsplit

import structlog
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from edgeway.api.platform import AuthCache
from edgeway.api.router import PathRouter
from edgeway.config import DashboardConfig
from edgeway.dashboard import (
    detail,
    dnschecks,
    nav,
    overview,
    resources,
    sessions,
    site,
    statics,
    traffic,
)
from edgeway.dashboard.agentfile import AgentDial
from edgeway.dashboard.limiter import Limiter
from edgeway.dashboard.web import (
    HEADERS,
    PREFIX,
    Ctx,
    Handler,
    Refusal,
    Shared,
    error_page,
    polling,
)
from edgeway.errors import Forbidden
from edgeway.platform import Platform
from edgeway.store.dashboard import SessionStore
from edgeway.store.db import DatabaseUnavailable

log = structlog.get_logger()
MAX_FORM = 1 << 20
_HEADERS = [(k.encode(), v.encode()) for k, v in HEADERS.items()]


class Dashboard:
    def __init__(self, platform: Platform, api: ASGIApp, config: DashboardConfig,
                 agent: AgentDial) -> None:
        cache = AuthCache()
        platform.watchers.append(cache.changed)
        self.shared = Shared(platform, api, config,
                             SessionStore(platform.db, config.session_ttl), cache,
                             Limiter(config.signin_per_minute),
                             platform.settings.public_url.startswith("https://"), agent)
        self.router = PathRouter()
        for path, method, handler, public in [*statics.routes(), *sessions.routes(),
                                              *overview.routes(), *dnschecks.routes(),
                                              *site.routes(), *traffic.routes(),
                                              *resources.routes(),
                                              *detail.routes()]:
            self.router.add(path, [method], (handler, public))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def secured(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), *_HEADERS]
            await send(message)

        request = Request(scope, receive)
        client = request.client.host if request.client else ""
        ctx = Ctx(request, self.shared, client, nav=nav.GROUPS)
        try:
            response = await self._handle(ctx)
        except Refusal as refusal:
            response = error_page(ctx, refusal)
        except DatabaseUnavailable as exc:
            response = error_page(ctx, Refusal(503, "The database is unavailable",
                                               f"{exc}; try again in a moment."))
        except Exception:
            log.exception("dashboard_error", method=scope["method"], path=scope["path"])
            response = error_page(ctx, Refusal(500, "Something went wrong", "The server "
                                               "could not show this page; its log says why."))
        await response(scope, receive, secured)

    async def _handle(self, ctx: Ctx) -> Response:
        scope = ctx.request.scope
        refused = await self.shared.platform.restrictions.refusing("dashboard", ctx.client)
        if refused is not None:
            log.warning("dashboard_refused", restriction=refused.id, client=ctx.client)
            raise Refusal(403, "Not allowed from this address",
                          f"The address {ctx.client} is not allowed to use the dashboard by "
                          f"IP restriction '{refused.id}'.")
        found = self.router.match(scope["path"][len(PREFIX):] or "/")
        if found is None:
            raise Refusal(404, "Not found", f"The dashboard has no page at {scope['path']}.")
        method = "GET" if scope["method"] == "HEAD" else scope["method"]
        if method not in found[0]:
            raise Refusal(405, "Method not allowed",
                          f"{scope['method']} is not supported on {scope['path']}.")
        (handler, public), names = found[0][method]
        scope["path_params"] = dict(zip(names, found[1], strict=True))
        return await self._run(ctx, method, handler, public)

    async def _run(self, ctx: Ctx, method: str, handler: Handler, public: bool) -> Response:
        if handler is statics.static:  # (no session read, nor kept alive, by a style sheet)
            return await handler(ctx)
        await self._resume(ctx)
        if ctx.caller is None and not public:
            if method == "GET":
                return sessions.to_signin(ctx, polling(ctx))
            raise Refusal(403, "Signed out", "This form's session has ended (signed out, "
                          "expired or revoked): sign in again.")
        if method == "POST":
            _same_site(ctx.request)
            ctx.form = await _form(ctx.request)
            given = ctx.form.get("csrf", "")
            if not ctx.csrf or not hmac.compare_digest(given.encode(), ctx.csrf.encode()):
                raise Refusal(403, "Form refused", "The form's CSRF token is missing or "
                              "does not match this session: reload the page and send it "
                              "again.")
        return await handler(ctx)

    async def _resume(self, ctx: Ctx) -> None:
        """The session of the request's cookie, its caller and the forms' CSRF token; before
        sign-in, the token of the sign-in cookie."""
        cookies = ctx.request.cookies
        secret = cookies.get(sessions.COOKIE, "")
        row = await self.shared.sessions.find(secret, not polling(ctx)) if secret else None
        if row is not None:
            try:
                ctx.caller = await sessions.resume(ctx, row)
            except Forbidden as exc:
                log.info("dashboard_session_ended", session=row.ref, why=exc.msg)
                await self.shared.sessions.end(row.id)
                row = None
        if row is not None:
            ctx.session = row
            ctx.csrf = self.shared.mac("csrf", secret)
        elif cookies.get(sessions.SIGNIN_COOKIE):
            ctx.csrf = self.shared.mac("signin", cookies[sessions.SIGNIN_COOKIE])


def _same_site(request: Request) -> None:
    """Refuse a POST a browser says comes from another site (SameSite=Strict already keeps
    the session cookie off it; this also covers the sign-in form)."""
    fetch_site = request.headers.get("sec-fetch-site", "")
    origin = request.headers.get("origin")
    host = request.headers.get("host", "")
    cross = fetch_site not in ("", "same-origin", "none")
    if origin is not None and (origin == "null" or urlsplit(origin).netloc != host):
        cross = True
    if cross:
        raise Refusal(403, "Form refused", f"A form posted from another site "
                      f"({origin or fetch_site}) is refused: the dashboard takes forms from "
                      "its own pages only.")


async def _form(request: Request) -> dict[str, str]:
    """The urlencoded form of a POST (the first value of each name), at most ``MAX_FORM``."""
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype != "application/x-www-form-urlencoded":
        raise Refusal(415, "Form refused", f"A form must be sent as "
                      f"application/x-www-form-urlencoded, not '{ctype or 'nothing'}'.")
    body = b""
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_FORM:
            raise Refusal(413, "Form too large", f"A form may hold at most {MAX_FORM} bytes.")
    try:
        pairs = parse_qsl(body.decode(), keep_blank_values=True, max_num_fields=1000)
    except (UnicodeDecodeError, ValueError) as exc:
        raise Refusal(400, "Form refused", f"The form could not be read: {exc}.") from None
    out: dict[str, str] = {}
    for key, value in pairs:
        out.setdefault(key, value)
    return out
