"""pki.x509 for TLS certificates: chains (leaf first), private keys in each PEM form, the
members read off the leaf, and fuzzers proving only ``CertificateError`` comes out."""

from __future__ import annotations

import base64
import contextlib
import textwrap
import warnings
from datetime import UTC, datetime, timedelta

import pytest
from cryptography import x509 as cx509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.x509.oid import NameOID
from hypothesis import given, settings
from hypothesis import strategies as st

from edgeway.pki import x509
from tests.pki.material import cert_pem, key_pem, new_key, tls_chain

CHAIN = tls_chain()


def test_chain_members_and_key_match() -> None:
    certs = x509.load_chain(CHAIN.pem)
    assert len(certs) == 2 and certs[0] == CHAIN.leaf
    info = x509.describe_tls(certs[0])
    assert info.subject_common_name == "app.example.com"
    assert info.dns_names == ["app.example.com", "*.app.example.com"]
    assert info.ips == ["192.0.2.10"]
    assert info.issuer_common_name == "Test Intermediate" and info.serial_number == "beef01"
    assert (info.subject_organization, info.subject_organizational_unit, info.subject_locality,
            info.subject_province, info.subject_country) == ("Acme", "Edge", "Lyon", "Rhone",
                                                             "FR")
    assert info.key_usages == ["digital_signature", "key_encipherment"]
    assert info.extended_key_usages == ["server_auth"]
    key = x509.load_private_key(CHAIN.key)
    assert x509.key_matches(certs[0], key) and x509.private_key_type(key) == "ecdsa"
    assert not x509.key_matches(certs[0], new_key("ecdsa"))
    assert not x509.key_matches(certs[1], key)


def test_chain_refusals() -> None:
    wrong_order = cert_pem(CHAIN.intermediate) + cert_pem(CHAIN.leaf)
    unrelated = cert_pem(CHAIN.leaf) + cert_pem(tls_chain().intermediate)
    cases = {
        "": "1 to 10", "garbage": "1 to 10", cert_pem(CHAIN.root) * 11: "1 to 10",
        wrong_order: "certificate 2 did not issue certificate 1",
        unrelated: "did not issue",
        "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n": "parsable",
    }
    for text, words in cases.items():
        with pytest.raises(x509.CertificateError, match=words):
            x509.load_chain(text)
    assert len(x509.load_chain(cert_pem(CHAIN.leaf))) == 1


@pytest.mark.parametrize("kind", ["rsa", "ecdsa", "ed25519"])
def test_private_key_forms(kind: str) -> None:
    key = new_key(kind)
    forms = [key_pem(key)]
    if kind != "ed25519":
        forms.append(key.private_bytes(serialization.Encoding.PEM,
                                       serialization.PrivateFormat.TraditionalOpenSSL,
                                       serialization.NoEncryption()).decode())
    for text in forms:
        assert x509.private_key_type(x509.load_private_key(text)) == kind


def test_private_key_refusals() -> None:
    key = new_key("ecdsa")
    encrypted = key.private_bytes(serialization.Encoding.PEM,
                                  serialization.PrivateFormat.PKCS8,
                                  serialization.BestAvailableEncryption(b"pw")).decode()
    openssh = key.private_bytes(serialization.Encoding.PEM,
                                serialization.PrivateFormat.OpenSSH,
                                serialization.NoEncryption()).decode()
    cases = {
        encrypted: "encrypted", openssh: "OpenSSH key", key_pem(key) * 2: "exactly one",
        cert_pem(CHAIN.leaf): "exactly one", "": "exactly one",
        "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n": "parsable",
    }
    for text, words in cases.items():
        with pytest.raises(x509.CertificateError, match=words):
            x509.load_private_key(text)


def _armor(label: str, data: bytes) -> str:
    body = "\n".join(textwrap.wrap(base64.b64encode(data).decode(), 64))
    return f"-----BEGIN {label}-----\n{body}\n-----END {label}-----\n"


LABELS = st.sampled_from(["CERTIFICATE", "PRIVATE KEY", "RSA PRIVATE KEY", "EC PRIVATE KEY",
                          "ENCRYPTED PRIVATE KEY", "PUBLIC KEY"])
TEXTS = st.one_of(st.text(max_size=300), st.builds(_armor, LABELS, st.binary(max_size=400)))


def _both(text: str) -> None:
    for parse in (x509.load_chain, x509.load_private_key):
        with contextlib.suppress(x509.CertificateError):
            parse(text)


@settings(max_examples=500, deadline=None)
@given(TEXTS)
def test_parsers_raise_only_their_own_error(text: str) -> None:
    _both(text)


LEAF_DER = CHAIN.leaf.public_bytes(serialization.Encoding.DER)
KEY_DER = CHAIN.leaf_key.private_bytes(serialization.Encoding.DER,
                                       serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption())


@settings(max_examples=500, deadline=None)
@given(st.integers(0, 10_000), st.binary(min_size=1, max_size=6))
def test_damaged_certificates_and_keys_raise_only_their_own_error(at: int, junk: bytes) -> None:
    for label, der in (("CERTIFICATE", LEAF_DER), ("PRIVATE KEY", KEY_DER)):
        damaged = bytearray(der)
        pos = at % len(damaged)
        damaged[pos:pos + len(junk)] = junk
        text = _armor(label, bytes(damaged))
        try:
            certs = x509.load_chain(text)
            x509.describe_tls(certs[0])
            x509.key_matches(certs[0], x509.load_private_key(CHAIN.key))
        except x509.CertificateError:
            pass
        with contextlib.suppress(x509.CertificateError):
            x509.describe(x509.load_one(text))
        _both(text)


def test_a_damaged_version_field_is_a_certificate_error() -> None:
    """Found by the test above: cryptography raises InvalidVersion (not a ValueError) for a
    version number other than v1/v3."""
    der = bytearray(LEAF_DER)
    at = der.find(bytes([0xA0, 0x03, 0x02, 0x01, 0x02]))  # [0] EXPLICIT INTEGER 2 (v3)
    assert at > 0
    der[at + 4] = 1  # v2
    text = _armor("CERTIFICATE", bytes(der))
    for load in (x509.load_chain, x509.load_one):
        with pytest.raises(x509.CertificateError, match="not a valid X509 version"):
            load(text)


@pytest.mark.parametrize("tag", [0xA3, 0xA5])  # [3] x400Address, [5] EDIPartyName
def test_san_name_types_the_library_cannot_read_are_certificate_errors(tag: int) -> None:
    """Found by the damaged-certificate test: cryptography raises UnsupportedGeneralNameType
    (not a ValueError) when such a name is read."""
    der = bytearray(LEAF_DER)
    at = der.find(b"\x82\x0fapp.example.com")  # the first SAN: dNSName app.example.com
    assert at > 0
    der[at] = tag
    certs = x509.load_chain(_armor("CERTIFICATE", bytes(der)))
    with pytest.raises(x509.CertificateError, match="malformed name or extension"):
        x509.describe_tls(certs[0])


def test_a_name_attribute_of_the_wrong_length_is_read_as_it_is() -> None:
    """Found by the damaged-certificate test (a locality OID damaged into countryName): the
    library warns (a UserWarning, an error under this suite) for a country that is not two
    letters. Such certificates are in use, so they are described, not refused."""
    key = new_key("ecdsa")
    with warnings.catch_warnings():  # building one warns too
        warnings.simplefilter("ignore", UserWarning)
        name = cx509.Name([cx509.NameAttribute(NameOID.COMMON_NAME, "legacy.example.com"),
                           cx509.NameAttribute(NameOID.COUNTRY_NAME, "USA", _validate=False)])
    now = datetime.now(UTC)
    cert = (cx509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(7)
            .not_valid_before(now).not_valid_after(now + timedelta(days=1))
            .sign(key, hashes.SHA256()))
    pem = cert_pem(cert)
    info = x509.describe_tls(x509.load_chain(pem)[0])
    assert (info.subject_country, info.subject_common_name) == ("USA", "legacy.example.com")
    assert x509.describe(x509.load_one(pem)).subject_common_name == "legacy.example.com"
