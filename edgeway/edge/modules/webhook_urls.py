"""Webhook signature schemes that sign the URL the sender called (twilio, Mandrill, square,
hubspot), and the set-up challenges the edge answers for the sender (twitter's CRC, dropbox's
verification request). A check here is ``(secret, headers, body, now, method, url) -> bool``;
the body-only schemes of ``webhook_schemes`` are wrapped by ``body_only``."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable
from urllib.parse import parse_qsl, urlsplit

from edgeway.edge.h1 import header
from edgeway.edge.modules.webhook_schemes import Check, Headers, body_hmac, mac, same

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
    if "bodySHA256" in query and not same(query["bodySHA256"].encode(),
                                           hashlib.sha256(body).hexdigest().encode()):
        return False
    signed = url + b"".join(k + v for k, v in _form_params(headers, body))
    want = base64.b64encode(mac("sha1", secret, signed))
    return same(header(headers, b"x-twilio-signature").strip(), want)


def mandrill(secret: bytes, headers: Headers, body: bytes, _now: float, _method: bytes,
             url: bytes) -> bool:
    """Mailchimp Transactional (Mandrill): ``x-mandrill-signature``, base64 hmac-sha1(key,
    URL + the form's parameters sorted, each name then value)."""
    signed = url + b"".join(k + v for k, v in _form_params(headers, body))
    want = base64.b64encode(mac("sha1", secret, signed))
    return same(header(headers, b"x-mandrill-signature").strip(), want)


def square(secret: bytes, headers: Headers, body: bytes, _now: float, _method: bytes,
           url: bytes) -> bool:
    """``x-square-hmacsha256-signature``: base64 hmac-sha256(key, notification URL + body)."""
    want = base64.b64encode(mac("sha256", secret, url + body))
    return same(header(headers, b"x-square-hmacsha256-signature").strip(), want)


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
    want = base64.b64encode(mac("sha256", secret, method + url + body + stamp))
    return same(header(headers, b"x-hubspot-signature-v3").strip(), want)


def body_only(check: Check) -> UrlCheck:
    def url_check(secret: bytes, headers: Headers, body: bytes, now: float, _method: bytes,
                  _url: bytes) -> bool:
        return check(secret, headers, body, now)
    return url_check


URL_SCHEMES: dict[str, UrlCheck] = {
    "twilio": twilio,
    "mailchimp": mandrill,
    "square": square,
    "hubspot": hubspot,
    "twitter": body_only(body_hmac(b"x-twitter-webhooks-signature", "sha256", "b64",
                                    b"sha256=")),
    "dropbox": body_only(body_hmac(b"x-dropbox-signature", "sha256", "hex")),
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
    token = b"sha256=" + base64.b64encode(mac("sha256", secret, crc.encode()))
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
