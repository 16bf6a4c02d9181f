"""TCP in ngrok's endpoint model: agents bind internal TCP endpoints (``tcp://db.internal:5432``:
the official SDK's ``remote_addr``, the Edgeway agent's ``--url``), which no listener serves;
a TCP cloud endpoint on a reserved address (``POST /endpoints`` with a ``tcp://`` URL) and the
``on_tcp_connect`` phase of agents' TCP and TLS endpoints forward connections to them with
``forward-internal``; the address is served by the cloud endpoint alone while it exists."""

from __future__ import annotations

import json
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.agent.test_oneliners import only_tunnel, spawn
from tests.edge.agents import agent
from tests.edge.test_policy_ip_policies import until
from tests.edge.upstream import accept_in_threads
from tests.server import Server, free_block, free_port, start


@pytest.fixture
def small(tmp_path: Path) -> Iterator[tuple[Server, list[int]]]:
    """A server whose agent TCP range is four free ports."""
    ports = free_block(4)
    srv = start(tmp_path / "srv", None, "--tcp-ports", f"{ports[0]}-{ports[-1]}")
    try:
        yield srv, ports
    finally:
        assert srv.stop() == 0


@contextmanager
def tagged(tag: bytes) -> Iterator[int]:
    """A TCP service on a free loopback port answering each read with ``tag`` + the bytes."""
    listener = socket.create_server(("127.0.0.1", 0))

    def answer(conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(65536):
                conn.sendall(tag + data)

    accept_in_threads(listener, answer)
    try:
        yield listener.getsockname()[1]
    finally:
        listener.close()


def ask(port: int, source: str = "127.0.0.1", say: bytes = b"ping") -> bytes:
    """What a connection to ``port`` gets back for ``say`` (b"" when it is closed)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10,
                                      source_address=(source, 0)) as s:
            s.sendall(say)
            return s.recv(100)
    except (ConnectionResetError, ConnectionRefusedError, BrokenPipeError):
        return b""


def forward(url: str, on_error: str = "halt") -> dict[str, Any]:
    return {"type": "forward-internal", "config": {"url": url, "on_error": on_error}}


def tcp_policy(*rules: dict[str, Any]) -> str:
    return json.dumps({"on_tcp_connect": list(rules)})


def test_a_tcp_cloud_endpoint_forwards_to_internal_tcp_endpoints(
        small: tuple[Server, list[int]]) -> None:
    srv, _ports = small
    with srv.client() as api, tagged(b"A:") as up_a, tagged(b"B:") as up_b:
        token = api.post("/credentials", json={}).json()["token"]
        ra = api.post("/reserved_addrs", json={"description": "db"}).json()
        addr, port = ra["addr"], int(ra["addr"].rsplit(":", 1)[1])
        sdk = agent(srv, token, {"kind": "tcp", "forward": f"tcp://127.0.0.1:{up_a}",
                                 "remote_addr": "DB.internal:5432"},
                    {"kind": "tcp", "forward": f"tcp://127.0.0.1:{up_a}",
                     "remote_addr": "db.internal:5432"},
                    {"kind": "tcp", "forward": f"tcp://127.0.0.1:{up_a}",
                     "remote_addr": "db.internal"})
        ours = spawn("tcp", str(up_b), "--url", "tcp://cache.internal:6379", "--authtoken",
                     token, "--server-addr", f"localhost:{srv.tunnel_port}", "--root-cas",
                     str(srv.data_dir / "ca.pem"), web=free_port())
        try:
            assert sdk.urls[0] == "tcp://db.internal:5432", sdk.listeners
            assert "already bound" in sdk.listeners[1]["error"]  # one address, one claim
            assert "and a port" in sdk.listeners[2]["error"]
            assert only_tunnel(ours)["public_url"] == "tcp://cache.internal:6379"
            listed = {e["url"]: e for e in api.get("/endpoints").json()["endpoints"]}
            inner = listed["tcp://db.internal:5432"]
            assert (inner["bindings"], inner["proto"], inner["port"]) == \
                (["internal"], "tcp", 5432)

            deny_other = {"expressions": [  # (endpoint.*: the cloud endpoint's address)
                "conn.client_ip == '127.0.0.2'",
                f"endpoint.protocol == 'tcp' && endpoint.addr == '{addr}' && "
                f"endpoint.port == {port} && endpoint.id.startsWith('ep_')"],
                "actions": [{"type": "deny"}]}
            body = {"type": "cloud", "url": f"tcp://{addr}", "description": "db front",
                    "traffic_policy": tcp_policy(deny_other,
                                                 {"actions": [forward("tcp://db.internal:5432")]})}
            r = api.post("/endpoints", json=body)
            assert r.status_code == 201, r.text
            ep = r.json()
            assert (ep["type"], ep["url"], ep["proto"], ep["host"], ep["port"],
                    ep["bindings"]) == ("cloud", f"tcp://{addr}", "tcp",
                                        addr.rsplit(":", 1)[0], port, ["public"])
            assert ep["tcp_addr"]["id"] == ra["id"]
            until(lambda: ask(port) == b"A:ping", "the cloud endpoint forwards to db.internal")
            assert ask(port, "127.0.0.2") == b""  # its policy's deny: closed
            # a name is served by one of them: the cloud endpoint holds the address
            r = api.post("/endpoints", json=body)
            assert r.status_code == 400 and ep["id"] in r.text, r.text
            assert r.json()["error_code"] == "ERR_EDGEWAY_7122"
            group = api.post("/backends/tunnel_group", json={"labels": {"x": "y"}}).json()
            r = api.post("/edges/tcp", json={"hostports": [addr],
                                             "backend": {"backend_id": group["id"]}})
            assert r.status_code == 400 and ep["id"] in r.text, r.text
            r = api.delete(f"/reserved_addrs/{ra['id']}")
            assert r.status_code == 400 and ep["id"] in r.text, r.text
            taker = agent(srv, token, {"kind": "tcp", "forward": f"tcp://127.0.0.1:{up_a}",
                                       "remote_addr": addr})
            try:
                assert f"served by the cloud endpoint '{ep['id']}'" in \
                    taker.listeners[0]["error"], taker.listeners
            finally:
                taker.stop()
            # the policy changed: the next connections follow it
            r = api.patch(f"/endpoints/{ep['id']}", json={"traffic_policy": tcp_policy(
                {"actions": [forward("tcp://cache.internal:6379")]})})
            assert r.status_code == 200, r.text
            until(lambda: ask(port) == b"B:ping", "the new policy forwards to cache.internal")
            assert ask(port, "127.0.0.2") == b"B:ping"
            # nobody serves it: closed
            ours.stop()
            until(lambda: ask(port) == b"", "closed once the internal endpoint is gone")
            assert api.delete(f"/endpoints/{ep['id']}").status_code == 204
            until(lambda: _refused(port), "the listener goes with the endpoint")
            assert api.delete(f"/reserved_addrs/{ra['id']}").status_code == 204
        finally:
            sdk.stop()
            if ours.proc.poll() is None:
                ours.stop()


def _refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2).close()
    except ConnectionRefusedError:
        return True
    return False


def test_forward_internal_on_agents_tcp_and_tls_endpoints(
        small: tuple[Server, list[int]]) -> None:
    """An agent's TCP endpoint whose policy forwards to an internal one (whose own policy
    runs too); one nobody serves: halt closes, continue goes on to the endpoint's own
    upstream; a forwarding loop is closed; a TLS endpoint terminating TLS forwards the plain
    bytes."""
    srv, _ports = small
    with srv.client() as api, tagged(b"A:") as up_a, tagged(b"B:") as up_b:
        token = api.post("/credentials", json={}).json()["token"]
        own = f"tcp://127.0.0.1:{up_b}"
        only_local = {"type": "restrict-ips", "config": {"allow": ["127.0.0.1/32"]}}
        sdk = agent(
            srv, token,
            {"kind": "tcp", "forward": f"tcp://127.0.0.1:{up_a}",
             "remote_addr": "db.internal:5432", "policy": tcp_policy({"actions": [only_local]})},
            {"kind": "tcp", "forward": own, "remote_addr": "loop.internal:1",
             "policy": tcp_policy({"actions": [forward("tcp://loop.internal:1")]})},
            {"kind": "tcp", "forward": own,
             "policy": tcp_policy({"actions": [forward("tcp://db.internal:5432")]})},
            {"kind": "tcp", "forward": own,
             "policy": tcp_policy({"actions": [forward("tcp://gone.internal:9")]})},
            {"kind": "tcp", "forward": own,
             "policy": tcp_policy({"actions": [forward("tcp://gone.internal:9", "continue")]})},
            {"kind": "tcp", "forward": own,
             "policy": tcp_policy({"actions": [forward("tcp://loop.internal:1")]})},
            {"kind": "tls", "forward": own, "policy": tcp_policy(
                {"actions": [{"type": "terminate-tls", "config": {}}]},
                {"actions": [forward("tcp://db.internal:5432")]})},
            {"kind": "tcp", "forward": own,
             "policy": tcp_policy({"actions": [forward("https://db.internal")]})})
        try:
            errors = [ln.get("error", "") for ln in sdk.listeners]
            assert not any(errors[:7]), errors
            assert "tcp://db.internal:5432" in errors[7], errors  # (an HTTP URL on TCP)
            ports = [int(u.rsplit(":", 1)[1]) for u in sdk.urls[2:6]]
            assert ask(ports[0]) == b"A:ping"  # forwarded, db.internal's policy admits us
            assert ask(ports[0], "127.0.0.2") == b""  # ...and refuses another address
            assert ask(ports[1]) == b""  # nobody serves gone.internal: halt closes
            assert ask(ports[2]) == b"B:ping"  # continue: its own upstream
            assert ask(ports[3]) == b""  # a loop
            import ssl
            name = sdk.urls[6].split("://", 1)[1].rsplit(":", 1)[0]
            ctx = ssl.create_default_context(cafile=str(srv.data_dir / "ca.pem"))
            with socket.create_connection(("127.0.0.1", srv.https_port), timeout=10) as raw, \
                    ctx.wrap_socket(raw, server_hostname=name) as s:
                s.sendall(b"plain")
                assert s.recv(100) == b"A:plain"
        finally:
            sdk.stop()


def test_a_tls_cloud_endpoint_terminates_or_passes_tls_through_to_internal_endpoints(
        small: tuple[Server, list[int]]) -> None:
    """``tls://NAME`` on a reserved domain, its policy's on_tcp_connect: with terminate-tls
    the edge completes the handshake with the name's own certificate and the internal TCP
    endpoint gets the plain bytes; without it the handshake goes through to the endpoint's
    service. The name is then the endpoint's alone; unanswered connections are closed."""
    import ssl

    from tests.agent.test_oneliners import tls_echo
    srv, _ports = small
    terminated, passed = "tls-cloud.example.com", "tls-pass.example.com"
    with srv.client() as api, tagged(b"A:") as up_a, tls_echo(srv) as up_tls:
        token = api.post("/credentials", json={}).json()["token"]
        for name in (terminated, passed):
            assert api.post("/reserved_domains", json={"domain": name}).status_code == 201
        sdk = agent(srv, token, {"kind": "tcp", "forward": f"tcp://127.0.0.1:{up_a}",
                                 "remote_addr": "plain.internal:1"},
                    {"kind": "tcp", "forward": f"tcp://127.0.0.1:{up_tls}",
                     "remote_addr": "secure.internal:443"})
        try:
            assert not any(ln.get("error") for ln in sdk.listeners), sdk.listeners
            r = api.post("/endpoints", json={
                "type": "cloud", "url": f"tls://{terminated}", "traffic_policy": tcp_policy(
                    {"actions": [{"type": "terminate-tls", "config": {"min_version": "1.3"}}]},
                    {"actions": [forward("tcp://plain.internal:1")]})})
            assert r.status_code == 201, r.text
            ep = r.json()
            assert (ep["url"], ep["proto"], ep["host"]) == (f"tls://{terminated}", "tls",
                                                            terminated)
            r = api.post("/endpoints", json={
                "type": "cloud", "url": f"tls://{passed}",
                "traffic_policy": tcp_policy({"actions": [forward("tcp://secure.internal:443")]})})
            assert r.status_code == 201, r.text
            # the name is the endpoint's: an agent's bind of it and an HTTPS cloud endpoint
            # on it are refused
            r = api.post("/endpoints", json={"type": "cloud", "url": f"https://{terminated}",
                                             "traffic_policy": json.dumps({})})
            assert r.status_code == 400 and ep["id"] in r.text, r.text
            taker = agent(srv, token, {"kind": "tls", "forward": f"tcp://127.0.0.1:{up_a}",
                                       "domain": terminated})
            try:
                assert f"cloud endpoint {ep['id']}" in taker.listeners[0]["error"]
            finally:
                taker.stop()

            def talk(name: str, ctx: ssl.SSLContext) -> tuple[bytes, str]:
                with socket.create_connection(("127.0.0.1", srv.https_port),
                                              timeout=10) as raw, \
                        ctx.wrap_socket(raw, server_hostname=name) as s:
                    s.sendall(b"plain")
                    return s.recv(100), s.version() or ""

            edge_ca = ssl.create_default_context(cafile=str(srv.data_dir / "ca.pem"))
            until(lambda: _answers(talk, terminated, edge_ca), "the TLS cloud endpoint serves")
            assert talk(terminated, edge_ca) == (b"A:plain", "TLSv1.3")
            theirs = ssl.create_default_context(cafile=str(srv.data_dir / "ca.pem"))
            theirs.check_hostname = False  # (the upstream's own certificate, not the name's)
            assert talk(passed, theirs)[0] == b"echo:plain"
            # a policy that neither forwards nor closes: closed
            r = api.patch(f"/endpoints/{ep['id']}", json={"traffic_policy": tcp_policy(
                {"actions": [{"type": "log"}]})})
            assert r.status_code == 200, r.text
            until(lambda: not _answers(talk, terminated, edge_ca), "closed when unanswered")
        finally:
            sdk.stop()


def _answers(talk: Callable[[str, Any], tuple[bytes, str]], name: str, ctx: Any) -> bool:
    try:
        return talk(name, ctx)[0] != b""
    except (OSError, ConnectionError):
        return False


def test_tcp_endpoints_terminate_tls_with_the_address_certificate(
        small: tuple[Server, list[int]]) -> None:
    """terminate-tls on a TCP cloud endpoint and on an agent's TCP endpoint: the clients
    speak TLS to the edge, which shows a certificate for the TCP address's host (here an IP
    address) from the platform CA; the upstream gets the plain bytes; a client speaking no
    TLS gets nothing through; on an http:// endpoint it is refused (no TLS there)."""
    import ssl
    srv, _ports = small
    terminate = {"actions": [{"type": "terminate-tls", "config": {}}]}
    with srv.client() as api, tagged(b"A:") as up_a:
        token = api.post("/credentials", json={}).json()["token"]
        ra = api.post("/reserved_addrs", json={"description": "tls db"}).json()
        addr = ra["addr"]
        sdk = agent(srv, token, {"kind": "tcp", "forward": f"tcp://127.0.0.1:{up_a}",
                                 "remote_addr": "db.internal:5432"},
                    {"kind": "tcp", "forward": f"tcp://127.0.0.1:{up_a}",
                     "policy": tcp_policy(terminate)},
                    {"kind": "http", "forward": f"http://127.0.0.1:{up_a}",
                     "policy": tcp_policy(terminate)})
        try:
            assert not any(ln.get("error") for ln in sdk.listeners[:2]), sdk.listeners
            assert "speaks no TLS" in sdk.listeners[2]["error"], sdk.listeners
            r = api.post("/endpoints", json={
                "type": "cloud", "url": f"tcp://{addr}",
                "traffic_policy": tcp_policy(terminate, {"actions": [
                    forward("tcp://db.internal:5432")]})})
            assert r.status_code == 201, r.text
            host = addr.rsplit(":", 1)[0]
            ports = [int(addr.rsplit(":", 1)[1]), int(sdk.urls[1].rsplit(":", 1)[1])]

            def talk(port: int) -> bytes:
                ctx = ssl.create_default_context(cafile=str(srv.data_dir / "ca.pem"))
                with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, \
                        ctx.wrap_socket(raw, server_hostname=host) as s:
                    s.sendall(b"plain")
                    return s.recv(100)

            until(lambda: _answers(lambda _n, _c: (talk(ports[0]), ""), "", None),
                  "the TCP cloud endpoint terminates TLS")
            for port in ports:
                assert talk(port) == b"A:plain"
                # no TLS (bytes that cannot start a TLS record): closed, nothing reaches
                # the upstream
                assert ask(port, say=b"plain text, no TLS\n") == b""
        finally:
            sdk.stop()


def test_pooled_tcp_cloud_endpoints_take_connections_in_turn(
        small: tuple[Server, list[int]]) -> None:
    srv, _ports = small
    with srv.client() as api, tagged(b"A:") as up_a, tagged(b"B:") as up_b:
        token = api.post("/credentials", json={}).json()["token"]
        addr = api.post("/reserved_addrs", json={}).json()["addr"]
        port = int(addr.rsplit(":", 1)[1])
        sdk = agent(srv, token, {"kind": "tcp", "forward": f"tcp://127.0.0.1:{up_a}",
                                 "remote_addr": "a.internal:1"},
                    {"kind": "tcp", "forward": f"tcp://127.0.0.1:{up_b}",
                     "remote_addr": "b.internal:1"})
        try:
            for name in ("a", "b"):
                r = api.post("/endpoints", json={
                    "type": "cloud", "url": f"tcp://{addr}", "pooling_enabled": True,
                    "traffic_policy": tcp_policy({"actions": [
                        forward(f"tcp://{name}.internal:1")]})})
                assert r.status_code == 201, r.text
            until(lambda: {ask(port) for _ in range(4)} == {b"A:ping", b"B:ping"},
                  "both pooled endpoints take connections")
            r = api.post("/endpoints", json={"type": "cloud", "url": f"tcp://{addr}",
                                             "traffic_policy": tcp_policy({"actions": [
                                                 forward("tcp://a.internal:1")]})})
            assert r.status_code == 400 and "pooling_enabled true" in r.text, r.text
        finally:
            sdk.stop()
