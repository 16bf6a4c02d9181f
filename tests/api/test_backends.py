"""Backends: references between backends, cycles, deletes and the shapes of each kind."""

from __future__ import annotations

import httpx

from tests.api.samples import created
from tests.api.samples_edges import tunnel_group


def test_failover_and_weighted_reference_backends(api: httpx.Client) -> None:
    a, b = tunnel_group(api), tunnel_group(api)
    fo = created(api, "/backends/failover", {"backends": [a, b]})
    assert fo["backends"] == [a, b]
    wd = created(api, "/backends/weighted", {"backends": {a: 1, fo["id"]: 10000}})
    assert wd["backends"] == {a: 1, fo["id"]: 10000}
    r = api.post("/backends/weighted", json={"backends": {a: 10001}})
    assert r.status_code == 400 and "backends" in r.json()["msg"]
    r = api.post("/backends/failover", json={"backends": ["bkdtg_" + "0" * 27]})
    assert r.status_code == 400 and "backends[0]" in r.json()["msg"]
    r = api.post("/backends/failover", json={"backends": ["ipp_" + "0" * 27]})
    assert r.status_code == 400
    assert api.post("/backends/failover", json={"backends": []}).status_code == 400
    r = api.delete(f"/backends/tunnel_group/{a}")
    assert r.status_code == 400 and fo["id"] in r.json()["msg"]


def test_backend_references_cannot_form_a_cycle(api: httpx.Client) -> None:
    leaf = tunnel_group(api)
    first = created(api, "/backends/failover", {"backends": [leaf]})
    second = created(api, "/backends/weighted", {"backends": {first["id"]: 5}})
    r = api.patch(f"/backends/failover/{first['id']}", json={"backends": [second["id"]]})
    assert r.status_code == 400 and "cycle" in r.json()["msg"]
    r = api.patch(f"/backends/failover/{first['id']}", json={"backends": [first["id"]]})
    assert r.status_code == 400 and "cycle" in r.json()["msg"]
    assert api.get(f"/backends/failover/{first['id']}").json()["backends"] == [leaf]


def test_static_and_http_response_rules(api: httpx.Client) -> None:
    for bad in ("nohost", "db.example.com:99999", "bad_host:1"):
        r = api.post("/backends/static", json={"address": bad})
        assert r.status_code == 400 and "address" in r.json()["msg"], bad
    ok = created(api, "/backends/static", {"address": "[2001:db8::1]:443",
                                           "tls": {"enabled": True}})
    assert ok["tls"] == {"enabled": True}
    assert created(api, "/backends/static", {"address": "10.0.0.1:80"})["tls"] == {
        "enabled": False}
    hr = created(api, "/backends/http_response", {})
    assert (hr["status_code"], hr["body"], hr["headers"]) == (200, "", {})
    r = api.post("/backends/http_response", json={"status_code": 99})
    assert r.status_code == 400 and "status_code" in r.json()["msg"]
    r = api.post("/backends/http_response", json={"headers": {"Bad Name": "x"}})
    assert r.status_code == 400 and "headers.Bad Name" in r.json()["msg"]


def test_tunnel_group_labels(api: httpx.Client) -> None:
    tg = created(api, "/backends/tunnel_group", {"labels": {"site": "a", "env": "prod"}})
    assert tg["tunnels"] == []
    r = api.patch(f"/backends/tunnel_group/{tg['id']}", json={"labels": {}})
    assert r.json()["labels"] == {"site": "a", "env": "prod"}
    r = api.post("/backends/tunnel_group", json={"labels": {"bad key": "x"}})
    assert r.status_code == 400 and "labels.bad key" in r.json()["msg"]
    r = api.post("/backends/tunnel_group", json={"labels": {"k": ""}})
    assert r.status_code == 400
