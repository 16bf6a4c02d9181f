"""The oidc module, sans I/O: its configuration, its hook, and the check of the provider's ID
token (a JWT signed with RS256 or ES256 by a key of the provider's JWKS; issuer, audience,
expiry and nonce). The flow itself (discovery, redirects, the code exchange) is
``edge/login/oidc.py``; sessions and the gate are shared with the other logins
(the ``edge/login`` package)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

from edgeway.edge.hooks import Compiling
from edgeway.edge.login import base as login
from edgeway.edge.login.base import Common, Gate, unb64

CALLBACK = "/.edgeway/oidc/callback"
LEEWAY = 60  # seconds of clock skew tolerated on the ID token's times
ALGORITHMS = ("RS256", "ES256")


class BadToken(Exception):
    pass


@dataclass(frozen=True)
class Config:
    common: Common
    issuer: str
    client_id: str
    client_secret: str
    scopes: tuple[str, ...]


def config(module: dict[str, Any], key: str = "") -> Config:
    """``allow_emails``/``allow_domains`` come from agent binds (the API's module has none)."""
    scopes = [str(s) for s in module.get("scopes") or ["profile", "email"]]
    issuer = str(module.get("issuer", "")).rstrip("/")
    client_id = str(module.get("client_id", ""))
    return Config(login.common("oidc", module, key, issuer, client_id,
                               emails=module.get("allow_emails"),
                               domains=module.get("allow_domains")),
                  issuer, client_id, str(module.get("client_secret", "")),
                  tuple(dict.fromkeys(["openid", *scopes])))


@dataclass(frozen=True)
class Login(Gate):
    name = "oidc"
    config: Config

    @property
    def common(self) -> Common:
        return self.config.common


def compile(module: dict[str, Any], ctx: Compiling) -> Login:
    return Login(config(module, ctx.key))


def _int(text: str) -> int:
    return int.from_bytes(unb64(text), "big")


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


def _decode(token: str) -> tuple[dict[str, Any], dict[str, Any], bytes, bytes]:
    """The JWT's header, claims, signed bytes and signature."""
    try:
        head_b64, body_b64, sig_b64 = token.split(".")
        head, claims = json.loads(unb64(head_b64)), json.loads(unb64(body_b64))
        signature = unb64(sig_b64)
    except ValueError:
        raise BadToken("the ID token is not a JWT") from None
    if not isinstance(head, dict) or not isinstance(claims, dict):
        raise BadToken("the ID token is not a JWT")
    return head, claims, f"{head_b64}.{body_b64}".encode(), signature


def _verify(head: dict[str, Any], jwks: dict[str, Any], signed: bytes, signature: bytes
            ) -> None:
    """The signature checks with one of the provider's signing keys (of the token's kid)."""
    alg, kid = head.get("alg"), head.get("kid")
    if alg not in ALGORITHMS:
        raise BadToken(f"the ID token's algorithm {alg!r} is not accepted (RS256, ES256)")
    listed = jwks.get("keys")
    keys = [k for k in (listed if isinstance(listed, list) else []) if isinstance(k, dict)
            and (kid is None or k.get("kid") == kid) and k.get("use", "sig") == "sig"]
    for jwk in keys:
        try:
            _check_signature(str(alg), jwk, signed, signature)
            return
        except (InvalidSignature, KeyError, ValueError, TypeError, BadToken):
            continue  # (a key of another kind, or not as the JWK format says)
    raise BadToken("the ID token's signature does not verify with the provider's keys")


def _check_claims(claims: dict[str, Any], cfg: Config, nonce: str, now: float) -> None:
    aud = claims.get("aud")
    if str(claims.get("iss", "")).rstrip("/") != cfg.issuer:  # (as discovery is read:
        # some providers' issuer ends with a slash, and the configured one never does)
        raise BadToken(f"the ID token was issued by {claims.get('iss')!r}, not {cfg.issuer!r}")
    if cfg.client_id != aud and not (isinstance(aud, list) and cfg.client_id in aud):
        raise BadToken("the ID token is not for this client")
    if not isinstance(claims.get("exp"), int | float) or claims["exp"] < now - LEEWAY:
        raise BadToken("the ID token has expired")
    if claims.get("nonce") != nonce:
        raise BadToken("the ID token's nonce is not this login's")
    if not claims.get("sub"):
        raise BadToken("the ID token names no subject")


def verify_id_token(token: str, jwks: dict[str, Any], cfg: Config, nonce: str,
                    now: float) -> dict[str, Any]:
    """The claims of a valid ID token for this client and login; ``BadToken`` otherwise."""
    head, claims, signed, signature = _decode(token)
    _verify(head, jwks, signed, signature)
    _check_claims(claims, cfg, nonce, now)
    return claims
