"""Certificate authorities uploaded for mutual TLS; their members are read off the PEM."""

from __future__ import annotations

from typing import Any

from edgeway.catalog.model import Context, Field, Kind, standard
from edgeway.errors import Invalid
from edgeway.pki import x509


def _ca_pem(value: str, _ctx: Context) -> str:
    try:
        info = x509.describe(x509.load_one(value))
    except x509.CertificateError as exc:
        raise Invalid("ca_pem", str(exc), 228) from None
    if not info.is_ca:
        raise Invalid("ca_pem", "is not a CA certificate: its basic constraints do not say "
                      "CA:TRUE", 228)
    return value


def _derive(doc: dict[str, Any], _ctx: Context, old: dict[str, Any] | None) -> dict[str, Any]:
    if old is not None:
        return {}
    info = x509.describe(x509.load_one(doc["ca_pem"]))
    return {
        "subject_common_name": info.subject_common_name,
        "not_before": x509.rfc3339(info.not_before),
        "not_after": x509.rfc3339(info.not_after),
        "key_usages": info.key_usages,
        "extended_key_usages": info.extended_key_usages,
    }


def _derived(name: str, typ: Any, doc: str) -> Field:
    return Field(name, typ, doc, create="no", default=list if typ is list[str] else "")


CERTIFICATE_AUTHORITIES = Kind(
    collection="certificate_authorities", prefix="ca", list_key="certificate_authorities",
    title="CertificateAuthority",
    describe="CA certificates that client certificates are checked against (mutual TLS).",
    fields=(
        *standard(),
        Field("ca_pem", str, "the CA certificate, PEM", create="required", check=_ca_pem),
        _derived("subject_common_name", str, "subject common name of the certificate"),
        _derived("not_before", str, "start of validity, RFC 3339"),
        _derived("not_after", str, "end of validity, RFC 3339"),
        _derived("key_usages", list[str], "key usages of the certificate"),
        _derived("extended_key_usages", list[str], "extended key usages of the certificate"),
    ),
    derive=_derive,
)

KINDS = (CERTIFICATE_AUTHORITIES,)
