"""The oidc module, sans I/O: its configuration, the signed values the login flow keeps in
cookies and the ``state`` parameter, and the check of the provider's ID token (a JWT signed
with RS256 or ES256 by a key of the provider's JWKS; issuer, audience, expiry and nonce).
The flow itself (discovery, redirects, the code exchange) is ``edge/oidc_login.py``."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

from edgeway.edge.h1 import Headers
from edgeway.edge.hooks import Compiling, Exchange, Hook, Verdict
from edgeway.edge.pages import Fixed, page

CALLBACK = "/.edgeway/oidc/callback"
LOGOUT = "/.edgeway/oidc/logout"
IDENTITY = (b"edgeway-auth-user-id", b"edgeway-auth-user-email", b"edgeway-auth-user-name")
DEFAULT_MAXIMUM = 24 * 3600
LEEWAY = 60  # seconds of clock skew tolerated on the ID token's times


class BadToken(Exception):
    pass


@dataclass(frozen=True)
class Config:
    issuer: str
    client_id: str
    client_secret: str
    scopes: tuple[str, ...]
    prefix: str  # of the cookie names
    inactivity: int  # seconds without a request that end a session (0: no limit)
    maximum: int  # seconds a session lasts at most
    options_passthrough: bool
    allow_emails: tuple[str, ...] = ()  # agent binds: only these users (lower case) ...
    allow_domains: tuple[str, ...] = ()  # ... or users of these email domains

    def admits(self, email: str) -> bool:
        if not self.allow_emails and not self.allow_domains:
            return True
        email = email.lower()
        return email in self.allow_emails or email.rpartition("@")[2] in self.allow_domains

    @property
    def cookie(self) -> str:
        return self.prefix + "session"

    @property
    def state_cookie(self) -> str:
        return self.prefix + "oidc_state"


def config(module: dict[str, Any]) -> Config:
    scopes = [str(s) for s in module.get("scopes") or ["profile", "email"]]
    return Config(
        str(module.get("issuer", "")).rstrip("/"), str(module.get("client_id", "")),
        str(module.get("client_secret", "")),
        tuple(dict.fromkeys(["openid", *scopes])), str(module.get("cookie_prefix") or
                                                         "edgeway."),
        int(module.get("inactivity_timeout") or 0),
        int(module.get("maximum_duration") or DEFAULT_MAXIMUM),
        bool(module.get("options_passthrough")),
        tuple(str(e).lower() for e in module.get("allow_emails") or []),
        tuple(str(d).lower().lstrip("@") for d in module.get("allow_domains") or []))


@dataclass(frozen=True)
class Login(Hook):
    """The login on traffic: a request without a valid session is sent to the provider; the
    callback and logout paths are answered by the edge; a signed-in user's request goes on
    with their identity (and a renewed session cookie on its response)."""
    name = "oidc"
    config: Config

    async def request(self, x: Exchange) -> Verdict:
        gate = x.services.login
        if gate is None:  # (only HTTPS edges have routes, and a login)
            return page(503, "Not available", "Logins need HTTPS.", 4008)
        outcome = await gate.check(self.config, x.req)
        if isinstance(outcome, Fixed):
            return outcome
        x.req, x.renew = outcome
        return None

    def response(self, x: Exchange, status: int, headers: Headers) -> Headers:
        return headers + [(k.encode(), v.encode()) for k, v in x.renew] if x.renew else headers


def compile(module: dict[str, Any], ctx: Compiling) -> Login:
    return Login(config(module))


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def sign(key: bytes, value: dict[str, Any]) -> str:
    """``value`` as a cookie-safe string only ``key`` could have made."""
    data = _b64(json.dumps(value, separators=(",", ":")).encode())
    return data + "." + _b64(hmac.new(key, data.encode(), hashlib.sha256).digest())


def unsign(key: bytes, token: str) -> dict[str, Any] | None:
    data, _, mac = token.partition(".")
    want = _b64(hmac.new(key, data.encode(), hashlib.sha256).digest())
    if not mac or not hmac.compare_digest(mac, want):
        return None
    try:
        value = json.loads(_unb64(data))
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _int(text: str) -> int:
    return int.from_bytes(_unb64(text), "big")


def _check_signature(alg: str, jwk: dict[str, Any], signed: bytes, signature: bytes) -> None:
    if alg == "RS256" and jwk.get("kty") == "RSA":
        rsa_key = rsa.RSAPublicNumbers(_int(jwk["e"]), _int(jwk["n"])).public_key()
        rsa_key.verify(signature, signed, padding.PKCS1v15(), hashes.SHA256())
    elif alg == "ES256" and jwk.get("kty") == "EC" and jwk.get("crv") == "P-256":
        ec_key = ec.EllipticCurvePublicNumbers(_int(jwk["x"]), _int(jwk["y"]),
                                               ec.SECP256R1()).public_key()
        if len(signature) != 64:
            raise InvalidSignature
        der = encode_dss_signature(int.from_bytes(signature[:32], "big"),
                                   int.from_bytes(signature[32:], "big"))
        ec_key.verify(der, signed, ec.ECDSA(hashes.SHA256()))
    else:
        raise BadToken(f"the ID token's algorithm {alg!r} does not fit its key")


def verify_id_token(token: str, jwks: dict[str, Any], cfg: Config, nonce: str,
                    now: float) -> dict[str, Any]:
    """The claims of a valid ID token for this client and login; ``BadToken`` otherwise."""
    try:
        head_b64, body_b64, sig_b64 = token.split(".")
        head = json.loads(_unb64(head_b64))
        claims = json.loads(_unb64(body_b64))
        signature = _unb64(sig_b64)
    except ValueError:
        raise BadToken("the ID token is not a JWT") from None
    if not isinstance(head, dict) or not isinstance(claims, dict):
        raise BadToken("the ID token is not a JWT")
    alg, kid = head.get("alg"), head.get("kid")
    if alg not in ("RS256", "ES256"):
        raise BadToken(f"the ID token's algorithm {alg!r} is not accepted (RS256, ES256)")
    keys = [k for k in jwks.get("keys", []) if isinstance(k, dict)
            and (kid is None or k.get("kid") == kid) and k.get("use", "sig") == "sig"]
    for jwk in keys:
        try:
            _check_signature(str(alg), jwk, f"{head_b64}.{body_b64}".encode(), signature)
            break
        except (InvalidSignature, KeyError, ValueError, BadToken):
            continue
    else:
        raise BadToken("the ID token's signature does not verify with the provider's keys")
    aud = claims.get("aud")
    if claims.get("iss") != cfg.issuer:
        raise BadToken(f"the ID token was issued by {claims.get('iss')!r}, not {cfg.issuer!r}")
    if cfg.client_id != aud and not (isinstance(aud, list) and cfg.client_id in aud):
        raise BadToken("the ID token is not for this client")
    if not isinstance(claims.get("exp"), int | float) or claims["exp"] < now - LEEWAY:
        raise BadToken("the ID token has expired")
    if claims.get("nonce") != nonce:
        raise BadToken("the ID token's nonce is not this login's")
    if not claims.get("sub"):
        raise BadToken("the ID token names no subject")
    return claims
