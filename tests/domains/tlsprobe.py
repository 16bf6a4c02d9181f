"""Test certificates (a CA and leaves signed by it) and a TLS client that reports the
certificate a listener presents for a server name."""

from __future__ import annotations

import ipaddress
import socket
import ssl
from datetime import UTC, datetime, timedelta

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _general(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


class UploadCA:
    def __init__(self) -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.now(UTC)
        self.cert = (x509.CertificateBuilder().subject_name(_name("Upload Test CA"))
                     .issuer_name(_name("Upload Test CA")).public_key(self.key.public_key())
                     .serial_number(x509.random_serial_number())
                     .not_valid_before(now - timedelta(days=1))
                     .not_valid_after(now + timedelta(days=30))
                     .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
                     .sign(self.key, hashes.SHA256()))
        self.pem = self.cert.public_bytes(serialization.Encoding.PEM).decode()

    def leaf(self, *names: str, days: int = 10, start: int = -1) -> tuple[str, str]:
        """(chain PEM, key PEM) of a server certificate for ``names``."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.now(UTC)
        cert = (x509.CertificateBuilder().subject_name(_name(names[0]))
                .issuer_name(self.cert.subject).public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now + timedelta(days=start))
                .not_valid_after(now + timedelta(days=days))
                .add_extension(x509.SubjectAlternativeName([_general(n) for n in names]),
                               False)
                .sign(self.key, hashes.SHA256()))
        chain = cert.public_bytes(serialization.Encoding.PEM).decode() + self.pem
        pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption()).decode()
        return chain, pem


def presented(port: int, server_name: str, ca_pem: str | None = None) -> x509.Certificate:
    """The leaf the listener on ``port`` presents for ``server_name``; with ``ca_pem`` the
    handshake must also verify against it (chain and name)."""
    ctx = ssl.create_default_context(cadata=ca_pem) if ca_pem else ssl.create_default_context()
    if ca_pem is None:
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
            ctx.wrap_socket(raw, server_hostname=server_name) as tls:
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)


def serial(pem: str) -> int:
    return x509.load_pem_x509_certificate(pem.encode()).serial_number
