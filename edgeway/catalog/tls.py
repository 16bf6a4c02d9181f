"""TLS certificates uploaded with their private keys, for serving HTTPS and TLS endpoints.

The members the API reports are read off the leaf certificate (``pki.x509``). The private key
must match the leaf; it is stored sealed with the platform secret key (``ctx.sealer``, context
``SEAL_CONTEXT``) in ``private_key_pem`` and never rendered.
"""

from __future__ import annotations

from typing import Any

import msgspec

from edgeway.catalog.model import Context, Field, Kind, standard
from edgeway.errors import Invalid
from edgeway.pki import x509
from edgeway.pki.seal import TLS_KEYS

SEAL_CONTEXT = TLS_KEYS


class SubjectAlternativeNames(msgspec.Struct, kw_only=True):
    dns_names: list[str]
    ips: list[str]


def _chain(value: str) -> list[Any]:
    try:
        return x509.load_chain(value)
    except x509.CertificateError as exc:
        raise Invalid("certificate_pem", str(exc), 215) from None


def _key(value: str) -> x509.PrivateKey:
    try:
        return x509.load_private_key(value)
    except x509.CertificateError as exc:
        raise Invalid("private_key_pem", str(exc), 215) from None


def _certificate_pem(value: str, _ctx: Context) -> str:
    _chain(value)
    return value


def _private_key_pem(value: str, _ctx: Context) -> str:
    _key(value)
    return value


def _describe(doc: dict[str, Any]) -> dict[str, Any]:
    leaf = _chain(doc["certificate_pem"])[0]
    key = _key(doc["private_key_pem"])
    if not x509.key_matches(leaf, key):
        raise Invalid("private_key_pem", "does not match the certificate: its public key is "
                      "not the one in the leaf (the first certificate of certificate_pem)", 215)
    try:
        info = x509.describe_tls(leaf)
    except x509.CertificateError as exc:
        raise Invalid("certificate_pem", str(exc), 215) from None
    return {
        "subject_common_name": info.subject_common_name,
        "subject_alternative_names": {"dns_names": info.dns_names, "ips": info.ips},
        "issued_at": None,
        "not_before": x509.rfc3339(info.not_before), "not_after": x509.rfc3339(info.not_after),
        "key_usages": info.key_usages, "extended_key_usages": info.extended_key_usages,
        "private_key_type": x509.private_key_type(key),
        "issuer_common_name": info.issuer_common_name, "serial_number": info.serial_number,
        "subject_organization": info.subject_organization,
        "subject_organizational_unit": info.subject_organizational_unit,
        "subject_locality": info.subject_locality, "subject_province": info.subject_province,
        "subject_country": info.subject_country,
    }


def _derive(doc: dict[str, Any], ctx: Context, old: dict[str, Any] | None) -> dict[str, Any]:
    if old is not None:
        return {}
    out = _describe(doc)
    out["private_key_pem"] = ctx.sealer.seal(doc["private_key_pem"].encode(), SEAL_CONTEXT)
    return out


def _out(name: str, typ: Any, doc: str, default: Any = "") -> Field:
    return Field(name, typ, doc, create="no", default=default)


def _no_sans() -> dict[str, list[str]]:
    return {"dns_names": [], "ips": []}


TLS_CERTIFICATES = Kind(
    collection="tls_certificates", prefix="cert", list_key="tls_certificates",
    title="TLSCertificate",
    describe="Uploaded TLS certificates (leaf first, then intermediates) and their keys.",
    fields=(
        *standard(),
        Field("certificate_pem", str, "the leaf certificate, then any intermediates, PEM",
              create="required", check=_certificate_pem),
        Field("private_key_pem", str, "the leaf's unencrypted PEM private key; stored sealed, "
              "never returned", create="required", check=_private_key_pem, response=False),
        _out("subject_common_name", str, "subject common name of the leaf"),
        _out("subject_alternative_names", SubjectAlternativeNames,
             "DNS names and IP addresses the certificate is valid for", _no_sans),
        _out("issued_at", str | None, "when the platform issued it; null for uploads", None),
        _out("not_before", str, "start of validity, RFC 3339"),
        _out("not_after", str, "end of validity, RFC 3339"),
        _out("key_usages", list[str], "key usages of the leaf", list),
        _out("extended_key_usages", list[str], "extended key usages of the leaf", list),
        _out("private_key_type", str, "rsa, ecdsa or ed25519"),
        _out("issuer_common_name", str, "common name of the issuer"),
        _out("serial_number", str, "serial number, hexadecimal"),
        _out("subject_organization", str, "subject organization (O)"),
        _out("subject_organizational_unit", str, "subject organizational unit (OU)"),
        _out("subject_locality", str, "subject locality (L)"),
        _out("subject_province", str, "subject state or province (ST)"),
        _out("subject_country", str, "subject country (C)"),
    ),
    derive=_derive,
)

KINDS = (TLS_CERTIFICATES,)
