"""Agent mutual TLS: a server started with ``--agent-client-cas`` completes the tunnel
listener's handshake only for agents presenting a client certificate one of those certificate
authorities issued. The Edgeway agent presents ``client_cert``/``client_key``; an agent
without one (ours, or the official SDK, which has no client certificate option) is refused
with an error that says why; the authority cannot be deleted while the server uses it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.agent.test_agent import Agent, run_agent, wait_for_line, write_config
from tests.edge import upstream
from tests.edge.agents import EdgeClient, sdk_connect
from tests.edge.test_mutual_tls import authority_files
from tests.server import Server, free_port, start


@pytest.fixture
def guarded(tmp_path: Path) -> tuple[Server, Path, Path, str]:
    """A server requiring agent certificates of a CA it stores; that CA's client pair."""
    pem, cert, key = authority_files(tmp_path, "agents")
    plain = start(tmp_path / "srv")
    with plain.client() as api:
        ca = api.post("/certificate_authorities", json={"ca_pem": pem}).json()["id"]
        token: str = api.post("/credentials", json={}).json()["token"]
    assert plain.stop() == 0
    return (start(tmp_path / "srv", None, "--agent-client-cas", ca, token=plain.token), cert, key,
            token)


def test_agents_need_a_client_certificate_of_the_agent_ca(
        guarded: tuple[Server, Path, Path, str], tmp_path: Path) -> None:
    srv, cert, key, token = guarded
    try:
        with upstream.running("svc") as svc:
            web = free_port()
            tunnels = f"tunnels:\n  web:\n    proto: http\n    addr: {svc}\n"
            cfg = write_config(tmp_path / "with.yml", srv, token, web,
                               f"client_cert: {cert}\nclient_key: {key}\n" + tunnels)
            a = run_agent("web", "--config", str(cfg), web_port=web)
            try:
                url = a.api("GET", "/api/tunnels/web").json()["public_url"]
                with EdgeClient(srv) as client:
                    assert client.get(url + "/m").text == "svc /m"
            finally:
                a.stop()
            # without the certificate, or with one another authority issued: refused, and the
            # agent says why
            _, other_cert, other_key = authority_files(tmp_path, "others")
            for name, extra in (("without", ""),
                                ("other", f"client_cert: {other_cert}\n"
                                          f"client_key: {other_key}\n")):
                bare = write_config(tmp_path / f"{name}.yml", srv, token, free_port(),
                                    extra + tunnels)
                proc = subprocess.Popen([sys.executable, "-m", "edgeway", "agent", "start",
                                         "web", "--log", "stderr", "--config", str(bare)],
                                        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                        text=True)
                try:
                    line = wait_for_line(proc, "session_lost", 30)
                finally:
                    Agent(proc, "").stop()
                assert "requires an agent client certificate" in line, (name, line)
                assert name == "without" or str(other_cert) in line, line
        said = sdk_connect(srv, token)
        assert said.startswith("refused:") and "agent client certificate" in said, said
        with srv.client() as api:
            ca = next(c["id"] for c in api.get("/certificate_authorities").json()[
                "certificate_authorities"])
            r = api.delete(f"/certificate_authorities/{ca}")
            assert r.status_code == 400 and "--agent-client-cas" in r.json()["msg"], r.text
    finally:
        assert srv.stop() == 0
