"""Sign-in with an API key (or a person's name and password: ``api.userauth``), sign-out,
and the sessions page.

The key is pasted once: the server keeps its token's hash with the session (as the
``api_keys`` table does; for a password, the fingerprint of its stored hash, so that a new
password ends the session), the browser only the session's random secret, in an HttpOnly,
SameSite=Strict cookie scoped to ``/dashboard`` (Secure when the public URL is https). The
sign-in form has its own CSRF token, from a cookie of its own, so another site cannot sign a
browser in to a key of its choosing. Failed attempts are limited per client address
(``limiter``).
An admin key's session lists and revokes every session; any other key's, its own key's.
"""

from __future__ import annotations

import secrets
import time
from datetime import UTC, datetime
from urllib.parse import quote

import structlog
from starlette.responses import Response

from edgeway import ids
from edgeway.api import auth, userauth
from edgeway.api.platform import Caller
from edgeway.dashboard.web import PREFIX, Ctx, Handler, Refusal, redirect
from edgeway.errors import CODE_PREFIX, Forbidden
from edgeway.store.dashboard import Session

log = structlog.get_logger()
COOKIE = "edgeway_session"
PASSWORD = "pw:"  # a password session's proof: this, then the password hash's fingerprint
SIGNIN_COOKIE = "edgeway_signin"


def _cookie(ctx: Ctx, response: Response, name: str, value: str) -> None:
    response.set_cookie(name, value, path=PREFIX, secure=ctx.shared.secure, httponly=True,
                        samesite="strict")


def _forget(ctx: Ctx, response: Response, name: str) -> None:
    response.delete_cookie(name, path=PREFIX, secure=ctx.shared.secure, httponly=True,
                           samesite="strict")


def _next(text: str) -> str:
    """Where to go after sign-in: a page of the dashboard, else the overview."""
    if text.startswith(PREFIX + "/") and not text.startswith(PREFIX + "//") \
            and "\\" not in text and not any(ord(c) < 33 for c in text):
        return text
    return PREFIX + "/"


def to_signin(ctx: Ctx, polled: bool = False) -> Response:
    """303 to sign-in, back here after; for a live part refreshing itself, htmx's own
    redirect of the whole page (it would follow a 303 and put the sign-in form in the
    part)."""
    url = ctx.request.url
    here = url.path + (f"?{url.query}" if url.query and not polled else "")
    target = f"{PREFIX}/signin?next={quote(here, safe='')}"
    if polled:
        return Response(status_code=200, headers={"hx-redirect": target,
                                                  "cache-control": "no-store"})
    return redirect(target)


async def signin_form(ctx: Ctx) -> Response:
    nxt = _next(ctx.request.query_params.get("next", ""))
    if ctx.caller is not None:
        return redirect(nxt)
    notice = "Signed out." if "signed_out" in ctx.request.query_params else ""
    return _signin_page(ctx, nxt, notice=notice)


def _signin_page(ctx: Ctx, nxt: str, status: int = 200, **values: str) -> Response:
    fresh = ""
    if not ctx.csrf:  # (a first visit: the sign-in form's cookie)
        fresh = secrets.token_urlsafe(32)
        ctx.csrf = ctx.shared.mac("signin", fresh)
    response = ctx.page("signin.html", status, next=nxt, **values)
    if fresh:
        _cookie(ctx, response, SIGNIN_COOKIE, fresh)
    return response


async def signin(ctx: Ctx) -> Response:
    nxt = _next(ctx.form.get("next", ""))
    wait = ctx.shared.limiter.wait(ctx.client)
    if wait:
        log.warning("dashboard_signin_limited", client=ctx.client)
        response = _signin_page(ctx, nxt, 429, error=f"Too many sign-in attempts from "
                                f"{ctx.client}: try again in {int(wait) + 1} seconds.")
        response.headers["retry-after"] = str(int(wait) + 1)
        return response
    name = ctx.form.get("name", "").strip()
    try:
        if name:  # (a person's name and password)
            caller, fingerprint = await userauth.by_password(
                name, ctx.form.get("password", ""), ctx.shared.platform)
            who, proof = caller.owner_id, PASSWORD + fingerprint
        else:
            digest = ids.token_hash(auth.check_token(ctx.form.get("key", "").strip()))
            caller = await auth.by_digest(digest, ctx.shared.platform, ctx.shared.auth)
            who, proof = caller.key_id, digest
    except Forbidden as exc:
        ctx.shared.limiter.failed(ctx.client)
        log.info("dashboard_signin_refused", client=ctx.client, code=exc.code)
        where = "password" if name else "key"
        return _signin_page(ctx, nxt, 403, error=exc.msg, code=f"{CODE_PREFIX}{exc.code}",
                            where=where, name=name)
    secret, row = await ctx.shared.sessions.open(
        who, proof, ctx.client, ctx.request.headers.get("user-agent", ""))
    log.info("dashboard_signin", session=row.ref, by=who, client=ctx.client)
    response = redirect(nxt)
    _cookie(ctx, response, COOKIE, secret)
    _forget(ctx, response, SIGNIN_COOKIE)
    return response


async def signout(ctx: Ctx) -> Response:
    assert ctx.session is not None
    await ctx.shared.sessions.end(ctx.session.id)
    log.info("dashboard_signout", session=ctx.session.ref, client=ctx.client)
    response = redirect(f"{PREFIX}/signin?signed_out=1")
    _forget(ctx, response, COOKIE)
    return response


def stamp(epoch: float) -> str:
    return datetime.fromtimestamp(int(epoch), UTC).strftime("%Y-%m-%d %H:%M:%SZ")


def _whose(ctx: Ctx) -> str | None:
    """Whose sessions this caller sees and revokes: an admin everyone's (None), else those
    of its own API key (or user)."""
    assert ctx.caller is not None and ctx.session is not None
    return None if ctx.caller.is_admin else ctx.session.key_id


async def resume(ctx: Ctx, row: Session) -> Caller:
    """The caller a session acts as, its API key (or user's password) checked again."""
    if row.key_hash.startswith(PASSWORD):
        return await userauth.by_session(row.key_id, row.key_hash[len(PASSWORD):],
                                         ctx.shared.platform)
    return await auth.by_digest(row.key_hash, ctx.shared.platform, ctx.shared.auth)


async def listed(ctx: Ctx) -> Response:
    rows = await ctx.shared.sessions.listed(_whose(ctx))
    ttl = ctx.shared.config.session_ttl
    shown = [{"ref": r.ref, "key_id": r.key_id, "created": stamp(r.created),
              "seen": stamp(r.seen), "expires": stamp(r.seen + ttl), "client": r.client,
              "user_agent": r.user_agent, "current": ctx.session is not None
              and r.id == ctx.session.id} for r in rows]
    notice = "Session revoked." if "revoked" in ctx.request.query_params else ""
    return ctx.page("sessions.html", rows=shown, everyone=_whose(ctx) is None,
                    now=stamp(time.time()), notice=notice)


async def revoke(ctx: Ctx) -> Response:
    ref = ctx.form.get("ref", "")
    if not await ctx.shared.sessions.revoke(ref, _whose(ctx)):
        raise Refusal(404, "No such session", f"There is no session '{ref}' to revoke (it "
                      "ended, or is not one this key may revoke).")
    log.info("dashboard_session_revoked", session=ref, by=ctx.session.ref if ctx.session
             else "", client=ctx.client)
    if ctx.session is not None and ref == ctx.session.ref:
        response = redirect(f"{PREFIX}/signin?signed_out=1")
        _forget(ctx, response, COOKIE)
        return response
    return redirect(f"{PREFIX}/sessions?revoked=1")


def routes() -> list[tuple[str, str, Handler, bool]]:
    """(path under /dashboard, method, handler, served without a session)."""
    return [("/signin", "GET", signin_form, True), ("/signin", "POST", signin, True),
            ("/signout", "POST", signout, False), ("/sessions", "GET", listed, False),
            ("/sessions/revoke", "POST", revoke, False)]
