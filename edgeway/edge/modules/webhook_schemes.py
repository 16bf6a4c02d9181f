"""Webhook signature schemes that sign the body (and headers), by provider: an HMAC of the
body, of a timestamped message, a shared token, Svix's signed id and Standard Webhooks, Box's
timestamped pair, Mailgun's signature in the body, SendGrid's ECDSA signature. Each check is
``(secret, headers, body, now) -> bool``; timestamps must be within ``TOLERANCE`` seconds."""

from __future__ import annotations

import base64
import binascii
import hmac
import json
from collections.abc import Callable
from datetime import datetime

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from edgeway.edge.h1 import header

TOLERANCE = 180.0
Headers = list[tuple[bytes, bytes]]
Check = Callable[[bytes, Headers, bytes, float], bool]  # secret, headers, body, now


def mac(algo: str, key: bytes, message: bytes) -> bytes:
    return hmac.new(key, message, algo).digest()


def _encode(digest: bytes, encoding: str) -> bytes:
    return digest.hex().encode() if encoding == "hex" else base64.b64encode(digest)


def same(a: bytes, b: bytes) -> bool:
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
        want = prefix + _encode(mac(algo, secret, body), encoding)
        return same(header(headers, name).strip(), want)
    return check


def body_hmac_listed(name: bytes, version: bytes) -> Check:
    """``name: v1=<hex>,v1=<hex>`` (any listed signature of ``version`` may match; secrets
    rotate)."""
    def check(secret: bytes, headers: Headers, body: bytes, _now: float) -> bool:
        want = mac("sha256", secret, body).hex().encode()
        return any(k == version and same(v, want) for k, v in _pairs(header(headers, name)))
    return check


def token(name: bytes) -> Check:
    def check(secret: bytes, headers: Headers, _body: bytes, _now: float) -> bool:
        return same(header(headers, name), secret)
    return check


def stamped_pairs(name: bytes, ts_key: bytes, sig_key: bytes) -> Check:
    """``name: t=<unix time>,v1=<hex hmac(secret, "<t>.<body>")>`` (Stripe's layout)."""
    def check(secret: bytes, headers: Headers, body: bytes, now: float) -> bool:
        pairs = _pairs(header(headers, name))
        stamp = next((v for k, v in pairs if k == ts_key), b"")
        if not _fresh(stamp, now):
            return False
        want = mac("sha256", secret, stamp + b"." + body).hex().encode()
        return any(k == sig_key and same(v, want) for k, v in pairs)
    return check


def slack(secret: bytes, headers: Headers, body: bytes, now: float) -> bool:
    stamp = header(headers, b"x-slack-request-timestamp")
    if not _fresh(stamp, now):
        return False
    want = b"v0=" + mac("sha256", secret, b"v0:" + stamp + b":" + body).hex().encode()
    return same(header(headers, b"x-slack-signature"), want)


def zendesk(secret: bytes, headers: Headers, body: bytes, _now: float) -> bool:
    stamp = header(headers, b"x-zendesk-webhook-signature-timestamp")
    want = base64.b64encode(mac("sha256", secret, stamp + body))
    return bool(stamp) and same(header(headers, b"x-zendesk-webhook-signature"), want)


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
    want = base64.b64encode(mac("sha256", key, msg_id + b"." + stamp + b"." + body))
    return any(k == b"v1" and same(v, want)
               for k, v in _pairs(header(headers, b"svix-signature"), b" ", b","))


def prefixed_stamp(sig_name: bytes, ts_name: bytes, version: bytes) -> Check:
    """``sig_name: <version>=<hex hmac(secret, "<version>:<ts>:<body>")>`` with the Unix
    time in ``ts_name`` (Zoom, Frame.io, Orb)."""
    def check(secret: bytes, headers: Headers, body: bytes, now: float) -> bool:
        stamp = header(headers, ts_name)
        if not _fresh(stamp, now):
            return False
        want = version + b"=" + mac("sha256", secret, version + b":" + stamp + b":" + body
                                     ).hex().encode()
        return same(header(headers, sig_name).strip(), want)
    return check


def box(secret: bytes, headers: Headers, body: bytes, now: float) -> bool:
    """``box-signature-primary`` (or ``-secondary``, for a rotated key): base64 of
    hmac(secret, body + box-delivery-timestamp), an RFC 3339 time within 10 minutes."""
    stamp = header(headers, b"box-delivery-timestamp")
    try:
        sent = datetime.fromisoformat(stamp.decode().replace("Z", "+00:00")).timestamp()
    except ValueError:
        return False
    if abs(now - sent) > 600:
        return False
    want = base64.b64encode(mac("sha256", secret, body + stamp))
    return any(same(header(headers, name), want)
               for name in (b"box-signature-primary", b"box-signature-secondary"))


def tiktok(secret: bytes, headers: Headers, body: bytes, now: float) -> bool:
    """``tiktok-signature: t=<unix time>,s=<hex hmac(secret, "<t>.<body>")>``."""
    pairs = _pairs(header(headers, b"tiktok-signature"))
    stamp = next((v for k, v in pairs if k == b"t"), b"")
    if not _fresh(stamp, now):
        return False
    want = mac("sha256", secret, stamp + b"." + body).hex().encode()
    return any(k == b"s" and same(v, want) for k, v in pairs)


def teams(secret: bytes, headers: Headers, body: bytes, _now: float) -> bool:
    """Microsoft Teams outgoing webhooks: ``authorization: HMAC <base64 hmac(key, body)>``
    keyed with the base64-decoded security token."""
    try:
        key = base64.b64decode(secret, validate=True)
    except (binascii.Error, ValueError):
        return False
    want = b"HMAC " + base64.b64encode(mac("sha256", key, body))
    return same(header(headers, b"authorization").strip(), want)


def mailgun(secret: bytes, _headers: Headers, body: bytes, now: float) -> bool:
    """Mailgun's JSON webhooks sign in the body: ``signature: {timestamp, token,
    signature}``, the hex hmac(signing key, timestamp + token)."""
    try:
        sig = json.loads(body)["signature"]
        stamp, tok, got = (str(sig[k]).encode() for k in ("timestamp", "token", "signature"))
    except (ValueError, KeyError, TypeError):
        return False
    return _fresh(stamp, now) and same(got, mac("sha256", secret, stamp + tok).hex().encode())


def sendgrid(secret: bytes, headers: Headers, body: bytes, now: float) -> bool:
    """SendGrid's signed event webhook: an ECDSA (P-256, SHA-256) signature, base64 DER, over
    the timestamp header and the body; the secret is the verification key SendGrid shows
    (base64 DER, or PEM)."""
    stamp = header(headers, b"x-twilio-email-event-webhook-timestamp")
    if not _fresh(stamp, now):
        return False
    try:
        text = secret.decode().strip()
        key = (serialization.load_pem_public_key(text.encode()) if "-----BEGIN" in text
               else serialization.load_der_public_key(base64.b64decode(text)))
        signature = base64.b64decode(header(headers, b"x-twilio-email-event-webhook-signature"),
                                     validate=True)
        if not isinstance(key, ec.EllipticCurvePublicKey):
            return False
        key.verify(signature, stamp + body, ec.ECDSA(hashes.SHA256()))
    except (ValueError, binascii.Error, InvalidSignature, UnicodeDecodeError):
        return False
    return True


def standard(secret: bytes, headers: Headers, body: bytes, now: float) -> bool:
    """Standard Webhooks (Brex): ``webhook-signature: v1,<base64>`` over
    ``<webhook-id>.<webhook-timestamp>.<body>``, keyed with the base64 secret (``whsec_``
    prefix optional)."""
    renamed = [(k.lower().replace(b"webhook-", b"svix-"), v) for k, v in headers
               if k.lower().startswith(b"webhook-")]
    return svix(secret, renamed, body, now)


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
    "brex": standard,
    "xero": body_hmac(b"x-xero-signature", "sha256", "b64"),
    "heroku": body_hmac(b"heroku-webhook-hmac-sha256", "sha256", "b64"),
    "mongodb": body_hmac(b"x-mms-signature", "sha1", "b64"),
    "docusign": body_hmac(b"x-docusign-signature-1", "sha256", "b64"),
    "webex": body_hmac(b"x-spark-signature", "sha1", "hex"),
    "alchemy": body_hmac(b"x-alchemy-signature", "sha256", "hex"),
    "chargify": body_hmac(b"x-chargify-webhook-signature-hmac-sha-256", "sha256", "hex"),
    "coinbase": body_hmac(b"x-cc-webhook-signature", "sha256", "hex"),
    "modern_treasury": body_hmac(b"x-signature", "sha256", "hex"),
    "pusher": body_hmac(b"x-pusher-signature", "sha256", "hex"),
    "clearbit": body_hmac(b"x-request-signature", "sha1", "hex", b"sha1="),
    "castle": body_hmac(b"x-castle-signature", "sha256", "b64"),
    "bolt": body_hmac(b"x-bolt-hmac-sha256", "sha256", "b64"),
    "worldline": body_hmac(b"x-gcs-signature", "sha256", "b64"),
    "autodesk": body_hmac(b"x-adsk-signature", "sha1", "hex", b"sha1hash="),
    "zoom": prefixed_stamp(b"x-zm-signature", b"x-zm-request-timestamp", b"v0"),
    "frameio": prefixed_stamp(b"x-frameio-signature", b"x-frameio-request-timestamp", b"v0"),
    "orb": prefixed_stamp(b"x-orb-signature", b"x-orb-timestamp", b"v1"),
    "box": box,
    "tiktok": tiktok,
    "microsoft_teams": teams,
    "mailgun": mailgun,
    "sendgrid": sendgrid,
}
