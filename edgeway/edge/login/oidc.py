"""The OIDC login flow (the ``oidc`` module): a request without a session is redirected to the
OpenID provider's authorization endpoint (discovered from ``issuer``; authorization code flow
with ``state`` bound to the browser by a cookie, and ``nonce``), whose answer comes back to
``oidc.CALLBACK`` on the same host (the redirect URI is ``https://<Host><CALLBACK>``), where
the code is exchanged (client_secret_basic), the ID token checked and the session opened.
Provider metadata (discovery and JWKS) is fetched once an hour per issuer; a provider that
failed is asked again after a few seconds, not by every request.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx

from edgeway.edge.hooks import Exchange
from edgeway.edge.login import base as login
from edgeway.edge.login.base import Answer, Gate, ProviderError
from edgeway.edge.login.code_flow import CodeFlow, to_provider
from edgeway.edge.login.flow import Services
from edgeway.edge.login.providers import openid_identity
from edgeway.edge.modules import oidc
from edgeway.edge.modules.oidc import BadToken, Config
from edgeway.edge.pages import Fixed

METADATA_TTL = 3600.0
RETRY_AFTER = 5.0  # seconds before a provider that failed is asked again


class OidcFlow(CodeFlow):
    kind, callback = "oidc", oidc.CALLBACK

    def __init__(self, gate: Services) -> None:
        super().__init__(gate)
        self._metadata: dict[str, tuple[float, dict[str, Any], dict[str, Any]]] = {}
        self._failed: dict[str, tuple[float, str]] = {}  # issuer -> (when, why)
        self._locks: dict[str, asyncio.Lock] = {}  # one fetch per issuer at a time

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
        http = self.gate.http()
        try:
            r = await http.get(f"{issuer}/.well-known/openid-configuration")
            r.raise_for_status()
            meta = r.json()
            if not isinstance(meta, dict) or str(meta.get("issuer") or "").rstrip("/") != issuer:
                raise ProviderError(f"{issuer}: its discovery document names another issuer "
                                    f"({meta.get('issuer') if isinstance(meta, dict) else '?'})")
            r = await http.get(meta["jwks_uri"])
            r.raise_for_status()
            jwks = r.json()
        except (httpx.HTTPError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ProviderError(f"{issuer}: {type(exc).__name__}: {exc}") from None
        if not isinstance(jwks, dict):
            raise ProviderError(f"{issuer}: its JWKS is not a JSON object")
        return meta, jwks

    @staticmethod
    def _cfg(hook: Gate) -> Config:
        assert isinstance(hook, oidc.Login)
        return hook.config

    async def begin(self, hook: Gate, x: Exchange) -> Fixed:
        cfg = self._cfg(hook)
        meta, _ = await self._provider(cfg.issuer)
        host = login.site_host(x.req.headers)
        endpoint = str(meta.get("authorization_endpoint", ""))
        if not endpoint.startswith(("https://", "http://")):
            raise ProviderError(f"{cfg.issuer}: its discovery document has no "
                                "authorization_endpoint")
        return to_provider(self.gate.key, cfg.common, x, endpoint, lambda _b, nonce: {
            "response_type": "code", "client_id": cfg.client_id,
            "redirect_uri": f"https://{host}{oidc.CALLBACK}", "scope": " ".join(cfg.scopes),
            "nonce": nonce})

    async def answered(self, hook: Gate, x: Exchange, answer: Answer) -> Fixed:
        cfg = self._cfg(hook)
        one, state = answer.one, answer.state
        host = login.site_host(x.req.headers)
        claims = await self._claims(cfg, one("code"), f"https://{host}{oidc.CALLBACK}",
                                    str(state.get("n", "")))
        if isinstance(claims, Fixed):
            return claims
        who = openid_identity(claims)  # (an e-mail the provider did not verify is none)
        c = cfg.common
        refusal = self.gate.allowed(who, [("allow_emails/allow_domains",
                                           c.email_allowed(who.email))] if c.email_rules
                                    else [])
        if refusal is not None:
            return refusal
        return await self.gate.establish(hook, x, who, ("oidc", cfg.issuer),
                                         login.local_target(state.get("r")))

    async def _claims(self, cfg: Config, code: str, redirect_uri: str, nonce: str
                      ) -> dict[str, Any] | Fixed:
        """The code exchanged for a checked ID token's claims (or the refusal)."""
        meta, jwks = await self._provider(cfg.issuer)
        try:
            r = await self.gate.http().post(
                str(meta["token_endpoint"]), auth=(cfg.client_id, cfg.client_secret),
                data={"grant_type": "authorization_code", "code": code,
                      "redirect_uri": redirect_uri})
            tokens = r.json() if r.status_code == 200 else {}
        except (httpx.HTTPError, ValueError, KeyError) as exc:
            raise ProviderError(f"{cfg.issuer}: token request: {exc}") from None
        id_token = tokens.get("id_token") if isinstance(tokens, dict) else None
        if not isinstance(id_token, str):
            return login.refused("Login failed", "The identity provider did not exchange the "
                                 f"code for an ID token (HTTP {r.status_code}).")
        try:
            try:
                return oidc.verify_id_token(id_token, jwks, cfg, nonce, time.time())
            except BadToken:  # the provider may have rotated its keys since
                _, jwks = await self._provider(cfg.issuer, fresh=True)
                return oidc.verify_id_token(id_token, jwks, cfg, nonce, time.time())
        except BadToken as exc:
            return login.refused("Login failed", str(exc))
