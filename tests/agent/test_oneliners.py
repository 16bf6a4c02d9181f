"""The one-liners as a user runs them against a real server (on SQLite and PostgreSQL):
``edgeway config add-authtoken``/``add-server-addr`` write the default config, then
``edgeway http`` with basic auth and the Host header rewritten, ``edgeway tcp`` and
``edgeway tls``; their metrics after traffic; a config tunnel's URL kept across an agent
restart; web_addr in use; the top-level help."""

from __future__ import annotations

import json
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.agent.test_agent import Agent, write_config
from tests.edge import upstream
from tests.edge.agents import EdgeClient
from tests.server import Server, free_port


def edgeway(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "edgeway", *args], capture_output=True,
                          text=True, timeout=60)


def spawn(*argv: str, web: int) -> Agent:
    """An agent command (``--log stderr``), once its tunnels are bound or refused."""
    proc = subprocess.Popen([sys.executable, "-m", "edgeway", *argv, "--log", "stderr",
                             "--web-addr", f"127.0.0.1:{web}"], stderr=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, text=True)
    a = Agent(proc, f"http://127.0.0.1:{web}")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            tunnels = a.api("GET", "/api/tunnels").json()["tunnels"]
            if tunnels and all(t["public_url"] or t["error"] for t in tunnels):
                return a
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            raise AssertionError(f"the agent exited: {a.stop()}")
        time.sleep(0.05)
    raise AssertionError(f"no tunnel came up: {a.stop()}")


def only_tunnel(a: Agent) -> dict[str, Any]:
    tunnels: list[dict[str, Any]] = a.api("GET", "/api/tunnels").json()["tunnels"]
    assert len(tunnels) == 1, tunnels
    return tunnels[0]


@contextmanager
def tls_echo(srv: Server) -> Iterator[int]:
    """A local TLS service (the tunnel listener's certificate) answering ``echo:<bytes>``."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(srv.data_dir / "tunnel.pem", srv.data_dir / "tunnel.key")
    listener = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn, context.wrap_socket(conn, server_side=True) as tls:
                tls.sendall(b"echo:" + tls.recv(100))

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        listener.close()
        thread.join(5)


def metrics_after(a: Agent, tunnel: str, key: str) -> dict[str, Any]:
    """The tunnel's metrics once ``key``'s rate1 moved (rates tick every second)."""
    deadline = time.monotonic() + 30
    while True:
        m: dict[str, Any] = a.api("GET", f"/api/tunnels/{tunnel}").json()["metrics"]
        if m[key]["rate1"] > 0 or time.monotonic() > deadline:
            return m
        time.sleep(0.1)


def test_one_liners_against_a_real_server(server: Server, tmp_path: Path) -> None:
    with server.client() as api:
        token = api.post("/credentials", json={}).json()["token"]
    for args in (("add-authtoken", token),
                 ("add-server-addr", f"localhost:{server.tunnel_port}")):
        done = edgeway("config", *args)
        assert done.returncode == 0, done.stderr
    ca = ("--root-cas", str(server.data_dir / "ca.pem"))
    webs = free_port(), free_port(), free_port()
    with upstream.running("svc") as svc, upstream.echo() as echo, tls_echo(server) as tls:
        web = spawn("http", str(svc), "--basic-auth", "alice:a-long-password",
                    "--host-header", "rewrite", *ca, web=webs[0])
        tcp = spawn("tcp", f"127.0.0.1:{echo}", *ca, web=webs[1])
        tls_agent = spawn("tls", str(tls), *ca, web=webs[2])
        try:
            url = only_tunnel(web)["public_url"]
            assert url.startswith("https://")
            with EdgeClient(server) as client:
                assert client.get(url + "/headers").status_code == 401
                r = client.get(url + "/headers", auth=("alice", "a-long-password"))
                assert r.status_code == 200, r.text
                headers = dict(r.json()["headers"])
                assert headers["host"] == f"127.0.0.1:{svc}"  # rewritten by the agent
                assert "authorization" in headers
            m = metrics_after(web, only_tunnel(web)["name"], "http")
            assert m["http"]["count"] == 1 and m["http"]["p50"] > 0  # (the 401 is the edge's)
            assert m["conns"]["count"] >= 1 and m["conns"]["rate1"] > 0
            status = web.api("GET", "/api/status").json()
            assert status["status"] == "online" and 0 < status["session"]["legs"][0][
                "latency"] < 10**9
            tcp_url = only_tunnel(tcp)["public_url"]
            host, port = tcp_url.removeprefix("tcp://").rsplit(":", 1)
            with socket.create_connection((host, int(port)), timeout=10) as conn:
                conn.sendall(b"ping")
                assert conn.recv(4) == b"ping"
            m = metrics_after(tcp, only_tunnel(tcp)["name"], "conns")
            assert "http" not in m and m["conns"]["count"] == 1
            tls_url = only_tunnel(tls_agent)["public_url"]
            name = tls_url.removeprefix("tls://").rsplit(":", 1)[0]
            client_ctx = ssl.create_default_context()
            client_ctx.check_hostname, client_ctx.verify_mode = False, ssl.CERT_NONE
            with socket.create_connection(("127.0.0.1", server.https_port), timeout=10) as raw, \
                    client_ctx.wrap_socket(raw, server_hostname=name) as conn:
                conn.sendall(b"hello")  # TLS end to end with the local service
                assert conn.recv(100) == b"echo:hello"
        finally:
            for a in (web, tcp, tls_agent):
                a.stop()


def test_a_config_tunnel_keeps_its_url_across_agent_restarts(server: Server,
                                                             tmp_path: Path) -> None:
    with server.client() as api:
        token = api.post("/credentials", json={}).json()["token"]
    web = free_port()
    with upstream.running("svc") as svc:
        cfg = write_config(tmp_path / "a.yml", server, token, web,
                           f"tunnels:\n  site:\n    proto: http\n    addr: {svc}\n"
                           f"  db:\n    proto: tcp\n    addr: {svc}\n")

        def urls(a: Agent) -> dict[str, str]:
            return {t["name"]: t["public_url"]
                    for t in a.api("GET", "/api/tunnels").json()["tunnels"]}

        first = spawn("start", "--all", "--config", str(cfg), web=web)
        before = urls(first)
        # a second agent running the same tunnels meanwhile does not take them over
        other = spawn("start", "--all", "--config", str(cfg), web=free_port())
        try:
            assert set(urls(other).values()).isdisjoint(before.values())
        finally:
            other.stop()
        first.stop()
        again = spawn("start", "--all", "--config", str(cfg), web=web)
        try:
            assert urls(again) == before
            with EdgeClient(server) as client:
                assert client.get(before["site"] + "/back").text == "svc /back"
        finally:
            again.stop()


def test_web_addr_in_use_moves_to_the_next_port(server: Server, tmp_path: Path) -> None:
    with server.client() as api:
        token = api.post("/credentials", json={}).json()["token"]
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        cfg = write_config(tmp_path / "a.yml", server, token, port, "")
        proc = subprocess.Popen([sys.executable, "-m", "edgeway", "start", "--none", "--config",
                                 str(cfg), "--log", "stderr"], stderr=subprocess.PIPE,
                                stdout=subprocess.DEVNULL, text=True)
        a = Agent(proc, "")
        try:
            assert proc.stderr is not None
            line = json.loads(proc.stderr.readline())
            # the next free port: port + 1 unless another process took that one meanwhile
            assert line["event"] == "web_addr_in_use" and port < line["listening"] <= port + 9
            a = Agent(proc, f"http://127.0.0.1:{line['listening']}")
            deadline = time.monotonic() + 60
            while True:
                try:
                    if a.api("GET", "/api/status").json()["status"] == "online":
                        break
                except httpx.HTTPError:
                    pass
                assert time.monotonic() < deadline
                time.sleep(0.05)
        finally:
            a.stop()


def test_the_command_line_help_and_version() -> None:
    r = edgeway("--help")
    assert r.returncode == 0 and "`" not in r.stdout.split("examples:")[0]
    for command in ("serve", "ca", "agent", "start", "http", "tcp", "tls", "config",
                    "api-keys"):
        assert f"\n    {command} " in r.stdout, command
    assert edgeway("--version").stdout.strip().startswith("edgeway ")
    r = edgeway("http", "3000", "--resolve", "h:80:not an address", "--authtoken", "x",
                "--server-addr", "h:80")
    assert r.returncode == 2 and "HOST:PORT:ADDRESS" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("command", [["ca", "export"], ["api-keys", "create"]])
def test_an_unused_data_directory_is_refused(tmp_path: Path, command: list[str]) -> None:
    r = edgeway(*command, "--data-dir", str(tmp_path / "typo"))
    assert r.returncode == 2 and str(tmp_path / "typo") in r.stderr
    assert "no server has" not in r.stdout and not (tmp_path / "typo").exists()
