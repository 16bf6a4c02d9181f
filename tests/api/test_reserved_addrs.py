"""Reserved TCP addresses: the platform picks a free port of the TCP range; creates that run
at once (PostgreSQL runs them side by side) each get their own, while ports are free."""

from __future__ import annotations

import concurrent.futures
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import BACKENDS, backend_server
from tests.server import Server

LOW, PORTS = 20000, 30  # (20 creates at once in 30 ports: two of them often pick the same)


@pytest.fixture(scope="module", params=BACKENDS)
def narrow(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
           ) -> Iterator[Server]:
    """A server whose TCP range has a few ports only."""
    with backend_server(request.param, Path(tmp_path_factory.mktemp("addrs")),
                        "--tcp-ports", f"{LOW}-{LOW + PORTS - 1}") as srv:
        yield srv


def test_concurrent_creates_each_get_a_free_port(narrow: Server) -> None:
    def reserve(i: int) -> tuple[int, str]:
        with narrow.client() as c:
            r = c.post("/reserved_addrs", json={"description": f"db {i}"})
            return r.status_code, r.json().get("addr") or r.text

    for _round in range(3):  # (a few rounds: a race lost once is caught)
        with concurrent.futures.ThreadPoolExecutor(20) as pool:
            results = list(pool.map(reserve, range(20)))
        assert [status for status, _ in results] == [201] * 20, results
        addrs = [addr for _, addr in results]
        assert len(set(addrs)) == 20
        assert all(LOW <= int(a.rsplit(":", 1)[1]) < LOW + PORTS for a in addrs)
        with narrow.client() as c:
            for made in c.get("/reserved_addrs").json()["reserved_addrs"]:
                assert c.delete(f"/reserved_addrs/{made['id']}").status_code == 204
    with narrow.client() as c:  # every port taken: a clear "none free"
        for _ in range(PORTS):
            assert c.post("/reserved_addrs", json={}).status_code == 201
        r = c.post("/reserved_addrs", json={})
        assert r.status_code == 400 and r.json()["error_code"] == "ERR_EDGEWAY_509", r.text
