"""The OAuth login flow (the ``oauth`` module): authorization code grant with ``state`` bound
to the browser by a cookie and PKCE (S256; the verifier is derived from that cookie, so the
edge keeps nothing) where the provider takes it.

With the module's own application, the provider sends the browser back to
``https://<Host>/.edgeway/oauth/callback``. With the platform's managed application (no
client_id in the module: ``--oauth-apps``), one redirect URI serves every site:
``https://<login host>/.edgeway/oauth/callback``, which sends the browser on to the callback
on the host the login started on (named in the signed state). There the code is exchanged,
the user read from the provider's user API (code_host_a: also its verified e-mail, teams and
organizations), the module's rules applied and the session opened, keeping the access token
sealed: every ``auth_check_interval`` seconds the user is read again with it (refreshed when
the provider gave a refresh token), so a user the provider no longer knows, or who left the
team, loses access within that bound.
"""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any
from urllib.parse import parse_qs

import httpx

from edgeway.config import IdentityOptions
from edgeway.edge.h1 import Request
from edgeway.edge.hooks import Exchange
from edgeway.edge.login import base as login
from edgeway.edge.login.base import Answer, Gate, Identity, ProviderError
from edgeway.edge.login.code_flow import CodeFlow, to_provider
from edgeway.edge.login.flow import Services
from edgeway.edge.login.sessions import Live
from edgeway.edge.modules import oauth
from edgeway.edge.modules.oauth import CALLBACK, Config
from edgeway.edge.pages import Fixed, page

PAGES = 10  # pages of teams or organizations read at most (100 each)


class Revoked(Exception):
    """The provider no longer accepts the session's token."""


def _tokens(r: httpx.Response) -> dict[str, Any]:
    """A token endpoint's answer, JSON or (older providers) form-encoded."""
    try:
        body = r.json()
    except ValueError:
        body = {k: v[0] for k, v in parse_qs(r.text).items()}
    return body if isinstance(body, dict) else {}


class OAuthFlow(CodeFlow):
    kind, callback = "oauth", CALLBACK

    def __init__(self, gate: Services, options: IdentityOptions, login_site: str) -> None:
        super().__init__(gate)
        self.overrides = {(p, e): url for p, e, url in options.oauth_endpoints}
        self.apps = {p: (i, s) for p, i, s in options.oauth_apps}
        self.login_host = login_site.split("://", 1)[1].split(":", 1)[0]
        self.central = f"{login_site}{CALLBACK}"  # the managed applications' redirect URI

    def endpoint(self, cfg: Config, name: str) -> str:
        return self.overrides.get((cfg.provider.name, name)) or cfg.provider.endpoints[name]

    def _app(self, cfg: Config, host: str) -> tuple[str, str, str] | None:
        """Client id, secret and redirect URI; None: a managed one this server lacks."""
        if cfg.client_id:
            return cfg.client_id, cfg.client_secret, f"https://{host}{CALLBACK}"
        managed = self.apps.get(cfg.provider.name)
        return (*managed, self.central) if managed else None

    @staticmethod
    def _cfg(hook: Gate) -> Config:
        assert isinstance(hook, oauth.Login)
        return hook.config

    def bounce(self, req: Request, host: str) -> Fixed | None:
        """The managed applications' callback on the login host: on to the host the login
        started on (None: not a request for it)."""
        if host != self.login_host or req.target.split(b"?", 1)[0] != CALLBACK.encode():
            return None
        query = req.target.decode("latin-1").partition("?")[2]
        state = login.unsign(self.gate.key, (parse_qs(query).get("state") or [""])[0])
        if state is None or state.get("x", 0) < time.time() or not state.get("h"):
            return login.refused("Login failed", "The login answer does not belong to a login "
                                 "started here, or came too late; start again.", 400)
        return login.redirect(f"https://{state['h']}{CALLBACK}?{query}")

    async def begin(self, hook: Gate, x: Exchange) -> Fixed:
        cfg = self._cfg(hook)
        host = login.site_host(x.req.headers)
        app = self._app(cfg, host)
        if app is None:
            return page(503, "Login unavailable", f"This site logs in with {cfg.provider.name} "
                        "through the platform's managed OAuth application, which this server "
                        "does not have (--oauth-apps).", 4008)

        def params(browser: str, nonce: str) -> dict[str, str]:
            out = {"response_type": "code", "client_id": app[0], "redirect_uri": app[2],
                   "scope": " ".join(cfg.requested)}
            if cfg.provider.pkce:
                verifier = login.pkce_verifier(self.gate.key, browser, nonce)
                out |= {"code_challenge": login.pkce_challenge(verifier),
                        "code_challenge_method": "S256"}
            return out
        return to_provider(self.gate.key, cfg.common, x, self.endpoint(cfg, "authorize"),
                           params, h=host)

    async def answered(self, hook: Gate, x: Exchange, answer: Answer) -> Fixed:
        cfg = self._cfg(hook)
        one, state = answer.one, answer.state
        app = self._app(cfg, login.site_host(x.req.headers))
        if app is None:
            return await self.begin(hook, x)  # (the 503 page naming the missing application)
        tokens = await self._exchange(cfg, app, {
            "grant_type": "authorization_code", "code": one("code"), "redirect_uri": app[2],
            **({"code_verifier": login.pkce_verifier(self.gate.key, str(state.get("b")),
                                                     str(state.get("n")))}
               if cfg.provider.pkce else {})})
        access = tokens.get("access_token")
        if not isinstance(access, str) or not access:
            return login.refused("Login failed", "The identity provider did not exchange the "
                                 f"code for a token: {tokens.get('error', 'no access_token')} "
                                 f"{tokens.get('error_description', '')}".rstrip())
        try:
            who = await self.identify(cfg, app[0], access)
        except Revoked:
            return login.refused("Login failed", "The identity provider refused its own token.")
        refusal = self.gate.allowed(who, cfg.rules(who))
        if refusal is not None:
            return refusal
        return await self.gate.establish(
            hook, x, who, (cfg.provider.name, _origin(self.endpoint(cfg, "authorize"))),
            login.local_target(state.get("r")), token=access,
            refresh=str(tokens.get("refresh_token") or ""))

    async def _exchange(self, cfg: Config, app: tuple[str, str, str], grant: dict[str, str]
                        ) -> dict[str, Any]:
        """A token request (client_secret_post): the provider's answer (``error`` on a
        refusal)."""
        try:
            r = await self.gate.http().post(
                self.endpoint(cfg, "token"), headers={"Accept": "application/json"},
                data={**grant, "client_id": app[0], "client_secret": app[1]})
        except httpx.HTTPError as exc:
            raise ProviderError(f"{cfg.provider.name} token request: {exc}") from None
        tokens = _tokens(r)
        if r.status_code >= 500:
            raise ProviderError(f"{cfg.provider.name} token request: HTTP {r.status_code}")
        if r.status_code != 200 and "error" not in tokens:
            tokens["error"] = f"HTTP {r.status_code}"
        return tokens

    async def _get(self, cfg: Config, client_id: str, token: str, name: str,
                   query: str = "") -> tuple[Any, httpx.Response]:
        url = self.endpoint(cfg, name) + query
        headers = {"Authorization": f"Bearer {token}", "Accept": "application/json",
                   **dict(cfg.provider.user_headers)}
        if cfg.provider.name == "streaming_a":
            headers["Client-Id"] = client_id  # its user API wants the application too
        try:
            r = await self.gate.http().get(url, headers=headers)
            if r.status_code in (401, 403):
                raise Revoked(f"{name}: HTTP {r.status_code}")
            r.raise_for_status()
            return r.json(), r
        except (httpx.HTTPError, ValueError) as exc:
            raise ProviderError(f"{cfg.provider.name} {name}: {exc}") from None

    async def _listed(self, cfg: Config, client_id: str, token: str, name: str) -> list[Any]:
        """Every item of a paged list (teams, organizations), following ``Link: next``."""
        out: list[Any] = []
        body, r = await self._get(cfg, client_id, token, name, "?per_page=100")
        for _ in range(PAGES):
            out += body if isinstance(body, list) else []
            nxt = r.links.get("next", {}).get("url")
            if not nxt:
                break
            query = "?" + nxt.partition("?")[2]
            body, r = await self._get(cfg, client_id, token, name, query)
        return out

    async def identify(self, cfg: Config, client_id: str, token: str) -> Identity:
        """Who ``token`` belongs to, with what the module's rules look at."""
        doc, _ = await self._get(cfg, client_id, token, "user")
        who = cfg.provider.parse(doc)
        if not who.id:
            raise ProviderError(f"{cfg.provider.name} user: no user id in its answer")
        if cfg.provider.name != "code_host_a":
            return who
        emails, _ = await self._get(cfg, client_id, token, "emails")
        verified = [e for e in emails if isinstance(e, dict) and e.get("verified")] \
            if isinstance(emails, list) else []
        primary = [e for e in verified if e.get("primary")] or verified
        facts: list[str] = []
        if cfg.teams:
            for team in await self._listed(cfg, client_id, token, "teams"):
                org = team.get("organization") if isinstance(team, dict) else None
                if isinstance(org, dict):
                    facts += [f"team:{str(org.get('login', '')).lower()}/"
                              f"{str(team.get('slug', '')).lower()}", f"team:{team.get('id')}"]
        if cfg.organizations:
            facts += [f"org:{str(o.get('login', '')).lower()}"
                      for o in await self._listed(cfg, client_id, token, "organizations")
                      if isinstance(o, dict)]
        email = primary[0].get("email") if primary else None
        return replace(who, email=email if isinstance(email, str) else "", facts=tuple(facts))

    def due(self, hook: Gate, live: Live, now: float) -> bool:
        interval = self._cfg(hook).check_interval
        return bool(interval) and now - int(live.doc.get("checked_at") or 0) >= interval

    async def recheck(self, hook: Gate, x: Exchange, live: Live) -> Fixed | None:
        cfg = self._cfg(hook)
        app = self._app(cfg, login.site_host(x.req.headers))
        sessions = self.gate.sessions
        token = sessions.unseal(str(live.doc.get("token_sealed", "")))
        refresh = sessions.unseal(str(live.doc.get("refresh_sealed", "")))
        renewed: dict[str, Any] = {}
        try:
            if app is None or not token:
                raise Revoked("no token")
            try:
                who = await self.identify(cfg, app[0], token)
            except Revoked:
                if not refresh:
                    raise
                renewed = await self._exchange(cfg, app, {
                    "grant_type": "refresh_token", "refresh_token": refresh})
                if not isinstance(renewed.get("access_token"), str) \
                        or not renewed["access_token"]:
                    raise
                who = await self.identify(cfg, app[0], renewed["access_token"])
        except Revoked:
            await sessions.end(live.id)
            return await self.begin(hook, x)
        refusal = self.gate.allowed(who, cfg.rules(who))
        if refusal is not None:
            await sessions.end(live.id)
            return refusal
        # a provider that rotates refresh tokens answers a new one (the old is spent)
        rotated = renewed.get("refresh_token")
        await sessions.checked(live, time.time(), str(renewed.get("access_token") or ""),
                               rotated if isinstance(rotated, str) else "")
        return None


def _origin(url: str) -> str:
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{rest.split('/', 1)[0]}"
