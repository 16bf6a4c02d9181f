"""SSH keys and certificates, sans I/O.

What lives here: generating CA key pairs; reading a public key given as an OpenSSH
authorized-keys line (``type base64 [comment]``), an RFC 4716 block (``---- BEGIN SSH2 PUBLIC
KEY ----``, what ``ssh-keygen -e`` prints) or a PEM public key (SPKI ``PUBLIC KEY`` or PKCS#1
``RSA PUBLIC KEY``); SHA-256 fingerprints as ``ssh-keygen -l`` prints them; and signing host and
user certificates with ``cryptography``'s ``SSHCertificateBuilder``.

What does not: storage, sealing (``pki.seal``), HTTP. Every bad input raises ``SSHKeyError``
(and nothing else); callers turn it into an API error naming their member.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import secrets
import struct
from dataclasses import dataclass, field
from datetime import datetime

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.hazmat.primitives.serialization import SSHCertificateBuilder, SSHCertificateType

PrivateKey = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey
PublicKey = rsa.RSAPublicKey | ec.EllipticCurvePublicKey | ed25519.Ed25519PublicKey

KEY_TYPES = ("rsa", "ecdsa", "ed25519")
RSA_SIZES = (2048, 4096)
RSA_BITS = (2048, 16384)  # accepted sizes of uploaded RSA keys; OpenSSH refuses > 16384
CURVES: dict[str, type[ec.EllipticCurve]] = {
    "p256": ec.SECP256R1, "p384": ec.SECP384R1, "p521": ec.SECP521R1}
_CURVE_ALIASES = {"secp256r1": "p256", "secp384r1": "p384", "secp521r1": "p521",
                  "nistp256": "p256", "nistp384": "p384", "nistp521": "p521",
                  "p-256": "p256", "p-384": "p384", "p-521": "p521"}
WIRE_TYPES = ("ssh-ed25519", "ssh-rsa", "ecdsa-sha2-nistp256", "ecdsa-sha2-nistp384",
              "ecdsa-sha2-nistp521")
MAX_TEXT = 16384
_TYPE_NAME = re.compile(r"(?:ssh|ecdsa|sk)-[a-z0-9@.-]{1,60}")
_B64 = re.compile(r"[A-Za-z0-9+/]+={0,2}")
_RFC4716 = ("---- BEGIN SSH2 PUBLIC KEY ----", "---- END SSH2 PUBLIC KEY ----")


class SSHKeyError(ValueError):
    pass


# What the library raises on bad key data (compressed EC points: NotImplementedError)
_LIBRARY_ERRORS = (ValueError, TypeError, UnsupportedAlgorithm, NotImplementedError)


def canonical_curve(name: str) -> str:
    """``p256``/``p384``/``p521`` for any accepted spelling (``secp384r1``, ``P-384``...)."""
    low = name.strip().lower()
    low = _CURVE_ALIASES.get(low, low)
    if low not in CURVES:
        raise SSHKeyError(f"'{name}' is not a supported curve; use p256, p384 or p521 "
                          "(also accepted: secp256r1, secp384r1, secp521r1)")
    return low


def generate(key_type: str, curve: str = "p256", key_size: int = 4096) -> PrivateKey:
    if key_type == "ed25519":
        return ed25519.Ed25519PrivateKey.generate()
    if key_type == "ecdsa":
        return ec.generate_private_key(CURVES[canonical_curve(curve)]())
    if key_type == "rsa" and key_size in RSA_SIZES:
        return rsa.generate_private_key(65537, key_size)
    raise SSHKeyError(f"cannot generate a '{key_type}' key of {key_size} bits")


def private_pem(key: PrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def load_private(pem: bytes) -> PrivateKey:
    key = serialization.load_pem_private_key(pem, None)
    if not isinstance(key, rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey
                      | ed25519.Ed25519PrivateKey):
        raise SSHKeyError("stored key is not an RSA, ECDSA or Ed25519 key")
    return key


def key_type(key: PublicKey) -> str:
    if isinstance(key, rsa.RSAPublicKey):
        return "rsa"
    return "ecdsa" if isinstance(key, ec.EllipticCurvePublicKey) else "ed25519"


def openssh_line(key: PublicKey) -> str:
    """``<type> <base64>`` with no comment, as in authorized_keys."""
    return key.public_bytes(serialization.Encoding.OpenSSH,
                            serialization.PublicFormat.OpenSSH).decode()


def fingerprint(key: PublicKey) -> str:
    """``SHA256:<unpadded base64>`` of the key blob, the form ``ssh-keygen -l`` prints."""
    blob = base64.b64decode(openssh_line(key).split()[1])
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


@dataclass(frozen=True)
class ParsedKey:
    key: PublicKey
    line: str  # normalised ``type base64[ comment]``
    key_type: str
    fingerprint: str


def parse_public_key(text: str) -> ParsedKey:
    """Any accepted form of one RSA, ECDSA or Ed25519 public key; ``SSHKeyError`` otherwise."""
    if len(text) > MAX_TEXT:
        raise SSHKeyError(f"is longer than {MAX_TEXT} characters; send one public key")
    body = text.strip()
    if not body:
        raise SSHKeyError("is empty; send a public key such as 'ssh-ed25519 AAAA... comment'")
    if "PRIVATE KEY" in body:
        raise SSHKeyError("looks like a private key; send the public key (the .pub file)")
    if body.startswith("---- BEGIN SSH2"):
        key, comment = _from_rfc4716(body), ""
    elif body.startswith("-----BEGIN"):
        key, comment = _from_pem(body), ""
    else:
        key, comment = _from_line(body)
    _check_strength(key)
    line = openssh_line(key) + (f" {comment}" if comment else "")
    return ParsedKey(key, line, key_type(key), fingerprint(key))


def _from_line(body: str) -> tuple[PublicKey, str]:
    parts = body.split(None, 2)
    if len(parts) >= 2 and parts[0] not in WIRE_TYPES and _TYPE_NAME.fullmatch(parts[0]):
        raise SSHKeyError(f"holds a '{parts[0]}' key; supported types: {', '.join(WIRE_TYPES)}")
    if len(parts) < 2 or parts[0] not in WIRE_TYPES:
        raise SSHKeyError("is not a public key in authorized-keys format '<type> <base64> "
                          f"[comment]' with type one of {', '.join(WIRE_TYPES)}, nor PEM")
    comment = parts[2].strip() if len(parts) == 3 else ""
    if any(not c.isprintable() for c in comment):
        raise SSHKeyError("must be a single line; the comment holds unprintable characters")
    return _from_blob(parts[0], parts[1]), comment


def _blob_type(blob: bytes) -> str:
    if len(blob) < 4:
        raise SSHKeyError("holds no key: the base64 data is too short")
    (size,) = struct.unpack(">I", blob[:4])
    name = blob[4:4 + size]
    if size > 64 or len(name) != size or not name.isascii():
        raise SSHKeyError("holds no readable key type in its base64 data")
    return name.decode()


def _from_blob(wire_type: str, b64: str) -> PublicKey:
    if not _B64.fullmatch(b64):
        raise SSHKeyError("has a key part that is not base64")
    try:
        blob = base64.b64decode(b64, validate=True)
    except binascii.Error:
        raise SSHKeyError("has a key part that is not valid base64") from None
    inner = _blob_type(blob)
    if inner != wire_type:
        raise SSHKeyError(f"says '{wire_type}' but its data holds a '{inner}' key")
    try:
        key = serialization.load_ssh_public_key(f"{wire_type} {b64}".encode())
    except _LIBRARY_ERRORS as exc:
        raise SSHKeyError(f"is not a valid {wire_type} key ({_reason(exc)})") from None
    return _supported(key)


def _reason(exc: Exception) -> str:
    text = str(exc).strip() or type(exc).__name__
    return text[:120]


def _from_rfc4716(body: str) -> PublicKey:
    lines = [ln.strip() for ln in body.splitlines() if ln.strip()]
    if len(lines) < 3 or lines[0] != _RFC4716[0] or lines[-1] != _RFC4716[1]:
        raise SSHKeyError(f"an RFC 4716 key must sit between '{_RFC4716[0]}' and "
                          f"'{_RFC4716[1]}'")
    data: list[str] = []
    continued = False
    for ln in lines[1:-1]:
        header = continued or (":" in ln and not data)
        continued = header and ln.endswith("\\")
        if not header:
            data.append(ln)
    b64 = "".join(data)
    try:
        blob = base64.b64decode(b64, validate=True)
    except ValueError:  # binascii.Error, or non-ASCII text
        raise SSHKeyError("has an RFC 4716 body that is not valid base64") from None
    wire_type = _blob_type(blob)
    if wire_type not in WIRE_TYPES:
        raise SSHKeyError(f"holds a '{wire_type}' key; supported: {', '.join(WIRE_TYPES)}")
    return _from_blob(wire_type, b64)


def _from_pem(body: str) -> PublicKey:
    if body.count("-----BEGIN") != 1:
        raise SSHKeyError("must hold exactly one PEM block")
    try:
        key = serialization.load_pem_public_key(body.encode())
    except _LIBRARY_ERRORS as exc:
        raise SSHKeyError("is not a PEM 'PUBLIC KEY' or 'RSA PUBLIC KEY' block "
                          f"({_reason(exc)})") from None
    return _supported(key)


def _supported(key: object) -> PublicKey:
    if isinstance(key, rsa.RSAPublicKey | ed25519.Ed25519PublicKey):
        return key
    if isinstance(key, ec.EllipticCurvePublicKey) and key.curve.name in (
            "secp256r1", "secp384r1", "secp521r1"):
        return key
    raise SSHKeyError("holds a key of an unsupported type; supported: RSA, ECDSA (P-256, "
                      "P-384, P-521) and Ed25519")


def _check_strength(key: PublicKey) -> None:
    if isinstance(key, rsa.RSAPublicKey) and not RSA_BITS[0] <= key.key_size <= RSA_BITS[1]:
        raise SSHKeyError(f"is a {key.key_size}-bit RSA key; RSA keys must have "
                          f"{RSA_BITS[0]} to {RSA_BITS[1]} bits")


@dataclass(frozen=True)
class CertRequest:
    """What to certify. Empty ``principals`` means valid for every principal."""

    public_key: PublicKey
    host: bool
    principals: list[str]
    valid_after: datetime
    valid_before: datetime
    key_id: str
    critical_options: dict[str, str] = field(default_factory=dict)
    extensions: dict[str, str] = field(default_factory=dict)


def sign(ca: PrivateKey, req: CertRequest) -> str:
    """The certificate in authorized-keys form (``<type>-cert-v01@openssh.com <base64>``)."""
    kind = SSHCertificateType.HOST if req.host else SSHCertificateType.USER
    builder = (
        SSHCertificateBuilder().public_key(req.public_key).type(kind)
        .serial(secrets.randbits(63) + 1).key_id(req.key_id.encode())
        .valid_after(int(req.valid_after.timestamp()))
        .valid_before(int(req.valid_before.timestamp()))
    )
    if req.principals:
        builder = builder.valid_principals([p.encode() for p in req.principals])
    else:
        builder = builder.valid_for_all_principals()  # type: ignore[no-untyped-call,unused-ignore]
    # Values go in raw: the builder does the nested string encoding OpenSSH expects.
    for name, value in sorted(req.critical_options.items()):
        builder = builder.add_critical_option(name.encode(), value.encode())
    for name, value in sorted(req.extensions.items()):
        builder = builder.add_extension(name.encode(), value.encode())
    return builder.sign(ca).public_bytes().decode()
