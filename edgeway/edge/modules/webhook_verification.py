"""The webhook_verification module: a request reaches the upstream only with a valid signature
of its provider over the exact body received (the edge reads the body whole first, up to
``MAX_BODY``). Signatures with a timestamp must be within ``TOLERANCE`` seconds of now.

Providers are verified by one of a few schemes (an HMAC of the body, of a timestamped
message, a shared token, Svix's signed id); ``compile`` returns None for a provider not in
the table, whose routes are then refused rather than served unverified.
"""

from __future__ import annotations

import base64
import binascii
import hmac
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from edgeway.edge.modules.request_headers import header

MAX_BODY = 10 << 20
TOLERANCE = 180.0
Headers = list[tuple[bytes, bytes]]
Check = Callable[[bytes, Headers, bytes, float], bool]  # secret, headers, body, now


def _mac(algo: str, key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, algo).digest()


def _encode(digest: bytes, encoding: str) -> bytes:
    return digest.hex().encode() if encoding == "hex" else base64.b64encode(digest)


def _same(a: bytes, b: bytes) -> bool:
    return hmac.compare_digest(a, b)


def _fresh(timestamp: bytes, now: float, millis: bool = False) -> bool:
    try:
        seconds = int(timestamp) / (1000 if millis else 1)
    except ValueError:
        return False
    return abs(now - seconds) <= TOLERANCE


def _pairs(value: bytes, sep: bytes = b",", eq: bytes = b"=") -> list[tuple[bytes, bytes]]:
    out = []
    for part in value.split(sep):
        k, _, v = part.strip().partition(eq)
        out.append((k.strip(), v.strip()))
    return out


def body_hmac(name: bytes, algo: str, encoding: str, prefix: bytes = b"") -> Check:
    """``name: <prefix><hmac(secret, body)>``."""
    def check(secret: bytes, headers: Headers, body: bytes, _now: float) -> bool:
        want = prefix + _encode(_mac(algo, secret, body), encoding)
        return _same(header(headers, name).strip(), want)
    return check


def body_hmac_listed(name: bytes, version: bytes) -> Check:
    """``name: v1=<hex>,v1=<hex>`` (any listed signature of ``version`` may match; secrets
    rotate)."""
    def check(secret: bytes, headers: Headers, body: bytes, _now: float) -> bool:
        want = _mac("sha256", secret, body).hex().encode()
        return any(k == version and _same(v, want) for k, v in _pairs(header(headers, name)))
    return check


def token(name: bytes) -> Check:
    def check(secret: bytes, headers: Headers, _body: bytes, _now: float) -> bool:
        return _same(header(headers, name), secret)
    return check


def stamped_pairs(name: bytes, ts_key: bytes, sig_key: bytes) -> Check:
    """``name: t=<unix time>,v1=<hex hmac(secret, "<t>.<body>")>`` (Stripe's layout)."""
    def check(secret: bytes, headers: Headers, body: bytes, now: float) -> bool:
        pairs = _pairs(header(headers, name))
        stamp = next((v for k, v in pairs if k == ts_key), b"")
        if not _fresh(stamp, now):
            return False
        want = _mac("sha256", secret, stamp + b"." + body).hex().encode()
        return any(k == sig_key and _same(v, want) for k, v in pairs)
    return check


def slack(secret: bytes, headers: Headers, body: bytes, now: float) -> bool:
    stamp = header(headers, b"x-slack-request-timestamp")
    if not _fresh(stamp, now):
        return False
    want = b"v0=" + _mac("sha256", secret, b"v0:" + stamp + b":" + body).hex().encode()
    return _same(header(headers, b"x-slack-signature"), want)


def zendesk(secret: bytes, headers: Headers, body: bytes, _now: float) -> bool:
    stamp = header(headers, b"x-zendesk-webhook-signature-timestamp")
    want = base64.b64encode(_mac("sha256", secret, stamp + body))
    return bool(stamp) and _same(header(headers, b"x-zendesk-webhook-signature"), want)


def svix(secret: bytes, headers: Headers, body: bytes, now: float) -> bool:
    """Svix (and Clerk, which sends through it): ``svix-signature: v1,<base64> ...`` over
    ``<svix-id>.<svix-timestamp>.<body>``, keyed with the base64 secret after ``whsec_``."""
    stamp, msg_id = header(headers, b"svix-timestamp"), header(headers, b"svix-id")
    try:
        key = base64.b64decode(secret.removeprefix(b"whsec_"), validate=True)
    except (binascii.Error, ValueError):
        return False
    if not msg_id or not _fresh(stamp, now):
        return False
    want = base64.b64encode(_mac("sha256", key, msg_id + b"." + stamp + b"." + body))
    return any(k == b"v1" and _same(v, want)
               for k, v in _pairs(header(headers, b"svix-signature"), b" ", b","))


_META = body_hmac(b"x-hub-signature-256", "sha256", "hex", b"sha256=")
PROVIDERS: dict[str, Check] = {
    "github": _META,
    "facebook_graph_api": _META,
    "facebook_messenger": _META,
    "instagram": _META,
    "whatsapp": _META,
    "bitbucket": body_hmac(b"x-hub-signature", "sha256", "hex", b"sha256="),
    "intercom": body_hmac(b"x-hub-signature", "sha1", "hex", b"sha1="),
    "shopify": body_hmac(b"x-shopify-hmac-sha256", "sha256", "b64"),
    "sentry": body_hmac(b"sentry-hook-signature", "sha256", "hex"),
    "typeform": body_hmac(b"typeform-signature", "sha256", "b64", b"sha256="),
    "launch_darkly": body_hmac(b"x-ld-signature", "sha256", "hex"),
    "sonatype": body_hmac(b"x-nexus-webhook-signature", "sha1", "hex"),
    "aftership": body_hmac(b"aftership-hmac-sha256", "sha256", "b64"),
    "terraform": body_hmac(b"x-tfe-notification-signature", "sha512", "hex"),
    "pagerduty": body_hmac_listed(b"x-pagerduty-signature", b"v1"),
    "circleci": body_hmac_listed(b"circleci-signature", b"v1"),
    "gitlab": token(b"x-gitlab-token"),
    "stripe": stamped_pairs(b"stripe-signature", b"t", b"v1"),
    "mux": stamped_pairs(b"mux-signature", b"t", b"v1"),
    "calendly": stamped_pairs(b"calendly-webhook-signature", b"t", b"v1"),
    "buildkite": stamped_pairs(b"x-buildkite-signature", b"timestamp", b"signature"),
    "slack": slack,
    "zendesk": zendesk,
    "svix": svix,
    "clerk": svix,
}


@dataclass(frozen=True)
class Verifier:
    provider: str
    secret: bytes
    check: Check

    def verify(self, headers: Headers, body: bytes, now: float) -> bool:
        return self.check(self.secret, headers, body, now)


def compile(module: dict[str, Any]) -> Verifier | None:
    """The module's verifier; None when its provider is not one this edge verifies."""
    provider = str(module.get("provider", "")).lower()
    check = PROVIDERS.get(provider)
    if check is None:
        return None
    return Verifier(provider, str(module.get("secret", "")).encode(), check)
