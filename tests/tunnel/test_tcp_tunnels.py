"""TCP tunnels end to end with the official ngrok SDK: bind, traffic through the edge with
flow control both ways, the tunnel in the API, ACLs and refused options."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from tests.server import Server

if not os.environ.get("CI"):
    pytest.importorskip("ngrok", reason="pip install --ignore-requires-python ngrok==1.7.0")

AGENT = textwrap.dedent("""
    import asyncio, sys, ngrok
    token, addr, ca, upstream, mode = sys.argv[1:6]
    async def main():
        s = await (ngrok.SessionBuilder().authtoken(token).server_addr(addr)
                   .ca_cert(bytearray(open(ca, "rb").read())).connect())
        ep = s.tcp_endpoint().metadata("db")
        if mode == "cidr":
            ep = ep.allow_cidr("10.0.0.0/8")
        elif mode == "local":
            ep = ep.allow_cidr("127.0.0.0/8").deny_cidr("10.0.0.0/8")
        try:
            ln = await ep.listen_and_forward(upstream)
        except Exception as exc:
            print("FAILED", repr(exc), flush=True)
            return
        print("URL", ln.url(), ln.id(), flush=True)
        sys.stdin.readline()
        await s.close()
    asyncio.run(main())
""")


def agent(srv: Server, token: str, upstream: str, mode: str = "") -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", AGENT, token, f"localhost:{srv.tunnel_port}",
         str(srv.data_dir / "ca.pem"), upstream, mode],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen[str]) -> None:
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write("\n")
    proc.stdin.close()
    proc.wait(15)
    proc.stdout.close()


def free_in_range(count: int, low: int = 20000, high: int = 20999) -> list[int]:
    found: list[int] = []
    for port in range(low, high + 1):
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        found.append(port)
        if len(found) == count:
            return found
    raise AssertionError("no free ports in the TCP tunnel range")


def roundtrip(port: int, payload: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=20) as s:
        got = bytearray()

        def send() -> None:
            s.sendall(payload)
            s.shutdown(socket.SHUT_WR)

        sender = threading.Thread(target=send)
        sender.start()
        while chunk := s.recv(65536):
            got += chunk
        sender.join()
        return bytes(got)


def test_tcp_tunnel_carries_every_byte_both_ways(own_server: Server, echo_port: int) -> None:
    with own_server.client() as api:
        token = api.post("/credentials", json={}).json()["token"]
        proc = agent(own_server, token, f"tcp://127.0.0.1:{echo_port}")
        assert proc.stdout is not None
        line = proc.stdout.readline().split()
        assert line[0] == "URL", line
        url, tunnel_id = line[1], line[2]
        assert url.startswith("tcp://127.0.0.1:") and tunnel_id.startswith("tn_")
        port = int(url.rsplit(":", 1)[1])
        payload = os.urandom(3 << 20)  # many windows' worth each way
        assert roundtrip(port, payload) == payload
        assert roundtrip(port, b"second connection") == b"second connection"
        (tn,) = api.get("/tunnels").json()["tunnels"]
        assert (tn["id"], tn["public_url"], tn["proto"], tn["metadata"]) == (
            tunnel_id, url, "tcp", "db")
        session = api.get("/tunnel_sessions").json()["tunnel_sessions"][0]
        assert tn["tunnel_session"]["id"] == session["id"]
        finish(proc)
        deadline = time.monotonic() + 5
        while api.get("/tunnels").json()["tunnels"] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert api.get("/tunnels").json()["tunnels"] == []
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=2).close()


def test_refused_binds_say_why(own_server: Server, echo_port: int) -> None:
    with own_server.client() as api:
        token = api.post("/credentials", json={"acl": ["bind:*.example.com"]}).json()["token"]
        proc = agent(own_server, token, f"tcp://127.0.0.1:{echo_port}")
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("FAILED") and "ACL" in line and "ERR_NGROK_8000" in line, line
        proc.wait(15)
        proc.stdout.close()
        assert proc.stdin is not None
        proc.stdin.close()
        assert api.get("/tunnels").json()["tunnels"] == []


def test_acl_allowing_the_address_binds(own_server: Server, echo_port: int) -> None:
    with own_server.client() as api:
        allowed = free_in_range(2)  # ports of the default range nothing else holds now
        token = api.post("/credentials", json={
            "acl": [f"bind:127.0.0.1:{p}" for p in allowed]}).json()["token"]
        proc = agent(own_server, token, f"tcp://127.0.0.1:{echo_port}")
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline().split()
            assert line[0] == "URL" and line[1] in [f"tcp://127.0.0.1:{p}"
                                                    for p in allowed], line
            assert roundtrip(int(line[1].rsplit(":", 1)[1]), b"ok") == b"ok"
        finally:
            finish(proc)


@pytest.mark.parametrize(("mode", "passes"), [("cidr", False), ("local", True)])
def test_ip_restrictions_of_the_bind_are_enforced(own_server: Server, echo_port: int,
                                                   mode: str, passes: bool) -> None:
    with own_server.client() as api:
        token = api.post("/credentials", json={}).json()["token"]
        proc = agent(own_server, token, f"tcp://127.0.0.1:{echo_port}", mode)
        assert proc.stdout is not None
        line = proc.stdout.readline().split()
        assert line[0] == "URL", line
        port = int(line[1].rsplit(":", 1)[1])
        if passes:
            assert roundtrip(port, b"from loopback") == b"from loopback"
        else:  # outside allow_cidr: closed before any byte reaches the agent
            with socket.create_connection(("127.0.0.1", port), timeout=10) as s, \
                    contextlib.suppress(ConnectionResetError):
                assert s.recv(100) == b""
        finish(proc)


def test_unenforceable_options_are_refused_clearly(own_server: Server) -> None:
    script = textwrap.dedent("""
        import asyncio, sys, ngrok
        async def main():
            s = await (ngrok.SessionBuilder().authtoken(sys.argv[1]).server_addr(sys.argv[2])
                       .ca_cert(bytearray(open(sys.argv[3], "rb").read())).connect())
            try:
                await s.http_endpoint().oauth("google").listen()
            except Exception as exc:
                print("FAILED", repr(exc), flush=True)
            await s.close()
        asyncio.run(main())
    """)
    with own_server.client() as api:
        token = api.post("/credentials", json={}).json()["token"]
        out = subprocess.run([sys.executable, "-c", script, token,
                              f"localhost:{own_server.tunnel_port}",
                              str(own_server.data_dir / "ca.pem")],
                             capture_output=True, text=True, timeout=30).stdout
        assert out.startswith("FAILED") and "no managed OAuth application for google" in out \
            and "ERR_NGROK_8000" in out, out
        assert api.get("/tunnels").json()["tunnels"] == []
