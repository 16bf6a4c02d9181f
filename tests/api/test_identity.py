"""API keys, bot users and credentials: ACL rules, owners, shown-once tokens, bot state."""

from __future__ import annotations

import httpx
import pytest

from tests.server import Server

GOOD_ACL = ["*", "bind:*.example.com", "bind:app.example.com", "bind:env=prod",
            "bind:*=prod", "bind:team=*", "bind:1.2.3.4:443", "bind:tcp.example.com:20000",
            "bind:EXAMPLE.org"]


def test_acl_accepts_every_documented_form(api: httpx.Client) -> None:
    r = api.post("/credentials", json={"acl": GOOD_ACL})
    assert r.status_code == 201, r.text
    acl = r.json()["acl"]
    assert "bind:example.org" in acl and len(acl) == len(GOOD_ACL)
    r = api.post("/credentials", json={"acl": ["bind:a.example.com", "bind:A.example.com"]})
    assert r.json()["acl"] == ["bind:a.example.com"]


@pytest.mark.parametrize("rule", ["foo", "bind:", "bind:bad_domain!.com", "bind:a=b c",
                                  "bind:host.example.com:99999", "bind:nodot", "**",
                                  "bind:h.example.com:²", "bind:a.*.example.com",
                                  "connect:x.example.com"])
def test_acl_refuses_bad_rules(api: httpx.Client, rule: str) -> None:
    r = api.post("/credentials", json={"acl": ["*", rule]})
    assert r.status_code == 400, rule
    body = r.json()
    assert body["error_code"].endswith("_600") and "acl[1]" in body["msg"]


def test_credential_token_shown_once_and_acl_updates(api: httpx.Client) -> None:
    made = api.post("/credentials", json={"description": "site 1"}).json()
    assert made["token"] and made["acl"] == []
    assert api.get(f"/credentials/{made['id']}").json()["token"] is None
    listed = api.get("/credentials").json()["credentials"]
    assert all(c["token"] is None for c in listed)
    r = api.patch(f"/credentials/{made['id']}", json={"acl": ["bind:x.example.com"]})
    assert r.json()["acl"] == ["bind:x.example.com"] and r.json()["token"] is None
    r = api.patch(f"/credentials/{made['id']}", json={"acl": ["nope"]})
    assert r.status_code == 400
    assert api.get(f"/credentials/{made['id']}").json()["acl"] == ["bind:x.example.com"]


def test_owner_defaults_to_the_caller_and_may_be_a_bot(api: httpx.Client) -> None:
    me = api.post("/credentials", json={}).json()["owner_id"]
    assert me.startswith("usr_")
    assert api.post("/api_keys", json={}).json()["owner_id"] == me
    bot = api.post("/bot_users", json={"name": "site-bot"}).json()
    cred = api.post("/credentials", json={"owner_id": bot["id"]}).json()
    assert cred["owner_id"] == bot["id"]
    for bad in ("bot_" + "0" * 27, "ipp_" + "0" * 27, "someone"):
        r = api.post("/credentials", json={"owner_id": bad})
        assert r.status_code == 400 and "owner_id" in r.json()["msg"], bad


def test_bot_keys_follow_the_bot(api: httpx.Client, server: Server) -> None:
    bot = api.post("/bot_users", json={"name": "automation"}).json()
    assert bot["active"] is True
    key = api.post("/api_keys", json={"owner_id": bot["id"]}).json()
    cred = api.post("/credentials", json={"owner_id": bot["id"]}).json()
    with server.client(key["token"]) as as_bot:
        assert as_bot.get("/ip_policies").status_code == 200
        mine = as_bot.post("/credentials", json={}).json()
        assert mine["owner_id"] == bot["id"]
        admin_id = api.post("/credentials", json={}).json()["owner_id"]
        r = as_bot.post("/credentials", json={"owner_id": admin_id})
        assert r.status_code == 403 and r.json()["error_code"].endswith("_630")
        assert api.patch(f"/bot_users/{bot['id']}", json={"active": False}).status_code == 200
        assert as_bot.get("/ip_policies").status_code == 403
        api.patch(f"/bot_users/{bot['id']}", json={"active": True})
        assert as_bot.get("/ip_policies").status_code == 200
        assert api.delete(f"/bot_users/{bot['id']}").status_code == 204
        assert as_bot.get("/ip_policies").status_code == 403
    for gone in (f"/api_keys/{key['id']}", f"/credentials/{cred['id']}",
                 f"/credentials/{mine['id']}"):
        assert api.get(gone).status_code == 404, gone


def test_bot_user_name_rules(api: httpx.Client) -> None:
    assert api.post("/bot_users", json={"name": ""}).status_code == 400
    assert api.post("/bot_users", json={"name": "x" * 256}).status_code == 400
    r = api.post("/bot_users", json={"name": "ok", "active": "yes"})
    assert r.status_code == 400 and "active" in r.json()["msg"]
