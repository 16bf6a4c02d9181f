"""Nothing lost, nothing invented: ``kill -9`` of the server in the middle of a burst of API
changes, then a restart, delivers an event for exactly the changes that committed (on SQLite
and PostgreSQL); two nodes on one PostgreSQL database deliver a burst made through both
without sending any event twice."""

from __future__ import annotations

import base64
import os
import secrets
import signal
import threading
import time
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import BACKENDS
from tests.events.capture import Capture
from tests.events.conftest import AWS_ENV, event_args, wait_for, wait_len
from tests.events.test_changes import arrived, monitoring
from tests.server import Server, fresh_pg_database, start


def burst(srv: Server, threads: int, each: int, tag: str,
          ok: list[str] | None = None) -> tuple[list[str], int]:
    """Create IP policies from ``threads`` clients at once: (ids answered 201, requests that
    got no answer); ``ok`` fills as they are answered."""
    ok = [] if ok is None else ok
    failed = [0]
    lock = threading.Lock()

    def run(n: int) -> None:
        with srv.client() as api:
            for i in range(each):
                try:
                    r = api.post("/ip_policies", json={"description": f"{tag}-{n}-{i}"})
                except httpx.HTTPError:
                    with lock:
                        failed[0] += 1
                    return
                if r.status_code == 201:
                    with lock:
                        ok.append(r.json()["id"])
    workers = [threading.Thread(target=run, args=(n,)) for n in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return ok, failed[0]


def created(cap: Capture, tags: str) -> list[str]:
    return [e["event"]["object"]["id"] for e in arrived(cap, tags)]


def stored(srv: Server, tag: str) -> set[str]:
    with srv.client() as api:
        out, url = set(), "/ip_policies?limit=100"
        while url:
            page = api.get(url).json()
            out |= {p["id"] for p in page["ip_policies"] if p["description"].startswith(tag)}
            url = page["next_page_uri"]
    return out


@pytest.mark.parametrize("backend", BACKENDS)
def test_kill_9_mid_burst_delivers_exactly_the_committed_changes(
        backend: str, tmp_path: Path, cap: Capture, moto: str) -> None:
    tags, tag = f"run:{secrets.token_hex(4)}", secrets.token_hex(4)
    with fresh_pg_database() if backend == "postgres" else nullcontext() as url:
        srv = start(tmp_path / "srv", url, *event_args(cap, moto), env=AWS_ENV)
        with srv.client() as api:
            dest = api.post("/event_destinations", json={"target": monitoring(tags)}).json()
            api.post("/event_subscriptions", json={
                "sources": [{"type": "ip_policy_created.v0"}], "destination_ids": [dest["id"]]})
        cap.down()  # (so events wait in the outbox when the server dies)
        answered: list[str] = []

        def kill() -> None:  # mid-burst: once some changes were answered
            wait_for("answered changes", lambda: len(answered) >= 40, 60, 0.005)
            srv.proc.send_signal(signal.SIGKILL)
        killer = threading.Thread(target=kill)
        killer.start()
        ok, lost = burst(srv, 8, 400, tag, answered)
        killer.join()
        srv.proc.wait(10)
        srv.stop()
        assert srv.proc.returncode == -signal.SIGKILL and ok and lost, (len(ok), lost)
        cap.up()
        again = start(tmp_path / "srv", url, *event_args(cap, moto), env=AWS_ENV,
                      token=srv.token)
        try:
            committed = stored(again, tag)
            assert set(ok) <= committed  # (and some answered nothing but committed anyway)
            got = wait_for("every committed change's event",
                           lambda: ids if set(ids := created(cap, tags)) >= committed
                           else None, 30)
            assert set(got) == committed, "an event for a change that did not commit"
        finally:
            assert again.stop() == 0


@pytest.mark.skipif("postgres" not in BACKENDS, reason="PostgreSQL backend not selected")
def test_two_nodes_on_one_database_never_send_an_event_twice(tmp_path: Path, cap: Capture,
                                                             moto: str) -> None:
    tags, tag = f"run:{secrets.token_hex(4)}", secrets.token_hex(4)
    key = base64.b64encode(os.urandom(32)).decode()
    env = {**AWS_ENV, "EDGEWAY_SECRET_KEY": key}
    with fresh_pg_database() as url:
        a = start(tmp_path / "a", url, *event_args(cap, moto), env=env)
        b = start(tmp_path / "b", url, *event_args(cap, moto), env=env, token=a.token)
        try:
            with a.client() as api:
                dest = api.post("/event_destinations",
                                json={"target": monitoring(tags)}).json()
                api.post("/event_subscriptions", json={
                    "sources": [{"type": "ip_policy_created.v0"}],
                    "destination_ids": [dest["id"]]})
            cap.delay = 0.05  # slow: both nodes' workers want the backlog at the same time
            results: list[Any] = []
            runs = [threading.Thread(target=lambda s=s: results.append(burst(s, 3, 40, tag)))
                    for s in (a, b)]
            for r in runs:
                r.start()
            for r in runs:
                r.join()
            made_ = [i for ok, _ in results for i in ok]
            assert len(made_) == 240
            got = wait_len("every event", lambda: created(cap, tags), 240, timeout=60)
            time.sleep(1.0)  # (a duplicate would arrive now)
            got = created(cap, tags)
            assert len(got) == 240 and set(got) == set(made_), "an event was sent twice"
        finally:
            cap.delay = 0.0
            assert a.stop() == 0 and b.stop() == 0
