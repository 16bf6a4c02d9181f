"""``edgeway serve --workers 2``: two processes on the same ports, each a node of one cluster
linked by a Unix socket. An agent's tunnel is held by one of them; every request, on a
connection of its own (the kernel gives each to either worker), is answered. The admin key is
printed once; SIGTERM stops both workers and the command exits 0. Without PostgreSQL the
option is refused with the reason."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from edgeway import cli
from tests.conftest import BACKENDS
from tests.edge import upstream
from tests.edge.agents import EdgeClient, agent
from tests.server import fresh_pg_database, start


def test_workers_need_postgresql(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["serve", "--workers", "2", "--data-dir", str(tmp_path)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "--workers 2" in err and "PostgreSQL" in err and "--database-url" in err
    with pytest.raises(SystemExit):
        cli.main(["serve", "--workers", "many", "--data-dir", str(tmp_path)])
    assert "from 1 to 64, or auto" in capsys.readouterr().err


@pytest.mark.skipif("postgres" not in BACKENDS, reason="the workers share PostgreSQL")
def test_two_workers_serve_one_tunnel_whichever_accepts(tmp_path: Path) -> None:
    with fresh_pg_database() as url:
        srv = start(tmp_path / "srv", url, "--workers", "2")
        try:
            with srv.client() as api:
                token = api.post("/credentials", json={}).json()["token"]
            with upstream.running("svc") as port:
                bound = agent(srv, token,
                              {"kind": "https", "forward": f"http://127.0.0.1:{port}"})
                try:
                    answers = []
                    # (a client of its own each: a new connection, accepted by either worker;
                    # the bind was answered once both served it: no 404 from the first)
                    for i in range(40):
                        with EdgeClient(srv) as web:
                            r = web.get(f"{bound.urls[0]}/{i}")
                        answers.append((r.status_code, r.text))
                    assert answers == [(200, f"svc /{i}") for i in range(40)]
                finally:
                    bound.stop()
            log = srv.log()
            assert log.count('"node_joined"') == 2 and '"node_link_up"' in log
            for i in (0, 1):
                sock = srv.data_dir / "workers" / str(i) / "link.sock"
                assert stat.S_IMODE(sock.stat().st_mode) == 0o600
        finally:
            assert srv.stop() == 0
    assert srv.stdout_tail.count("First start") == 0  # (printed once, before the workers)
