"""The job claim that lets one node of several sharing a database issue a certificate:
two stores on separate connections race for the same due jobs; each job goes to exactly one
of them, a claimed job is not claimed again, and a finished one waits for its due time."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from edgeway.store.acme import AcmeStore
from edgeway.store.migrate import open_database
from tests.conftest import BACKENDS
from tests.server import fresh_pg_database


async def _race(url: str | None, data_dir: Path) -> None:
    one, two = await open_database(url, data_dir), await open_database(url, data_dir)
    try:
        a, b = AcmeStore(one), AcmeStore(two)
        ids = [f"rd_job{i:02d}" for i in range(20)]
        for id_ in ids:
            await a.add_job(id_, {"names": [f"{id_}.example.com"]})
        await b.add_job(ids[0], {"names": ["again"]})  # (a second node adding it: no error)
        won_a, won_b = await asyncio.gather(a.claim("node-a", 600), b.claim("node-b", 600))
        assert sorted(won_a + won_b) == ids and not set(won_a) & set(won_b)
        assert await a.claim("node-a", 600) == [] and await b.claim("node-b", 600) == []
        # finished (due later): not claimable
        await a.finish(ids[0], "node-b" if ids[0] in won_b else "node-a", {"x": 1}, 2**40)
        assert ids[0] not in await b.claim("node-b", 600)
        assert (await a.jobs())[ids[0]] == {"x": 1}
    finally:
        await one.close()
        await two.close()


@pytest.mark.parametrize("backend", BACKENDS)
def test_each_due_job_goes_to_one_node(backend: str, tmp_path: Path) -> None:
    if backend == "postgres":
        with fresh_pg_database() as url:
            asyncio.run(_race(url, tmp_path))
    else:
        asyncio.run(_race(None, tmp_path))
