"""API key roles (admin, operator, read_only), the last working admin key, and enforced api
IP restrictions that would lock their caller out. Over the real server."""

from __future__ import annotations

import http.client
import json
import subprocess
import sys
from urllib.parse import urlsplit

import httpx

from tests.api.test_api_restrictions import from_address
from tests.server import Server


def key(api: httpx.Client, **body: object) -> dict[str, object]:
    r = api.post("/api_keys", json=body)
    assert r.status_code == 201, r.text
    made: dict[str, object] = r.json()
    return made


def refused(r: httpx.Response, *words: str) -> None:
    assert r.status_code == 403, r.text
    body = r.json()
    assert body["error_code"].endswith("_260") and all(w in body["msg"] for w in words), body


def test_keys_have_a_role_admin_by_default(server: Server) -> None:
    with server.client() as api:
        plain = key(api)
        assert plain["role"] == "admin"
        ops = key(api, role="operator")
        assert api.get(f"/api_keys/{ops['id']}").json()["role"] == "operator"
        r = api.post("/api_keys", json={"role": "root"})
        assert r.status_code == 400 and "role" in r.json()["msg"], r.text
        for made in (plain, ops):
            assert api.delete(f"/api_keys/{made['id']}").status_code == 204


def test_an_operator_runs_the_platform_but_not_its_access(server: Server) -> None:
    with server.client() as api:
        ops = key(api, role="operator")
        guard = api.post("/ip_policies", json={}).json()["id"]
        api.post("/ip_policy_rules", json={"ip_policy_id": guard, "cidr": "0.0.0.0/0",
                                           "action": "allow"})
        watch = api.post("/ip_restrictions", json={"type": "api", "ip_policy_ids": [guard]})
        assert watch.status_code == 201, watch.text
        bot = api.post("/bot_users", json={"name": "site"}).json()
    with server.client(str(ops["token"])) as op:
        policy = op.post("/ip_policies", json={"description": "office"})
        assert policy.status_code == 201
        assert op.post("/credentials", json={}).status_code == 201
        r = op.post("/ip_restrictions", json={"type": "endpoints",
                                              "ip_policy_ids": [policy.json()["id"]]})
        assert r.status_code == 201, r.text
        assert op.get("/api_keys").status_code == 200
        refused(op.post("/api_keys", json={"role": "admin"}), "operator", "api_keys")
        refused(op.delete(f"/api_keys/{ops['id']}"), "operator")
        refused(op.delete(f"/bot_users/{bot['id']}"), "operator", "bot_users")
        refused(op.post("/bot_users", json={"name": "x"}), "operator")
        refused(op.post("/ip_restrictions", json={"type": "api", "ip_policy_ids": [guard]}),
                "api or dashboard")
        refused(op.patch(f"/ip_restrictions/{watch.json()['id']}", json={"enforced": True}))
        refused(op.delete(f"/ip_restrictions/{watch.json()['id']}"))
        refused(op.post("/ip_policy_rules", json={"ip_policy_id": guard, "cidr": "10.0.0.0/8",
                                                  "action": "deny"}), guard, "guards the API")
        refused(op.delete(f"/ip_policies/{guard}"), guard)
    with server.client() as api:
        assert api.get(f"/bot_users/{bot['id']}").status_code == 200
        assert api.delete(f"/ip_restrictions/{watch.json()['id']}").status_code == 204
        assert api.delete(f"/api_keys/{ops['id']}").status_code == 204


def raw(server: Server, token: str, method: str, path: str, body: object = None
        ) -> tuple[int, dict[str, object]]:
    """``method path`` sent as written (httpx would fold the slashes that the router
    ignores), with ``token``; the status and the JSON body."""
    where = urlsplit(server.base_url)
    conn = http.client.HTTPConnection(where.hostname or "", where.port, timeout=30)
    try:
        conn.request(method, path, None if body is None else json.dumps(body),
                     {"Authorization": f"Bearer {token}", "Edgeway-Version": "2",
                      "Content-Type": "application/json"})
        r = conn.getresponse()
        answer: dict[str, object] = json.loads(r.read() or b"{}")
        return r.status, answer
    finally:
        conn.close()


def test_no_spelling_of_a_path_lets_an_operator_manage_access(server: Server) -> None:
    def access(api: httpx.Client) -> list[object]:
        return [api.get(f"/{c}").json() for c in ("api_keys", "bot_users", "service_users")]

    with server.client() as api:
        ops = key(api, role="operator")
        bot = api.post("/bot_users", json={"name": "spelled"}).json()
        before = access(api)
    token = str(ops["token"])
    for path in ("//api_keys", "///api_keys/", "/api_keys/", f"//api_keys/{ops['id']}",
                 "//bot_users", f"//bot_users/{bot['id']}", "//service_users",
                 "/%61pi_keys"):
        for method, body in (("POST", {"role": "admin"}), ("PATCH", {"role": "admin"}),
                             ("DELETE", None)):
            status, answer = raw(server, token, method, path, body)
            assert status in (403, 404, 405), (method, path, status, answer)
            if status == 403:
                assert str(answer["error_code"]).endswith("_260"), answer
    with server.client() as api:
        assert access(api) == before  # nothing made, changed or deleted
        assert api.delete(f"/bot_users/{bot['id']}").status_code == 204
        assert api.delete(f"/api_keys/{ops['id']}").status_code == 204


def test_a_read_only_key_reads(server: Server) -> None:
    with server.client() as api:
        ro = key(api, role="read_only")
        pid = api.post("/ip_policies", json={}).json()["id"]
    with server.client(str(ro["token"])) as reader:
        assert reader.get("/ip_policies").status_code == 200
        assert reader.get(f"/ip_policies/{pid}").status_code == 200
        refused(reader.post("/ip_policies", json={}), "read_only")
        refused(reader.patch(f"/ip_policies/{pid}", json={"description": "x"}), "read_only")
        refused(reader.delete(f"/ip_policies/{pid}"), "read_only")
        refused(reader.patch(f"/api_keys/{ro['id']}", json={"role": "admin"}), "read_only")
    with server.client() as api:
        assert api.get(f"/api_keys/{ro['id']}").json()["role"] == "read_only"


def test_the_last_working_admin_key_stays(own_server: Server) -> None:
    with own_server.client() as api:
        (first,) = api.get("/api_keys").json()["keys"]
        r = api.delete(f"/api_keys/{first['id']}")
        assert r.status_code == 400 and r.json()["error_code"].endswith("_261"), r.text
        r = api.patch(f"/api_keys/{first['id']}", json={"role": "operator"})
        assert r.status_code == 400
        key(api, role="operator")  # an operator key is no admin key
        assert api.delete(f"/api_keys/{first['id']}").status_code == 400
        bot = api.post("/bot_users", json={"name": "automation"}).json()
        second = key(api, owner_id=bot["id"])
        assert api.delete(f"/api_keys/{first['id']}").status_code == 204  # the bot's remains
    with own_server.client(str(second["token"])) as api:
        r = api.patch(f"/bot_users/{bot['id']}", json={"active": False})
        assert r.status_code == 400 and "inactive bot" in r.json()["msg"], r.text
        assert api.delete(f"/bot_users/{bot['id']}").status_code == 400  # (and its keys)
        assert api.get(f"/bot_users/{bot['id']}").json()["active"] is True
        assert len(api.get("/api_keys").json()["keys"]) == 2


def test_an_api_restriction_that_locks_the_caller_out_needs_force(own_server: Server) -> None:
    with own_server.client() as admin, from_address(own_server, "127.0.0.2") as caller:
        pid = admin.post("/ip_policies", json={}).json()["id"]
        admin.post("/ip_policy_rules", json={"ip_policy_id": pid, "cidr": "127.0.0.1/32",
                                             "action": "allow"})
        body = {"type": "api", "enforced": True, "ip_policy_ids": [pid]}
        r = caller.post("/ip_restrictions", json=body)
        assert r.status_code == 400 and r.json()["error_code"].endswith("_262"), r.text
        assert "127.0.0.2" in r.json()["msg"] and "'force'" in r.json()["msg"]
        assert admin.get("/ip_restrictions").json()["ip_restrictions"] == []  # nothing kept
        r = caller.post("/ip_restrictions", json={**body, "force": True})
        assert r.status_code == 201 and "force" not in r.json(), r.text
        assert caller.get("/ip_policies").status_code == 403  # as asked
        assert admin.get("/ip_policies").status_code == 200


def test_the_cli_makes_keys_of_a_role(own_server: Server) -> None:
    made = subprocess.run([sys.executable, "-m", "edgeway", "api-keys", "create", "--role",
                           "read_only", "--data-dir", str(own_server.data_dir)],
                          capture_output=True, text=True, timeout=60)
    assert made.returncode == 0, made.stderr
    with own_server.client(made.stdout.strip()) as reader:
        assert reader.get("/ip_policies").status_code == 200
        refused(reader.post("/ip_policies", json={}), "read_only")
    bad = subprocess.run([sys.executable, "-m", "edgeway", "api-keys", "create", "--role",
                          "root", "--data-dir", str(own_server.data_dir)],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode != 0 and "--role" in bad.stderr
