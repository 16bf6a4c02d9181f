"""The API on PostgreSQL while its database connections are lost: concurrent traffic while
every backend of the server's database is terminated again and again, a connection lost while
COMMIT is in flight, and an outage of the database (a cut link). Never a 500: lost connections
are retried, and what cannot be answered is a 503 with ``Retry-After`` and the error body
(252 not applied, 253 outcome unknown); every acknowledged write is there afterwards, and a
write answered "not applied" is not."""

from __future__ import annotations

import asyncio
import concurrent.futures
import random
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from tests.conftest import BACKENDS, backend_server
from tests.pgfaults import Link, dbname, terminate_now
from tests.server import Server, fresh_pg_database, start

pytestmark = pytest.mark.skipif("postgres" not in BACKENDS,
                                reason="PostgreSQL backend not selected")
CLIENTS = 8
NOT_APPLIED, OUTCOME_UNKNOWN = "ERR_EDGEWAY_252", "ERR_EDGEWAY_253"


@pytest.fixture(scope="module")
def pg_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    with backend_server("postgres", Path(tmp_path_factory.mktemp("lost-pg"))) as srv:
        yield srv


@dataclass
class Traffic:
    """What the clients sent and got: every answer, the acknowledged creates."""

    answers: list[tuple[str, httpx.Response]] = field(default_factory=list)
    created: dict[str, str] = field(default_factory=dict)  # id -> description
    refused: list[str] = field(default_factory=list)  # descriptions answered "not applied"
    lock: threading.Lock = field(default_factory=threading.Lock)

    def client(self, srv: Server, n: int, stop: threading.Event) -> None:
        rng = random.Random(n)
        with srv.client() as api:
            for i in range(1_000_000):
                if stop.is_set():
                    return
                with self.lock:
                    known = list(self.created)
                op = rng.choice(("create", "get", "list", "update")) if known else "create"
                description = f"c{n}-{i}"
                if op == "create":
                    r = api.post("/ip_policies", json={"description": description})
                elif op == "get":
                    r = api.get(f"/ip_policies/{rng.choice(known)}")
                elif op == "list":
                    r = api.get("/ip_policies", params={"limit": 5})
                else:
                    r = api.patch(f"/ip_policies/{rng.choice(known)}",
                                  json={"metadata": description})
                with self.lock:
                    self.answers.append((op, r))
                    if op == "create" and r.status_code == 201:
                        self.created[r.json()["id"]] = description
                    elif op == "create" and _code(r) == NOT_APPLIED:
                        self.refused.append(description)


def _code(r: httpx.Response) -> str:
    try:
        return str(r.json().get("error_code", ""))
    except ValueError:
        return ""


def _terminator(name: str, stop: threading.Event, rounds: list[int]) -> None:
    while not stop.is_set():
        if terminate_now(name):
            rounds.append(1)
        stop.wait(0.05)


def _check_unavailable(r: httpx.Response, codes: tuple[str, ...]) -> None:
    body: dict[str, Any] = r.json()
    assert r.status_code == 503, r.text
    assert r.headers.get("retry-after", "").isdigit(), r.headers
    assert body["error_code"] in codes and body["status_code"] == 503, body
    assert body["msg"] and body["details"]["operation_id"].startswith("op_"), body


def test_terminated_backends_under_load_never_give_a_500(pg_server: Server) -> None:
    traffic, stop, rounds = Traffic(), threading.Event(), list[int]()
    threads = [threading.Thread(target=traffic.client, args=(pg_server, n, stop))
               for n in range(CLIENTS)]
    threads.append(threading.Thread(target=_terminator,
                                    args=(dbname(pg_server.database_url or ""), stop, rounds)))
    for t in threads:
        t.start()
    deadline = time.monotonic() + 25
    try:  # until the backends were terminated often, under enough traffic (or the deadline)
        while time.monotonic() < deadline and (len(rounds) < 60 or len(traffic.answers) < 600):
            time.sleep(0.1)
    finally:
        stop.set()
        for t in threads:
            t.join(60)
    assert len(rounds) >= 10, "the backends were hardly terminated"
    failed = [(op, r.status_code, r.text) for op, r in traffic.answers if r.status_code >= 300]
    assert [f for f in failed if f[1] == 500] == []
    for op, r in traffic.answers:
        if r.status_code >= 300:
            _check_unavailable(r, (NOT_APPLIED, OUTCOME_UNKNOWN) if op in ("create", "update")
                               else (NOT_APPLIED,))
    ok = sum(r.status_code < 300 for _, r in traffic.answers)
    assert ok >= 0.8 * len(traffic.answers), f"{len(failed)} of {len(traffic.answers)} failed"
    # every acknowledged create is there, whole; no create answered "not applied" is
    with pg_server.client() as api:
        for id_, description in traffic.created.items():
            r = api.get(f"/ip_policies/{id_}")
            assert r.status_code == 200 and r.json()["description"] == description, r.text
        stored: set[str] = set()
        url: str | None = "/ip_policies"
        while url:
            page = api.get(url).json()
            stored |= {p["description"] for p in page["ip_policies"]}
            url = page["next_page_uri"]
    assert set(traffic.created.values()) <= stored
    assert stored.isdisjoint(traffic.refused)
    log = pg_server.log()
    assert "unhandled_error" not in log and "Traceback" not in log
    assert "store_connection_lost" in log


async def _slow_commits(url: str, on: bool) -> None:
    """A trigger that makes COMMIT of a new IP policy take 30 s (or its removal)."""
    conn = await asyncpg.connect(url)
    try:
        if on:
            await conn.execute(
                "CREATE OR REPLACE FUNCTION slow() RETURNS trigger LANGUAGE plpgsql AS "
                "$$ BEGIN PERFORM pg_sleep(30); RETURN NULL; END $$; "
                "CREATE CONSTRAINT TRIGGER slow AFTER INSERT ON ip_policies DEFERRABLE "
                "INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION slow()")
        else:
            await conn.execute("DROP TRIGGER slow ON ip_policies")
    finally:
        await conn.close()


async def _committing(url: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        deadline = time.monotonic() + 10
        while not await conn.fetchval(
                "SELECT count(*) > 0 FROM pg_stat_activity WHERE datname = $1 AND "
                "query = 'COMMIT' AND state = 'active'", dbname(url)):
            assert time.monotonic() < deadline, "no COMMIT in flight"
            await asyncio.sleep(0.01)
    finally:
        await conn.close()


def test_connection_lost_during_commit_is_an_unknown_outcome(pg_server: Server) -> None:
    url = pg_server.database_url or ""
    asyncio.run(_slow_commits(url, True))
    try:
        with concurrent.futures.ThreadPoolExecutor(1) as pool, pg_server.client() as api:
            answer = pool.submit(api.post, "/ip_policies", json={"description": "in flight"})
            asyncio.run(_committing(url))
            terminate_now(dbname(url))
            r = answer.result(30)
        _check_unavailable(r, (OUTCOME_UNKNOWN,))
        assert "may or may not have been applied" in r.json()["msg"]
    finally:
        asyncio.run(_slow_commits(url, False))


def test_database_outage_answers_503_then_recovers(tmp_path: Path) -> None:
    link = Link()
    try:
        with fresh_pg_database() as url:
            srv = start(tmp_path / "srv", link.url(url))
            try:
                with srv.client() as api:
                    made = api.post("/ip_policies", json={"description": "before"})
                    assert made.status_code == 201
                    link.cut()
                    began = time.monotonic()
                    for r in (api.get(f"/ip_policies/{made.json()['id']}"),
                              api.get("/ip_policies"),
                              api.post("/ip_policies", json={"description": "during"}),
                              api.patch(f"/ip_policies/{made.json()['id']}",
                                        json={"description": "during"})):
                        _check_unavailable(r, (NOT_APPLIED,))
                        assert r.headers["retry-after"] == "2"
                    assert time.monotonic() - began < 20
                    link.mend()
                    deadline = time.monotonic() + 10  # a client that honours Retry-After
                    while (r := api.get(f"/ip_policies/{made.json()['id']}")).status_code == 503:
                        assert time.monotonic() < deadline, r.text
                        time.sleep(0.1)
                    assert r.json()["description"] == "before"
                    assert api.post("/ip_policies", json={"description": "after"}
                                    ).status_code == 201
                    descriptions = {p["description"] for p in
                                    api.get("/ip_policies").json()["ip_policies"]}
                    assert descriptions == {"before", "after"}
            finally:
                assert srv.stop() == 0
            log = srv.log()
            assert "store_unavailable" in log and "unhandled_error" not in log
    finally:
        link.close()
