"""A TLS service with its own self-signed certificate, for passthrough tests: when a client
behind the edge completes a handshake that verifies against *this* certificate, the edge did
not terminate TLS. It answers each line with ``<name> got <line>``."""

from __future__ import annotations

import contextlib
import socket
import ssl
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.edge.upstream import accept_in_threads


def write_pair(directory: Path, name: str, cert: x509.Certificate,
               key: ec.EllipticCurvePrivateKey) -> tuple[Path, Path]:
    """``<name>.pem`` and ``<name>.key`` (PKCS#8) in ``directory``: their paths."""
    cert_path, key_path = directory / f"{name}.pem", directory / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


def self_signed(name: str, directory: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.now(UTC)
    cert = (x509.CertificateBuilder().subject_name(subject).issuer_name(subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(hours=1)).not_valid_after(now + timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    return write_pair(directory, name, cert, key)


def localhost_contexts(directory: Path) -> tuple[ssl.SSLContext, ssl.SSLContext]:
    """(server, client) contexts for a self-signed ``localhost`` certificate."""
    cert, key = self_signed("localhost", directory)
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server.load_cert_chain(cert, key)
    return server, ssl.create_default_context(cafile=str(cert))


@contextmanager
def running(name: str, directory: Path) -> Iterator[tuple[int, Path]]:
    """(port, certificate path) of a TLS line-echo service for ``name``."""
    cert, key = self_signed(name, directory)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    listener = socket.create_server(("127.0.0.1", 0))

    def serve(conn: socket.socket) -> None:
        with contextlib.suppress(OSError, ssl.SSLError), \
                context.wrap_socket(conn, server_side=True) as tls, tls.makefile("rwb") as f:
            for line in f:
                f.write(f"{name} got ".encode() + line)
                f.flush()

    accept_in_threads(listener, serve)
    try:
        yield listener.getsockname()[1], cert
    finally:
        listener.close()


def ask(port: int, name: str, cafile: Path, line: bytes) -> bytes:
    """One line through a TLS connection to 127.0.0.1:``port`` with SNI ``name``, verified
    against ``cafile``."""
    context = ssl.create_default_context(cafile=str(cafile))
    with socket.create_connection(("127.0.0.1", port), timeout=20) as raw, \
            context.wrap_socket(raw, server_hostname=name) as tls:
        tls.sendall(line)
        return tls.recv(65536)
