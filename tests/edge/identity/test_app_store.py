"""The store side of logins, on SQLite and PostgreSQL without a server: one application user
per provider and user id (updated by later logins), sessions found by id and ended by single
logout within their realm (and provider session), SAML assertion ids used once until they
expire, and the sweep of expired sessions and assertions."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from edgeway.catalog.apps import APP_USERS
from edgeway.edge.login.base import Identity, common
from edgeway.edge.login.sessions import AppSessions, Opening
from edgeway.pki.seal import Sealer
from edgeway.store.migrate import open_database
from edgeway.store.repo import Repo
from tests.conftest import BACKENDS
from tests.server import fresh_pg_database


@pytest.fixture(params=BACKENDS)
def url(request: pytest.FixtureRequest) -> Iterator[str | None]:
    with ExitStack() as stack:
        yield stack.enter_context(fresh_pg_database()) if request.param == "postgres" else None


def test_users_sessions_assertions_and_the_sweep(url: str | None, tmp_path: Path) -> None:
    async def run() -> None:
        db = await open_database(url, tmp_path)
        try:
            store = AppSessions(db, Sealer(os.urandom(32)), "http://api.example")
            short = common("saml", {"maximum_duration": 1}, "rt_a", "idp")
            other = common("saml", {}, "rt_b", "idp")
            saml = ("saml", "https://idp.example/metadata")
            opening = Opening(saml, "https://a.example", "curl/8", "192.0.2.1", "tok",
                              details={"session_index": "s1"})
            first, _ = await store.open(short, Identity("u1", "old@x.example"), opening)
            second, _ = await store.open(other, Identity("u1", "new@x.example"), opening)
            third, _ = await store.open(other, Identity("u1"), Opening(
                saml, "https://b.example", "", "192.0.2.2", details={"session_index": "s2"}))
            users = await Repo(db.reader()).all_docs(APP_USERS)
            assert [d["email"] for _, d in users] == [""]  # one user, as last seen
            found = await store.find(first)
            assert found is not None and store.unseal(found.doc["token_sealed"]) == "tok"
            assert found.doc["token_sealed"] != "tok"  # (kept sealed)
            # single logout in rt_b's realm, of provider session s2 only
            assert await store.end_user_sessions(saml, "u1", other.realm, "s2") == 1
            assert await store.find(third) is None and await store.find(second) is not None
            assert await store.first_use("a1", time.time() + 1)
            assert not await store.first_use("a1", time.time() + 1)
            assert await store.sweep(time.time() + 2) == 1  # the short session
            assert await store.find(first) is None and await store.find(second) is not None
            assert await store.first_use("a1", time.time() + 60)  # expired, so forgotten
        finally:
            await db.close()

    asyncio.run(run())
