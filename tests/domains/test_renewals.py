"""A managed certificate another reserved domain was given (a wildcard's, for one of its
subdomains) outlives its owner's renewal, and a reference to a certificate that is gone (as
an earlier version's renewal left them) is a 400 naming ``certificate_id``, not a 500."""

from __future__ import annotations

import time

from tests.domains import db
from tests.domains.conftest import Domains
from tests.domains.test_acme import QUEUED, issued, manage, rd, until
from tests.domains.tlsprobe import UploadCA, presented


def test_a_renewal_keeps_the_certificate_another_domain_uses(domains: Domains) -> None:
    wild = manage(domains, "*.share.acme.example", acme_cname=True, timeout=QUEUED)
    shared = wild["certificate"]["id"]
    with domains.server.client() as api:
        r = api.post("/reserved_domains", json={
            "domain": "www.share.acme.example", "certificate_management_policy": None,
            "certificate_id": shared})
        assert r.status_code == 201, r.text
        www = r.json()
        # a new key type: the wildcard's certificate is ordered again and replaced
        r = api.patch(f"/reserved_domains/{wild['id']}", json={
            "certificate_management_policy": {"authority": "letsencrypt",
                                              "private_key_type": "rsa"}})
        assert r.status_code == 200, r.text
    renewed = until(lambda: rd(domains, wild["id"]), lambda d: issued(d) and
                    d["certificate"]["id"] != shared, timeout=QUEUED)
    with domains.server.client() as api:
        assert api.get(f"/tls_certificates/{shared}").status_code == 200
        assert api.get(f"/reserved_domains/{www['id']}").json()["certificate"]["id"] == shared
        # (still the edge's certificate for the subdomain, not the platform CA's)
        cert = api.get(f"/tls_certificates/{shared}").json()
        want = int(cert["serial_number"].replace(":", ""), 16)
        root, deadline = domains.pebble.root(), time.monotonic() + 10
        while presented(domains.server.https_port, "www.share.acme.example").serial_number \
                != want:
            assert time.monotonic() < deadline, "the subdomain lost its certificate"
            time.sleep(0.2)
        presented(domains.server.https_port, "www.share.acme.example", root)
        # once nothing uses it, the replaced certificate can go like any other
        assert api.delete(f"/reserved_domains/{www['id']}").status_code == 204
        assert api.delete(f"/tls_certificates/{shared}").status_code == 204
        assert api.delete(f"/reserved_domains/{wild['id']}").status_code == 204
        until(lambda: {"status": api.get(renewed["certificate"]["uri"]).status_code},
              lambda d: d["status"] == 404, QUEUED)


def test_a_reference_to_a_deleted_certificate_is_a_400(domains: Domains) -> None:
    chain, key = UploadCA().leaf("dangling.acme.example")
    with domains.server.client() as api:
        cert_id = api.post("/tls_certificates", json={"certificate_pem": chain,
                                                      "private_key_pem": key}).json()["id"]
        made = api.post("/reserved_domains", json={
            "domain": "dangling.acme.example", "certificate_id": cert_id}).json()
        assert made["certificate"]["id"] == cert_id
        # what an earlier version's renewal left: the domain still names a deleted certificate
        assert db.execute(domains.server, "DELETE FROM tls_certificates WHERE id = ?",
                          cert_id) == 1
        r = api.patch(f"/reserved_domains/{made['id']}", json={
            "certificate_management_policy": {"authority": "letsencrypt"}})
        assert r.status_code == 400, r.text
        body = r.json()
        assert body["error_code"] == "ERR_EDGEWAY_215"
        assert body["details"]["member"] == "certificate_id"
        assert body["msg"] == (f"Invalid value for 'certificate_id': the certificate "
                               f"'{cert_id}' does not exist any more; set certificate_id to "
                               "null or to another certificate")
        r = api.patch(f"/reserved_domains/{made['id']}", json={"certificate_id": None})
        assert r.status_code == 200 and r.json()["certificate"] is None
        assert api.delete(f"/reserved_domains/{made['id']}").status_code == 204
