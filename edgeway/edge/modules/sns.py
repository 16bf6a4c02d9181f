"""Amazon SNS message signatures (webhook_verification provider ``sns``).

SNS signs each HTTP(S) delivery in its JSON body: ``Signature`` (base64) over the canonical
string of the message's fields (name, newline, value, newline, in a fixed order per
``Type``), RSA with SHA-1 (``SignatureVersion`` 1) or SHA-256 (2), by the certificate at
``SigningCertURL``. That URL must be HTTPS on a host SNS serves certificates from
(``sns.<region>.amazonaws.com``, or ``.com.cn``; ``--sns-cert-hosts`` for another
deployment); the certificate is fetched once and cached. No shared secret is involved.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import time
from typing import Any
from urllib.parse import urlsplit

import httpx
import structlog
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, rsa

log = structlog.get_logger()
CERT_HOSTS = r"sns\.[a-z0-9-]+\.amazonaws\.com(\.cn)?"
CACHE_SECONDS = 24 * 3600
_FIELDS = {
    "Notification": ("Message", "MessageId", "Subject", "Timestamp", "TopicArn", "Type"),
    "SubscriptionConfirmation": ("Message", "MessageId", "SubscribeURL", "Timestamp", "Token",
                                 "TopicArn", "Type"),
}
_FIELDS["UnsubscribeConfirmation"] = _FIELDS["SubscriptionConfirmation"]
_HASHES = {"1": hashes.SHA1, "2": hashes.SHA256}


def canonical(msg: dict[str, Any]) -> bytes | None:
    """The string SNS signs for ``msg``; None when it is not an SNS message."""
    names = _FIELDS.get(str(msg.get("Type")))
    if names is None:
        return None
    out = []
    for name in names:
        if name in msg:
            out.append(f"{name}\n{msg[name]}\n")
        elif name != "Subject":  # (the only optional one)
            return None
    return "".join(out).encode()


def signed_by(msg: dict[str, Any], cert: x509.Certificate) -> bool:
    """Whether ``msg`` carries a valid signature of ``cert``'s key."""
    data, algo = canonical(msg), _HASHES.get(str(msg.get("SignatureVersion")))
    key = cert.public_key()
    if data is None or algo is None or not isinstance(key, rsa.RSAPublicKey):
        return False
    try:
        key.verify(base64.b64decode(str(msg.get("Signature", "")), validate=True), data,
                   padding.PKCS1v15(), algo())
    except (InvalidSignature, binascii.Error, ValueError):
        return False
    return True


class SnsVerifier:
    """Checks SNS deliveries, fetching (and caching) their signing certificates."""

    def __init__(self, hosts: str = CERT_HOSTS) -> None:
        self.hosts = re.compile(hosts)
        self._certs: dict[str, tuple[x509.Certificate, float]] = {}
        self._http: httpx.AsyncClient | None = None

    def allowed(self, url: str) -> bool:
        parts = urlsplit(url)
        return parts.scheme == "https" and bool(parts.hostname) \
            and self.hosts.fullmatch(parts.hostname or "") is not None \
            and parts.path.endswith(".pem")

    async def verify(self, body: bytes) -> bool:
        try:
            msg = json.loads(body)
        except ValueError:
            return False
        if not isinstance(msg, dict):
            return False
        url = str(msg.get("SigningCertURL", ""))
        if not self.allowed(url):
            return False
        cert = await self._cert(url)
        return cert is not None and signed_by(msg, cert)

    async def _cert(self, url: str) -> x509.Certificate | None:
        hit = self._certs.get(url)
        if hit is not None and hit[1] > time.monotonic():
            return hit[0]
        if self._http is None:
            self._http = httpx.AsyncClient(timeout=10, follow_redirects=False)
        try:
            r = await self._http.get(url)
            r.raise_for_status()
            cert = x509.load_pem_x509_certificate(r.content)
        except (httpx.HTTPError, ValueError) as exc:
            log.warning("sns_certificate_unavailable", url=url, error=str(exc))
            return None
        if len(self._certs) > 100:
            self._certs.clear()
        self._certs[url] = (cert, time.monotonic() + CACHE_SECONDS)
        return cert
