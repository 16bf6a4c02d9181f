"""Concurrent reads and writes: every response is the right one (reads by id are batched on
PostgreSQL; writes are serialised on SQLite)."""

from __future__ import annotations

import concurrent.futures

import httpx

from tests.server import Server


def test_concurrent_gets_each_get_their_own_resource(api: httpx.Client, server: Server) -> None:
    made = [api.post("/bot_users", json={"name": f"b{i}"}).json() for i in range(24)]
    gone = made.pop()
    assert api.delete(f"/bot_users/{gone['id']}").status_code == 204
    wanted = [m["id"] for m in made] * 4 + [gone["id"]] * 8

    def fetch(id_: str) -> tuple[str, int, dict[str, object]]:
        with server.client() as c:
            r = c.get(f"/bot_users/{id_}")
            return id_, r.status_code, r.json()

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        results = list(pool.map(fetch, wanted))
    names = {m["id"]: m["name"] for m in made}
    for id_, status, body in results:
        if id_ == gone["id"]:
            assert status == 404
        else:
            assert status == 200 and body["id"] == id_ and body["name"] == names[id_]


def test_concurrent_creates_and_updates_lose_nothing(api: httpx.Client, server: Server) -> None:
    pid = api.post("/ip_policies", json={}).json()["id"]

    def add(i: int) -> int:
        with server.client() as c:
            r = c.post("/ip_policy_rules", json={"ip_policy_id": pid, "action": "allow",
                                                 "cidr": f"10.{i}.0.0/16"})
            c.patch(f"/ip_policies/{pid}", json={"description": f"touched {i}"})
            return r.status_code

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        assert set(pool.map(add, range(40))) == {201}
    cidrs: set[str] = set()
    url: str | None = "/ip_policy_rules"
    while url:
        page = api.get(url).json()
        cidrs |= {r["cidr"] for r in page["ip_policy_rules"] if r["ip_policy"]["id"] == pid}
        url = page["next_page_uri"]
    assert cidrs == {f"10.{i}.0.0/16" for i in range(40)}
    assert api.get(f"/ip_policies/{pid}").json()["description"].startswith("touched ")
