"""TCP tunnel ports: a cleanly closed session returns its ports at once, a dropped one holds
them for its tunnel ids for the grace period, then they return; a tunnel id is its
credential's; a deleted credential, deactivated bot user or narrowed ACL reaches live
sessions. Over a real server, the official SDK and a raw muxado agent."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from edgeway.tunnel.ports import PortPool
from tests.server import Server, free_block, start
from tests.tunnel.raw import Agent, port_of
from tests.waiting import until

if not os.environ.get("CI"):
    pytest.importorskip("ngrok", reason="pip install --ignore-requires-python ngrok==1.7.0")

GRACE = 3.0


@pytest.fixture
def small(tmp_path: Path) -> Iterator[tuple[Server, list[int]]]:
    """A server whose TCP tunnels have 3 ports and a 3 s grace period."""
    ports = free_block(3)  # (none of them one of this or a later server's own listeners)
    srv = start(tmp_path / "srv", None, "--tcp-ports", f"{ports[0]}-{ports[-1]}",
                "--tcp-grace", str(GRACE))
    try:
        yield srv, ports
    finally:
        assert srv.stop() == 0


SDK_CYCLES = textwrap.dedent("""
    import asyncio, sys, ngrok
    token, addr, ca, cycles = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    async def main():
        for _ in range(cycles):
            s = await (ngrok.SessionBuilder().authtoken(token).server_addr(addr)
                       .ca_cert(bytearray(open(ca, "rb").read())).connect())
            try:
                ln = await s.tcp_endpoint().listen()
                print("URL", ln.url(), flush=True)
                await ln.close()  # (an Unbind: the SDK's session.close keeps the connection)
            except Exception as exc:
                print("FAILED", repr(exc), flush=True)
            await s.close()
    asyncio.run(main())
""")


def test_a_closed_sdk_listener_returns_its_port_at_once(
        small: tuple[Server, list[int]]) -> None:
    srv, ports = small
    with srv.client() as api:
        token = api.post("/credentials", json={}).json()["token"]
    out = subprocess.run([sys.executable, "-c", SDK_CYCLES, token,
                          f"localhost:{srv.tunnel_port}", str(srv.data_dir / "ca.pem"), "12"],
                         capture_output=True, text=True, timeout=120).stdout.splitlines()
    assert len(out) == 12 and all(line.startswith("URL tcp://") for line in out), out
    assert {int(line.rsplit(":", 1)[1]) for line in out} <= set(ports)


def test_a_dropped_session_holds_its_port_for_its_own_tunnel_then_frees_it(
        small: tuple[Server, list[int]]) -> None:
    srv, ports = small
    with srv.client() as api:
        token = api.post("/credentials", json={}).json()["token"]
        other = api.post("/credentials", json={}).json()["token"]

    async def main() -> None:
        a = await Agent.connect(srv, token)
        made = await a.bind_tcp()
        held = port_of(made)
        a.drop()
        thief = await Agent.connect(srv, other)
        stolen = await thief.bind_tcp(made["Id"])
        assert "belongs to another credential" in stolen["Error"], stolen
        asked = await thief.bind_tcp(addr=f"127.0.0.1:{held}")
        assert "already bound" in asked["Error"], asked
        assert port_of(await thief.bind_tcp()) != held
        again = await Agent.connect(srv, token)  # the agent is back: same id, same port
        rebound = await again.bind_tcp(made["Id"])
        assert (rebound["Id"], port_of(rebound)) == (made["Id"], held)
        again.drop()
        # the grace period passes: the port returns to the pool for anyone
        deadline = time.monotonic() + GRACE + 10
        got: set[int] = set()
        while held not in got:
            assert time.monotonic() < deadline, f"port {held} never returned ({got})"
            reply = await thief.bind_tcp()
            if not reply.get("Error"):
                got.add(port_of(reply))
            else:
                await asyncio.sleep(0.2)
        assert got <= set(ports)
        await thief.conn.close()

    asyncio.run(main())


def test_a_reserved_address_in_its_grace_is_its_owners(
        small: tuple[Server, list[int]]) -> None:
    """A dropped session's reserved address waits for its own credential: another's bind of
    it is refused until the grace ends; the owner's agent, back with new tunnel ids (a
    restart), gets it at once."""
    srv, ports = small
    with srv.client() as api:
        token = api.post("/credentials", json={}).json()["token"]
        other = api.post("/credentials", json={}).json()["token"]
        addr = api.post("/reserved_addrs", json={"description": "db"}).json()["addr"]
    assert int(addr.rsplit(":", 1)[1]) in ports

    async def main() -> None:
        owner = await Agent.connect(srv, token)
        assert port_of(await owner.bind_tcp(addr=addr)) == int(addr.rsplit(":", 1)[1])
        owner.drop()
        with srv.client() as api:  # the server saw the drop: the tunnel has ended
            deadline = time.monotonic() + 10
            while api.get("/tunnels").json()["tunnels"]:
                assert time.monotonic() < deadline, "the dropped tunnel did not end"
                await asyncio.sleep(0.05)
        thief = await Agent.connect(srv, other)
        stolen = await thief.bind_tcp(addr=addr)
        assert "already bound (held for the reconnect" in stolen.get("Error", ""), stolen
        back = await Agent.connect(srv, token)  # a new process: no tunnel id of before
        again = await back.bind_tcp(addr=addr)
        assert again["URL"] == f"tcp://{addr}", again
        back.drop()
        # the grace period passes: the address is the account's, any credential binds it
        deadline = time.monotonic() + GRACE + 10
        while (got := await thief.bind_tcp(addr=addr)).get("Error"):
            assert time.monotonic() < deadline, got
            await asyncio.sleep(0.2)
        assert got["URL"] == f"tcp://{addr}"
        await thief.conn.close()

    asyncio.run(main())


def test_ports_of_unbound_tunnels_and_closed_sessions_return_at_once(
        small: tuple[Server, list[int]]) -> None:
    srv, ports = small
    with srv.client() as api:
        token = api.post("/credentials", json={}).json()["token"]

    async def main() -> None:
        a = await Agent.connect(srv, token)
        made = [await a.bind_tcp() for _ in ports]
        assert sorted(port_of(m) for m in made) == ports
        full = await a.bind_tcp()
        assert "no TCP address this credential may bind is free" in full["Error"], full
        for _round in range(5):  # unbind and bind again, many times over: nothing leaks
            assert await a.rpc(2, {"Id": made[0]["Id"]}) == {}
            made[0] = await a.bind_tcp()
            assert port_of(made[0]) in ports
        await a.conn.close()  # a goodbye (GOAWAY): every port is free at once
        b = await Agent.connect(srv, token)
        assert sorted([port_of(await b.bind_tcp()) for _ in ports]) == ports
        await b.conn.close()

    asyncio.run(main())


def test_ports_the_system_refuses_are_skipped(small: tuple[Server, list[int]]) -> None:
    srv, ports = small
    with srv.client() as api:
        token = api.post("/credentials", json={}).json()["token"]
    squatters = []
    for port in ports[:2]:  # another process listens on two of the three
        sock = socket.socket()
        sock.bind(("127.0.0.1", port))
        sock.listen()
        squatters.append(sock)

    async def main() -> None:
        a = await Agent.connect(srv, token)
        assert port_of(await a.bind_tcp()) == ports[2]
        full = await a.bind_tcp()
        assert "no TCP address" in full["Error"], full
        await a.conn.close()

    try:
        asyncio.run(main())
    finally:
        for sock in squatters:
            sock.close()


def test_deleting_a_credential_ends_its_sessions_at_once(server: Server) -> None:
    with server.client() as api:
        made = api.post("/credentials", json={}).json()

    async def main() -> None:
        a = await Agent.connect(server, made["token"])
        port = port_of(await a.bind_tcp())
        with server.client() as api:
            assert api.delete(f"/credentials/{made['id']}").status_code == 204
        await asyncio.wait_for(a.conn.closed.wait(), 5)
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", port), timeout=2).close()
        with server.client() as api:  # (its row goes as the session's end is written)
            def mine() -> list[object]:
                return [s for s in api.get("/tunnel_sessions").json()["tunnel_sessions"]
                        if s["credential"]["id"] == made["id"]]
            await until(lambda: not mine(), lambda: f"the session is still listed: {mine()}")

    asyncio.run(main())


def test_a_deactivated_bot_users_sessions_end(server: Server) -> None:
    with server.client() as api:
        bot = api.post("/bot_users", json={"name": "site-agent"}).json()
        made = api.post("/credentials", json={"owner_id": bot["id"]}).json()
        assert "token" in made, made

    async def main() -> None:
        a = await Agent.connect(server, made["token"])
        with server.client() as api:
            r = api.patch(f"/bot_users/{bot['id']}", json={"active": False})
            assert r.status_code == 200, r.text
        await asyncio.wait_for(a.conn.closed.wait(), 5)

    asyncio.run(main())


def test_a_narrowed_acl_stops_the_tunnels_it_no_longer_allows(
        small: tuple[Server, list[int]]) -> None:
    srv, ports = small
    keep, lose = ports[0], ports[1]
    with srv.client() as api:
        made = api.post("/credentials", json={"acl": [f"bind:127.0.0.1:{p}" for p in (
            keep, lose)]}).json()

    async def main() -> None:
        a = await Agent.connect(srv, made["token"])
        stops: list[dict[str, Any]] = []

        async def listen() -> None:  # the server's StopTunnel streams
            while (stream := await a.conn.accept()) is not None:
                raw = bytearray()
                while chunk := await stream.read():
                    raw += chunk
                if int.from_bytes(raw[:4], "big") == 9:  # StopTunnel
                    stops.append(json.loads(raw[4:]))
        listener = asyncio.create_task(listen())
        kept = await a.bind_tcp(addr=f"127.0.0.1:{keep}")
        lost = await a.bind_tcp(addr=f"127.0.0.1:{lose}")
        assert port_of(kept) == keep and port_of(lost) == lose
        with srv.client() as api:
            r = api.patch(f"/credentials/{made['id']}", json={"acl": [f"bind:127.0.0.1:{keep}"]})
            assert r.status_code == 200, r.text
        deadline = time.monotonic() + 5
        while not stops:
            assert time.monotonic() < deadline, "no StopTunnel for the tunnel the ACL lost"
            await asyncio.sleep(0.05)
        assert stops[0]["Id"] == lost["Id"] and "ACL" in stops[0]["Message"], stops
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", lose), timeout=2).close()
        socket.create_connection(("127.0.0.1", keep), timeout=2).close()  # still served
        refused = await a.bind_tcp(addr=f"127.0.0.1:{lose}")
        assert "ACL" in refused["Error"], refused
        listener.cancel()
        await a.conn.close()

    asyncio.run(main())


def test_the_pool_allocates_holds_and_expires() -> None:
    pool = PortPool(100, 104, grace=10)
    got = {pool.take_any(f"t{i}", 100, None, 0) for i in range(5)}
    assert got == {100, 101, 102, 103, 104} and pool.free == 0
    assert pool.take_any("t5", 100, None, 0) is None
    pool.hold("t0", 100, 1)
    assert not pool.take("t9", 100, 2)  # held for t0 only
    assert pool.take_any("t9", 100, None, 2) is None
    assert pool.held("t0", 5) == 100 and pool.take("t0", 100, 5)
    pool.hold("t0", 100, 6)
    assert pool.held("t0", 16) is None and pool.free == 1  # the grace ran out
    pool.release("t1", 101)
    assert pool.take_any("t9", 0, {101, 104}, 17) == 101
    pool.block("t9", 101, 17)  # the system refused it: set aside, then back
    assert pool.take_any("t8", 101, None, 18) == 100
    assert pool.take_any("t7", 101, None, 28) == 101


def test_reserved_ports_are_only_taken_by_name() -> None:
    pool = PortPool(100, 102, grace=10)
    pool.reserve({101})
    got = {pool.take_any(f"t{i}", 101, None, 0) for i in range(3)}
    assert got == {100, 102, None}  # 101 is never generated
    assert pool.take("r1", 101, 0, "cr_a")  # asked for by name
    pool.hold("r1", 101, 1, "cr_a")  # its session dropped
    assert not pool.take("x1", 101, 2, "cr_b")  # the grace is its owner's: not another's
    assert not pool.take("x2", 101, 2)
    assert pool.take("r2", 101, 2, "cr_a")  # the owner's re-bind, under a new tunnel id
    assert not pool.take("r3", 101, 2, "cr_a")  # while a live tunnel uses it, nobody else
    pool.release("r2", 101)
    assert pool.free == 0  # released, still reserved
    pool.release("t0", 100)
    pool.reserve(set())  # the reservation was deleted: back to the pool
    assert pool.free == 2 and pool.take_any("t9", 101, None, 3) == 101
    pool.reserve({101})
    pool.hold("t9", 101, 4, "cr_a")
    assert pool.held("t9", 15) is None  # the grace ran out: anyone's again, by name
    assert pool.take("x3", 101, 15, "cr_b")


def _connected_echo(port: int, deadline: float) -> None:
    """A round trip through ``port`` (waiting for its listener until ``deadline``)."""
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
                s.sendall(b"through the edge")
                assert s.recv(100) == b"through the edge"
            return
        except (ConnectionRefusedError, ConnectionResetError, AssertionError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def test_a_tcp_edge_serves_a_reserved_address(small: tuple[Server, list[int]],
                                              echo_port: int) -> None:
    """ngrok's sequence: reserve an address, put a TCP edge on it. The edge then serves it
    (to labeled tunnels); no agent may bind it meanwhile, and it cannot be deleted under the
    edge. Ports of the agent range that are not a reserved address stay refused."""
    from tests.edge.agents import agent
    srv, ports = small
    with srv.client() as api:
        token = api.post("/credentials", json={}).json()["token"]
        ra = api.post("/reserved_addrs", json={"description": "db"}).json()
        addr, port = ra["addr"], int(ra["addr"].rsplit(":", 1)[1])
        host = addr.rsplit(":", 1)[0]
        other = next(p for p in ports if p != port)
        group = api.post("/backends/tunnel_group", json={"labels": {"svc": "db"}}).json()
        body = {"backend": {"backend_id": group["id"]}}
        for hostport, says in ((f"{host}:{other}", "is not a reserved address"),
                               (f"db.example.com:{port}", "serves reserved addresses only")):
            r = api.post("/edges/tcp", json={"hostports": [hostport], **body})
            assert r.status_code == 400 and r.json()["error_code"] == "ERR_EDGEWAY_7105", r.text
            assert says in r.json()["msg"] and r.json()["details"]["member"] == "hostports[0]"

    async def bound_then_refused() -> None:
        a = await Agent.connect(srv, token)
        assert port_of(await a.bind_tcp(addr=addr)) == port
        with srv.client() as api:  # a tunnel holds the address: the edge must wait
            r = api.post("/edges/tcp", json={"hostports": [addr], **body})
            assert r.status_code == 400 and "is bound by the tunnel" in r.text, r.text
            assert r.json()["error_code"] == "ERR_EDGEWAY_7122"
        await a.conn.close()

    asyncio.run(bound_then_refused())
    with srv.client() as api:
        deadline = time.monotonic() + 10
        while "is bound by the tunnel" in \
                (r := api.post("/edges/tcp", json={"hostports": [addr], **body})).text:
            # (until the server has recorded the tunnel's end)
            assert time.monotonic() < deadline, r.text
            time.sleep(0.05)
        assert r.status_code == 201, r.text
        edge = r.json()
        r = api.delete(f"/reserved_addrs/{ra['id']}")
        assert r.status_code == 400 and edge["id"] in r.text, r.text
    served = agent(srv, token, {"kind": "labeled", "labels": {"svc": "db"},
                                "forward": f"tcp://127.0.0.1:{echo_port}"})
    try:
        _connected_echo(port, time.monotonic() + 10)

        async def refused() -> None:
            a = await Agent.connect(srv, token)
            reply = await a.bind_tcp(addr=addr)
            assert f"served by the TCP edge '{edge['id']}'" in reply.get("Error", ""), reply
            generated = [port_of(await a.bind_tcp()) for _ in range(len(ports) - 1)]
            assert port not in generated  # (nor handed out as a generated port)
            await a.conn.close()

        asyncio.run(refused())
    finally:
        served.stop()
    with srv.client() as api:
        assert api.delete(f"/edges/tcp/{edge['id']}").status_code == 204

    async def bound_again() -> None:  # the edge gone, the address is the agents' again
        a = await Agent.connect(srv, token)
        deadline = time.monotonic() + 10
        while (reply := await a.bind_tcp(addr=addr)).get("Error"):
            assert time.monotonic() < deadline, reply
            await asyncio.sleep(0.05)
        assert port_of(reply) == port
        await a.conn.close()

    asyncio.run(bound_again())
