"""Agent ingresses and reserved domains: names, derived DNS targets, certificate policies."""

from __future__ import annotations

import concurrent.futures
import uuid

import httpx
import pytest

from tests.domains.names import long_name
from tests.server import Server, start

REGIONS = ["us", "us-cal-1", "eu", "au", "ap", "jp", "sa", "in"]


def site() -> str:
    return f"{uuid.uuid4().hex[:8]}.example.com"


def test_agent_ingress_targets(api: httpx.Client) -> None:
    domain = f"connect.{site()}"
    r = api.post("/agent_ingresses", json={"domain": domain.upper(), "description": "acme"})
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["domain"] == domain
    assert body["ns_targets"] == [f"ns{i}.edgeway.localhost" for i in range(1, 5)]
    assert body["region_domains"] == [f"tunnel.{reg}.{domain}" for reg in REGIONS]
    assert body["certificate_management_policy"] is None
    assert body["certificate_management_status"] is None
    r = api.post("/agent_ingresses", json={"domain": domain + "."})
    assert r.status_code == 400 and r.json()["error_code"].endswith("_413")
    assert domain in r.json()["msg"]


@pytest.mark.parametrize("domain", ["", "nodot", "*.wild.example.com", "bad_char.example.com",
                                    "-lead.example.com", "a" * 64 + ".example.com",
                                    "x.edgeway.localhost", "1.2.3.4"])
def test_agent_ingress_refuses_bad_domains(api: httpx.Client, domain: str) -> None:
    r = api.post("/agent_ingresses", json={"domain": domain})
    assert r.status_code == 400, domain
    assert "domain" in r.json()["msg"]


def test_agent_ingress_policy(api: httpx.Client) -> None:
    r = api.post("/agent_ingresses", json={"domain": f"c.{site()}",
                                           "certificate_management_policy": {}})
    body = r.json()
    assert body["certificate_management_policy"] == {"authority": "letsencrypt",
                                                     "private_key_type": "rsa"}
    job = body["certificate_management_status"]["provisioning_job"]
    assert job["error_code"] is None and job["started_at"].endswith("Z") and job["msg"]
    r = api.patch(f"/agent_ingresses/{body['id']}", json={
        "certificate_management_policy": {"private_key_type": "ecdsa"}})
    assert r.json()["certificate_management_policy"]["private_key_type"] == "ecdsa"
    r = api.patch(f"/agent_ingresses/{body['id']}", json={"domain": "other.example.com"})
    assert r.status_code == 400 and "domain" in r.json()["msg"]


def test_platform_settings_shape_ingress_targets(tmp_path_factory: pytest.TempPathFactory
                                                 ) -> None:
    srv = start(tmp_path_factory.mktemp("custom"), None, "--regions", "eu,ap",
                "--name-servers", "a.dns.test,b.dns.test", "--base-domain", "tunnels.test")
    try:
        with srv.client() as c:
            body = c.post("/agent_ingresses", json={"domain": "connect.acme.test"}).json()
            assert body["ns_targets"] == ["a.dns.test", "b.dns.test"]
            assert body["region_domains"] == ["tunnel.eu.connect.acme.test",
                                              "tunnel.ap.connect.acme.test"]
            rd = c.post("/reserved_domains", json={"domain": "*.site.acme.test"}).json()
            assert rd["cname_target"].endswith(".cname.tunnels.test")
            assert c.post("/reserved_domains", json={"domain": "x.acme.test",
                                                     "region": "us"}).status_code == 400
    finally:
        assert srv.stop() == 0


def test_wildcard_reserved_domain(api: httpx.Client) -> None:
    domain = f"*.site1.{site()}"
    r = api.post("/reserved_domains", json={"domain": domain, "region": ""})
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["domain"] == domain and body["region"] == ""
    assert body["cname_target"].endswith(".cname.edgeway.localhost")
    assert body["acme_challenge_cname_target"].endswith(".acme.edgeway.localhost")
    assert body["certificate_management_policy"] == {"authority": "letsencrypt",
                                                     "private_key_type": "ecdsa"}
    assert body["certificate_management_status"]["renews_at"] is None
    assert body["certificate"] is None and body["resolves_to"] == []
    assert body["http_endpoint_configuration"] is None


def test_a_wildcard_whose_challenge_name_cannot_exist_is_refused(api: httpx.Client) -> None:
    """A wildcard's certificate needs _acme-challenge.<the name after '*.'>, a domain name
    too: at most 253 characters (a plain name may use all 253)."""
    suffix = site()
    for length, status in ((237, 201), (238, 400), (251, 400)):
        rest = long_name(length, suffix)
        r = api.post("/reserved_domains", json={"domain": f"*.{rest}"})
        assert r.status_code == status, (length, r.text)
        if status == 400:
            body = r.json()
            assert body["error_code"] == "ERR_EDGEWAY_448"
            assert body["details"]["member"] == "domain"
            assert body["msg"] == (f"Invalid value for 'domain': '*.{rest}' is too long for a "
                                   "wildcard domain: the name after '*.' may have at most 237 "
                                   f"characters (it has {length}), so that its certificate's "
                                   "_acme-challenge.<name> record fits in a domain name's 253")
    rest = long_name(252, suffix)
    r = api.post("/reserved_domains", json={"domain": f"*.{rest}"})
    assert r.status_code == 400 and r.json()["msg"] == (
        f"Invalid value for 'domain': '*.{rest}' is too long: a domain name has at most 253 "
        "characters, '*.' included")
    r = api.post("/reserved_domains", json={"domain": long_name(253, suffix),
                                            "certificate_management_policy": None})
    assert r.status_code == 201, r.text


def test_plain_and_platform_domains(api: httpx.Client) -> None:
    plain = api.post("/reserved_domains", json={"domain": f"www.{site()}"}).json()
    assert plain["cname_target"] and plain["acme_challenge_cname_target"] is None
    name = f"app-{uuid.uuid4().hex[:6]}.edgeway.localhost"
    owned = api.post("/reserved_domains", json={"domain": name}).json()
    assert owned["cname_target"] is None and owned["certificate_management_policy"] is None
    r = api.post("/reserved_domains", json={
        "domain": f"b{name}", "certificate_management_policy": {"authority": "letsencrypt"}})
    assert r.status_code == 400 and r.json()["error_code"].endswith("_439")
    for bad in ("*.x.edgeway.localhost", "edgeway.localhost", "*.com.", "a..b.com"):
        assert api.post("/reserved_domains", json={"domain": bad}).status_code == 400, bad


def test_reserved_twice_is_refused_even_concurrently(api: httpx.Client, server: Server) -> None:
    domain = f"race.{site()}"

    def reserve(_: int) -> int:
        with server.client() as c:
            return c.post("/reserved_domains", json={"domain": domain}).status_code

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        codes = list(pool.map(reserve, range(16)))
    assert sorted(codes) == [201] + [400] * 15
    r = api.post("/reserved_domains", json={"domain": domain.upper()})
    assert r.status_code == 400 and "already reserved" in r.json()["msg"]


def test_certificate_policy_rules_and_detach(api: httpx.Client) -> None:
    r = api.post("/reserved_domains", json={
        "domain": f"p.{site()}", "certificate_management_policy": {"authority": "acme-ca"}})
    assert r.status_code == 400 and r.json()["error_code"].endswith("_435")
    r = api.post("/reserved_domains", json={
        "domain": f"p.{site()}", "certificate_management_policy": {"private_key_type": "dsa"}})
    assert r.status_code == 400
    rd = api.post("/reserved_domains", json={
        "domain": f"p.{site()}", "certificate_management_policy": {"private_key_type": "rsa"}})
    rid = rd.json()["id"]
    assert rd.json()["certificate_management_policy"]["private_key_type"] == "rsa"
    r = api.delete(f"/reserved_domains/{rid}/certificate")
    assert r.status_code == 400 and r.json()["error_code"].endswith("_436")
    assert api.delete(f"/reserved_domains/{rid}/certificate_management_policy").status_code == 204
    got = api.get(f"/reserved_domains/{rid}").json()
    assert got["certificate_management_policy"] is None
    assert got["certificate_management_status"] is None
    assert api.delete(f"/reserved_domains/{rid}/certificate").status_code == 204
    assert api.delete(f"/reserved_domains/rd_{'0' * 27}/certificate").status_code == 404


def test_resolves_to_and_region(api: httpx.Client) -> None:
    rd = api.post("/reserved_domains", json={"domain": f"r.{site()}", "region": "eu",
                                             "resolves_to": [{"value": "eu"}]}).json()
    assert rd["region"] == "eu" and rd["resolves_to"] == [{"value": "eu"}]
    r = api.patch(f"/reserved_domains/{rd['id']}", json={"resolves_to": []})
    assert r.json()["resolves_to"] == [{"value": "eu"}]
    r = api.patch(f"/reserved_domains/{rd['id']}", json={"resolves_to": [{"value": "mars"}]})
    assert r.status_code == 400 and "resolves_to[0].value" in r.json()["msg"]
    assert api.post("/reserved_domains", json={"domain": f"r.{site()}",
                                               "region": "mars"}).status_code == 400
