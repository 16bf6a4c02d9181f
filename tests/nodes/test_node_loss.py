"""A node killed with SIGKILL: its agent reconnects to the node left (both listen for agents
on one address, as nodes behind one DNS name would) and binds the same URL and TCP port
again; traffic resumes through the survivor; the dead node's sessions, tunnels and endpoints
are removed once its lease ran out, and so is its row. The tunnel session's region is its
node's. The figure: seconds from the SIGKILL to the first request served again."""

from __future__ import annotations

import base64
import secrets
import signal
import socket
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import BACKENDS
from tests.edge import upstream
from tests.edge.agents import EdgeClient, agent
from tests.server import Server, free_block, free_port, fresh_pg_database, start

pytestmark = pytest.mark.skipif("postgres" not in BACKENDS,
                                reason="nodes share a PostgreSQL database")
LEASE = 3.0  # seconds (--node-lease)
RECOVERY = 60.0  # seconds for the SDK's back-off on a loaded machine, and the lease


def _listing(srv: Server, collection: str) -> list[dict[str, Any]]:
    with srv.client() as api:
        items: list[dict[str, Any]] = api.get(f"/{collection}").json()[collection]
    return items


def _until(check: Any, what: str, within: float = RECOVERY) -> float:
    began = time.monotonic()
    while not check():
        assert time.monotonic() - began < within, what
        time.sleep(0.05)
    return time.monotonic() - began


def _answer(srv: Server, url: str) -> str:
    try:
        with EdgeClient(srv, timeout=5) as web:
            r = web.get(url + "/after")
            return r.text if r.status_code == 200 else ""
    except httpx.HTTPError:
        return ""


TCP_NAME = "tcp.loss.example"


def test_a_killed_node_costs_its_agent_one_reconnect(tmp_path: Path) -> None:
    key = base64.b64encode(secrets.token_bytes(32)).decode()
    block = free_block(10)
    common = ("--reuse-port", "--node-lease", f"{LEASE:g}", "--tcp-ports",
              f"{block[0]}-{block[-1]}", "--regions", "us,eu")
    env = {"EDGEWAY_SECRET_KEY": key}
    with fresh_pg_database() as url:
        # (each node listens for TCP tunnels on an address of its own, as nodes on two
        # machines would, and publishes them under the one name both share)
        a = start(tmp_path / "a", url, *common, "--node-addr", f"127.0.0.1:{free_port()}",
                  "--region", "us", "--tcp-host", "127.0.0.1", "--tcp-name", TCP_NAME, env=env)
        b = start(tmp_path / "b", url, *common, "--node-addr", f"127.0.0.1:{free_port()}",
                  "--region", "eu", "--tcp-host", "127.0.0.2", "--tcp-name", TCP_NAME,
                  token=a.token, env=env,
                  ports=(free_port(), a.tunnel_port, free_port(), free_port()))
        with a.client() as api:
            token = api.post("/credentials", json={}).json()["token"]
        try:
            with upstream.running("svc") as service, upstream.echo() as echo:
                bound = agent(a, token,
                              {"kind": "https", "forward": f"http://127.0.0.1:{service}"},
                              {"kind": "tcp", "forward": f"tcp://127.0.0.1:{echo}"})
                try:
                    _lose_a_node(a, b, bound.urls)
                finally:
                    bound.stop()
        finally:
            for srv in (a, b):
                srv.stop()  # (the killed one's output closed too)


def _lose_a_node(a: Server, b: Server, urls: list[str]) -> None:
    https_url, tcp_url = urls
    port = int(tcp_url.rsplit(":", 1)[1])
    (session,) = _listing(a, "tunnel_sessions")
    holder, other = (a, b) if session["region"] == "us" else (b, a)  # (the kernel chose)
    _until(lambda: _answer(other, https_url) == "svc /after", "the other node serving")
    holder.proc.send_signal(signal.SIGKILL)
    holder.proc.wait()
    killed = time.monotonic()
    _until(lambda: _answer(other, https_url) == "svc /after", "served again after the kill")
    failover = time.monotonic() - killed
    assert tcp_url.startswith(f"tcp://{TCP_NAME}:")
    tcp_host = "127.0.0.2" if other is b else "127.0.0.1"
    with socket.create_connection((tcp_host, port), timeout=10) as sock:
        sock.sendall(b"same port")
        assert sock.recv(100) == b"same port"
    # the dead node's rows go once its lease ran out; the new session is the survivor's
    _until(lambda: len(_listing(other, "tunnel_sessions")) == 1
           and len(_listing(other, "tunnels")) == 2, "the dead node's rows removed")
    (now,) = _listing(other, "tunnel_sessions")
    assert now["id"] != session["id"] and now["region"] == ("eu" if other is b else "us")
    assert {t["public_url"].rsplit(":", 1)[0] for t in _listing(other, "tunnels")} == {
        https_url.rsplit(":", 1)[0], tcp_url.rsplit(":", 1)[0]}
    assert "node_gone" in other.log()
    print(f"failover: {failover:.2f} s from SIGKILL to the first request served again")
