"""Uploaded certificates (``reserved_domains.certificate_id``): checked against the domain,
served by SNI for the domain, its wildcard's names and the HTTPS and TLS edges on them, and
detached or refused with clear errors."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from tests.domains.conftest import Domains
from tests.domains.tlsprobe import UploadCA, presented, serial


@pytest.fixture(scope="module")
def ca() -> UploadCA:
    return UploadCA()


def upload(domains: Domains, chain: str, key: str) -> str:
    with domains.server.client() as api:
        r = api.post("/tls_certificates", json={"certificate_pem": chain,
                                                "private_key_pem": key})
        assert r.status_code == 201, r.text
        return str(r.json()["id"])


def until(check: Callable[[], bool], timeout: float = 10) -> bool:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True


def test_served_for_its_domain_then_detached(domains: Domains, ca: UploadCA) -> None:
    chain, key = ca.leaf("shop.upload.example")
    cert_id = upload(domains, chain, key)
    port = domains.server.https_port
    with domains.server.client() as api:
        r = api.post("/reserved_domains", json={"domain": "shop.upload.example",
                                                "certificate_id": cert_id})
        assert r.status_code == 201, r.text
        rd = r.json()
        assert rd["certificate"] == {"id": cert_id, "uri": f"{domains.server.base_url}"
                                     f"/tls_certificates/{cert_id}"}
        assert rd["certificate_management_policy"] is None
        assert rd["certificate_management_status"] is None
        # verified against the uploader's CA, for the name: the uploaded leaf itself
        assert presented(port, "shop.upload.example", ca.pem).serial_number == serial(chain)
        # in use: the certificate cannot be deleted
        assert api.delete(f"/tls_certificates/{cert_id}").status_code == 400
        assert api.delete(f"/reserved_domains/{rd['id']}/certificate").status_code == 204
        assert api.get(f"/reserved_domains/{rd['id']}").json()["certificate"] is None
        assert until(lambda: "CN=Edgeway platform CA" in presented(
            port, "shop.upload.example").issuer.rfc4514_string())
        assert api.delete(f"/tls_certificates/{cert_id}").status_code == 204
        api.delete(f"/reserved_domains/{rd['id']}")


def test_a_wildcard_certificate_serves_edges_on_its_names(domains: Domains,
                                                          ca: UploadCA) -> None:
    chain, key = ca.leaf("*.apps.upload.example")
    cert_id = upload(domains, chain, key)
    port = domains.server.https_port
    with domains.server.client() as api:
        rd = api.post("/reserved_domains", json={"domain": "*.apps.upload.example",
                                                 "certificate_id": cert_id}).json()
        backend = api.post("/backends/http_response", json={
            "body": "from the edge", "status_code": 200, "headers": {}}).json()
        https = api.post("/edges/https", json={
            "hostports": [f"web.apps.upload.example:{port}"]}).json()
        api.post(f"/edges/https/{https['id']}/routes", json={
            "match_type": "path_prefix", "match": "/",
            "backend": {"backend_id": backend["id"]}})
        tls = api.post("/edges/tls", json={
            "hostports": [f"db.apps.upload.example:{port}"],
            "tls_termination": {"terminate_at": "edge"}}).json()
    for name in ("web.apps.upload.example", "db.apps.upload.example",
                 "any.apps.upload.example"):
        assert presented(port, name, ca.pem).serial_number == serial(chain), name
    with domains.server.client() as api:
        api.delete(f"/edges/https/{https['id']}")
        api.delete(f"/edges/tls/{tls['id']}")
        api.delete(f"/backends/http_response/{backend['id']}")
        api.delete(f"/reserved_domains/{rd['id']}")


def test_a_certificate_that_does_not_fit_is_refused(domains: Domains, ca: UploadCA) -> None:
    other = upload(domains, *ca.leaf("other.upload.example", "*.upload.example"))
    expired = upload(domains, *ca.leaf("old.upload.example", days=-1, start=-5))
    with domains.server.client() as api:
        for domain, cert, words in (
                ("a.b.upload.example", other, "does not cover 'a.b.upload.example'"),
                ("*.x.upload.example", other, "does not cover"),
                ("old.upload.example", expired, "expired on")):
            r = api.post("/reserved_domains", json={"domain": domain, "certificate_id": cert})
            assert r.status_code == 400 and words in r.json()["msg"], r.text
            assert "certificate_id" in r.json()["msg"]
        both = api.post("/reserved_domains", json={
            "domain": "sub.upload.example", "certificate_id": other,
            "certificate_management_policy": {"authority": "letsencrypt"}})
        assert both.status_code == 400 and both.json()["error_code"] == "ERR_EDGEWAY_434"
        # a wildcard certificate covers a name one label under it
        rd = api.post("/reserved_domains", json={"domain": "sub.upload.example",
                                                 "certificate_id": other}).json()
        assert rd["certificate"]["id"] == other
        assert rd["certificate_management_policy"] is None
        bad = api.patch(f"/reserved_domains/{rd['id']}", json={"certificate_id": expired})
        assert bad.status_code == 400 and "does not cover" in bad.json()["msg"]
        mixed = api.patch(f"/reserved_domains/{rd['id']}", json={
            "certificate_management_policy": {"authority": "letsencrypt"}})
        assert mixed.status_code == 400 and mixed.json()["error_code"] == "ERR_EDGEWAY_434"
        assert api.get(f"/reserved_domains/{rd['id']}").json()["certificate"]["id"] == other
        api.delete(f"/reserved_domains/{rd['id']}")
        for cert in (other, expired):
            assert api.delete(f"/tls_certificates/{cert}").status_code == 204
