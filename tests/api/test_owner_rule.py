"""Only admins may set an owner other than themselves (``owner_id`` on API keys, agent
credentials and SSH credentials): an operator key of the admin user may not act as a bot.
Over the real server, on every backend."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from edgeway import catalog
from tests.api.test_list_filter import listed
from tests.pki.material import ssh_public_key
from tests.server import Server

OWNED = [k.collection for k in catalog.ALL if k.routed and any(
    f.name == "owner_id" for f in k.fields)]


def body(collection: str, **extra: Any) -> dict[str, Any]:
    return {"public_key": ssh_public_key(), **extra} if collection == "ssh_credentials" \
        else dict(extra)


def made(r: httpx.Response) -> dict[str, Any]:
    assert r.status_code == 201, r.text
    out: dict[str, Any] = r.json()
    return out


def test_the_owned_kinds_are_the_ones_this_covers() -> None:
    assert sorted(OWNED) == ["api_keys", "credentials", "ssh_credentials"]


@pytest.mark.parametrize("collection", ["credentials", "ssh_credentials"])
def test_an_operator_may_not_give_a_bot_what_it_makes(server: Server,
                                                      collection: str) -> None:
    with server.client() as api:
        bot = made(api.post("/bot_users", json={"name": "owned"}))
        ops = made(api.post("/api_keys", json={"role": "operator"}))
    with server.client(str(ops["token"])) as op:
        r = op.post(f"/{collection}", json=body(collection, owner_id=bot["id"]))
        assert r.status_code == 403, r.text
        err = r.json()
        assert err["error_code"] == "ERR_EDGEWAY_630", err
        assert "Only an admin may set 'owner_id'" in err["msg"] and bot["id"] in err["msg"]
        # its own identity (the admin user's, that owns the key) and the default are fine
        mine = made(op.post(f"/{collection}", json=body(collection,
                                                        owner_id=ops["owner_id"])))
        assert mine["owner_id"] == ops["owner_id"]
        assert made(op.post(f"/{collection}", json=body(collection)))["owner_id"] \
            == ops["owner_id"]
    with server.client() as api:
        assert listed(api, f"/{collection}", filter=f'obj.owner_id == "{bot["id"]}"') == []
        # an admin may; an operator may then change the bot's credential, not its owner
        theirs = made(api.post(f"/{collection}", json=body(collection, owner_id=bot["id"])))
        assert theirs["owner_id"] == bot["id"]
    with server.client(str(ops["token"])) as op:
        r = op.patch(f"/{collection}/{theirs['id']}", json={"description": "ops"})
        assert r.status_code == 200 and r.json()["owner_id"] == bot["id"], r.text
        r = op.patch(f"/{collection}/{theirs['id']}", json={"owner_id": ops["owner_id"]})
        assert r.status_code == 400 and r.json()["details"]["member"] == "owner_id", r.text
    with server.client() as api:
        r = api.patch(f"/{collection}/{theirs['id']}", json={"owner_id": ops["owner_id"]})
        assert r.status_code == 400, r.text  # (no one changes an owner: not in PATCH)
        assert api.get(f"/{collection}/{theirs['id']}").json()["owner_id"] == bot["id"]
        assert api.delete(f"/api_keys/{ops['id']}").status_code == 204


def test_an_operator_makes_no_api_keys_for_anyone(server: Server) -> None:
    with server.client() as api:
        bot = made(api.post("/bot_users", json={"name": "keyless"}))
        ops = made(api.post("/api_keys", json={"role": "operator"}))
    with server.client(str(ops["token"])) as op:
        r = op.post("/api_keys", json={"owner_id": bot["id"]})
        assert r.status_code == 403 and r.json()["error_code"] == "ERR_EDGEWAY_260", r.text
    with server.client() as api:
        assert made(api.post("/api_keys", json={"owner_id": bot["id"]}))["owner_id"] \
            == bot["id"]
        assert api.delete(f"/api_keys/{ops['id']}").status_code == 204
