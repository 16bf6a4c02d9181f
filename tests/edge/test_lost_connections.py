"""The tunnel listener and the edge on PostgreSQL while database connections are lost: after
every backend was terminated, an agent authenticates and binds (its session and tunnel are
recorded) and the edge serves it; while the database is out of reach, bound tunnels keep
serving on the last routing snapshot, a new agent is refused with a reason, and nothing
crashes; once it is back, agents connect again."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import BACKENDS
from tests.edge.agents import SCRIPT, EdgeClient, agent
from tests.pgfaults import Link, dbname, terminate_now
from tests.server import Server, fresh_pg_database, start, trust

pytestmark = pytest.mark.skipif("postgres" not in BACKENDS,
                                reason="PostgreSQL backend not selected")


def _wait_log(srv: Server, event: str, within: float = 15.0) -> None:
    deadline = time.monotonic() + within
    while f'"event":"{event}"' not in srv.log():
        assert time.monotonic() < deadline, f"no {event} in the log"
        time.sleep(0.1)


def _connect(srv: Server, token: str, listener: dict[str, str]
             ) -> subprocess.CompletedProcess[str]:
    """The SDK agent of ``agents.agent`` that is expected to fail: its exit and stderr."""
    spec = {"token": token, "addr": f"localhost:{srv.tunnel_port}",
            "ca": str(srv.data_dir / "ca.pem"), "listeners": [listener]}
    return subprocess.run([sys.executable, "-c", SCRIPT, json.dumps(spec)], input="\n",
                          capture_output=True, text=True, timeout=30, check=False)


def test_agents_and_edge_through_lost_connections(tmp_path: Path, service: int) -> None:
    link = Link()
    try:
        with fresh_pg_database() as url:
            srv = start(tmp_path / "srv", link.url(url))
            try:
                _check(srv, url, link, service)
            finally:
                assert srv.stop() == 0
            log = srv.log()
            assert "Traceback" not in log and "never retrieved" not in log, log
    finally:
        link.close()


def _check(srv: Server, url: str, link: Link, service: int) -> None:
    forward = {"kind": "http", "forward": f"http://127.0.0.1:{service}"}
    with srv.client() as api:
        token = api.post("/credentials", json={}).json()["token"]
    assert terminate_now(dbname(url)) >= 1
    first = agent(srv, token, forward)
    try:
        assert first.urls[0].startswith("http://"), first.listeners
        with EdgeClient(srv) as web, srv.client() as api:
            assert web.get(first.urls[0] + "/a").status_code == 200
            sessions = api.get("/tunnel_sessions").json()["tunnel_sessions"]
            tunnels = api.get("/tunnels").json()["tunnels"]
            assert len(sessions) == 1 and [t["public_url"] for t in tunnels] == first.urls
            link.cut()
            assert web.get(first.urls[0] + "/b").status_code == 200
            _wait_log(srv, "edge_snapshot_stale")  # the background reload failed, and said so
            assert web.get(first.urls[0] + "/c").status_code == 200
            challenge = httpx.get(  # a CA's http-01 request: it cannot be read, and says so
                f"http://127.0.0.1:{srv.http_port}/.well-known/acme-challenge/{'t' * 43}",
                headers={"Host": "site.example.com"}, timeout=60, verify=trust())
            assert challenge.status_code == 503, challenge.text
            assert challenge.headers["edgeway-error-code"] == "ERR_EDGEWAY_4017"
            refused = _connect(srv, token, forward)
            assert refused.returncode != 0
            assert "the server cannot reach its database; retry" in refused.stderr
            _wait_log(srv, "agent_session_store_unavailable")
            link.mend()
            deadline = time.monotonic() + 10
            while api.get("/tunnel_sessions").status_code == 503:
                assert time.monotonic() < deadline, "the API did not come back"
                time.sleep(0.1)
            second = agent(srv, token, forward)
            try:
                assert web.get(second.urls[0] + "/d").status_code == 200
                assert len(api.get("/tunnel_sessions").json()["tunnel_sessions"]) == 2
            finally:
                second.stop()
    finally:
        first.stop()
