"""The webhook_verification module: a request reaches the upstream only with a valid signature
of its provider over the exact body received (the edge reads the body whole first, up to
``MAX_BODY``).

Providers are verified by the schemes of ``webhook_schemes`` (the body and headers),
``webhook_urls`` (the URL the sender called, and the set-up challenges the edge answers) and
``sns`` (a certificate the sender serves). The API accepts exactly these providers
(``edgeway.catalog.modules.webhook``). ``compile`` returns None for any other (one stored
before it was refused, or an agent's bind), whose routes are then refused rather than
served unverified.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from edgeway.edge.modules.webhook_schemes import PROVIDERS, Headers
from edgeway.edge.modules.webhook_urls import (
    CHALLENGES,
    URL_SCHEMES,
    Answer,
    Challenge,
    UrlCheck,
    body_only,
)

MAX_BODY = 10 << 20
CERTIFIED = frozenset({"sns"})  # signed by a certificate the sender serves: edgeway.edge.sns
NAMES = frozenset(PROVIDERS) | frozenset(URL_SCHEMES) | CERTIFIED  # what the API accepts


@dataclass(frozen=True)
class Verifier:
    provider: str
    secret: bytes
    check: UrlCheck
    challenge: Challenge | None = None

    def verify(self, headers: Headers, body: bytes, now: float, method: bytes = b"POST",
               url: bytes = b"") -> bool:
        return self.check(self.secret, headers, body, now, method, url)

    def answer(self, method: bytes, target: bytes) -> Answer | None:
        """The edge's own answer to the sender's set-up challenge, if this is one."""
        return self.challenge(self.secret, method, target) if self.challenge else None


def compile(module: dict[str, Any]) -> Verifier | None:
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
