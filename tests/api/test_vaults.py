"""Vaults and secrets: a secret shows its vault's name as it is now, a rename included, in
every answer and in the list filter; an update that changes nothing keeps when and by whom
they were last changed."""

from __future__ import annotations

import secrets
import time

import httpx


def test_a_vault_renamed_is_named_so_by_its_secrets(api: httpx.Client) -> None:
    old, new = f"v-{secrets.token_hex(4)}", f"w-{secrets.token_hex(4)}"
    vault = api.post("/vaults", json={"name": old}).json()
    by_id = api.post("/vault_secrets", json={"vault_id": vault["id"], "name": "one",
                                             "value": "x"}).json()
    by_name = api.post("/vault_secrets", json={"vault_name": old, "name": "two",
                                               "value": "y"}).json()
    assert by_id["vault_name"] == by_name["vault_name"] == old
    r = api.patch(f"/vaults/{vault['id']}", json={"name": new})
    assert r.status_code == 200 and r.json()["name"] == new
    ids = {by_id["id"], by_name["id"]}
    for id_ in ids:
        assert api.get(f"/vault_secrets/{id_}").json()["vault_name"] == new
    listed = api.get(f"/vaults/{vault['id']}/secrets").json()["secrets"]
    assert {s["id"]: s["vault_name"] for s in listed} == {id_: new for id_ in ids}
    found = api.get("/vault_secrets", params={"filter": f'obj.vault_name == "{new}"'}).json()
    assert {s["id"] for s in found["secrets"]} == ids
    stale = api.get("/vault_secrets", params={"filter": f'obj.vault_name == "{old}"'}).json()
    assert stale["secrets"] == []
    changed = api.patch(f"/vault_secrets/{by_id['id']}", json={"description": "d"}).json()
    assert changed["vault_name"] == new
    # a create by the old name finds no vault; by the new one it does
    r = api.post("/vault_secrets", json={"vault_name": old, "name": "three", "value": "z"})
    assert r.status_code == 400 and r.json()["details"]["member"] == "vault_name"
    three = api.post("/vault_secrets", json={"vault_name": new, "name": "three",
                                             "value": "z"}).json()
    assert three["vault"]["id"] == vault["id"] and three["vault_name"] == new
    for id_ in (*ids, three["id"]):
        assert api.delete(f"/vault_secrets/{id_}").status_code == 204
    assert api.delete(f"/vaults/{vault['id']}").status_code == 204


def _next_second() -> None:
    """Until the clock's second changes (stamps are to the second)."""
    second = int(time.time())
    while int(time.time()) == second:
        time.sleep(0.02)


def test_an_update_that_changes_nothing_keeps_the_stamps(api: httpx.Client) -> None:
    vault = api.post("/vaults", json={"name": f"s-{secrets.token_hex(4)}"}).json()
    secret = api.post("/vault_secrets", json={"vault_id": vault["id"], "name": "k",
                                              "value": "v"}).json()
    for path, made, same, other in (
            (f"/vaults/{vault['id']}", vault, {"name": vault["name"]}, {"name": "renamed"}),
            (f"/vault_secrets/{secret['id']}", secret, {"name": "k"}, {"value": "v"})):
        for body in ({}, same):
            _next_second()
            r = api.patch(path, json=body)
            assert r.status_code == 200 and r.json()["updated_at"] == made["updated_at"], \
                (body, r.text)
        _next_second()
        r = api.patch(path, json=other)  # (a secret's value, even the same, is a change)
        assert r.status_code == 200 and r.json()["updated_at"] > made["updated_at"], r.text
    assert api.delete(f"/vault_secrets/{secret['id']}").status_code == 204
    assert api.delete(f"/vaults/{vault['id']}").status_code == 204
