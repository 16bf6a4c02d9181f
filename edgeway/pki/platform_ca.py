"""The platform's own CA and the tunnel listener's server certificate, kept in the data
directory: ``ca.pem`` (give it to agents: ``edgeway ca export``), the CA key sealed in
``ca.key.sealed``, and ``tunnel.pem``/``tunnel.key`` (mode 0600) re-issued whenever the wanted
names change or expiry is under 30 days. Agents verify the chain and the host name, so the
server certificate carries every name and address agents dial."""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from edgeway.pki.seal import Sealer


@dataclass(frozen=True)
class TunnelTLS:
    ca_pem: Path
    cert: Path
    key: Path


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Edgeway"),
                      x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def _ca(data_dir: Path, sealer: Sealer) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    pem, sealed = data_dir / "ca.pem", data_dir / "ca.key.sealed"
    if pem.exists() and sealed.exists():
        key = serialization.load_pem_private_key(sealer.open(sealed.read_text(), "ca"), None)
        assert isinstance(key, ec.EllipticCurvePrivateKey)
        return x509.load_pem_x509_certificate(pem.read_bytes()), key
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.now(UTC)
    cert = (x509.CertificateBuilder().subject_name(_name("Edgeway platform CA"))
            .issuer_name(_name("Edgeway platform CA")).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(hours=1)).not_valid_after(now + timedelta(days=3650))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False,
                                         False), critical=True)
            .sign(key, hashes.SHA256()))
    sealed.write_text(sealer.seal(_pem_key(key), "ca"))
    pem.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return cert, key


def _san(names: list[str]) -> x509.SubjectAlternativeName:
    out: list[x509.GeneralName] = []
    for n in dict.fromkeys(names):
        try:
            out.append(x509.IPAddress(ipaddress.ip_address(n)))
        except ValueError:
            out.append(x509.DNSName(n))
    return x509.SubjectAlternativeName(out)


def _current(cert_path: Path, names: list[str]) -> bool:
    if not cert_path.exists():
        return False
    cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    fresh = cert.not_valid_after_utc - datetime.now(UTC) > timedelta(days=30)
    return fresh and cert.extensions.get_extension_for_class(
        x509.SubjectAlternativeName).value == _san(names)


def ensure(data_dir: Path, sealer: Sealer, names: list[str]) -> TunnelTLS:
    data_dir.mkdir(parents=True, exist_ok=True)
    tls = TunnelTLS(data_dir / "ca.pem", data_dir / "tunnel.pem", data_dir / "tunnel.key")
    ca_cert, ca_key = _ca(data_dir, sealer)
    if _current(tls.cert, names) and tls.key.exists():
        return tls
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.now(UTC)
    cert = (x509.CertificateBuilder().subject_name(_name(names[0]))
            .issuer_name(ca_cert.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(hours=1)).not_valid_after(now + timedelta(days=397))
            .add_extension(_san(names), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    _write_private(tls.key, _pem_key(key))
    tls.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM)
                         + ca_cert.public_bytes(serialization.Encoding.PEM))
    return tls
