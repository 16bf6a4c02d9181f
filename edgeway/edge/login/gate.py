"""The login gate of the HTTPS edge: what the ``oidc``, ``oauth`` and ``saml`` hooks hand
their requests to (``base`` has the shared pieces, ``flow`` what a flow is, the flows
their own files).

For each request on a route (or tunnel) with a login module: the module's own paths
(``/.edgeway/<module>/...``) go to its flow; ``logout`` ends the session; otherwise the
session cookie is checked (its signature, realm and end, then the session in the database:
deleted means logged out, ``inactivity_timeout`` counts from its last request), the user is
re-checked at the provider when the module asks for it (OAuth ``auth_check_interval``), and
the request goes on with the user's identity; a request without a valid session starts a
login. Provider failures are 502 pages; while the database is out of reach, a valid signed
cookie is trusted until its own end.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import httpx
import structlog

from edgeway.config import IdentityOptions
from edgeway.edge.h1 import Request, header
from edgeway.edge.hooks import Exchange
from edgeway.edge.login import base as login
from edgeway.edge.login.base import IDENTITY, PREFIX, Common, Gate, Identity, ProviderError
from edgeway.edge.login.flow import Flow
from edgeway.edge.login.oauth import OAuthFlow
from edgeway.edge.login.oidc import OidcFlow
from edgeway.edge.login.saml import SamlFlow
from edgeway.edge.login.sessions import TOUCH_AFTER, AppSessions, Live, Opening, seen
from edgeway.edge.pages import Fixed, page
from edgeway.store.db import DatabaseUnavailable

log = structlog.get_logger()
SWEEP_EVERY = 300.0  # seconds between two sweeps of expired sessions and assertions


def build(key: bytes, sessions: AppSessions, options: IdentityOptions, login_site: str,
          https_port: int) -> LoginGate:
    """The gate with the three flows; ``login_site``: the managed OAuth applications'
    callback site (``https://<login host>[:port]``)."""
    gate = LoginGate(key, sessions)
    oauth = OAuthFlow(gate, options, login_site)
    for flow in (OidcFlow(gate), oauth, SamlFlow(gate, https_port)):
        gate.flows[flow.kind] = flow
    gate.bounce = oauth.bounce
    return gate


class LoginGate:
    def __init__(self, key: bytes, sessions: AppSessions) -> None:
        self.key, self.sessions = key, sessions
        self.flows: dict[str, Flow] = {}
        # the managed OAuth applications' callback on the login host (see OAuthFlow.bounce)
        self.bounce: Callable[[Request, str], Fixed | None] = lambda _req, _host: None
        self._http: httpx.AsyncClient | None = None
        self._checks: dict[str, asyncio.Future[Fixed | None]] = {}  # re-checks in flight
        self._sweeper: asyncio.Task[None] | None = None

    def http(self) -> httpx.AsyncClient:
        if self._http is None:
            self._http = httpx.AsyncClient(timeout=10, follow_redirects=False)
        return self._http

    async def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_EVERY)
            try:
                await self.sessions.sweep(time.time())
            except DatabaseUnavailable as exc:
                log.warning("app_session_sweep_failed", error=str(exc))

    # -- a request -------------------------------------------------------------------------

    async def check(self, hook: Gate, x: Exchange) -> Fixed | Request:
        """The answer the edge gives itself (a redirect to log in, a callback's outcome, a
        logout, a refusal), or the request to forward, with the user's identity."""
        if self._sweeper is None:
            self._sweeper = asyncio.create_task(self._sweep())
        c, req = hook.common, x.req
        flow = self.flows[hook.kind]
        path = req.target.decode("latin-1").split("?", 1)[0]
        headers = [(k, v) for k, v in req.headers if k.lower() not in IDENTITY]
        try:
            if path.startswith(PREFIX):
                if path == f"{PREFIX}{hook.kind}/logout":
                    return await self._logout(hook, x, flow)
                answer = await flow.own(hook, x, path)
                if answer is not None:
                    return answer
            if c.options_passthrough and req.method == b"OPTIONS":
                return replace(req, headers=headers)
            cookie, live = await self._session(c, req)
            if cookie is None:
                return await flow.begin(hook, x)
            if live is not None and flow.due(hook, live, time.time()):
                refusal = await self._recheck(hook, flow, x, live)
                if refusal is not None:
                    return refusal
        except ProviderError as exc:
            log.warning("login_provider_error", module=hook.kind, key=c.key, error=str(exc))
            return page(502, "Login unavailable", "The identity provider could not be "
                        f"reached or answered wrongly: {exc}", 4014)
        except DatabaseUnavailable as exc:
            log.warning("login_store_unavailable", module=hook.kind, key=c.key, error=str(exc))
            return page(503, "Login unavailable", "Logins cannot be recorded right now; try "
                        "again in a moment.", 4014, (("Retry-After", "2"),))
        identity = [(name, str(cookie.get(k, "")).encode("utf-8", "replace"))
                    for name, k in zip(IDENTITY, ("u", "e", "n"), strict=True)]
        return replace(req, headers=headers + identity)

    def _cookie(self, c: Common, req: Request, now: float) -> dict[str, Any] | None:
        value = login.cookies(req.headers).get(c.cookie)
        data = login.unsign(self.key, value) if value else None
        if data is None or data.get("r") != c.realm or float(data.get("x", 0)) < now:
            return None
        return data

    async def _session(self, c: Common, req: Request
                       ) -> tuple[dict[str, Any] | None, Live | None]:
        """The signed cookie of a valid session and the session as stored (None while the
        database is out of reach)."""
        now = time.time()
        data = self._cookie(c, req, now)
        if data is None:
            return None, None
        try:
            live = await self.sessions.find(str(data.get("s", "")))
            if live is None or live.doc.get("realm") != c.realm:
                return None, None
            if c.inactivity and now - seen(live.doc) > c.inactivity:
                await self.sessions.end(live.id)
                return None, None
            await self.sessions.touch(live, now, min(TOUCH_AFTER, c.inactivity / 4)
                                      if c.inactivity else TOUCH_AFTER)
        except DatabaseUnavailable as exc:
            log.warning("app_session_unchecked", key=c.key, error=str(exc))
            return data, None
        return data, live

    async def _recheck(self, hook: Gate, flow: Flow, x: Exchange, live: Live
                       ) -> Fixed | None:
        """One re-check per session at a time; requests meanwhile wait for its outcome."""
        running = self._checks.get(live.id)
        if running is not None:
            return await asyncio.shield(running)
        future: asyncio.Future[Fixed | None] = asyncio.get_running_loop().create_future()
        self._checks[live.id] = future
        try:
            outcome = await flow.recheck(hook, x, live)
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # (retrieved: waiters re-raise it)
            raise
        finally:
            self._checks.pop(live.id, None)
        future.set_result(outcome)
        return outcome

    async def _logout(self, hook: Gate, x: Exchange, flow: Flow) -> Fixed:
        live = None
        data = self._cookie(hook.common, x.req, time.time())
        if data is not None:
            try:
                live = await self.sessions.find(str(data.get("s", "")))
                if live is not None:
                    await self.sessions.end(live.id)
            except DatabaseUnavailable as exc:
                log.warning("app_session_unchecked", key=hook.common.key, error=str(exc))
        return await flow.logout(hook, x, live)

    # -- the end of a login ----------------------------------------------------------------

    async def establish(self, hook: Gate, x: Exchange, who: Identity, provider: tuple[str, str],
                        target: str, **more: Any) -> Fixed:
        """A login that succeeded: its session (stored, and in a signed cookie), and the
        browser sent back to ``target``."""
        c = hook.common
        site = "https://" + login.site_host(x.req.headers)
        opening = Opening(provider, site, header(x.req.headers, b"user-agent")
                          .decode("latin-1"), x.ip, **more)
        try:
            sid, expires = await self.sessions.open(c, who, opening)
        except DatabaseUnavailable as exc:
            log.warning("app_session_not_opened", key=c.key, error=str(exc))
            return page(503, "Login unavailable", "The session could not be recorded; try "
                        "again in a moment.", 4014, (("Retry-After", "2"),))
        cookie = login.sign(self.key, {"s": sid, "r": c.realm, "u": who.id, "e": who.email,
                                       "n": who.name, "x": int(expires)})
        return login.redirect(target, login.set_cookie(c.cookie, cookie),
                              login.set_cookie(c.state_cookie, "", 0))

    @staticmethod
    def allowed(who: Identity, rules: list[tuple[str, bool]]) -> Fixed | None:
        """``rules`` (name, passed) decide: anyone when there are none, else a user who
        passes one of them; the refusal names them."""
        if not rules or any(ok for _, ok in rules):
            return None
        who_text = who.email or who.username or who.id
        return login.refused("Not allowed", f"{who_text} may not use this site: not allowed "
                             f"by {' or '.join(name for name, _ in rules)}.")
