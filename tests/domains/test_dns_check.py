"""DNS checks (``GET /reserved_domains/{id}/dns_check``, ``GET /agent_ingresses/{id}/
dns_check``) through the configured resolver: each record the user was told to create is
reported ok, missing or wrong with the expected and found values."""

from __future__ import annotations

import json
from typing import Any

from tests.domains import db
from tests.domains.conftest import BASE, Domains
from tests.domains.names import long_name


def check(domains: Domains, path: str) -> dict[str, Any]:
    with domains.server.client() as api:
        r = api.get(f"{path}/dns_check")
        assert r.status_code == 200, r.text
        out: dict[str, Any] = r.json()
    assert out["resolver"] == f"127.0.0.1:{domains.resolver_port}"
    return out


def test_a_plain_domain_missing_then_ok(domains: Domains) -> None:
    with domains.server.client() as api:
        rd = api.post("/reserved_domains", json={"domain": "app.check.example",
                                                 "certificate_management_policy": None}).json()
    path = f"/reserved_domains/{rd['id']}"
    report = check(domains, path)
    assert report["ok"] is False and report["domain"] == "app.check.example"
    [record] = report["records"]
    assert record == {"name": "app.check.example", "type": "CNAME",
                      "expected": [rd["cname_target"]], "found": [], "status": "missing",
                      "msg": f"app.check.example has no CNAME record: create one pointing "
                             f"to {rd['cname_target']}"}
    domains.resolver.cnames["app.check.example"] = "elsewhere.example.net"
    record = check(domains, path)["records"][0]
    assert (record["status"], record["found"]) == ("wrong", ["elsewhere.example.net"])
    assert record["msg"] == (f"the CNAME of app.check.example points to elsewhere.example.net,"
                             f" expected {rd['cname_target']}")
    domains.resolver.cnames["app.check.example"] = rd["cname_target"]
    report = check(domains, path)
    assert report["ok"] is True and report["records"][0]["status"] == "ok"
    assert report["records"][0]["found"] == [rd["cname_target"]]


def test_a_wildcard_domain_and_its_challenge_cname(domains: Domains) -> None:
    with domains.server.client() as api:
        rd = api.post("/reserved_domains", json={"domain": "*.site.check.example",
                                                 "certificate_management_policy": None}).json()
    domains.resolver.cnames["*.site.check.example"] = rd["cname_target"]
    domains.resolver.cnames["_acme-challenge.site.check.example"] = "wrong.example.net"
    report = check(domains, f"/reserved_domains/{rd['id']}")
    assert report["ok"] is False
    wild, acme = report["records"]
    assert (wild["name"], wild["status"]) == ("*.site.check.example", "ok")
    assert acme == {"name": "_acme-challenge.site.check.example", "type": "CNAME",
                    "expected": [rd["acme_challenge_cname_target"]],
                    "found": ["wrong.example.net"], "status": "wrong",
                    "msg": "the CNAME of _acme-challenge.site.check.example points to "
                           f"wrong.example.net, expected {rd['acme_challenge_cname_target']}"}


def test_names_in_the_platform_zones_need_nothing_and_ingress_ns(domains: Domains) -> None:
    with domains.server.client() as api:
        own = api.post("/reserved_domains", json={"domain": f"own.{BASE}"}).json()
        ingress = api.post("/agent_ingresses", json={"domain": "connect.check.example"}).json()
        missing = api.get("/reserved_domains/rd_2BTzFrLQMBWNAkxBBYmgFPVBhWq/dns_check")
        assert missing.status_code == 404
        assert api.get("/reserved_domains/nope/dns_check").status_code == 400
    assert check(domains, f"/reserved_domains/{own['id']}") | {"checked_at": ""} == {
        "id": own["id"], "domain": f"own.{BASE}", "ok": True, "records": [],
        "resolver": f"127.0.0.1:{domains.resolver_port}", "checked_at": ""}
    # the test resolver stands for the internet, where the ingress zone is delegated to us
    report = check(domains, f"/agent_ingresses/{ingress['id']}")
    assert report["ok"] is True
    assert report["records"][0]["found"] == sorted(ingress["ns_targets"])


def test_a_name_too_long_to_look_up_is_reported_not_a_500(domains: Domains) -> None:
    """A wildcard whose _acme-challenge name is past DNS's limit (an earlier version stored
    such names; they are refused now): its record is reported wrong, saying why."""
    rest = long_name(240, "long.check.example")
    with domains.server.client() as api:
        rd = api.post("/reserved_domains", json={"domain": "*.long.check.example",
                                                 "certificate_management_policy": None}).json()
        [(stored,)] = db.rows(domains.server, "SELECT doc FROM reserved_domains WHERE id = ?",
                              rd["id"])
        assert db.execute(domains.server, "UPDATE reserved_domains SET doc = ? WHERE id = ?",
                          json.dumps({**json.loads(stored), "domain": f"*.{rest}"}),
                          rd["id"]) == 1
    report = check(domains, f"/reserved_domains/{rd['id']}")
    assert report["ok"] is False and report["domain"] == f"*.{rest}"
    wild, acme = report["records"]
    assert (wild["name"], wild["status"]) == (f"*.{rest}", "missing")
    assert acme["name"] == f"_acme-challenge.{rest}" and acme["status"] == "wrong"
    assert acme["msg"].startswith(f"_acme-challenge.{rest} cannot be looked up: "), acme
    with domains.server.client() as api:
        assert api.delete(f"/reserved_domains/{rd['id']}").status_code == 204


def test_the_dashboard_lists_the_domains_whose_records_are_missing_or_wrong(
        domains: Domains) -> None:
    from tests.dashboard.visitor import signed_in

    with domains.server.client() as api:
        rd = api.post("/reserved_domains", json={"domain": "board.check.example",
                                                 "certificate_management_policy": None}).json()
        reader = api.post("/api_keys", json={"role": "read_only"}).json()["token"]
    with signed_in(domains.server, reader) as browser:  # (a read-only key may check)
        overview = browser.get("/dashboard/").text
        assert 'hx-get="/dashboard/dns_checks"' in overview and 'id="dns-checks-link"' in overview
        page = browser.get("/dashboard/dns_checks")
        assert page.status_code == 200, domains.server.log()[-3000:]
        listed = page.text.split(f'id="dns-{rd["id"]}"', 1)
        assert len(listed) == 2, page.text
        item = listed[1].split('class="card"', 1)[0]  # (up to the next domain's)
        assert "board.check.example" in item and "<strong>missing</strong>" in item
        assert rd["cname_target"] in item
        domains.resolver.cnames["board.check.example"] = "elsewhere.example.net"
        item = browser.get("/dashboard/dns_checks").text.split(f'id="dns-{rd["id"]}"', 1)[1]
        assert "<strong>wrong</strong>" in item.split('class="card"', 1)[0]
        assert "found elsewhere.example.net" in item.split('class="card"', 1)[0]
        domains.resolver.cnames["board.check.example"] = rd["cname_target"]
        assert f'id="dns-{rd["id"]}"' not in browser.get("/dashboard/dns_checks").text
