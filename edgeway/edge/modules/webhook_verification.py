"""The webhook_verification module: a request reaches the upstream only with a valid signature
of its provider over the exact body received (the edge reads the body whole first, up to
``MAX_BODY``). Signatures with a timestamp must be within ``TOLERANCE`` seconds of now.

Providers are verified by one of a few schemes (an HMAC of the body, of a timestamped
message, a shared token, Svix's signed id, SendGrid's ECDSA signature); the API accepts only
the providers of this table (``edgeway.catalog.modules.webhook``). ``compile`` returns None
for a provider not in it (one stored before it was refused, or an agent's bind), whose
routes are then refused rather than served unverified.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

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


def prefixed_stamp(sig_name: bytes, ts_name: bytes, version: bytes) -> Check:
    """``sig_name: <version>=<hex hmac(secret, "<version>:<ts>:<body>")>`` with the Unix
    time in ``ts_name`` (Zoom, Frame.io, Orb)."""
    def check(secret: bytes, headers: Headers, body: bytes, now: float) -> bool:
        stamp = header(headers, ts_name)
        if not _fresh(stamp, now):
            return False
        want = version + b"=" + _mac("sha256", secret, version + b":" + stamp + b":" + body
                                     ).hex().encode()
        return _same(header(headers, sig_name).strip(), want)
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
    want = base64.b64encode(_mac("sha256", secret, body + stamp))
    return any(_same(header(headers, name), want)
               for name in (b"box-signature-primary", b"box-signature-secondary"))


def tiktok(secret: bytes, headers: Headers, body: bytes, now: float) -> bool:
    """``tiktok-signature: t=<unix time>,s=<hex hmac(secret, "<t>.<body>")>``."""
    pairs = _pairs(header(headers, b"tiktok-signature"))
    stamp = next((v for k, v in pairs if k == b"t"), b"")
    if not _fresh(stamp, now):
        return False
    want = _mac("sha256", secret, stamp + b"." + body).hex().encode()
    return any(k == b"s" and _same(v, want) for k, v in pairs)


def teams(secret: bytes, headers: Headers, body: bytes, _now: float) -> bool:
    """Microsoft Teams outgoing webhooks: ``authorization: HMAC <base64 hmac(key, body)>``
    keyed with the base64-decoded security token."""
    try:
        key = base64.b64decode(secret, validate=True)
    except (binascii.Error, ValueError):
        return False
    want = b"HMAC " + base64.b64encode(_mac("sha256", key, body))
    return _same(header(headers, b"authorization").strip(), want)


def mailgun(secret: bytes, _headers: Headers, body: bytes, now: float) -> bool:
    """Mailgun's JSON webhooks sign in the body: ``signature: {timestamp, token,
    signature}``, the hex hmac(signing key, timestamp + token)."""
    try:
        sig = json.loads(body)["signature"]
        stamp, tok, got = (str(sig[k]).encode() for k in ("timestamp", "token", "signature"))
    except (ValueError, KeyError, TypeError):
        return False
    return _fresh(stamp, now) and _same(got, _mac("sha256", secret, stamp + tok).hex().encode())


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


# -- schemes that sign the URL the sender called (``url``: scheme://host[:port]/path?query) -----

UrlCheck = Callable[[bytes, Headers, bytes, float, bytes, bytes], bool]  # + method, url


def _form_params(headers: Headers, body: bytes) -> list[tuple[bytes, bytes]]:
    if not header(headers, b"content-type").lower().startswith(
            b"application/x-www-form-urlencoded"):
        return []
    return sorted((k.encode(), v.encode()) for k, v in parse_qsl(
        body.decode("utf-8", "replace"), keep_blank_values=True))


def twilio(secret: bytes, headers: Headers, body: bytes, _now: float, _method: bytes,
           url: bytes) -> bool:
    """``x-twilio-signature``: base64 hmac-sha1(auth token, URL + the form's parameters
    sorted, each name then value); a JSON body is covered by the URL's ``bodySHA256``."""
    query = dict(parse_qsl(urlsplit(url).query.decode("latin-1")))
    if "bodySHA256" in query and not _same(query["bodySHA256"].encode(),
                                           hashlib.sha256(body).hexdigest().encode()):
        return False
    signed = url + b"".join(k + v for k, v in _form_params(headers, body))
    want = base64.b64encode(_mac("sha1", secret, signed))
    return _same(header(headers, b"x-twilio-signature").strip(), want)


def mandrill(secret: bytes, headers: Headers, body: bytes, _now: float, _method: bytes,
             url: bytes) -> bool:
    """Mailchimp Transactional (Mandrill): ``x-mandrill-signature``, base64 hmac-sha1(key,
    URL + the form's parameters sorted, each name then value)."""
    signed = url + b"".join(k + v for k, v in _form_params(headers, body))
    want = base64.b64encode(_mac("sha1", secret, signed))
    return _same(header(headers, b"x-mandrill-signature").strip(), want)


def square(secret: bytes, headers: Headers, body: bytes, _now: float, _method: bytes,
           url: bytes) -> bool:
    """``x-square-hmacsha256-signature``: base64 hmac-sha256(key, notification URL + body)."""
    want = base64.b64encode(_mac("sha256", secret, url + body))
    return _same(header(headers, b"x-square-hmacsha256-signature").strip(), want)


def hubspot(secret: bytes, headers: Headers, body: bytes, now: float, method: bytes,
            url: bytes) -> bool:
    """HubSpot v3: ``x-hubspot-signature-v3``, base64 hmac-sha256(client secret, method +
    URL + body + ``x-hubspot-request-timestamp``), a time in milliseconds within 5 minutes."""
    stamp = header(headers, b"x-hubspot-request-timestamp")
    try:
        if abs(now - int(stamp) / 1000) > 300:
            return False
    except ValueError:
        return False
    want = base64.b64encode(_mac("sha256", secret, method + url + body + stamp))
    return _same(header(headers, b"x-hubspot-signature-v3").strip(), want)


def _body_only(check: Check) -> UrlCheck:
    def url_check(secret: bytes, headers: Headers, body: bytes, now: float, _method: bytes,
                  _url: bytes) -> bool:
        return check(secret, headers, body, now)
    return url_check


URL_SCHEMES: dict[str, UrlCheck] = {
    "twilio": twilio,
    "mailchimp": mandrill,
    "square": square,
    "hubspot": hubspot,
    "twitter": _body_only(body_hmac(b"x-twitter-webhooks-signature", "sha256", "b64",
                                    b"sha256=")),
    "dropbox": _body_only(body_hmac(b"x-dropbox-signature", "sha256", "hex")),
}


# -- challenges the edge answers for the sender (unsigned GETs that set a webhook up) -------

Answer = tuple[int, tuple[tuple[str, str], ...], bytes]  # status, headers, body
Challenge = Callable[[bytes, bytes, bytes], Answer | None]  # secret, method, target


def _query(target: bytes) -> dict[str, str]:
    return dict(parse_qsl(urlsplit(target).query.decode("latin-1")))


def twitter_crc(secret: bytes, method: bytes, target: bytes) -> Answer | None:
    """Twitter's CRC: ``GET ?crc_token=T`` is answered with
    ``{"response_token": "sha256=<base64 hmac-sha256(consumer secret, T)>"}``."""
    crc = _query(target).get("crc_token")
    if method != b"GET" or crc is None:
        return None
    token = b"sha256=" + base64.b64encode(_mac("sha256", secret, crc.encode()))
    return 200, (("Content-Type", "application/json"),), json.dumps(
        {"response_token": token.decode()}).encode()


def dropbox_challenge(_secret: bytes, method: bytes, target: bytes) -> Answer | None:
    """Dropbox's verification request: ``GET ?challenge=C`` is answered with C."""
    challenge = _query(target).get("challenge")
    if method != b"GET" or challenge is None:
        return None
    return 200, (("Content-Type", "text/plain"), ("X-Content-Type-Options", "nosniff")), \
        challenge.encode()


CHALLENGES: dict[str, Challenge] = {"twitter": twitter_crc, "dropbox": dropbox_challenge}
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
        return Verifier(provider, b"", _body_only(lambda *_: False))
    body_check = PROVIDERS.get(provider)
    check = _body_only(body_check) if body_check is not None else URL_SCHEMES.get(provider)
    if check is None:
        return None
    return Verifier(provider, str(module.get("secret", "")).encode(), check,
                    CHALLENGES.get(provider))
