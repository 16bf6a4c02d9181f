"""The ``filter`` query parameter of lists: a CEL expression over each resource as rendered,
paged like any list (the next page carries the filter), with a 400 naming what is wrong; the
endpoints list's ``id``/``url`` selectors are tested on live endpoints in
tests/edge/test_binds.py."""

from __future__ import annotations

import uuid
from typing import Any

import httpx


def listed(api: httpx.Client, path: str, **params: Any) -> list[dict[str, Any]]:
    """Every resource the list gives for ``params``, following next_page_uri."""
    key = path.strip("/")
    r = api.get(path, params=params)
    assert r.status_code == 200, r.text
    out = list(r.json()[key])
    while (nxt := r.json()["next_page_uri"]) is not None:
        assert "filter=" in nxt or "filter" not in params
        r = api.get(nxt)
        assert r.status_code == 200, r.text
        out += r.json()[key]
    return out


def test_a_filter_selects_and_pages(api: httpx.Client) -> None:
    mark = uuid.uuid4().hex[:10]
    made = [api.post("/ip_policies", json={"metadata": f"{mark}-{name}",
                                           "description": name}).json()
            for name in ("alpha", "beta", "gamma")]
    api.post("/ip_policies", json={"metadata": "unrelated"})
    mine = f'obj.metadata.startsWith("{mark}")'
    got = listed(api, "/ip_policies", filter=mine, limit=1)
    assert [p["id"] for p in got] == [p["id"] for p in reversed(made)]  # newest first
    got = listed(api, "/ip_policies", filter=f'{mine} && obj.description != "beta"')
    assert {p["description"] for p in got} == {"alpha", "gamma"}
    got = listed(api, "/ip_policies", filter=f'{mine} && obj.description in ["beta", "x"]')
    assert [p["description"] for p in got] == ["beta"]
    # timestamps compare as timestamps, against the time of the request
    recent = f'{mine} && obj.created_at >= timestamp(time.now).subtract("1h")'
    assert len(listed(api, "/ip_policies", filter=recent)) == 3
    old = f'{mine} && obj.created_at < time.now.subtract("1d")'
    assert listed(api, "/ip_policies", filter=old) == []
    # a page of matches is found past many that do not match
    for i in range(5):
        api.post("/ip_policies", json={"metadata": f"noise {i}"})
    r = api.get("/ip_policies", params={"filter": f'obj.id == "{made[0]["id"]}"'})
    assert [p["id"] for p in r.json()["ip_policies"]] == [made[0]["id"]]
    assert r.json()["next_page_uri"] is None


def test_filters_over_lists_and_nested_members(api: httpx.Client) -> None:
    mark = uuid.uuid4().hex[:10]
    one = api.post("/credentials", json={"acl": [f"bind:{mark}.example.com"]}).json()
    api.post("/credentials", json={"acl": ["bind:other.example.com"], "metadata": mark})
    got = listed(api, "/credentials", filter=f'"bind:{mark}.example.com" in obj.acl')
    assert [c["id"] for c in got] == [one["id"]]
    got = listed(api, "/credentials", filter=f'size(obj.acl) == 1 && obj.metadata == "{mark}"')
    assert len(got) == 1 and got[0]["id"] != one["id"]


def test_bad_filters_are_refused_naming_the_reason(api: httpx.Client) -> None:
    api.post("/ip_policies", json={})  # something to evaluate the filter on
    for text, words in [("obj.metadata ==", "is not a valid CEL expression"),
                        ("obj.nope == 1", "'nope', which a IPPolicy does not have"),
                        ("obj.metadata", "must be true or false"),
                        ("other.x == 1", "names other"),
                        ('obj.created_at > time.now.subtract("7 days")', "not a duration"),
                        ("x" * 5000, "at most 4096 characters")]:
        r = api.get("/ip_policies", params={"filter": text})
        body = r.json()
        assert r.status_code == 400 and body["error_code"] == "ERR_EDGEWAY_250", (text, body)
        assert "'filter'" in body["msg"] and words in body["msg"], (text, body["msg"])
    r = api.get("/ip_policies?filter=true&filter=false")
    assert r.status_code == 400 and r.json()["error_code"] == "ERR_EDGEWAY_232"
    r = api.get("/ip_policies", params={"url": "x"})  # selectors are the endpoints' own
    assert r.status_code == 400 and "supported: before_id, limit, filter" in r.json()["msg"]
