"""Certificate authorities: members read off real certificates; garbage and non-CAs refused."""

from __future__ import annotations

import httpx

from tests.certs import make_cert


def test_members_are_derived_from_the_certificate(api: httpx.Client) -> None:
    pem = make_cert("Acme Root", days=730, eku=True)
    r = api.post("/certificate_authorities", json={"ca_pem": pem, "description": "acme"})
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["ca_pem"] == pem
    assert body["subject_common_name"] == "Acme Root"
    assert body["not_before"] == "2026-01-01T00:00:00Z"
    assert body["not_after"] == "2028-01-01T00:00:00Z"
    assert body["key_usages"] == ["digital_signature", "cert_sign", "crl_sign"]
    assert body["extended_key_usages"] == ["client_auth", "server_auth"]
    r = api.patch(f"/certificate_authorities/{body['id']}", json={"ca_pem": make_cert()})
    assert r.status_code == 400 and "ca_pem" in r.json()["msg"]


def test_garbage_and_non_ca_certificates_are_refused(api: httpx.Client) -> None:
    leaf = make_cert("leaf.example.com", ca=False)
    cases = {
        "not a pem": "exactly one",
        leaf: "not a CA",
        make_cert() + make_cert(): "exactly one",
        "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n": "parsable",
        "": "exactly one",
    }
    for pem, words in cases.items():
        r = api.post("/certificate_authorities", json={"ca_pem": pem})
        assert r.status_code == 400, pem[:30]
        assert "ca_pem" in r.json()["msg"] and words in r.json()["msg"]
    r = api.post("/certificate_authorities", json={})
    assert r.status_code == 400 and "ca_pem" in r.json()["msg"]
