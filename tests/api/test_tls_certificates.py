"""TLS certificates over HTTP: members read off the leaf of an uploaded chain, the key matched
against it and stored sealed (never returned), and every refusal naming its member."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from cryptography.hazmat.primitives import serialization

from tests.pki.material import cert_pem, key_pem, new_key, stored_doc, tls_chain
from tests.server import Server

MEMBERS = {"id", "uri", "created_at", "description", "metadata", "certificate_pem",
           "subject_common_name", "subject_alternative_names", "issued_at", "not_before",
           "not_after", "key_usages", "extended_key_usages", "private_key_type",
           "issuer_common_name", "serial_number", "subject_organization",
           "subject_organizational_unit", "subject_locality", "subject_province",
           "subject_country"}


def refused(r: httpx.Response, member: str, words: str, code: int = 215) -> None:
    assert r.status_code == 400, r.text
    body = r.json()
    assert body["error_code"].endswith(f"_{code}"), body
    assert f"'{member}'" in body["msg"] and words in body["msg"], body
    assert "PRIVATE KEY-----" not in body["msg"]


@pytest.mark.parametrize("leaf_kind", ["ecdsa", "rsa", "ed25519"])
def test_members_are_read_off_the_leaf(api: httpx.Client, server: Server,
                                       leaf_kind: str) -> None:
    chain = tls_chain(leaf_kind)
    r = api.post("/tls_certificates", json={"certificate_pem": chain.pem,
                                            "private_key_pem": chain.key, "description": "app"})
    assert r.status_code == 201, r.text
    made = r.json()
    assert set(made) == MEMBERS
    assert made["certificate_pem"] == chain.pem and made["issued_at"] is None
    assert made["subject_alternative_names"] == {
        "dns_names": ["app.example.com", "*.app.example.com"], "ips": ["192.0.2.10"]}
    assert {k: made[k] for k in ("subject_common_name", "issuer_common_name", "serial_number",
                                 "subject_organization", "subject_organizational_unit",
                                 "subject_locality", "subject_province", "subject_country",
                                 "private_key_type", "not_before", "not_after")} == {
        "subject_common_name": "app.example.com", "issuer_common_name": "Test Intermediate",
        "serial_number": "beef01", "subject_organization": "Acme",
        "subject_organizational_unit": "Edge", "subject_locality": "Lyon",
        "subject_province": "Rhone", "subject_country": "FR", "private_key_type": leaf_kind,
        "not_before": "2026-01-01T00:00:00Z", "not_after": "2026-04-01T00:00:00Z"}
    assert made["key_usages"] == ["digital_signature", "key_encipherment"]
    assert made["extended_key_usages"] == ["server_auth"]
    assert api.get(f"/tls_certificates/{made['id']}").json() == made
    assert "private_key_pem" not in api.get("/tls_certificates").json()["tls_certificates"][0]
    stored = stored_doc(server, "tls_certificates", made["id"])
    assert stored["private_key_pem"].startswith("v1:") and "PRIVATE KEY" not in str(stored)


def test_a_leaf_alone_is_accepted_and_the_key_must_be_the_leafs(api: httpx.Client) -> None:
    chain = tls_chain()
    r = api.post("/tls_certificates", json={"certificate_pem": cert_pem(chain.intermediate),
                                            "private_key_pem": chain.key})
    refused(r, "private_key_pem", "does not match")
    r = api.post("/tls_certificates", json={"certificate_pem": cert_pem(chain.leaf),
                                            "private_key_pem": chain.key})
    assert r.status_code == 201, r.text


def _encrypted(key: Any) -> str:
    return str(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                 serialization.BestAvailableEncryption(b"pw")).decode())


def test_refusals_name_the_member(api: httpx.Client) -> None:
    chain = tls_chain()
    wrong_order = cert_pem(chain.intermediate) + cert_pem(chain.leaf)
    cases: list[tuple[dict[str, str], str, str]] = [
        ({"certificate_pem": chain.pem, "private_key_pem": key_pem(new_key("ecdsa"))},
         "private_key_pem", "does not match"),
        ({"certificate_pem": wrong_order, "private_key_pem": chain.key}, "certificate_pem",
         "did not issue"),
        ({"certificate_pem": "garbage", "private_key_pem": chain.key}, "certificate_pem",
         "CERTIFICATE"),
        ({"certificate_pem": "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----",
          "private_key_pem": chain.key}, "certificate_pem", "parsable"),
        ({"certificate_pem": chain.pem, "private_key_pem": "garbage"}, "private_key_pem",
         "PEM private key"),
        ({"certificate_pem": chain.pem, "private_key_pem": _encrypted(chain.leaf_key)},
         "private_key_pem", "encrypted"),
        ({"certificate_pem": chain.pem, "private_key_pem": chain.key * 2}, "private_key_pem",
         "exactly one"),
    ]
    for body, member, words in cases:
        refused(api.post("/tls_certificates", json=body), member, words)
    for missing in ("certificate_pem", "private_key_pem"):
        body = {"certificate_pem": chain.pem, "private_key_pem": chain.key}
        del body[missing]
        refused(api.post("/tls_certificates", json=body), missing, "required", 1405)


def test_only_description_and_metadata_change(api: httpx.Client) -> None:
    chain = tls_chain()
    made = api.post("/tls_certificates", json={"certificate_pem": chain.pem,
                                               "private_key_pem": chain.key}).json()
    r = api.patch(f"/tls_certificates/{made['id']}", json={"description": "d", "metadata": "m"})
    assert r.status_code == 200 and r.json() == {**made, "description": "d", "metadata": "m"}
    for member in ("certificate_pem", "private_key_pem"):
        r = api.patch(f"/tls_certificates/{made['id']}", json={member: chain.pem})
        assert r.status_code == 400 and r.json()["error_code"].endswith("_214")
        assert member in r.json()["msg"]
