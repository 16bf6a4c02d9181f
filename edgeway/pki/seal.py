"""Seal private keys at rest: AES-256-GCM with the platform's secret key.

The key comes from ``EDGEWAY_SECRET_KEY`` (32 bytes, base64) or, failing that, from
``<data dir>/secret.key``, created with mode 0600 on first start. Several nodes sharing one
PostgreSQL database must share the key (set the variable on each). A sealed value is the text
``v1:<base64 of nonce || ciphertext>``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import secrets
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

ENV = "EDGEWAY_SECRET_KEY"
TLS_KEYS = "tls_certificates.private_key_pem"  # the context TLS certificates' keys are sealed in


class SealError(ValueError):
    pass


class Sealer:
    def __init__(self, key: bytes) -> None:
        if len(key) != 32:
            raise SealError("the secret key must be 32 bytes")
        self._aead = AESGCM(key)
        self._mac_key = hmac.new(key, b"edgeway mac", hashlib.sha256).digest()

    def mac(self, data: bytes) -> bytes:
        """A keyed digest of ``data``: stable across restarts, unguessable without the key."""
        return hmac.new(self._mac_key, data, hashlib.sha256).digest()

    def seal(self, data: bytes, context: str = "") -> str:
        nonce = secrets.token_bytes(12)
        box = self._aead.encrypt(nonce, data, context.encode())
        return "v1:" + base64.b64encode(nonce + box).decode()

    def open(self, sealed: str, context: str = "") -> bytes:
        if not sealed.startswith("v1:"):
            raise SealError("not a sealed value")
        try:
            raw = base64.b64decode(sealed[3:], validate=True)
            return self._aead.decrypt(raw[:12], raw[12:], context.encode())
        except (binascii.Error, InvalidTag) as exc:
            raise SealError("cannot open a sealed value: wrong secret key or damaged "
                            "data") from exc


def load(data_dir: Path) -> Sealer:
    """The platform's sealer, from the environment or the data directory's key file."""
    return Sealer(base64.b64decode(key_text(data_dir)))


def key_text(data_dir: Path) -> str:
    """The platform's secret key in base64, as ``EDGEWAY_SECRET_KEY`` gives it (the data
    directory's key file, made on first use, when the variable is not set)."""
    text = os.environ.get(ENV)
    if text:
        if _key(text) is None:
            raise SealError(f"{ENV} must be 32 random bytes in base64 "
                            "(e.g. `openssl rand -base64 32`)")
        return text
    path = data_dir / "secret.key"
    if not path.exists():
        data_dir.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(base64.b64encode(secrets.token_bytes(32)).decode() + "\n")
    text = path.read_text().strip()
    if _key(text) is None:
        raise SealError(f"{path} does not hold a 32-byte base64 key")
    return text


def _key(text: str) -> bytes | None:
    try:
        key = base64.b64decode(text, validate=True)
    except binascii.Error:
        return None
    return key if len(key) == 32 else None
