"""A gateway of its own (SQLite), restarted with ``--ssh-host-ca`` and one-second keep-alives:
clients trusting the SSH certificate authority with ``@cert-authority`` connect with strict
host key checking; the host key made on first start is kept; a client that stops answering
loses its session and tunnels within three keep-alives."""

from __future__ import annotations

import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.edge import upstream
from tests.server import Server, free_port, start
from tests.sshgw.client import SshUser, made, poll


@dataclass
class Gateway:
    srv: Server
    ca: dict[str, str]
    first_host_key: str


@pytest.fixture(scope="module")
def gateway(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateway]:
    data = Path(tmp_path_factory.mktemp("sshgw-own"))
    ssh = f"127.0.0.1:{free_port()}"
    first = start(data, None, "--ssh-addr", ssh)
    try:
        with first.client() as api:
            ca = made(api, "/ssh_certificate_authorities", {})
        host_key = (data / "ssh_host_ed25519_key.pub").read_text()
    finally:
        assert first.stop() == 0
    ports = (int(first.base_url.rsplit(":", 1)[1]), first.tunnel_port, first.http_port,
             first.https_port)
    srv = start(data, None, "--ssh-addr", ssh, "--ssh-host-ca", ca["id"],
                "--ssh-keepalive", "1", token=first.token, ports=ports)
    srv.ssh_port = int(ssh.rsplit(":", 1)[1])
    try:
        yield Gateway(srv, ca, host_key)
    finally:
        assert srv.stop() == 0


@pytest.fixture
def user(gateway: Gateway, tmp_path: Path) -> Iterator[SshUser]:
    someone = SshUser(gateway.srv, tmp_path / "ssh")
    try:
        yield someone
    finally:
        someone.close()


def test_host_certificate_and_host_key(gateway: Gateway, user: SshUser) -> None:
    srv = gateway.srv
    assert (srv.data_dir / "ssh_host_ed25519_key.pub").read_text() == gateway.first_host_key
    with srv.client() as api:
        user.credential(api)
        r = api.delete(f"/ssh_certificate_authorities/{gateway.ca['id']}")
        assert r.status_code == 400 and r.json()["error_code"] == "ERR_EDGEWAY_446"
        assert "--ssh-host-ca" in r.json()["msg"]
    # only the authority is trusted, not the key: the host certificate must be presented
    user.trust(f"@cert-authority [127.0.0.1]:{user.port} {gateway.ca['public_key']}")
    with upstream.running("certified") as service:
        ssh = user.start(f"0:localhost:{service}", command=["http"])
        assert ssh.urls()[0].startswith("http://")
        ssh.stop()
    other = made_ca_line(srv)
    user.trust(f"@cert-authority [127.0.0.1]:{user.port} {other}")
    refused = user.start("0:localhost:1", command=["http"])
    assert refused.exited() == 255 and "Host key verification failed" in refused.stderr()


def made_ca_line(srv: Server) -> str:
    with srv.client() as api:
        return str(made(api, "/ssh_certificate_authorities", {})["public_key"])


def test_a_client_that_stops_answering_loses_its_tunnels(gateway: Gateway,
                                                        user: SshUser) -> None:
    srv = gateway.srv
    with srv.client() as api:
        cred = user.credential(api)
        with upstream.running("frozen") as service:
            ssh = user.start(f"0:localhost:{service}", command=["http"])
            [url] = ssh.urls()

            def live() -> list[str]:
                return [t["public_url"] for t in api.get("/tunnels").json()["tunnels"]]

            assert url in live()
            ssh.proc.send_signal(signal.SIGSTOP)  # alive, connected, and silent
            try:
                poll(lambda: url not in live(), "the tunnel of the silent client to go",
                     timeout=15)
                sessions = api.get("/tunnel_sessions").json()["tunnel_sessions"]
                assert not [s for s in sessions if s["credential"]["id"] == cred["id"]]
            finally:
                ssh.proc.send_signal(signal.SIGCONT)
