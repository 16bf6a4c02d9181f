"""Key material for tests: SSH key pairs and TLS certificate chains with their keys, made with
``cryptography`` (fast, no subprocesses); and a peek at stored documents to prove sealing."""

from __future__ import annotations

import asyncio
import ipaddress
import json
import sqlite3
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.server import Server

PrivateKey = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey


def new_key(kind: str = "ed25519") -> PrivateKey:
    if kind == "rsa":
        return rsa.generate_private_key(65537, 2048)
    if kind == "ecdsa":
        return ec.generate_private_key(ec.SECP256R1())
    return ed25519.Ed25519PrivateKey.generate()


def ssh_public(key: PrivateKey, comment: str = "") -> str:
    line = key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                         serialization.PublicFormat.OpenSSH).decode()
    return f"{line} {comment}" if comment else line


def ssh_private(key: PrivateKey) -> str:
    """The OpenSSH private key file format ``ssh`` and ``sshd`` read."""
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                             serialization.NoEncryption()).decode()


def ssh_public_key(kind: str = "ed25519") -> str:
    """A fresh public key line, for bodies that need a key nobody registered yet."""
    return ssh_public(new_key(kind), "test@edgeway")


def pem_public(key: PrivateKey) -> str:
    return key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo).decode()


def key_pem(key: PrivateKey) -> str:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption()).decode()


def cert_pem(cert: x509.Certificate) -> str:
    return cert.public_bytes(serialization.Encoding.PEM).decode()


@dataclass(frozen=True)
class Chain:
    leaf: x509.Certificate
    leaf_key: PrivateKey
    intermediate: x509.Certificate
    root: x509.Certificate

    @property
    def pem(self) -> str:
        """Leaf first, then the intermediate (the root stays out, as servers send it)."""
        return cert_pem(self.leaf) + cert_pem(self.intermediate)

    @property
    def key(self) -> str:
        return key_pem(self.leaf_key)


START = datetime(2026, 1, 1, tzinfo=UTC)


def _name(cn: str, **extra: str) -> x509.Name:
    oids = {"O": NameOID.ORGANIZATION_NAME, "OU": NameOID.ORGANIZATIONAL_UNIT_NAME,
            "L": NameOID.LOCALITY_NAME, "ST": NameOID.STATE_OR_PROVINCE_NAME,
            "C": NameOID.COUNTRY_NAME}
    attrs = [x509.NameAttribute(oids[k], v) for k, v in extra.items()]
    return x509.Name([*attrs, x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _cert(subject: x509.Name, key: PrivateKey, issuer: x509.Name, signer: PrivateKey,
          *, ca: bool, serial: int, extra: list[x509.ExtensionType] | None = None
          ) -> x509.Certificate:
    b = (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
         .public_key(key.public_key()).serial_number(serial)
         .not_valid_before(START).not_valid_after(START + timedelta(days=90))
         .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True))
    for ext in extra or []:
        b = b.add_extension(ext, critical=False)
    algo = None if isinstance(signer, ed25519.Ed25519PrivateKey) else hashes.SHA256()
    return b.sign(signer, algo)


def _leaf_extensions() -> list[x509.ExtensionType]:
    return [
        x509.SubjectAlternativeName([x509.DNSName("app.example.com"),
                                     x509.DNSName("*.app.example.com"),
                                     x509.IPAddress(ipaddress.ip_address("192.0.2.10"))]),
        x509.KeyUsage(digital_signature=True, content_commitment=False,
                      key_encipherment=True, data_encipherment=False, key_agreement=False,
                      key_cert_sign=False, crl_sign=False, encipher_only=False,
                      decipher_only=False),
        x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]),
    ]


def tls_chain(leaf_kind: str = "ecdsa") -> Chain:
    """root -> intermediate -> leaf for app.example.com, with subject details and SANs."""
    root_key, mid_key, leaf_key = new_key("ecdsa"), new_key("ecdsa"), new_key(leaf_kind)
    root_name, mid_name = _name("Test Root"), _name("Test Intermediate")
    root = _cert(root_name, root_key, root_name, root_key, ca=True, serial=1)
    mid = _cert(mid_name, mid_key, root_name, root_key, ca=True, serial=2)
    subject = _name("app.example.com", O="Acme", OU="Edge", L="Lyon", ST="Rhone", C="FR")
    leaf = _cert(subject, leaf_key, mid_name, mid_key, ca=False, serial=0xBEEF01,
                 extra=_leaf_extensions())
    return Chain(leaf, leaf_key, mid, root)


def stored_doc(server: Server, table: str, id_: str) -> dict[str, Any]:
    """The document as stored (to prove what is sealed), read straight from either backend."""
    if server.database_url is None:
        with sqlite3.connect(server.data_dir / "edgeway.db") as conn:
            row = conn.execute(f"SELECT doc FROM {table} WHERE id = ?", (id_,)).fetchone()
        text = row[0]
    else:
        async def fetch(url: str) -> str:
            conn = await asyncpg.connect(url)
            try:
                return str(await conn.fetchval(f"SELECT doc FROM {table} WHERE id = $1", id_))
            finally:
                await conn.close()
        text = asyncio.run(fetch(server.database_url))
    doc: dict[str, Any] = json.loads(text)
    return doc
