"""The classic ngrok agent 2.3 (npm ``@expo/ngrok-bin-linux-x64``) against Edgeway: http with
``-subdomain`` and ``-hostname`` (its default binds http and https for the name from one
session), without a name (one generated name for both schemes, as ngrok 2 gave),
``host_header: rewrite``, ``tcp --remote-addr`` twice in a row, after a dropped session and
across a server restart, and ``tls`` passed through."""

from __future__ import annotations

import signal
import socket
import time
import uuid
from pathlib import Path

import httpx

from tests.edge import tls_upstream, upstream
from tests.edge.agents import EdgeClient
from tests.server import Server, free_block, free_port, start
from tests.vendor.peers import Classic, classic, classic_config


def _token(api: httpx.Client) -> str:
    token: str = api.post("/credentials", json={}).json()["token"]
    return token


def _echo_through(addr: str, payload: bytes, timeout: float = 20) -> bytes:
    """``payload`` through a TCP tunnel to an echo service, retried until it answers."""
    host, _, port = addr.removeprefix("tcp://").rpartition(":")
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((host, int(port)), timeout=5) as conn:
                conn.sendall(payload)
                got = conn.recv(65536)
                if got:
                    return got
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"nothing answered through {addr}")
        time.sleep(0.2)


def test_http_binds_both_schemes_for_subdomain_and_hostname(server: Server,
                                                            tmp_path: Path) -> None:
    name = f"c{uuid.uuid4().hex[:8]}"
    domain = f"app.{name}.example.com"
    with server.client() as api, upstream.running("svc") as port:
        assert api.post("/reserved_domains", json={"domain": domain}).status_code == 201
        cfg = classic_config(tmp_path / "c.yml", server, _token(api))
        sub = classic(cfg, "http", f"-subdomain={name}", str(port))
        host = classic(cfg, "http", f"-hostname={domain}", str(port))
        try:
            urls = sub.urls(2) + host.urls(2)
            assert [u.split("://")[0] for u in urls] == ["http", "https"] * 2
            assert f"{name}.edgeway.localhost" in urls[0] and domain in urls[2]
            with EdgeClient(server) as web:
                for url in urls:
                    r = web.get(url + "/both")
                    assert (r.status_code, r.text) == (200, "svc /both"), url
            # another session still cannot take the name (neither pools)
            other = classic(cfg, "http", f"-subdomain={name}", str(port))
            assert "already bound by another tunnel" in other.exited()
            assert web_ok(server, urls[1])
        finally:
            sub.stop()
            host.stop()


def test_http_without_a_name_gets_one_name_for_both_schemes(server: Server,
                                                            tmp_path: Path) -> None:
    """As ngrok 2 did: the agent binds https and http with no name, and both get one."""
    with server.client() as api, upstream.running("svc") as port:
        cfg = classic_config(tmp_path / "c.yml", server, _token(api))
        first, second = classic(cfg, "http", str(port)), classic(cfg, "http", str(port))
        try:
            urls, others = first.urls(2), second.urls(2)
            hosts = {u.split("://")[1].split(":")[0] for u in urls}
            assert [u.split("://")[0] for u in urls] == ["http", "https"] and len(hosts) == 1
            assert {u.split("://")[1].split(":")[0] for u in others}.isdisjoint(hosts)
            with EdgeClient(server) as web:
                for url in urls + others:
                    r = web.get(url + "/twins")
                    assert (r.status_code, r.text) == (200, "svc /twins"), url
            tunnels = api.get("/tunnels").json()["tunnels"]
            assert sorted(t["public_url"] for t in tunnels
                          if t["public_url"] in urls) == sorted(urls)
        finally:
            first.stop()
            second.stop()


def web_ok(server: Server, url: str) -> bool:
    with EdgeClient(server) as web:
        return web.get(url + "/still").status_code == 200


def test_host_header_rewrite(server: Server, tmp_path: Path) -> None:
    name = f"r{uuid.uuid4().hex[:8]}"
    with server.client() as api, upstream.running("svc") as port:
        cfg = classic_config(tmp_path / "c.yml", server, _token(api), (
            f"tunnels:\n  rw:\n    proto: http\n    addr: {port}\n    subdomain: {name}\n"
            "    host_header: rewrite\n"))
        agent = classic(cfg, "start", "rw")
        try:
            with EdgeClient(server) as web:
                for url in agent.urls(2):
                    seen = web.get(url + "/headers").json()["headers"]
                    assert [v for k, v in seen if k == "host"] == [f"localhost:{port}"]
                    assert dict(seen)["x-forwarded-host"].startswith(f"{name}.edgeway")
        finally:
            agent.stop()


def test_tcp_remote_addr_twice_and_after_a_dropped_session(server: Server,
                                                          tmp_path: Path) -> None:
    with server.client() as api, upstream.echo() as port:
        reserved = api.post("/reserved_addrs", json={"description": "db"}).json()
        cfg = classic_config(tmp_path / "c.yml", server, _token(api))
        unreserved = f"127.0.0.1:{free_port()}"
        for addr, last in ((reserved["addr"], signal.SIGKILL), (unreserved, signal.SIGINT)):
            for i, sig in enumerate((signal.SIGINT, last, signal.SIGINT)):
                agent = classic(cfg, "tcp", f"-remote-addr={addr}", str(port))
                try:
                    assert agent.urls(1) == [f"tcp://{addr}"], agent.text()
                    assert _echo_through(addr, f"run {i}".encode()) == f"run {i}".encode()
                finally:
                    agent.stop(sig)
                if addr == unreserved and sig is signal.SIGKILL:
                    break


def test_tls_passes_through(server: Server, tmp_path: Path) -> None:
    name = f"t{uuid.uuid4().hex[:8]}"
    host = f"{name}.edgeway.localhost"
    with server.client() as api, tls_upstream.running(host, tmp_path) as (port, cert):
        cfg = classic_config(tmp_path / "c.yml", server, _token(api))
        agent = classic(cfg, "tls", f"-subdomain={name}", str(port))
        try:
            assert agent.urls(1) == [f"tls://{host}:{server.https_port}"]
            got = tls_upstream.ask(server.https_port, host, cert, b"hello\n")
            assert got == f"{host} got hello\n".encode()
        finally:
            agent.stop()


def test_reserved_addr_across_a_server_restart(tmp_path: Path) -> None:
    """A range of two ports, one reserved: generated ports never take it, the reserved
    address is the agent's again after a restart."""
    low, _ = free_block(2)
    ports = (free_port(), free_port(), free_port(), free_port())
    args = ("--tcp-ports", f"{low}-{low + 1}")
    srv = start(tmp_path / "srv", None, *args, ports=ports)
    agents: list[Classic] = []
    try:
        with srv.client() as api, upstream.echo() as port:
            addr = api.post("/reserved_addrs", json={}).json()["addr"]
            cfg = classic_config(tmp_path / "c.yml", srv, _token(api))
            other = f"127.0.0.1:{low + (low + 1 - int(addr.rsplit(':', 1)[1]))}"
            agents.append(generated := classic(cfg, "tcp", str(port)))
            assert generated.urls(1) == [f"tcp://{other}"]
            agents.append(full := classic(cfg, "tcp", str(port)))
            assert "no TCP address this credential may bind is free" in full.exited()
            agents.append(agent := classic(cfg, "tcp", f"-remote-addr={addr}", str(port)))
            assert agent.urls(1) == [f"tcp://{addr}"]
            assert _echo_through(addr, b"before") == b"before"
            assert srv.stop() == 0
            srv = start(tmp_path / "srv", None, *args, token=srv.token, ports=ports)
            # the same agent reconnects and binds the reserved address again
            assert _echo_through(addr, b"after", timeout=60) == b"after"
    finally:
        for a in agents:
            a.stop()
        assert srv.stop() == 0


def test_an_internal_endpoint_reached_through_forward_internal(server: Server,
                                                               tmp_path: Path) -> None:
    """``-hostname=<name>.internal``: both schemes bound on the internal name, which no public
    listener serves; an edge route's traffic policy forwards to it."""
    name = f"c{uuid.uuid4().hex[:8]}"
    inner, front = f"{name}.internal", f"front.{name}.example.com"
    with server.client() as api, upstream.running("svc") as port:
        assert api.post("/reserved_domains", json={"domain": front}).status_code == 201
        edge = api.post("/edges/https", json={"hostports": [f"{front}:443"]}).json()["id"]
        answer = api.post("/backends/http_response", json={"body": "not forwarded",
                                                           "status_code": 200}).json()["id"]
        policy = ('{"on_http_request": [{"actions": [{"type": "forward-internal", '
                  f'"config": {{"url": "https://{inner}"}}}}]}}]}}')
        r = api.post(f"/edges/https/{edge}/routes", json={
            "match_type": "path_prefix", "match": "/", "backend": {"backend_id": answer},
            "traffic_policy": {"value": policy}})
        assert r.status_code == 201, r.text
        cfg = classic_config(tmp_path / "c.yml", server, _token(api))
        agent = classic(cfg, "http", f"-hostname={inner}", str(port))
        try:
            assert agent.urls(2) == [f"http://{inner}", f"https://{inner}"]
            with EdgeClient(server) as web:
                r = web.get(f"https://{front}/via")
                assert (r.status_code, r.text) == (200, "svc /via")
                assert web.get(f"http://{inner}/via").status_code == 404
        finally:
            agent.stop()


def test_an_internal_tcp_endpoint_behind_a_tcp_cloud_endpoint(server: Server,
                                                              tmp_path: Path) -> None:
    """``ngrok tcp -remote-addr=NAME.internal:PORT``: no listener of its own; a TCP cloud
    endpoint on a reserved address forwards its connections there."""
    import json
    name = f"c{uuid.uuid4().hex[:8]}.internal:5432"
    with server.client() as api, upstream.echo() as port:
        cfg = classic_config(tmp_path / "c.yml", server, _token(api))
        agent = classic(cfg, "tcp", f"-remote-addr={name}", str(port))
        try:
            assert agent.urls(1) == [f"tcp://{name}"], agent.text()
            addr = api.post("/reserved_addrs", json={}).json()["addr"]
            r = api.post("/endpoints", json={
                "type": "cloud", "url": f"tcp://{addr}", "traffic_policy": json.dumps(
                    {"on_tcp_connect": [{"actions": [{"type": "forward-internal",
                                                      "config": {"url": f"tcp://{name}"}}]}]})})
            assert r.status_code == 201, r.text
            assert _echo_through(addr, b"via the cloud") == b"via the cloud"
            assert api.delete(f"/endpoints/{r.json()['id']}").status_code == 204
            assert api.delete(f"/reserved_addrs/{addr_id(api, addr)}").status_code == 204
        finally:
            agent.stop()


def addr_id(api: httpx.Client, addr: str) -> str:
    return next(str(a["id"]) for a in api.get("/reserved_addrs").json()["reserved_addrs"]
                if a["addr"] == addr)
