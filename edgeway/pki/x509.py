"""Parse uploaded X.509 certificates and private keys and derive the members the API reports
about them: CA certificates (``load_one``, ``describe``) and TLS certificate chains with their
keys (``load_chain``, ``load_private_key``, ``key_matches``, ``describe_tls``).

Every bad input raises ``CertificateError`` (and nothing else); callers name the member.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TypeVar

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from cryptography.utils import CryptographyDeprecationWarning
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from edgeway.pki import ssh

_KEY_USAGES = (
    ("digital_signature", "digital_signature"),
    ("content_commitment", "content_commitment"),
    ("key_encipherment", "key_encipherment"),
    ("data_encipherment", "data_encipherment"),
    ("key_agreement", "key_agreement"),
    ("key_cert_sign", "cert_sign"),
    ("crl_sign", "crl_sign"),
)
_EKU = {
    ExtendedKeyUsageOID.SERVER_AUTH: "server_auth",
    ExtendedKeyUsageOID.CLIENT_AUTH: "client_auth",
    ExtendedKeyUsageOID.CODE_SIGNING: "code_signing",
    ExtendedKeyUsageOID.EMAIL_PROTECTION: "email_protection",
    ExtendedKeyUsageOID.TIME_STAMPING: "time_stamping",
    ExtendedKeyUsageOID.OCSP_SIGNING: "ocsp_signing",
    ExtendedKeyUsageOID.ANY_EXTENDED_KEY_USAGE: "any",
}


class CertificateError(ValueError):
    pass


@dataclass(frozen=True)
class CertInfo:
    subject_common_name: str
    not_before: datetime
    not_after: datetime
    key_usages: list[str]
    extended_key_usages: list[str]
    is_ca: bool


def rfc3339(t: datetime) -> str:
    return t.astimezone(UTC).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse_pem(data: bytes) -> list[x509.Certificate]:
    """The library's parser, with its deprecation warnings (e.g. a serial number that is not
    positive, which later releases refuse) turned into refusals now."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", CryptographyDeprecationWarning)
        try:
            return x509.load_pem_x509_certificates(data)
        except CryptographyDeprecationWarning as exc:
            raise CertificateError(f"is not acceptable: {exc}") from None
        except x509.InvalidVersion as exc:  # not a ValueError: a damaged version field
            raise CertificateError(f"is not a valid certificate: {exc}") from None


def load_one(pem: str) -> x509.Certificate:
    """Exactly one PEM certificate; anything else is a ``CertificateError``."""
    data = pem.encode()
    count = data.count(b"-----BEGIN CERTIFICATE-----")
    if count != 1:
        raise CertificateError("must hold exactly one PEM 'CERTIFICATE' block"
                               f" (found {count})")
    try:
        return _parse_pem(data)[0]
    except ValueError as exc:
        if isinstance(exc, CertificateError):
            raise
        raise CertificateError(f"is not a parsable PEM certificate ({exc})") from None


def _key_usages(cert: x509.Certificate) -> list[str]:
    try:
        ku = cert.extensions.get_extension_for_class(x509.KeyUsage).value
    except x509.ExtensionNotFound:
        return []
    out = [name for attr, name in _KEY_USAGES if getattr(ku, attr)]
    if ku.key_agreement:
        out += [n for a, n in (("encipher_only", "encipher_only"),
                               ("decipher_only", "decipher_only")) if getattr(ku, a)]
    return out


def _eku(cert: x509.Certificate) -> list[str]:
    try:
        eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        return []
    return [_EKU.get(oid, oid.dotted_string) for oid in eku]


def _is_ca(cert: x509.Certificate) -> bool:
    try:
        return bool(cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca)
    except x509.ExtensionNotFound:
        return False


# What lazily parsed names and extensions raise when malformed (KeyError: unknown string
# tags; the x509 ones are not ValueErrors: an x400Address/EDIPartyName in a SAN, an extension
# twice, a bad version)
_LAZY_ERRORS = (ValueError, KeyError, TypeError, UnsupportedAlgorithm,
                x509.UnsupportedGeneralNameType, x509.DuplicateExtension, x509.InvalidVersion)
T = TypeVar("T")


def _guarded(read: Callable[[x509.Certificate], T]) -> Callable[[x509.Certificate], T]:
    """Errors of lazily parsed names and extensions become ``CertificateError``. A name
    attribute of the wrong length (a three-letter country, say) is read as it is: the library
    only warns of it, as such certificates are in use and TLS stacks accept them."""
    def run(cert: x509.Certificate) -> T:
        try:
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", "Attribute's length must be", UserWarning)
                return read(cert)
        except _LAZY_ERRORS as exc:
            raise CertificateError(f"has a malformed name or extension ({exc!r})") from None
    return run


@_guarded
def describe(cert: x509.Certificate) -> CertInfo:
    cns = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    cn = cns[0].value if cns else ""
    return CertInfo(
        subject_common_name=cn if isinstance(cn, str) else cn.decode(),
        not_before=cert.not_valid_before_utc,
        not_after=cert.not_valid_after_utc,
        key_usages=_key_usages(cert),
        extended_key_usages=_eku(cert),
        is_ca=_is_ca(cert),
    )


# --- TLS certificates: a chain (leaf first) and the leaf's private key ---------------------

MAX_CHAIN = 10
PrivateKey = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey | ed25519.Ed25519PrivateKey
_BEGIN_CERT = "-----BEGIN CERTIFICATE-----"


@dataclass(frozen=True)
class TLSInfo:
    subject_common_name: str
    dns_names: list[str]
    ips: list[str]
    not_before: datetime
    not_after: datetime
    key_usages: list[str]
    extended_key_usages: list[str]
    issuer_common_name: str
    serial_number: str
    subject_organization: str
    subject_organizational_unit: str
    subject_locality: str
    subject_province: str
    subject_country: str


def load_chain(pem: str) -> list[x509.Certificate]:
    """The leaf certificate followed by its intermediates, each issued by the next."""
    count = pem.count(_BEGIN_CERT)
    if count == 0 or count > MAX_CHAIN:
        raise CertificateError(f"must hold 1 to {MAX_CHAIN} PEM 'CERTIFICATE' blocks, the leaf "
                               f"first (found {count})")
    try:
        certs = _parse_pem(pem.encode())
    except CertificateError:
        raise
    except ValueError as exc:
        raise CertificateError(f"is not a parsable PEM certificate chain ({exc})") from None
    if len(certs) != count:
        raise CertificateError("holds a damaged 'CERTIFICATE' block")
    for i, (child, parent) in enumerate(itertools.pairwise(certs), start=1):
        try:
            child.verify_directly_issued_by(parent)
        except (*_LAZY_ERRORS, InvalidSignature):
            raise CertificateError(f"certificate {i + 1} did not issue certificate {i}; give "
                                   "the leaf first, then each intermediate after the "
                                   "certificate it issued") from None
    return certs


def load_private_key(pem: str) -> PrivateKey:
    """One unencrypted PEM private key (PKCS#8, PKCS#1 RSA or SEC1 EC): RSA, ECDSA, Ed25519."""
    data = pem.encode()
    if data.count(b"-----BEGIN") != 1 or b"PRIVATE KEY-----" not in data:
        raise CertificateError("must hold exactly one PEM private key block ('PRIVATE KEY', "
                               "'RSA PRIVATE KEY' or 'EC PRIVATE KEY')")
    if b"OPENSSH PRIVATE KEY" in data:
        raise CertificateError("is an OpenSSH key; give a PKCS#8, PKCS#1 or SEC1 PEM key")
    try:
        if b"ENCRYPTED" in data:
            raise TypeError
        key = serialization.load_pem_private_key(data, None)
    except TypeError:
        raise CertificateError("is encrypted; upload the key without a passphrase (e.g. "
                               "'openssl pkey -in key.pem -out plain.pem')") from None
    except (ValueError, UnsupportedAlgorithm):
        raise CertificateError("is not a parsable PEM private key") from None
    if not isinstance(key, rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey
                      | ed25519.Ed25519PrivateKey):
        raise CertificateError("holds an unsupported key type; use RSA, ECDSA or Ed25519")
    return key


def private_key_type(key: PrivateKey) -> str:
    return ssh.key_type(key.public_key())


def key_matches(cert: x509.Certificate, key: PrivateKey) -> bool:
    spki = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    try:
        cert_key = cert.public_key().public_bytes(*spki)
    except _LAZY_ERRORS:
        return False
    return cert_key == key.public_key().public_bytes(*spki)


def _text(value: str | bytes) -> str:
    return value if isinstance(value, str) else value.decode("utf-8", "replace")


def _attr(name: x509.Name, oid: x509.ObjectIdentifier) -> str:
    found = name.get_attributes_for_oid(oid)
    return _text(found[0].value) if found else ""


def _sans(cert: x509.Certificate) -> tuple[list[str], list[str]]:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return [], []
    ips = [str(ip) for ip in san.get_values_for_type(x509.IPAddress)]
    return list(san.get_values_for_type(x509.DNSName)), ips


@_guarded
def describe_tls(cert: x509.Certificate) -> TLSInfo:
    subject = cert.subject
    dns_names, ips = _sans(cert)
    return TLSInfo(
        subject_common_name=_attr(subject, NameOID.COMMON_NAME),
        dns_names=dns_names, ips=ips,
        not_before=cert.not_valid_before_utc, not_after=cert.not_valid_after_utc,
        key_usages=_key_usages(cert), extended_key_usages=_eku(cert),
        issuer_common_name=_attr(cert.issuer, NameOID.COMMON_NAME),
        serial_number=format(cert.serial_number, "x"),
        subject_organization=_attr(subject, NameOID.ORGANIZATION_NAME),
        subject_organizational_unit=_attr(subject, NameOID.ORGANIZATIONAL_UNIT_NAME),
        subject_locality=_attr(subject, NameOID.LOCALITY_NAME),
        subject_province=_attr(subject, NameOID.STATE_OR_PROVINCE_NAME),
        subject_country=_attr(subject, NameOID.COUNTRY_NAME),
    )
