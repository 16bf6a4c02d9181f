"""``edgeway serve --workers 2``: two processes on the same ports, each a node of one cluster
linked by a Unix socket. An agent's tunnels are held by one of them; every request and
connection, each on a connection of its own (the kernel gives each to either worker), is
answered, and those the other worker accepted were handed over as sockets (SCM_RIGHTS), none
carried over the link. A hand-off socket takes only well-formed messages with one descriptor
each, and closes the descriptors of the rest. The admin key is printed once; SIGTERM stops
both workers and the command exits 0. Without PostgreSQL the option is refused with the
reason."""

from __future__ import annotations

import json
import socket
import stat
from pathlib import Path
from typing import Any

import pytest

from edgeway import cli
from tests.conftest import BACKENDS
from tests.edge import tls_upstream, upstream
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
                api.post("/reserved_domains", json={"domain": "raw.workers.example"})
            with upstream.running("svc") as port, \
                    tls_upstream.running("raw.workers.example", tmp_path) as (tls_up, cert):
                bound = agent(srv, token,
                              {"kind": "https", "forward": f"http://127.0.0.1:{port}"},
                              {"kind": "http", "forward": f"http://127.0.0.1:{port}"},
                              {"kind": "tls", "domain": "raw.workers.example",
                               "forward": f"tcp://127.0.0.1:{tls_up}"})
                try:
                    # (a client of its own each: a new connection, accepted by either worker;
                    # the bind was answered once both served it: no 404 from the first)
                    for url_ in bound.urls[:2]:
                        answers = []
                        for i in range(30):
                            with EdgeClient(srv) as web:
                                r = web.get(f"{url_}/{i}")
                            answers.append((r.status_code, r.text))
                        assert answers == [(200, f"svc /{i}") for i in range(30)], url_
                    for i in range(16):  # (passthrough: the upstream's own certificate)
                        said = tls_upstream.ask(srv.https_port, "raw.workers.example", cert,
                                                b"%d\n" % i)
                        assert said == b"raw.workers.example got %d\n" % i
                    _hostile_messages(srv, bound.urls[0])
                finally:
                    bound.stop()
            log = srv.log()
            assert log.count('"node_joined"') == 2
            for i in (0, 1):
                for name in ("link.sock", "handoff.sock"):
                    sock = srv.data_dir / "workers" / str(i) / name
                    assert stat.S_IMODE(sock.stat().st_mode) == 0o600
        finally:
            assert srv.stop() == 0
    assert srv.stdout_tail.count("First start") == 0  # (printed once, before the workers)
    stopped = _events(srv, "handoff_stopped")
    assert len(stopped) == 2
    sent = {k: sum(e["sent"][k] for e in stopped) for k in ("http", "tls")}
    received = {k: sum(e["received"][k] for e in stopped) for k in ("http", "tls")}
    # every connection the worker without the agent accepted went over as a socket: none was
    # carried over the link (one in 2**29 runs lands every connection on one worker)
    assert sent == received and sent["http"] > 0 and sent["tls"] > 0, stopped
    assert sum(e["carried"] for e in _events(srv, "node_left")) == 0
    assert _events(srv, "handoff_dropped") and not _events(srv, "connection_failed")


def _events(srv: Any, event: str) -> list[dict[str, Any]]:
    lines = (json.loads(line) for line in srv.log().splitlines() if line.startswith("{"))
    return [e for e in lines if e.get("event") == event]


def _hostile_messages(srv: Any, url: str) -> None:
    """Messages a hand-off socket must refuse: not JSON, no descriptor, two, an unknown kind;
    each descriptor sent is closed by the worker (its other end reads the end), and both
    workers serve on."""
    for i in (0, 1):
        path = str(srv.data_dir / "workers" / str(i) / "handoff.sock")
        with socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET) as out:
            out.connect(path)
            kept: list[socket.socket] = []
            for data, count in ((b"not json", 1), (b'{"kind":"http","peer":["1.2.3.4",5],'
                                                   b'"ref":""}', 0),
                                (b'{"kind":"http","peer":["1.2.3.4",5],"ref":""}', 2),
                                (b'{"kind":"ssh","peer":["1.2.3.4",5],"ref":""}', 1)):
                pairs = [socket.socketpair() for _ in range(count)]
                socket.send_fds(out, [data], [a.fileno() for a, _ in pairs])
                for a, b in pairs:
                    a.close()
                    kept.append(b)
            for b in kept:
                b.settimeout(10)
                assert b.recv(1) == b"", "a descriptor of a refused message was kept open"
                b.close()
    for _ in range(6):
        with EdgeClient(srv) as web:
            assert web.get(f"{url}/after").text == "svc /after"


def test_workers_forward_a_tcp_cloud_endpoint_to_an_internal_one(tmp_path: Path) -> None:
    """A TCP cloud endpoint's port is listened on by both workers; the internal TCP endpoint
    its policy forwards to is held by one of them: every connection, whichever worker took
    it, reaches the agent (over the link, or handed over)."""
    from tests.edge.test_policy_ip_policies import until
    from tests.edge.test_tcp_internal import ask, forward, tagged, tcp_policy
    from tests.server import free_block
    ports = free_block(2)
    with fresh_pg_database() as url:
        srv = start(tmp_path / "srv", url, "--workers", "2", "--tcp-ports",
                    f"{ports[0]}-{ports[-1]}")
        try:
            with srv.client() as api, tagged(b"A:") as up:
                token = api.post("/credentials", json={}).json()["token"]
                addr = api.post("/reserved_addrs", json={}).json()["addr"]
                port = int(addr.rsplit(":", 1)[1])
                bound = agent(srv, token, {"kind": "tcp", "forward": f"tcp://127.0.0.1:{up}",
                                           "remote_addr": "db.internal:5432"})
                try:
                    assert bound.urls == ["tcp://db.internal:5432"], bound.listeners
                    r = api.post("/endpoints", json={
                        "type": "cloud", "url": f"tcp://{addr}", "traffic_policy": tcp_policy(
                            {"actions": [forward("tcp://db.internal:5432")]})})
                    assert r.status_code == 201, r.text
                    until(lambda: all(ask(port) == b"A:ping" for _ in range(4)),
                          "both workers serve the endpoint", 30)
                    assert [ask(port) for _ in range(30)] == [b"A:ping"] * 30
                finally:
                    bound.stop()
        finally:
            assert srv.stop() == 0
