"""IP restrictions of type ``api`` are enforced on the management API itself."""

from __future__ import annotations

import httpx

from tests.server import HEADERS, Server, trust


def from_address(srv: Server, address: str) -> httpx.Client:
    transport = httpx.HTTPTransport(local_address=address, verify=trust())
    return httpx.Client(base_url=srv.base_url, transport=transport,
                        headers={**HEADERS, "Authorization": f"Bearer {srv.token}"})


def test_enforced_api_restriction_refuses_other_addresses(own_server: Server) -> None:
    with own_server.client() as admin, from_address(own_server, "127.0.0.2") as other:
        pid = admin.post("/ip_policies", json={}).json()["id"]
        admin.post("/ip_policy_rules", json={"ip_policy_id": pid, "cidr": "127.0.0.1/32",
                                             "action": "allow"})
        watch = admin.post("/ip_restrictions", json={"type": "api", "ip_policy_ids": [pid]})
        assert watch.json()["enforced"] is False
        assert other.get("/ip_policies").status_code == 200
        assert "ip_restriction_would_refuse" in own_server.log()
        rid = admin.post("/ip_restrictions", json={"type": "api", "enforced": True,
                                                   "ip_policy_ids": [pid]}).json()["id"]
        r = other.get("/ip_policies")
        assert r.status_code == 403 and r.json()["error_code"].endswith("_220")
        assert rid in r.json()["msg"]
        assert admin.get("/ip_policies").status_code == 200
        # Unenforced again: the restriction only logs.
        assert admin.patch(f"/ip_restrictions/{rid}", json={"enforced": False}).status_code == 200
        assert other.get("/ip_policies").status_code == 200


def test_deny_rules_win_and_a_deleted_policy_has_no_rules(own_server: Server) -> None:
    with own_server.client() as admin, from_address(own_server, "127.0.0.3") as other:
        pid = admin.post("/ip_policies", json={}).json()["id"]
        admin.post("/ip_policy_rules", json={"ip_policy_id": pid, "cidr": "127.0.0.0/8",
                                             "action": "allow"})
        rid = admin.post("/ip_restrictions", json={"type": "api", "enforced": True,
                                                   "ip_policy_ids": [pid]}).json()["id"]
        assert other.get("/ip_policies").status_code == 200
        deny = admin.post("/ip_policy_rules", json={"ip_policy_id": pid, "action": "deny",
                                                    "cidr": "127.0.0.3/32"}).json()
        assert other.get("/ip_policies").status_code == 403
        assert admin.delete(f"/ip_policy_rules/{deny['id']}").status_code == 204
        assert other.get("/ip_policies").status_code == 200
        dashboard = admin.post("/ip_policies", json={}).json()["id"]
        admin.post("/ip_restrictions", json={"type": "dashboard", "enforced": True,
                                             "ip_policy_ids": [dashboard]})
        assert other.get("/ip_policies").status_code == 200
        assert admin.delete(f"/ip_restrictions/{rid}").status_code == 204
        # A restriction whose only policy was deleted allows nobody (zero rules).
        gone = admin.post("/ip_policies", json={}).json()["id"]
        rid2 = admin.post("/ip_restrictions", json={"type": "api", "enforced": True,
                                                    "ip_policy_ids": [pid, gone]}).json()["id"]
        assert other.get("/ip_policies").status_code == 200
        assert admin.delete(f"/ip_policies/{gone}").status_code == 204  # it had no rules
        # Deleting the other would lock the caller out too: refused, nothing changed.
        r = admin.delete(f"/ip_policies/{pid}")
        assert r.status_code == 400 and r.json()["error_code"].endswith("_262"), r.text
        assert rid2 in r.json()["msg"] and "locking it out" in r.json()["msg"]
        assert admin.get(f"/ip_policies/{pid}").status_code == 200
        assert admin.patch(f"/ip_restrictions/{rid2}", json={"enforced": False}).status_code \
            == 200
        assert admin.delete(f"/ip_policies/{pid}").status_code == 204
        r = admin.patch(f"/ip_restrictions/{rid2}", json={"enforced": True})
        assert r.status_code == 400 and "'force'" in r.json()["msg"], r.text
        r = admin.patch(f"/ip_restrictions/{rid2}", json={"enforced": True, "force": True})
        assert r.status_code == 200 and "force" not in r.json(), r.text
        r = other.get("/ip_policies")
        assert r.status_code == 403 and rid2 in r.json()["msg"]
        assert admin.get("/ip_policies").status_code == 403
