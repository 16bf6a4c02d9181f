"""The platform's own CA and the tunnel listener's server certificate, kept in the data
directory: ``ca.pem`` (give it to agents: ``edgeway ca export``), the CA key sealed in
``ca.key.sealed``, and ``tunnel.pem``/``tunnel.key`` (mode 0600) re-issued whenever the wanted
names change or expiry is under 30 days. Agents verify the chain and the host name, so the
server certificate carries every name and address agents dial."""

from __future__ import annotations

import hashlib
import ipaddress
import os
import ssl
import tempfile
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from edgeway.pki.seal import TLS_KEYS, Sealer
from edgeway.tlsobject import direct

TLS_VERSIONS = {"1.0": ssl.TLSVersion.TLSv1, "1.1": ssl.TLSVersion.TLSv1_1,
                "1.2": ssl.TLSVersion.TLSv1_2, "1.3": ssl.TLSVersion.TLSv1_3}
LEGACY = frozenset({"1.0", "1.1"})


@dataclass(frozen=True)
class ServedCert:
    """A certificate served instead of the platform CA's: uploaded, or issued through ACME
    (a ``tls_certificates`` resource): its id, chain and sealed key."""

    id: str
    chain_pem: str
    key_sealed: str


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


def names_of(cert_path: Path) -> tuple[str, ...]:
    """The names a certificate (the first of a PEM chain) is for: its subject alternative
    names, DNS names in lower case and IP addresses as text; none without that extension."""
    cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return ()
    return (*(n.lower() for n in san.get_values_for_type(x509.DNSName)),
            *(str(ip) for ip in san.get_values_for_type(x509.IPAddress)))


def _current(cert_path: Path, names: list[str]) -> bool:
    if not cert_path.exists():
        return False
    cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
    fresh = cert.not_valid_after_utc - datetime.now(UTC) > timedelta(days=30)
    return fresh and cert.extensions.get_extension_for_class(
        x509.SubjectAlternativeName).value == _san(names)


def leaf(ca_cert: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey, names: list[str],
         days: int = 397, client: bool = False) -> tuple[bytes, bytes]:
    """A server certificate for ``names`` signed by the CA: (certificate + CA chain, key) PEM;
    with ``client`` also a client certificate (a node's, for the links between nodes)."""
    usages = [ExtendedKeyUsageOID.SERVER_AUTH, *([ExtendedKeyUsageOID.CLIENT_AUTH] * client)]
    key = ec.generate_private_key(ec.SECP256R1())
    now = datetime.now(UTC)
    cert = (x509.CertificateBuilder().subject_name(_name(names[0]))
            .issuer_name(ca_cert.subject).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(hours=1)).not_valid_after(now + timedelta(days=days))
            .add_extension(_san(names), critical=False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .sign(ca_key, hashes.SHA256()))
    return (cert.public_bytes(serialization.Encoding.PEM)
            + ca_cert.public_bytes(serialization.Encoding.PEM)), _pem_key(key)


def authority(data_dir: Path,
              sealer: Sealer) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """The CA's certificate and key, the CA created first if need be."""
    data_dir.mkdir(parents=True, exist_ok=True)
    return _ca(data_dir, sealer)


def write_private(path: Path, data: bytes) -> None:
    """Write a private key's file, readable by its owner only."""
    _write_private(path, data)


def ca_pem(data_dir: Path, sealer: Sealer) -> Path:
    """The CA certificate's file, the CA created first if need be."""
    data_dir.mkdir(parents=True, exist_ok=True)
    _ca(data_dir, sealer)
    return data_dir / "ca.pem"


def ensure(data_dir: Path, sealer: Sealer, names: list[str]) -> TunnelTLS:
    data_dir.mkdir(parents=True, exist_ok=True)
    tls = TunnelTLS(data_dir / "ca.pem", data_dir / "tunnel.pem", data_dir / "tunnel.key")
    ca_cert, ca_key = _ca(data_dir, sealer)
    if _current(tls.cert, names) and tls.key.exists():
        return tls
    chain, key = leaf(ca_cert, ca_key, names)
    _write_private(tls.key, key)
    tls.cert.write_bytes(chain)
    return tls


class EdgeCerts:
    """TLS server contexts for public host names, with certificates the platform CA issues
    (kept in ``<data dir>/edge-certs``, re-issued when under 30 days from expiry). Only names
    the router serves are asked for, so a client cannot make the edge mint arbitrary ones."""

    def __init__(self, data_dir: Path, sealer: Sealer, default: TunnelTLS) -> None:
        self.dir = data_dir / "edge-certs"
        self.sealer = sealer
        self._ca = _ca(data_dir, sealer)
        self._contexts: dict[tuple[str, bool, str, str, bool, str, str], ssl.SSLContext] = {}
        # the certificate (uploaded or issued) served for a name, when there is one
        self.lookup: Callable[[str], ServedCert | None] = lambda _name: None
        self.default = self._context(default.cert, default.key)
        self.default_names = names_of(default.cert)  # what a client without SNI gets

    @staticmethod
    def _context(cert: Path, key: Path, http: bool = True, client_cas: str = "",
                 min_version: str = "1.2", optional: bool = False,
                 max_version: str = "1.3") -> ssl.SSLContext:
        ctx = direct(ssl.create_default_context(ssl.Purpose.CLIENT_AUTH))
        if min_version in LEGACY:
            # Asked for by the edge's tls_termination, for old clients: their handshakes sign
            # with SHA-1, which OpenSSL's default security level refuses; level 0 is set on
            # the contexts of these edges only.
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", DeprecationWarning)
                ctx.minimum_version = TLS_VERSIONS[min_version]
            ctx.set_ciphers("DEFAULT:@SECLEVEL=0")
        else:
            ctx.minimum_version = TLS_VERSIONS.get(min_version, ssl.TLSVersion.TLSv1_2)
        if max_version != "1.3":
            ctx.maximum_version = TLS_VERSIONS[max_version]
        if http:
            ctx.set_alpn_protocols(["http/1.1"])
        ctx.load_cert_chain(cert, key)
        if client_cas:  # mutual TLS: a client certificate chaining to one of these, or no
            ctx.load_verify_locations(cadata=client_cas)
            ctx.verify_mode = ssl.CERT_OPTIONAL if optional else ssl.CERT_REQUIRED
        return ctx

    def context(self, name: str, http: bool = True, client_cas: str = "",
                min_version: str = "1.2", optional: bool = False,
                max_version: str = "1.3") -> ssl.SSLContext:
        """The context for ``name``: ALPN http/1.1 for the HTTPS edge, none for agents;
        ``client_cas`` (PEM) requires client certificates issued by them (mutual TLS), or
        with ``optional`` checks one if presented (the caller refuses its absence);
        ``min_version`` and ``max_version``: the TLS versions served (1.2 to 1.3 unless asked
        otherwise)."""
        own = self.lookup(name)
        slot = (name, http, min_version, client_cas, optional, own.id if own else "",
                max_version)
        ctx = self._contexts.get(slot)
        if ctx is not None:
            return ctx
        self.dir.mkdir(parents=True, exist_ok=True)
        if own is not None:
            return self._own(slot, own)
        file = name.replace("*", "_")  # names are checked host names, plus a leading "*."
        cert, key = self.dir / f"{file}.pem", self.dir / f"{file}.key"
        if not (_current(cert, [name]) and key.exists()):
            chain, pem = leaf(*self._ca, [name], days=90)
            _write_private(key, pem)
            cert.write_bytes(chain)
        if len(self._contexts) > 10_000:
            self._contexts.clear()
        ctx = self._contexts[slot] = self._context(cert, key, http, client_cas, min_version,
                                                       optional, max_version)
        return ctx

    def agents(self, cert: str, key: str, client_cas: str = "", min_version: str = "1.2",
               max_version: str = "1.3") -> ssl.SSLContext:
        """A context with an agent's own certificate and key (a TLS tunnel terminated at the
        edge), requiring client certificates issued by ``client_cas`` when given. The key is
        only ever in a file of this process that is gone once loaded."""
        slot = ("agent:" + hashlib.sha256(f"{cert}\0{key}".encode()).hexdigest(), False,
                min_version, client_cas, False, "", max_version)
        ctx = self._contexts.get(slot)
        if ctx is not None:
            return ctx
        self.dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=self.dir) as tmp:
            cert_path, key_path = Path(tmp) / "cert.pem", Path(tmp) / "key.pem"
            cert_path.write_text(cert)
            _write_private(key_path, key.encode())
            ctx = self._context(cert_path, key_path, False, client_cas, min_version, False,
                                max_version)
        if len(self._contexts) > 10_000:
            self._contexts.clear()
        self._contexts[slot] = ctx
        return ctx

    def _own(self, slot: tuple[str, bool, str, str, bool, str, str],
             own: ServedCert) -> ssl.SSLContext:
        """A context with a stored certificate; its key, opened, only ever in a file of this
        process that is gone once loaded."""
        key = self.sealer.open(own.key_sealed, TLS_KEYS)
        with tempfile.TemporaryDirectory(dir=self.dir) as tmp:
            cert_path, key_path = Path(tmp) / "cert.pem", Path(tmp) / "key.pem"
            cert_path.write_text(own.chain_pem)
            _write_private(key_path, key)
            _name, http, min_version, client_cas, optional, _id, max_version = slot
            ctx = self._context(cert_path, key_path, http, client_cas, min_version, optional,
                                max_version)
        if len(self._contexts) > 10_000:
            self._contexts.clear()
        self._contexts[slot] = ctx
        return ctx
