"""Managed certificates from a real ACME server (Pebble): a plain domain through http-01, a
wildcard through dns-01 (the user's ``_acme-challenge`` CNAME into the built-in DNS), each
then served and verified against Pebble's root; a broken CNAME reported as DNS_ERROR with a
retry time, then issued once a DNS check sees it fixed; a restart keeping the certificates;
a renewal when the renewal window is reached. One Pebble and one server per backend."""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.dashboard.visitor import signed_in
from tests.domains.conftest import Domains
from tests.domains.resolver import udp_and_tcp_port
from tests.domains.tlsprobe import presented
from tests.server import start

TIMEOUT = 30
# The manager runs one order at a time, and an order waits up to 30 s for its challenge to
# show in DNS: a job queued behind another test's order may start that much later.
QUEUED = 3 * TIMEOUT


def rd(domains: Domains, id_: str) -> dict[str, Any]:
    with domains.server.client() as api:
        out: dict[str, Any] = api.get(f"/reserved_domains/{id_}").json()
    return out


T = TypeVar("T")


def until(get: Callable[[], T], holds: Callable[[T], bool], timeout: float = TIMEOUT) -> T:
    deadline = time.monotonic() + timeout
    while True:
        doc = get()
        if holds(doc):
            return doc
        if time.monotonic() > deadline:
            raise AssertionError(f"still not so after {timeout} s: {doc}")
        time.sleep(0.2)


def issued(doc: dict[str, Any]) -> bool:
    status = doc["certificate_management_status"]
    return doc["certificate"] is not None and status["provisioning_job"] is None


def when(text: str) -> float:
    return datetime.fromisoformat(text).timestamp()


def manage(domains: Domains, domain: str, cname: str | None = None,
           acme_cname: bool = False, timeout: float = TIMEOUT) -> dict[str, Any]:
    """Reserve without a policy, create the user's records, then turn management on."""
    with domains.server.client() as api:
        made = api.post("/reserved_domains", json={
            "domain": domain, "certificate_management_policy": None}).json()
        if cname:
            domains.resolver.cnames[cname] = made["cname_target"]
        if acme_cname:
            bare = domain.removeprefix("*.")
            domains.resolver.cnames[f"_acme-challenge.{bare}"] = \
                made["acme_challenge_cname_target"]
        r = api.patch(f"/reserved_domains/{made['id']}", json={
            "certificate_management_policy": {"authority": "letsencrypt"}})
        assert r.status_code == 200, r.text
    return until(lambda: rd(domains, made["id"]), issued, timeout)


@pytest.fixture(scope="module")
def plain(domains: Domains) -> dict[str, Any]:
    return manage(domains, "app.acme.example", cname="app.acme.example")


@pytest.fixture(scope="module")
def wildcard(domains: Domains) -> dict[str, Any]:
    return manage(domains, "*.wild.acme.example", acme_cname=True)


def test_a_plain_domain_through_http01_is_served(domains: Domains,
                                                 plain: dict[str, Any]) -> None:
    status = plain["certificate_management_status"]
    assert plain["certificate_management_policy"] == {"authority": "letsencrypt",
                                                      "private_key_type": "ecdsa"}
    renews = when(status["renews_at"])
    assert 3600 - 600 - 120 < renews - time.time() <= 3600 - 600  # an hour's cert, 10 min
    with domains.server.client() as api:
        cert = api.get(f"/tls_certificates/{plain['certificate']['id']}").json()
    assert cert["issued_at"] is not None and cert["private_key_type"] == "ecdsa"
    assert cert["subject_alternative_names"]["dns_names"] == ["app.acme.example"]
    leaf = presented(domains.server.https_port, "app.acme.example", domains.pebble.root())
    assert format(leaf.serial_number, "x") == cert["serial_number"].replace(":", "").lower() \
        .lstrip("0")
    assert "Pebble Intermediate" in leaf.issuer.rfc4514_string()


def test_a_wildcard_through_dns01_is_served(domains: Domains,
                                            wildcard: dict[str, Any]) -> None:
    root = domains.pebble.root()
    for name in ("a.wild.acme.example", "other.wild.acme.example"):
        leaf = presented(domains.server.https_port, name, root)
        assert "Pebble Intermediate" in leaf.issuer.rfc4514_string()
    with domains.server.client() as api:
        cert = api.get(f"/tls_certificates/{wildcard['certificate']['id']}").json()
    assert cert["subject_alternative_names"]["dns_names"] == ["*.wild.acme.example"]


def test_a_broken_cname_is_a_dns_error_until_fixed(domains: Domains) -> None:
    domains.resolver.cnames["_acme-challenge.broken.acme.example"] = "wrong.example.net"
    with domains.server.client() as api:
        made = api.post("/reserved_domains", json={"domain": "*.broken.acme.example"}).json()
    target = made["acme_challenge_cname_target"]
    doc = until(lambda: rd(domains, made["id"]), lambda d: (
        d["certificate_management_status"]["provisioning_job"] or {}).get("error_code")
        == "DNS_ERROR")
    job = doc["certificate_management_status"]["provisioning_job"]
    assert job["msg"] == ("the CNAME of _acme-challenge.broken.acme.example points to "
                          f"wrong.example.net, expected {target}")
    assert when(job["retries_at"]) - when(job["started_at"]) == 60
    assert doc["certificate"] is None
    with signed_in(domains.server) as browser:  # (the dashboard's overview says so)
        page = browser.get("/dashboard/").text
        jobs = page.split('id="needs-jobs"', 1)[1].split("</div>", 1)[0]
        assert f'href="/dashboard/reserved_domains/{made["id"]}"' in jobs, page
        assert "*.broken.acme.example" in jobs and "(DNS_ERROR)" in jobs
        assert "wrong.example.net" in jobs and job["retries_at"] in jobs
    # fixed (and the wildcard's own CNAME made): the DNS check sees every record ok, and the
    # order is tried again at once
    domains.resolver.cnames["_acme-challenge.broken.acme.example"] = target
    domains.resolver.cnames["*.broken.acme.example"] = made["cname_target"]
    with domains.server.client() as api:
        assert api.get(f"/reserved_domains/{made['id']}/dns_check").json()["ok"] is True
    cert = until(lambda: rd(domains, made["id"]), issued)["certificate"]
    leaf = presented(domains.server.https_port, "x.broken.acme.example",
                     domains.pebble.root())
    assert "Pebble Intermediate" in leaf.issuer.rfc4514_string()
    # the domain deleted: the certificate issued for it goes too
    with domains.server.client() as api:
        assert api.delete(f"/reserved_domains/{made['id']}").status_code == 204
        until(lambda: {"status": api.get(cert["uri"]).status_code},
              lambda d: d["status"] == 404)


def restart(domains: Domains, *extra: str) -> None:
    assert domains.server.stop() == 0
    srv = domains.server
    domains.server = start(srv.data_dir, srv.database_url, *domains.args, *extra,
                           token=srv.token, ports=domains.ports)


def test_a_restart_keeps_the_certificates_then_they_renew(
        domains: Domains, plain: dict[str, Any], wildcard: dict[str, Any]) -> None:
    port, root = domains.server.https_port, domains.pebble.root()
    before = presented(port, "app.acme.example", root).serial_number
    with domains.server.client() as api:
        old = api.get(f"/tls_certificates/{plain['certificate']['id']}").json()
    restart(domains)
    assert presented(port, "app.acme.example", root).serial_number == before
    assert rd(domains, plain["id"])["certificate"] == plain["certificate"]
    # renewing an hour before expiry: the hour-long certificates are due at once
    restart(domains, "--acme-renew-before", "3590s")
    renewed = until(lambda: rd(domains, plain["id"]), lambda d: issued(d) and
                    d["certificate"] != plain["certificate"], timeout=60)
    assert when(renewed["certificate_management_status"]["renews_at"]) > time.time()
    assert presented(port, "app.acme.example", root).serial_number != before
    with domains.server.client() as api:  # the replaced certificate is gone
        assert api.get(f"/tls_certificates/{plain['certificate']['id']}").status_code == 404
        new = api.get(f"/tls_certificates/{renewed['certificate']['id']}").json()
    assert when(new["not_after"]) > when(old["not_after"])
    restart(domains)  # (back to the shared options)


def test_an_agent_ingress_certificate_on_the_tunnel_listener(domains: Domains) -> None:
    """Its region domains lie in a zone delegated to the built-in DNS: dns-01 there, and the
    tunnel listener presents the certificate to agents dialing a region domain."""
    with domains.server.client() as api:
        made = api.post("/agent_ingresses", json={
            "domain": "connect.acme.example",
            "certificate_management_policy": {"authority": "letsencrypt"}}).json()

    def get() -> dict[str, Any]:
        with domains.server.client() as api:
            out: dict[str, Any] = api.get(f"/agent_ingresses/{made['id']}").json()
        return out

    doc = until(get, lambda d: d["certificate_management_status"]["renews_at"] is not None)
    assert doc["certificate_management_status"]["provisioning_job"] is None
    root = domains.pebble.root()
    for name in ("tunnel.eu.connect.acme.example", "tunnel.us-cal-1.connect.acme.example"):
        # (served once this node's snapshot has reloaded: poll a moment)
        deadline = time.monotonic() + 10
        while True:
            issuer = presented(domains.server.tunnel_port, name).issuer.rfc4514_string()
            if "Pebble" in issuer or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        leaf = presented(domains.server.tunnel_port, name, root)  # (verified this time)
        assert "Pebble Intermediate" in leaf.issuer.rfc4514_string()


def test_two_nodes_on_one_database_issue_once(domains: Domains, tmp_path: Path) -> None:
    """A second node on the same PostgreSQL database (same secret key): both hear the new
    policy at once (LISTEN/NOTIFY) and one of them claims the order; the CA's http-01
    request reaches the first node (Pebble's port is its), which answers it from the shared
    store whichever node ordered; the certificate is issued once and both nodes serve it."""
    first = domains.server
    if first.database_url is None:
        pytest.skip("several nodes share a PostgreSQL database")
    shutil.copy(first.data_dir / "secret.key", tmp_path / "secret.key")
    args = list(domains.args)
    args[args.index("--dns-addr") + 1] = f"127.0.0.1:{udp_and_tcp_port()}"
    second = start(tmp_path, first.database_url, *args, token=first.token)
    try:
        with second.client() as api:
            made = api.post("/reserved_domains", json={
                "domain": "both.acme.example", "certificate_management_policy": None}).json()
            domains.resolver.cnames["both.acme.example"] = made["cname_target"]
            api.patch(f"/reserved_domains/{made['id']}", json={
                "certificate_management_policy": {"authority": "letsencrypt"}})
        until(lambda: rd(domains, made["id"]), issued)
        root = domains.pebble.root()
        for node in (first, second):
            deadline = time.monotonic() + 10  # (the other node's snapshot: at once)
            while "Pebble" not in presented(node.https_port, "both.acme.example"
                                            ).issuer.rfc4514_string():
                assert time.monotonic() < deadline
                time.sleep(0.2)
            presented(node.https_port, "both.acme.example", root)
        logs = first.log() + second.log()
        assert logs.count(f'"acme_certificate_issued","id":"{made["id"]}"') == 1
    finally:
        assert second.stop() == 0
