"""A clean stop of the node holding an agent's session (SIGTERM) while one client sends
HTTP requests and another opens TLS connections (passed through) through another node for
that agent's tunnels: not one request or connection fails, and none is cut. The stopping
node leaves the cluster at once, the other holds new requests for its tunnels, the requests
carried over the link end, then the agent is told to go (a GOAWAY), reconnects to the other
node (both listen for agents on one address) and binds the same URL; the held requests go on.
(A killed node cuts the requests it was carrying, and in CI one 404 slipped through after a
kill: that case is not claimed here; tests/nodes/test_node_loss.py covers the kill.)"""

from __future__ import annotations

import base64
import secrets
import signal
import socket
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import BACKENDS
from tests.edge import tls_upstream, upstream
from tests.edge.agents import EdgeClient, agent, read_all
from tests.server import Server, free_block, free_port, fresh_pg_database, start

pytestmark = pytest.mark.skipif("postgres" not in BACKENDS,
                                reason="nodes share a PostgreSQL database")


class Client(threading.Thread):
    """Requests one after the other through ``srv`` until stopped, every outcome kept: HTTP
    requests for ``url``; or with ``tls`` (a TLS tunnel's name and its upstream's
    certificate) a line through a new TLS connection each, passed through to the upstream;
    or with ``tcp`` (the node's address and the tunnel's port) bytes through a new TCP
    connection each, echoed."""

    def __init__(self, srv: Server, url: str, tls: tuple[str, Path] | None = None,
                 tcp: tuple[str, int] | None = None) -> None:
        super().__init__(daemon=True)
        self.srv, self.url, self.tls, self.tcp = srv, url, tls, tcp
        self.statuses: list[int | str] = []
        self.done = threading.Event()

    def run(self) -> None:
        with EdgeClient(self.srv, timeout=30) as web:
            while not self.done.is_set():
                n = len(self.statuses)
                try:
                    if self.tcp is not None:  # (a new connection each, to an echo service)
                        with socket.create_connection(self.tcp, timeout=30) as sock:
                            sock.sendall(b"%d" % n)
                            sock.shutdown(socket.SHUT_WR)
                            got = read_all(sock)
                        self.statuses.append(200 if got == b"%d" % n else repr(got))
                        continue
                    if self.tls is not None:
                        name, cert = self.tls
                        got = tls_upstream.ask(self.srv.https_port, name, cert, b"%d\n" % n)
                        expected = b"%s got %d\n" % (name.encode(), n)
                        self.statuses.append(200 if got == expected else repr(got))
                        continue
                    r = web.get(f"{self.url}/{n}")
                    ok = r.status_code == 200 and r.text == f"svc /{n}"
                    self.statuses.append(200 if ok else f"{r.status_code} {r.text[:200]}")
                except (httpx.HTTPError, OSError) as exc:
                    self.statuses.append(repr(exc))

    def until(self, count: int, within: float = 60) -> None:
        began = time.monotonic()
        while len(self.statuses) < count:
            assert time.monotonic() - began < within, self.statuses[-5:]
            time.sleep(0.01)


TCP_HOSTS = {"a": "127.0.0.1", "b": "127.0.0.2"}


def _pair(tmp_path: Path, url: str) -> tuple[Server, Server]:
    env = {"EDGEWAY_SECRET_KEY": base64.b64encode(secrets.token_bytes(32)).decode()}
    block = free_block(10)  # (each node publishes TCP tunnels on an address of its own)
    common = ("--reuse-port", "--node-lease", "3", "--tcp-ports", f"{block[0]}-{block[-1]}")
    a = start(tmp_path / "a", url, *common, "--node-addr", f"127.0.0.1:{free_port()}",
              "--tcp-host", TCP_HOSTS["a"], env=env)
    try:
        b = start(tmp_path / "b", url, *common, "--node-addr", f"127.0.0.1:{free_port()}",
                  "--tcp-host", TCP_HOSTS["b"],
                  token=a.token, env=env, ports=(free_port(), a.tunnel_port, free_port(),
                                                 free_port()))
    except BaseException:
        a.stop()  # (not left running when the second node fails to start)
        raise
    return a, b


@pytest.mark.parametrize("how", ["SIGTERM"])
def test_no_request_fails_while_the_agent_moves(tmp_path: Path, how: str) -> None:
    name = "raw.drain.example"
    with fresh_pg_database() as url, upstream.running("svc") as service, \
            upstream.echo() as echo, \
            tls_upstream.running(name, tmp_path) as (tls_port, tls_cert):
        a, b = _pair(tmp_path, url)
        bound = None
        moved = 0
        client: Client | None = None
        clients: list[Client] = []
        try:
            with a.client() as api:
                token = api.post("/credentials", json={}).json()["token"]
                assert api.post("/reserved_domains", json={"domain": name}).status_code == 201
            # (the agent dials the address both listen on: the kernel picks the node)
            bound = agent(a, token, {"kind": "https", "forward": f"http://127.0.0.1:{service}"},
                          {"kind": "tls", "domain": name,
                           "forward": f"tcp://127.0.0.1:{tls_port}"},
                          {"kind": "tcp", "forward": f"tcp://127.0.0.1:{echo}"})
            holder, other = (a, b) if "agent_session_start" in a.log() else (b, a)
            tcp_port = int(bound.urls[2].rsplit(":", 1)[1])
            # (the bind was answered once the other node served it too)
            with EdgeClient(other) as web:
                assert web.get(bound.urls[0]).status_code == 200
            client = Client(other, bound.urls[0])
            clients = [client, Client(other, "", (name, tls_cert)),
                       Client(other, "", tcp=(TCP_HOSTS["a" if other is a else "b"], tcp_port))]
            for each in clients:
                each.start()
            for each in clients:
                each.until(20)  # (the other node serves it: over the link)
            if how == "SIGTERM":
                began = time.monotonic()
                assert holder.stop() == 0
                # (no connection it carried was cut: the other node closed its idle ones)
                assert '"carried_cut":0' in holder.log(), holder.log()[-3000:]
                assert time.monotonic() - began < 8
            else:
                holder.proc.send_signal(signal.SIGKILL)
                holder.proc.wait()
            moved = len(client.statuses)
            client.until(moved + 50)
            for each in clients[1:]:  # (TLS and TCP connections wait too)
                each.until(len(each.statuses) + 20)
        finally:
            for each in clients:
                each.done.set()
                each.join(60)
            if bound is not None:
                bound.stop()
            for srv in (a, b):
                if srv.proc.stdout is not None and not srv.proc.stdout.closed:
                    srv.stop()
        for each in clients:
            failed = [(i, s) for i, s in enumerate(each.statuses) if s != 200]
            assert not failed, (f"{len(failed)} of {len(each.statuses)} failed (the move "
                                f"began at HTTP request {moved}): {failed[:5]}")
