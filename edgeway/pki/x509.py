"""Parse uploaded X.509 certificates and derive the members the API reports about them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

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


def load_one(pem: str) -> x509.Certificate:
    """Exactly one PEM certificate; anything else is a ``CertificateError``."""
    data = pem.encode()
    count = data.count(b"-----BEGIN CERTIFICATE-----")
    if count != 1:
        raise CertificateError("must hold exactly one PEM 'CERTIFICATE' block"
                               f" (found {count})")
    try:
        return x509.load_pem_x509_certificate(data)
    except ValueError as exc:
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
