"""Route module secrets at rest: a webhook secret an earlier version stored in the clear is
sealed when the server starts, and the edge still verifies with it; '********' written back
keeps it; the data directory and every file in it are the server user's alone."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from tests.api.test_secret_members import stored_text
from tests.conftest import BACKENDS
from tests.domains import db
from tests.edge.agents import EdgeClient
from tests.edge.test_edges import made, route
from tests.edge.test_webhook_verification import BODY, as_dict, signed
from tests.server import Server, fresh_pg_database, start

HOST = "sealed-hooks.example.com"
MASK = "********"


def private(data_dir: Path) -> list[str]:
    """What in ``data_dir`` (itself included) others may read, write or enter."""
    return [f"{p} {oct(stat.S_IMODE(p.stat().st_mode))}" for p in (data_dir, *data_dir.rglob("*"))
            if p.stat().st_mode & 0o077]


@pytest.fixture(params=BACKENDS)
def stopped(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[Path, str | None]]:
    with ExitStack() as stack:
        url = stack.enter_context(fresh_pg_database()) if request.param == "postgres" else None
        yield tmp_path / "srv", url


def _route_doc(server: Server, route_id: str) -> dict[str, Any]:
    (row,) = db.rows(server, "SELECT doc FROM edges_https_routes WHERE id = ?", route_id)
    doc: dict[str, Any] = json.loads(row[0])
    return doc


def _verifies(srv: Server, secret: str) -> None:
    with EdgeClient(srv) as web:
        r = web.request("POST", f"https://{HOST}/", content=BODY,
                        headers=as_dict(signed("github", BODY, secret=secret)))
        assert r.status_code == 200, r.text
        r = web.request("POST", f"https://{HOST}/", content=BODY,
                        headers=as_dict(signed("github", BODY, secret="wrong")))
        assert r.status_code == 403, r.text


def test_an_upgrade_seals_secrets_stored_in_the_clear(stopped: tuple[Path, str | None],
                                                      service: int) -> None:
    data_dir, url = stopped
    secret = f"hook-{uuid.uuid4().hex}"
    srv = start(data_dir, url)
    try:
        with srv.client() as api:
            made(api, "/reserved_domains", {"domain": HOST})
            edge = made(api, "/edges/https", {"hostports": [f"{HOST}:443"]})
            svc = made(api, "/backends/static", {"address": f"127.0.0.1:{service}"})
            rid = route(api, edge["id"], "path_prefix", "/", svc["id"],
                        webhook_verification={"provider": "github", "secret": secret})["id"]
    finally:
        assert srv.stop() == 0
    # as an earlier version left it: the secret in the clear, the files open to everyone
    doc = _route_doc(srv, rid)
    assert doc["webhook_verification"]["secret"].startswith("v1:")
    doc["webhook_verification"]["secret"] = secret
    db.execute(srv, "UPDATE edges_https_routes SET doc = ? WHERE id = ?", json.dumps(doc), rid)
    for p in (data_dir, *data_dir.rglob("*")):
        p.chmod(0o755 if p.is_dir() else 0o644)
    assert secret in stored_text(srv)
    again = start(data_dir, url, token=srv.token)
    try:
        assert secret not in stored_text(again)
        assert "module_secrets_sealed" in again.log() and "data_dir_tightened" in again.log()
        assert not private(data_dir)
        _verifies(again, secret)
        with again.client() as api:
            path = f"/edges/https/{edge['id']}/routes/{rid}"
            assert api.get(path).json()["webhook_verification"]["secret"] == MASK
            sealed = _route_doc(again, rid)["webhook_verification"]["secret"]
            r = api.patch(path, json={"description": "kept",
                                      "webhook_verification": {"provider": "github",
                                                               "secret": MASK}})
            assert r.status_code == 200 and r.json()["webhook_verification"]["secret"] == MASK
            assert _route_doc(again, rid)["webhook_verification"]["secret"] == sealed
            _verifies(again, secret)
            r = api.post(f"/edges/https/{edge['id']}/routes", json={
                "match_type": "path_prefix", "match": "/new",
                "webhook_verification": {"provider": "github", "secret": MASK}})
            assert r.status_code == 400, r.text
            assert r.json()["details"]["member"] == "webhook_verification.secret"
    finally:
        assert again.stop() == 0


def test_a_new_data_directory_is_the_servers_alone(tmp_path: Path) -> None:
    data_dir = tmp_path / "new" / "data"
    done = subprocess.run([sys.executable, "-m", "edgeway", "api-keys", "create", "--init",
                           "--data-dir", str(data_dir)], capture_output=True, text=True,
                          timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert (data_dir / "edgeway.db").exists()
    assert not private(data_dir)
