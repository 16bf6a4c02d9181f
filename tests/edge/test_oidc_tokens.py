"""ID token checks and signed cookie values of the oidc module, sans I/O: RS256 and ES256
tokens made here with their JWKS, and each way a token can be wrong."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

from edgeway.edge.login import base as login
from edgeway.edge.login.base import DEFAULT_MAXIMUM
from edgeway.edge.modules import oidc

CFG = oidc.config({"issuer": "https://idp.example.com/", "client_id": "app",
                    "client_secret": "s", "scopes": ["email"]})
NOW = 1_800_000_000
GOOD = {"iss": "https://idp.example.com", "aud": "app", "sub": "u1", "exp": NOW + 300,
        "iat": NOW, "nonce": "n1"}


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def num(n: int, size: int | None = None) -> str:
    return b64(n.to_bytes(size or (n.bit_length() + 7) // 8, "big"))


RSA = rsa.generate_private_key(public_exponent=65537, key_size=2048)
EC = ec.generate_private_key(ec.SECP256R1())
JWKS = {"keys": [
    {"kty": "RSA", "kid": "r1", "use": "sig", "n": num(RSA.public_key().public_numbers().n),
     "e": num(RSA.public_key().public_numbers().e)},
    {"kty": "EC", "kid": "e1", "crv": "P-256", "x": num(EC.public_key().public_numbers().x, 32),
     "y": num(EC.public_key().public_numbers().y, 32)},
]}


def token(claims: dict[str, Any], alg: str = "RS256", kid: str = "r1",
          key: Any = None) -> str:
    head = b64(json.dumps({"alg": alg, "kid": kid, "typ": "JWT"}).encode())
    body = b64(json.dumps(claims).encode())
    signed = f"{head}.{body}".encode()
    if alg == "RS256":
        sig = (key or RSA).sign(signed, padding.PKCS1v15(), hashes.SHA256())
    elif alg == "ES256":
        r, s = decode_dss_signature((key or EC).sign(signed, ec.ECDSA(hashes.SHA256())))
        sig = r.to_bytes(32, "big") + s.to_bytes(32, "big")
    else:
        sig = b""
    return f"{head}.{body}.{b64(sig)}"


def test_config_defaults() -> None:
    assert CFG.issuer == "https://idp.example.com" and CFG.scopes == ("openid", "email")
    assert CFG.common.cookie == "__Host-edgeway.session" and CFG.common.maximum == DEFAULT_MAXIMUM
    assert CFG.common.inactivity == 0 and not CFG.common.options_passthrough


@pytest.mark.parametrize(("alg", "kid"), [("RS256", "r1"), ("ES256", "e1")])
def test_valid_tokens_give_their_claims(alg: str, kid: str) -> None:
    assert oidc.verify_id_token(token(GOOD, alg, kid), JWKS, CFG, "n1", NOW)["sub"] == "u1"
    listed = {**GOOD, "aud": ["other", "app"]}
    assert oidc.verify_id_token(token(listed, alg, kid), JWKS, CFG, "n1", NOW)["sub"] == "u1"
    slashed = {**GOOD, "iss": "https://idp.example.com/"}  # (as Auth0 and others write it)
    assert oidc.verify_id_token(token(slashed, alg, kid), JWKS, CFG, "n1", NOW)["sub"] == "u1"


@pytest.mark.parametrize(("claims", "nonce", "words"), [
    ({**GOOD, "iss": "https://evil.example.com"}, "n1", "issued by"),
    ({**GOOD, "iss": "https://idp.example.com.evil/"}, "n1", "issued by"),
    ({**GOOD, "aud": "someone-else"}, "n1", "not for this client"),
    ({**GOOD, "exp": NOW - 120}, "n1", "expired"),
    (GOOD, "n2", "nonce"),
    ({k: v for k, v in GOOD.items() if k != "sub"}, "n1", "no subject"),
])
def test_wrong_claims_are_refused(claims: dict[str, Any], nonce: str, words: str) -> None:
    with pytest.raises(oidc.BadToken, match=words):
        oidc.verify_id_token(token(claims), JWKS, CFG, nonce, NOW)


def test_forged_or_unsigned_tokens_are_refused() -> None:
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    with pytest.raises(oidc.BadToken, match="signature"):
        oidc.verify_id_token(token(GOOD, key=other), JWKS, CFG, "n1", NOW)
    with pytest.raises(oidc.BadToken, match="signature"):  # an RSA signature under the EC kid
        oidc.verify_id_token(token(GOOD, "RS256", "e1"), JWKS, CFG, "n1", NOW)
    for alg in ("none", "HS256"):
        with pytest.raises(oidc.BadToken, match="algorithm"):
            oidc.verify_id_token(token(GOOD, alg), JWKS, CFG, "n1", NOW)
    with pytest.raises(oidc.BadToken, match="not a JWT"):
        oidc.verify_id_token("abc.def", JWKS, CFG, "n1", NOW)


def test_signed_values_resist_tampering() -> None:
    key = b"k" * 32
    value = login.sign(key, {"sub": "u1", "auth": NOW})
    assert login.unsign(key, value) == {"sub": "u1", "auth": NOW}
    data, _, mac = value.partition(".")
    forged = b64(json.dumps({"sub": "admin", "auth": NOW}).encode())
    assert login.unsign(key, f"{forged}.{mac}") is None
    assert login.unsign(b"x" * 32, value) is None
    assert login.unsign(key, data) is None


def test_signed_values_with_characters_outside_ascii_are_refused() -> None:
    key = b"k" * 32
    data = login.sign(key, {"sub": "u1"}).partition(".")[0]
    for forged in (f"{data}.\u00e9", f"{data}.x\u20ac", f"\u00e9{data}.abc"):
        assert login.unsign(key, forged) is None


def test_a_jwks_not_as_its_format_says_verifies_nothing_and_raises_nothing_else() -> None:
    rsa_key = JWKS["keys"][0]
    for jwks in ({"keys": {"r1": rsa_key}}, {"keys": 7},
                 {"keys": [{**rsa_key, "e": 65537}]}, {"keys": [{**rsa_key, "n": None}]}):
        with pytest.raises(oidc.BadToken, match="signature"):
            oidc.verify_id_token(token(GOOD), jwks, CFG, "n1", NOW)
