"""IP restrictions of type ``agent`` and ``endpoints`` on real traffic: an enforced ``agent``
restriction refuses tunnel sessions from addresses its policies do not allow (the SDK's auth
error, with its code) and ends the live ones it now refuses; an enforced ``endpoints``
restriction refuses public traffic on every edge and agent endpoint (403 for HTTP and HTTPS,
a closed connection for TCP and TLS); unenforced, both only log."""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import h11
import httpx

from tests.edge import tls_upstream
from tests.edge.agents import agent, ca_context, sdk_connect
from tests.edge.test_edges import made
from tests.server import Server, free_port

OTHER = "127.0.0.2"  # a client address the policies below do not allow (127.0.0.1 they do)

def wait_for(condition: Callable[[], bool], seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


@contextmanager
def restriction(api: httpx.Client, kind: str, cidr: str, enforced: bool) -> Iterator[str]:
    """A restriction of ``kind`` whose one policy allows ``cidr``; deleted after."""
    policy = made(api, "/ip_policies", {"description": f"{kind} {cidr}"})
    made(api, "/ip_policy_rules", {"ip_policy_id": policy["id"], "cidr": cidr,
                                   "action": "allow"})
    rid: str = made(api, "/ip_restrictions", {"type": kind, "enforced": enforced,
                                              "ip_policy_ids": [policy["id"]]})["id"]
    try:
        yield rid
    finally:
        assert api.delete(f"/ip_restrictions/{rid}").status_code == 204


def logged(srv: Server, rid: str, kind: str) -> bool:
    """The server logged that restriction ``rid`` of ``kind`` would refuse a client."""
    return any("ip_restriction_would_refuse" in line and rid in line
               and f'"type":"{kind}"' in line for line in srv.log().splitlines())


def test_agent_restrictions_refuse_sessions_from_other_addresses(
        srv: Server, token: str, service: int) -> None:
    with srv.client() as api, restriction(api, "agent", "10.0.0.0/8", False) as rid:
        a = agent(srv, token, {"kind": "http", "forward": f"http://127.0.0.1:{service}"})
        try:
            assert a.urls[0].startswith("http://")  # unenforced: it connected and bound
            live = {s["id"] for s in api.get("/tunnel_sessions").json()["tunnel_sessions"]}
            assert live
            wait_for(lambda: logged(srv, rid, "agent"))
            assert api.patch(f"/ip_restrictions/{rid}", json={"enforced": True}
                             ).status_code == 200
            # the live session ends, and the SDK's reconnects are refused
            wait_for(lambda: not live & {s["id"] for s in api.get("/tunnel_sessions").json()[
                "tunnel_sessions"]})
            said = sdk_connect(srv, token)
            assert said.startswith("refused:") and "may not start agent sessions" in said \
                and rid in said and "ERR_NGROK_220" in said, said
            # a rule allowing the agent's address lets it in again
            policy = api.get(f"/ip_restrictions/{rid}").json()["ip_policies"][0]["id"]
            made(api, "/ip_policy_rules", {"ip_policy_id": policy, "cidr": "127.0.0.1/32",
                                           "action": "allow"})
            assert sdk_connect(srv, token).startswith("connected")
        finally:
            a.stop()


def http_status(srv: Server, host: str, tls: bool, source: str) -> int | None:
    """The status of a GET to ``host`` from ``source``; None if closed without an answer."""
    port = srv.https_port if tls else srv.http_port
    raw = socket.create_connection(("127.0.0.1", port), timeout=20,
                                   source_address=(source, 0))
    sock = ca_context(srv).wrap_socket(raw, server_hostname=host.rsplit(":", 1)[0]) \
        if tls else raw
    with sock:
        sock.sendall(f"GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    return int(data.split(b" ", 2)[1]) if data else None


class KeptAlive:
    """One kept-alive HTTP connection from ``source``, a request at a time."""

    def __init__(self, port: int, host: str, source: str) -> None:
        self.host = host
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=20,
                                             source_address=(source, 0))
        self.conn = h11.Connection(h11.CLIENT)

    def __enter__(self) -> KeptAlive:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.sock.close()

    def status(self) -> int:
        if self.conn.our_state is h11.DONE:
            self.conn.start_next_cycle()
        self.sock.sendall(self.conn.send(h11.Request(method="GET", target="/",
                                                     headers=[("Host", self.host)])) or b"")
        self.sock.sendall(self.conn.send(h11.EndOfMessage()) or b"")
        status = 0
        while True:
            event = self.conn.next_event()
            if event is h11.NEED_DATA:
                self.conn.receive_data(self.sock.recv(65536))
            elif isinstance(event, h11.Response):
                status = event.status_code
            elif isinstance(event, h11.EndOfMessage):
                return status


def tcp_echoes(port: int, source: str) -> bool:
    """Whether bytes sent to 127.0.0.1:``port`` from ``source`` come back (else: closed)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=20,
                                      source_address=(source, 0)) as s:
            s.sendall(b"ping")
            return s.recv(100) == b"ping"
    except ConnectionResetError:
        return False


def tls_answers(srv: Server, name: str, cert: Path, source: str) -> bool:
    """Whether a line sent through a TLS tunnel from ``source`` gets its answer."""
    context = ssl.create_default_context(cafile=str(cert))
    try:
        with socket.create_connection(("127.0.0.1", srv.https_port), timeout=20,
                                      source_address=(source, 0)) as raw, \
                context.wrap_socket(raw, server_hostname=name) as tls:
            tls.sendall(b"hi\n")
            return tls.recv(100) == f"{name} got hi\n".encode()
    except (ssl.SSLError, ConnectionError):
        return False


def test_endpoints_restrictions_refuse_public_traffic_everywhere(
        srv: Server, token: str, service: int, echo_port: int, tmp_path: Path) -> None:
    tcp_edge_port = free_port()
    with tls_upstream.running("locked.example.org", tmp_path) as (tls_up, tls_cert), \
            srv.client() as api:
        made(api, "/reserved_domains", {"domain": "locked.example.org"})
        static = made(api, "/backends/static", {"address": f"127.0.0.1:{echo_port}"})
        edge = made(api, "/edges/tcp", {"hostports": [f"db.edgeway.localhost:{tcp_edge_port}"],
                                        "backend": {"backend_id": static["id"]}})
        a = agent(srv, token, {"kind": "http", "forward": f"http://127.0.0.1:{service}"},
                  {"kind": "https", "forward": f"http://127.0.0.1:{service}"},
                  {"kind": "tcp", "forward": f"tcp://127.0.0.1:{echo_port}"},
                  {"kind": "tls", "domain": "locked.example.org",
                   "forward": f"tcp://127.0.0.1:{tls_up}"})
        try:
            http_host = a.urls[0].split("://")[1]
            https_host = a.urls[1].split("://")[1]
            tcp_port = int(a.urls[2].rsplit(":", 1)[1])
            wait_for(lambda: tcp_echoes(tcp_edge_port, "127.0.0.1"))

            def reached(source: str) -> list[object]:
                return [http_status(srv, http_host, False, source),
                        http_status(srv, https_host, True, source),
                        tcp_echoes(tcp_port, source), tcp_echoes(tcp_edge_port, source),
                        tls_answers(srv, "locked.example.org", tls_cert, source)]

            allowed = [200, 200, True, True, True]
            with restriction(api, "endpoints", "127.0.0.1/32", False) as rid, \
                    KeptAlive(srv.http_port, http_host, OTHER) as kept:
                assert reached(OTHER) == allowed  # unenforced: logged only
                assert kept.status() == 200
                wait_for(lambda: logged(srv, rid, "endpoints"))
                assert api.patch(f"/ip_restrictions/{rid}", json={"enforced": True}
                                 ).status_code == 200
                # a connection kept alive across the change: its next request is refused
                assert kept.status() == 403
                assert reached(OTHER) == [403, 403, False, False, False]
                assert reached("127.0.0.1") == allowed
                # the agent is not an endpoint client: its session stayed
                assert http_status(srv, http_host, False, "127.0.0.1") == 200
            assert reached(OTHER) == allowed  # deleted: nothing refused
        finally:
            a.stop()
            api.delete(f"/edges/tcp/{edge['id']}")
