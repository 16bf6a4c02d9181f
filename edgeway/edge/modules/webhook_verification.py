"""The webhook_verification module: a request reaches the upstream only with a valid signature
of its provider over the exact body received (the edge reads the body whole first, up to
``MAX_BODY``).

Providers are verified by the schemes of ``webhook_schemes`` (the body and headers),
``webhook_urls`` (the URL the sender called, and the set-up challenges the edge answers) and
``sns`` (a certificate the sender serves). The API accepts exactly these providers
(``edgeway.catalog.modules.webhook``). Any other (one stored before it was refused, or an
agent's bind) compiles to an ``Unenforced`` hook: its routes are refused rather than served
unverified.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import structlog

from edgeway.edge import h1
from edgeway.edge.h1 import header
from edgeway.edge.hooks import Compiling, Exchange, Hook, Unenforced, Verdict
from edgeway.edge.modules.policy_values import Unsupported, result
from edgeway.edge.modules.webhook_schemes import PROVIDERS, Headers
from edgeway.edge.modules.webhook_urls import (
    CHALLENGES,
    URL_SCHEMES,
    Answer,
    Challenge,
    UrlCheck,
    body_only,
)
from edgeway.edge.pages import Fixed, page

log = structlog.get_logger()
MAX_BODY = 10 << 20
CERTIFIED = frozenset({"sns"})  # signed by a certificate the sender serves: edgeway.edge.sns
NAMES = frozenset(PROVIDERS) | frozenset(URL_SCHEMES) | CERTIFIED  # what the API accepts


@dataclass(frozen=True)
class Verifier(Hook):
    name = "webhook_verification"
    provider: str
    secret: bytes
    signed: UrlCheck  # the provider's scheme: (secret, headers, body, now, method, url)
    challenge: Challenge | None = None

    def verify(self, headers: Headers, body: bytes, now: float, method: bytes = b"POST",
               url: bytes = b"") -> bool:
        return self.signed(self.secret, headers, body, now, method, url)

    def answer(self, method: bytes, target: bytes) -> Answer | None:
        """The edge's own answer to the sender's set-up challenge, if this is one."""
        return self.challenge(self.secret, method, target) if self.challenge else None

    async def request(self, x: Exchange) -> Verdict:
        """Answer the sender's set-up challenge, or read the body whole (``x.body``) and
        refuse it unless its signature is valid."""
        verdict = await self.checked(x)
        if verdict is False:
            return self.refusal()
        return verdict if isinstance(verdict, Fixed) else None

    def refusal(self) -> Fixed:
        return page(403, "Forbidden", f"The request does not carry a valid {self.provider} "
                    "webhook signature.", 3204)

    async def checked(self, x: Exchange) -> Fixed | bool:
        """The edge's own answer (the sender's set-up challenge, a body over ``MAX_BODY``), or
        whether the body, read whole into ``x.body``, carries a valid signature."""
        req = x.req
        challenged = self.answer(req.method, req.target)
        if challenged is not None:
            return Fixed(*challenged)
        length = header(req.headers, b"content-length")
        too_long = length.isdigit() and int(length) > MAX_BODY  # known before reading
        if x.body is None:
            if req.body and not too_long and not req.http10 \
                    and header(req.headers, b"expect").lower() == b"100-continue":
                x.interim(b"HTTP/1.1 100 Continue\r\n\r\n")
            x.body = None if too_long else await x.read_body(MAX_BODY)
            if x.body is None:
                return page(413, "Payload too large", "Webhook bodies are verified whole, up "
                            f"to {MAX_BODY} bytes.", 4013, (("Connection", "close"),))
            x.req = h1.with_length(req, len(x.body))
        body = x.body
        url = b"%b://%b%b" % (x.scheme.encode(), header(req.headers, b"host"), req.target)
        return await x.services.sns.verify(body) if self.provider == "sns" else \
            self.verify(req.headers, body, time.time(), req.method, url)


@dataclass(frozen=True)
class PolicyVerifier(Hook):
    """The traffic policy's ``verify-webhook`` action (``provider``, ``secret``,
    ``enforce``): as the module, and ``actions.ngrok.verify_webhook.verified`` for the later
    rules; with ``enforce: false`` an unverified request goes on (only logged)."""
    name = "verify-webhook"
    verifier: Verifier
    enforce: bool

    async def request(self, x: Exchange) -> Verdict:
        verdict = await self.verifier.checked(x)
        if isinstance(verdict, Fixed):
            return verdict
        if x.env is not None:
            result(x.env, "verify_webhook", {"verified": verdict})
        if verdict or not self.enforce:
            if not verdict:
                log.info("verify_webhook_not_enforced", provider=self.verifier.provider)
            return None
        return self.verifier.refusal()


def policy_action(cfg: dict[str, Any]) -> PolicyVerifier:
    """The action of a policy's ``verify-webhook`` configuration; ``Unsupported`` naming
    what it cannot honour."""
    enforce = cfg.get("enforce", True)
    if not isinstance(enforce, bool):
        raise Unsupported(f"enforce {enforce!r} (true or false)")
    if not cfg.get("secret") and str(cfg.get("provider", "")).lower() not in CERTIFIED:
        raise Unsupported("verify-webhook needs the provider's secret")
    found = verifier(cfg)
    if found is None:
        raise Unsupported(f"provider {cfg.get('provider')!r}; this edge verifies "
                          + ", ".join(sorted(NAMES)))
    return PolicyVerifier(found, enforce)


def compile(module: dict[str, Any], ctx: Compiling) -> Verifier | Unenforced:
    """The module's verifier; ``Unenforced`` when its provider is not one this edge
    verifies."""
    return verifier(module) or Unenforced(
        f"webhook_verification (provider '{module.get('provider')}')")


def verifier(module: dict[str, Any]) -> Verifier | None:
    """The module's verifier; None when its provider is not one this edge verifies."""
    provider = str(module.get("provider", "")).lower()
    if provider in CERTIFIED:  # (the edge checks these itself, with the sender's certificate)
        return Verifier(provider, b"", body_only(lambda *_: False))
    body_check = PROVIDERS.get(provider)
    check = body_only(body_check) if body_check is not None else URL_SCHEMES.get(provider)
    if check is None:
        return None
    return Verifier(provider, str(module.get("secret", "")).encode(), check,
                    CHALLENGES.get(provider))
