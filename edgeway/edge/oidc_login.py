"""End-user login at the edge (the oidc module): a request on a route with the module needs a
valid session cookie; without one it is redirected to the OpenID provider (authorization code
flow, with ``state`` and ``nonce``), whose answer comes back to ``oidc.CALLBACK`` on the same
host (HTTPS edges only: the redirect URI is ``https://<Host><CALLBACK>``), where the code is
exchanged, the ID token checked and the session cookie set.

The session cookie is signed with a key of this platform (``Sealer.mac``), names the issuer
and client it was made for, and ends after ``maximum_duration`` (and ``inactivity_timeout``
without a request, when set: each request older than a minute renews it). The user's id,
email and name go upstream in ``Edgeway-Auth-User-*`` headers, which clients cannot set.
Provider metadata (discovery and JWKS) is fetched once an hour per issuer.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from dataclasses import replace
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import structlog

from edgeway.edge import h1
from edgeway.edge.h1 import Request, header
from edgeway.edge.modules import oidc
from edgeway.edge.modules.oidc import BadToken, Config
from edgeway.edge.pages import Fixed, page

log = structlog.get_logger()
Headers = h1.Headers
METADATA_TTL = 3600.0
LOGIN_TTL = 600  # seconds from the redirect to the provider to the callback
RENEW_AFTER = 60  # seconds: a session older than this is renewed (inactivity timeout)
RETRY_AFTER = 5.0  # seconds before a provider that failed is asked again


class ProviderError(Exception):
    pass


def _cookies(headers: Headers) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, value in headers:
        if name.lower() == b"cookie":
            for part in value.decode("latin-1").split(";"):
                k, _, v = part.strip().partition("=")
                out.setdefault(k, v)
    return out


def _set_cookie(name: str, value: str, max_age: int | None = None) -> tuple[str, str]:
    age = f"; Max-Age={max_age}" if max_age is not None else ""
    return ("Set-Cookie", f"{name}={value}; Path=/; Secure; HttpOnly; SameSite=Lax{age}")


def _redirect(location: str, *cookies: tuple[str, str]) -> Fixed:
    return Fixed(302, (("Location", location), ("Cache-Control", "no-store"), *cookies), b"")


class OidcGate:
    def __init__(self, key: bytes) -> None:
        self.key = key
        self._metadata: dict[str, tuple[float, dict[str, Any], dict[str, Any]]] = {}
        self._failed: dict[str, tuple[float, str]] = {}  # issuer -> (when, why): retried later
        self._locks: dict[str, asyncio.Lock] = {}  # one fetch per issuer at a time
        self._http: httpx.AsyncClient | None = None

    async def close(self) -> None:
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    def _client(self) -> httpx.AsyncClient:
        if self._http is None:
            self._http = httpx.AsyncClient(timeout=10, follow_redirects=False)
        return self._http

    async def _provider(self, issuer: str, fresh: bool = False
                        ) -> tuple[dict[str, Any], dict[str, Any]]:
        """The provider's discovery document and JWKS (cached for an hour)."""
        async with self._locks.setdefault(issuer, asyncio.Lock()):
            cached = self._metadata.get(issuer)
            if cached is not None and not fresh and time.monotonic() - cached[0] < METADATA_TTL:
                return cached[1], cached[2]
            failed = self._failed.get(issuer)
            if failed is not None and time.monotonic() - failed[0] < RETRY_AFTER:
                raise ProviderError(failed[1])  # not every request waits on a dead provider
            try:
                meta, jwks = await self._fetch(issuer)
            except ProviderError as exc:
                self._failed[issuer] = (time.monotonic(), str(exc))
                raise
            self._failed.pop(issuer, None)
            self._metadata[issuer] = (time.monotonic(), meta, jwks)
            return meta, jwks

    async def _fetch(self, issuer: str) -> tuple[dict[str, Any], dict[str, Any]]:
        try:
            r = await self._client().get(f"{issuer}/.well-known/openid-configuration")
            r.raise_for_status()
            meta = r.json()
            if not isinstance(meta, dict) or meta.get("issuer", "").rstrip("/") != issuer:
                raise ProviderError(f"its discovery document names another issuer "
                                    f"({meta.get('issuer') if isinstance(meta, dict) else '?'})")
            r = await self._client().get(meta["jwks_uri"])
            r.raise_for_status()
            jwks = r.json()
        except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
            raise ProviderError(f"{type(exc).__name__}: {exc}") from None
        if not isinstance(jwks, dict):
            raise ProviderError("its JWKS is not a JSON object")
        return meta, jwks

    async def check(self, cfg: Config, req: Request
                    ) -> Fixed | tuple[Request, tuple[tuple[str, str], ...]]:
        """The answer the edge gives itself (a redirect to log in, the callback's outcome, a
        logout), or the request to forward (with the user's identity) and headers to add to
        its response."""
        path = req.target.decode("latin-1").split("?", 1)[0]
        host = header(req.headers, b"host").decode("latin-1")
        headers = [(k, v) for k, v in req.headers if k.lower() not in oidc.IDENTITY]
        try:
            if path == oidc.CALLBACK:
                return await self._callback(cfg, req, host)
            if path == oidc.LOGOUT:
                return Fixed(200, (("Content-Type", "text/plain; charset=utf-8"),
                                   _set_cookie(cfg.cookie, "", 0)), b"Signed out.\n")
            if cfg.options_passthrough and req.method == b"OPTIONS":
                return replace(req, headers=headers), ()
            now = time.time()
            session = self._session(cfg, req.headers, now)
            if session is None:
                return await self._begin(cfg, req, host)
        except ProviderError as exc:
            log.warning("oidc_provider_error", issuer=cfg.issuer, error=str(exc))
            return page(502, "Login unavailable", f"The identity provider {cfg.issuer} could "
                        "not be reached or answered wrongly.", 4014)
        identity = [(name, str(session.get(key, "")).encode("utf-8", "replace"))
                    for name, key in zip(oidc.IDENTITY, ("sub", "email", "name"), strict=True)]
        renew: tuple[tuple[str, str], ...] = ()
        if cfg.inactivity and now - session["seen"] > RENEW_AFTER:
            session["seen"] = int(now)
            renew = (_set_cookie(cfg.cookie, oidc.sign(self.key, session)),)
        return replace(req, headers=headers + identity), renew

    def _session(self, cfg: Config, headers: Headers, now: float) -> dict[str, Any] | None:
        value = _cookies(headers).get(cfg.cookie)
        session = oidc.unsign(self.key, value) if value else None
        if session is None or session.get("iss") != cfg.issuer \
                or session.get("aud") != cfg.client_id:
            return None
        if now - session.get("auth", 0) > cfg.maximum:
            return None
        if cfg.inactivity and now - session.get("seen", 0) > cfg.inactivity:
            return None
        return session

    async def _begin(self, cfg: Config, req: Request, host: str) -> Fixed:
        meta, _ = await self._provider(cfg.issuer)
        browser, nonce = secrets.token_urlsafe(16), secrets.token_urlsafe(16)
        state = oidc.sign(self.key, {"b": browser, "n": nonce, "x": int(time.time()) + LOGIN_TTL,
                                     "r": req.target.decode("latin-1")})
        query = urlencode({"response_type": "code", "client_id": cfg.client_id,
                           "redirect_uri": f"https://{host}{oidc.CALLBACK}",
                           "scope": " ".join(cfg.scopes), "state": state, "nonce": nonce})
        endpoint = str(meta.get("authorization_endpoint", ""))
        if not endpoint.startswith(("https://", "http://")):
            raise ProviderError("its discovery document has no authorization_endpoint")
        sep = "&" if "?" in endpoint else "?"
        return _redirect(endpoint + sep + query, _set_cookie(cfg.state_cookie, browser, LOGIN_TTL))

    async def _callback(self, cfg: Config, req: Request, host: str) -> Fixed:
        query = parse_qs(urlsplit(req.target.decode("latin-1")).query)

        def one(name: str) -> str:
            return (query.get(name) or [""])[0]

        state = oidc.unsign(self.key, one("state"))
        browser = _cookies(req.headers).get(cfg.state_cookie)
        if state is None or state.get("x", 0) < time.time() or state.get("b") != browser:
            return page(400, "Login failed", "The login answer does not belong to a login "
                        "started in this browser, or came too late; start again.", 4015)
        if one("error"):
            return page(403, "Login refused", f"The identity provider answered "
                        f"{one('error')}: {one('error_description')}", 4015)
        meta, jwks = await self._provider(cfg.issuer)
        try:
            r = await self._client().post(
                str(meta["token_endpoint"]), auth=(cfg.client_id, cfg.client_secret),
                data={"grant_type": "authorization_code", "code": one("code"),
                      "redirect_uri": f"https://{host}{oidc.CALLBACK}"})
            tokens = r.json() if r.status_code == 200 else {}
        except (httpx.HTTPError, ValueError, KeyError) as exc:
            raise ProviderError(f"token request: {exc}") from None
        id_token = tokens.get("id_token") if isinstance(tokens, dict) else None
        if not isinstance(id_token, str):
            return page(403, "Login failed", "The identity provider did not exchange the "
                        f"code for an ID token (HTTP {r.status_code}).", 4015)
        try:
            try:
                claims = oidc.verify_id_token(id_token, jwks, cfg, state["n"], time.time())
            except BadToken:  # the provider may have rotated its keys since
                _, jwks = await self._provider(cfg.issuer, fresh=True)
                claims = oidc.verify_id_token(id_token, jwks, cfg, state["n"], time.time())
        except BadToken as exc:
            return page(403, "Login failed", str(exc), 4015)
        if not cfg.admits(str(claims.get("email", ""))):
            return page(403, "Not allowed", f"{claims.get('email') or claims['sub']} may not "
                        "use this site.", 4015)
        now = int(time.time())
        session = {"sub": claims["sub"], "email": claims.get("email", ""),
                   "name": claims.get("name", ""), "iss": cfg.issuer, "aud": cfg.client_id,
                   "auth": now, "seen": now}
        target = str(state.get("r") or "/")
        if not target.startswith("/") or target.startswith("//"):
            target = "/"
        return _redirect(target, _set_cookie(cfg.cookie, oidc.sign(self.key, session)),
                         _set_cookie(cfg.state_cookie, "", 0))

