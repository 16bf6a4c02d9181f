"""Vault secrets read by traffic policies: ``secrets.get(vault, name)`` in an expression and
in a ``${...}`` interpolation, on an official SDK endpoint; a changed secret applies to the
next requests; a policy naming a secret that does not exist is refused at bind."""

from __future__ import annotations

import json
import time
import uuid

import httpx

from tests.edge import upstream
from tests.edge.agents import EdgeClient, agent
from tests.server import Server


def _policy(vault: str) -> str:
    secret = f"secrets.get('{vault}', 'token')"
    return json.dumps({"on_http_request": [
        {"expressions": [f"!('x-token' in req.headers) || req.headers['x-token'][0] != "
                         f"{secret}"],
         "actions": [{"type": "deny", "config": {"status_code": 401}}]},
        {"actions": [{"type": "add-headers", "config": {"headers": {
            "x-from-vault": f"v=${{{secret}}}"}}}]}]})


def _seen(web: EdgeClient, url: str, token: str) -> httpx.Response:
    return web.get(url + "/headers", headers={"X-Token": token})


def test_policies_read_vault_secrets(server: Server) -> None:
    vault = f"v{uuid.uuid4().hex[:8]}"
    with server.client() as api, upstream.running("svc") as port:
        made = api.post("/vaults", json={"name": vault}).json()
        secret = api.post("/vault_secrets", json={"vault_id": made["id"], "name": "token",
                                                  "value": "first"}).json()
        assert "value" not in secret and secret["vault"]["id"] == made["id"]
        token = api.post("/credentials", json={}).json()["token"]
        a = agent(server, token,
                  {"kind": "https", "forward": f"http://127.0.0.1:{port}",
                   "policy": _policy(vault)},
                  {"kind": "https", "forward": f"http://127.0.0.1:{port}",
                   "policy": _policy(vault + "-missing")})
        try:
            url = a.listeners[0]["url"]
            assert "does not exist" in a.listeners[1]["error"]
            with EdgeClient(server) as web:
                assert _seen(web, url, "wrong").status_code == 401
                r = _seen(web, url, "first")
                assert r.status_code == 200
                assert ["x-from-vault", "v=first"] in r.json()["headers"]
                assert api.patch(f"/vault_secrets/{secret['id']}",
                                 json={"value": "second"}).status_code == 200
                deadline = time.monotonic() + 10
                while _seen(web, url, "second").status_code != 200:
                    assert time.monotonic() < deadline, "the new value never applied"
                    time.sleep(0.1)
                assert _seen(web, url, "first").status_code == 401
            # the vault cannot go while it holds secrets
            r = api.delete(f"/vaults/{made['id']}")
            assert r.status_code == 400 and secret["id"] in r.json()["msg"]
        finally:
            a.stop()
