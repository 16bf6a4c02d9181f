"""IP policies, rules and restrictions: CIDR validation, uniqueness, references, deletes."""

from __future__ import annotations

from typing import Any

import httpx
import pytest


def policy(api: httpx.Client) -> str:
    pid: str = api.post("/ip_policies", json={"description": "p"}).json()["id"]
    return pid


def rule(api: httpx.Client, pid: str, cidr: str, action: str = "allow") -> httpx.Response:
    return api.post("/ip_policy_rules", json={"ip_policy_id": pid, "cidr": cidr,
                                              "action": action})


@pytest.mark.parametrize(("cidr", "stored"), [
    ("10.0.0.0/8", "10.0.0.0/8"), ("192.168.1.7/32", "192.168.1.7/32"),
    ("2001:db8::/32", "2001:db8::/32"), ("2001:DB8:0:0::/64", "2001:db8::/64"),
    ("0.0.0.0/0", "0.0.0.0/0"), ("::/0", "::/0"),
])
def test_cidrs_accepted_in_canonical_form(api: httpx.Client, cidr: str, stored: str) -> None:
    r = rule(api, policy(api), cidr)
    assert r.status_code == 201, r.text
    body = r.json()
    assert body["cidr"] == stored and body["action"] == "allow"
    assert body["ip_policy"]["id"].startswith("ipp_")
    assert body["ip_policy"]["uri"].endswith(f"/ip_policies/{body['ip_policy']['id']}")


@pytest.mark.parametrize(("cidr", "suffix", "hint"), [
    ("10.0.0.1/8", "_1409", "10.0.0.0/8"), ("2001:db8::1/32", "_1409", "2001:db8::/32"),
    ("10.0.0.1", "_1413", "10.0.0.1/32"), ("banana", "_1406", ""),
    ("10.0.0.0/33", "_1406", ""), ("300.1.1.1/32", "_1406", ""),
])
def test_bad_cidrs_explain_themselves(api: httpx.Client, cidr: str, suffix: str,
                                      hint: str) -> None:
    r = rule(api, policy(api), cidr)
    assert r.status_code == 400
    assert r.json()["error_code"].endswith(suffix) and "cidr" in r.json()["msg"]
    assert hint in r.json()["msg"]


def test_rule_references_and_uniqueness(api: httpx.Client) -> None:
    pid = policy(api)
    assert rule(api, pid, "10.1.0.0/16").status_code == 201
    dup = rule(api, pid, "10.1.0.0/16", "deny")
    assert dup.status_code == 400 and dup.json()["error_code"].endswith("_1408")
    assert rule(api, policy(api), "10.1.0.0/16").status_code == 201
    r = rule(api, "ipp_" + "0" * 27, "10.2.0.0/16")
    assert r.status_code == 400 and r.json()["error_code"].endswith("_1414")
    r = rule(api, pid, "10.3.0.0/16", "maybe")
    assert r.status_code == 400 and "action" in r.json()["msg"]
    assert r.json()["error_code"].endswith("_1422")


def test_rule_update_rules(api: httpx.Client) -> None:
    pid = policy(api)
    a = rule(api, pid, "10.10.0.0/16").json()
    rule(api, pid, "10.20.0.0/16")
    r = api.patch(f"/ip_policy_rules/{a['id']}", json={"cidr": "10.20.0.0/16"})
    assert r.status_code == 400 and r.json()["error_code"].endswith("_1408")
    r = api.patch(f"/ip_policy_rules/{a['id']}", json={"action": "deny"})
    assert r.status_code == 400 and "action" in r.json()["msg"]
    r = api.patch(f"/ip_policy_rules/{a['id']}", json={"cidr": "10.30.0.1/16"})
    assert r.status_code == 400 and "10.30.0.0/16" in r.json()["msg"]
    assert api.get(f"/ip_policy_rules/{a['id']}").json()["cidr"] == "10.10.0.0/16"


def test_deleting_a_policy_deletes_its_rules(api: httpx.Client) -> None:
    pid = policy(api)
    rid = rule(api, pid, "172.16.0.0/12").json()["id"]
    assert api.delete(f"/ip_policies/{pid}").status_code == 204
    assert api.get(f"/ip_policy_rules/{rid}").status_code == 404


def restriction(api: httpx.Client, **body: Any) -> httpx.Response:
    return api.post("/ip_restrictions", json={"type": "dashboard", **body})


def test_restriction_references(api: httpx.Client) -> None:
    p1, p2 = policy(api), policy(api)
    r = restriction(api, ip_policy_ids=[p1, p2])
    assert r.status_code == 201
    body = r.json()
    assert [p["id"] for p in body["ip_policies"]] == [p1, p2]
    assert body["enforced"] is False and body["type"] == "dashboard"
    assert "ip_policy_ids" not in body
    r = restriction(api, ip_policy_ids=[p1, "ipp_" + "1" * 27])
    assert r.status_code == 400 and "ip_policy_ids[1]" in r.json()["msg"]
    r = restriction(api, ip_policy_ids=["rd_" + "1" * 27])
    assert r.status_code == 400 and "IPPolicy" in r.json()["msg"]
    assert restriction(api, ip_policy_ids=[]).status_code == 400
    assert restriction(api, ip_policy_ids=[p1, p1]).status_code == 400
    r = restriction(api, ip_policy_ids=[p1], type="everything")
    assert r.status_code == 400 and "type" in r.json()["msg"]


def test_restriction_type_is_immutable_and_empty_ids_keep(api: httpx.Client) -> None:
    p1, p2 = policy(api), policy(api)
    rid = restriction(api, ip_policy_ids=[p1]).json()["id"]
    r = api.patch(f"/ip_restrictions/{rid}", json={"type": "api"})
    assert r.status_code == 400 and "type" in r.json()["msg"]
    assert "cannot be changed" in r.json()["msg"]
    r = api.patch(f"/ip_restrictions/{rid}", json={"ip_policy_ids": [], "enforced": True})
    assert [p["id"] for p in r.json()["ip_policies"]] == [p1] and r.json()["enforced"]
    r = api.patch(f"/ip_restrictions/{rid}", json={"ip_policy_ids": [p2]})
    assert [p["id"] for p in r.json()["ip_policies"]] == [p2]
    # (enforced with a policy without rules: the shared server's dashboard is closed until
    # it goes)
    assert api.delete(f"/ip_restrictions/{rid}").status_code == 204


def test_deleted_policy_stays_referenced_as_empty(api: httpx.Client) -> None:
    p1, p2 = policy(api), policy(api)
    rid = restriction(api, ip_policy_ids=[p1, p2]).json()["id"]
    assert api.delete(f"/ip_policies/{p1}").status_code == 204
    body = api.get(f"/ip_restrictions/{rid}").json()
    assert [p["id"] for p in body["ip_policies"]] == [p1, p2]
    r = api.patch(f"/ip_restrictions/{rid}", json={"description": "still fine"})
    assert r.status_code == 200
    r = api.patch(f"/ip_restrictions/{rid}", json={"ip_policy_ids": [p1, p2]})
    assert r.status_code == 200
