"""The generic CRUD suite, driven by the catalog: every routed kind, on every backend."""

from __future__ import annotations

import re
from typing import Any

import httpx
import msgspec
import pytest

from edgeway import catalog
from edgeway.catalog.model import Kind
from edgeway.catalog.shapes import shapes
from tests.api.samples import SAMPLES
from tests.server import Server

ROUTED = [k for k in catalog.ALL if k.routed and k.path is None]  # nested: test_edges.py
WRITABLE = [k for k in ROUTED if "create" in k.ops]
READ_ONLY = [k for k in ROUTED if "create" not in k.ops]
RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


def ids_of(kinds: list[Kind]) -> list[Any]:
    return [pytest.param(k, id=k.collection) for k in kinds]


def test_every_writable_kind_has_test_data() -> None:
    assert {k.collection for k in WRITABLE} == set(SAMPLES)


def check_shape(kind: Kind, body: dict[str, Any], server: Server) -> None:
    """Every documented member is present, with the documented type."""
    response = shapes(kind).response
    assert set(response.__struct_fields__) <= set(body), set(response.__struct_fields__) - set(body)
    msgspec.convert(body, response)
    assert re.fullmatch(rf"{kind.prefix}_[0-9A-Za-z]{{27}}", body["id"])
    assert body["uri"] == f"{server.base_url}/{kind.collection}/{body['id']}"
    assert RFC3339.match(body["created_at"])


def create(api: httpx.Client, kind: Kind) -> dict[str, Any]:
    r = api.post(f"/{kind.collection}", json=SAMPLES[kind.collection].create(api))
    assert r.status_code == 201, r.text
    assert r.headers["content-type"] == "application/json"
    out: dict[str, Any] = r.json()
    return out


@pytest.mark.parametrize("kind", ids_of(WRITABLE))
def test_create_then_get(api: httpx.Client, server: Server, kind: Kind) -> None:
    made = create(api, kind)
    check_shape(kind, made, server)
    got = api.get(f"/{kind.collection}/{made['id']}")
    assert got.status_code == 200
    check_shape(kind, got.json(), server)
    if kind.secret:
        assert isinstance(made["token"], str) and made["token"].startswith(made["id"][-27:])
        assert got.json()["token"] is None
        made["token"] = None
    assert got.json() == made


@pytest.mark.parametrize("kind", ids_of(WRITABLE))
def test_list_is_paged_newest_first(api: httpx.Client, server: Server, kind: Kind) -> None:
    made = [create(api, kind)["id"] for _ in range(3)]
    first = api.get(f"/{kind.collection}", params={"limit": 2})
    assert first.status_code == 200
    page = first.json()
    assert page["uri"] == f"{server.base_url}/{kind.collection}"
    assert [i["id"] for i in page[kind.list_key]] == made[::-1][:2]
    msgspec.convert(page, shapes(kind).page)
    nxt = page["next_page_uri"]
    assert nxt.startswith(server.base_url + "/")
    second = api.get(nxt).json()
    assert second[kind.list_key][0]["id"] == made[0]
    seen: list[str] = []
    url: str | None = f"/{kind.collection}?limit=2"
    while url:
        body = api.get(url).json()
        seen += [i["id"] for i in body[kind.list_key]]
        url = body["next_page_uri"]
    assert seen == sorted(seen, reverse=True) and len(seen) == len(set(seen))
    assert set(made) <= set(seen)


@pytest.mark.parametrize("kind", ids_of(WRITABLE))
def test_update_changes_given_members_only(api: httpx.Client, server: Server,
                                           kind: Kind) -> None:
    made = create(api, kind)
    made.pop("token", None)
    change = SAMPLES[kind.collection].update
    r = api.patch(f"/{kind.collection}/{made['id']}", json=change)
    assert r.status_code == 200, r.text
    after = r.json()
    check_shape(kind, after, server)
    for name, value in after.items():
        if name in change:
            assert value == change[name], name
        elif name == "updated_at":  # the time of this update (ISO 8601 text sorts as time)
            assert value >= made[name], (value, made[name])
        elif name not in ("token", "certificate_management_status"):
            assert value == made[name], name
    assert api.patch(f"/{kind.collection}/{made['id']}", json={}).json() == after
    got = api.get(f"/{kind.collection}/{made['id']}").json()
    got.pop("token", None)
    after.pop("token", None)
    assert got == after


@pytest.mark.parametrize("kind", ids_of(WRITABLE))
def test_delete(api: httpx.Client, kind: Kind) -> None:
    made = create(api, kind)
    r = api.delete(f"/{kind.collection}/{made['id']}")
    if "delete" not in kind.ops:  # (abuse reports stay: their decisions are the record)
        assert r.status_code == 405, r.text
        assert api.get(f"/{kind.collection}/{made['id']}").status_code == 200
        return
    assert r.status_code == 204 and r.content == b""
    gone = api.get(f"/{kind.collection}/{made['id']}")
    assert gone.status_code == 404
    assert set(gone.json()) >= {"status_code", "msg", "details"}
    assert gone.json()["status_code"] == 404
    assert api.delete(f"/{kind.collection}/{made['id']}").status_code == 404


def _count(api: httpx.Client, kind: Kind) -> int:
    total, url = 0, f"/{kind.collection}"
    while url:
        body = api.get(url).json()
        total += len(body[kind.list_key])
        url = body["next_page_uri"]
    return total


@pytest.mark.parametrize("kind", ids_of(WRITABLE))
def test_unknown_member_is_refused_and_nothing_written(api: httpx.Client, kind: Kind) -> None:
    body = SAMPLES[kind.collection].create(api)
    before = _count(api, kind)
    r = api.post(f"/{kind.collection}", json={**body, "bogus_member": 1})
    assert r.status_code == 400
    err = r.json()
    assert err["error_code"].endswith("_214") and "bogus_member" in err["msg"]
    assert err["details"]["operation_id"].startswith("op_")
    assert _count(api, kind) == before


@pytest.mark.parametrize("kind", ids_of(WRITABLE))
def test_wrong_type_names_the_member(api: httpx.Client, kind: Kind) -> None:
    body = SAMPLES[kind.collection].create(api)
    name = next(iter(body))
    r = api.post(f"/{kind.collection}", json={**body, name: 12345})
    assert r.status_code == 400, r.text
    assert name in r.json()["msg"]


DESCRIBED = [k for k in WRITABLE if any(f.name == "description" for f in k.fields)]


@pytest.mark.parametrize("kind", ids_of(DESCRIBED))
def test_description_and_metadata_limits_count_bytes(api: httpx.Client, kind: Kind) -> None:
    body = SAMPLES[kind.collection].create(api)
    ok = api.post(f"/{kind.collection}", json={**body, "description": "é" * 127 + "a"})
    assert ok.status_code == 201, ok.text
    ok_id = ok.json()["id"]
    body = SAMPLES[kind.collection].create(api)
    r = api.post(f"/{kind.collection}", json={**body, "description": "é" * 128})
    assert r.status_code == 400 and "description" in r.json()["msg"]
    assert "255 bytes" in r.json()["msg"]
    r = api.post(f"/{kind.collection}", json={**body, "metadata": "€" * 1366})
    assert r.status_code == 400 and "metadata" in r.json()["msg"]
    r = api.patch(f"/{kind.collection}/{ok_id}", json={"description": "é" * 128})
    assert r.status_code == 400
    assert api.get(f"/{kind.collection}/{ok_id}").json()["description"] == "é" * 127 + "a"


@pytest.mark.parametrize("kind", ids_of(ROUTED))
def test_malformed_and_unknown_ids(api: httpx.Client, kind: Kind) -> None:
    other = "ipp" if kind.prefix != "ipp" else "rd"
    for bad in ("nope", f"{other}_{'A' * 27}", f"{kind.prefix}_short", "%00"):
        r = api.get(f"/{kind.collection}/{bad}")
        assert r.status_code in (400, 404), (bad, r.text)
        assert r.json()["status_code"] == r.status_code
    r = api.get(f"/{kind.collection}/{kind.prefix}_{'0' * 27}")
    assert r.status_code == 404
    assert kind.title in r.json()["msg"]


@pytest.mark.parametrize("kind", ids_of(READ_ONLY))
def test_read_only_kinds_are_empty_and_refuse_writes(api: httpx.Client, server: Server,
                                                     kind: Kind) -> None:
    r = api.get(f"/{kind.collection}")
    assert r.status_code == 200
    assert r.json() == {kind.list_key: [], "uri": f"{server.base_url}/{kind.collection}",
                        "next_page_uri": None}
    assert api.post(f"/{kind.collection}", json={}).status_code == 405
    gone = api.delete(f"/{kind.collection}/{kind.prefix}_{'0' * 27}")  # (application users
    assert gone.status_code == (404 if "delete" in kind.ops else 405)  # and sessions: 404)
