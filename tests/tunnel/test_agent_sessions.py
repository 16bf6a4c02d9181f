"""Agents connect to the tunnel listener: the official ngrok Python SDK (1.7.0) authenticates
with a credential's token over TLS trusting the platform CA, keeps its session alive with
heartbeats, and shows up in /tunnel_sessions; bad tokens are refused with a stable code; a
session whose heartbeats stop is dropped."""

from __future__ import annotations

import asyncio
import json
import os
import ssl
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import httpx
import pytest

from tests.conftest import BACKENDS
from tests.server import Server, start

if not os.environ.get("CI"):  # CI installs the SDK (scripts/test) and must not skip
    pytest.importorskip("ngrok", reason="install the SDK: pip install "
                        "--ignore-requires-python ngrok==1.7.0")

AGENT = textwrap.dedent("""
    import asyncio, sys, ngrok
    token, addr, ca, hold = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    async def main():
        try:
            s = await (ngrok.SessionBuilder().authtoken(token).server_addr(addr)
                       .ca_cert(bytearray(open(ca, "rb").read())).metadata("site-1")
                       .heartbeat_interval(1).connect())
        except Exception as exc:
            print("FAILED", repr(exc), flush=True)
            return
        print("CONNECTED", flush=True)
        await asyncio.sleep(hold)
        await s.close()
        print("CLOSED", flush=True)
    asyncio.run(main())
""")


def agent(srv: Server, token: str, hold: float, host: str = "localhost"
          ) -> subprocess.Popen[str]:
    ca = srv.data_dir / "ca.pem"
    return subprocess.Popen([sys.executable, "-c", AGENT, token, f"{host}:{srv.tunnel_port}",
                             str(ca), str(hold)], stdout=subprocess.PIPE, text=True)


def sessions(api: httpx.Client) -> list[dict[str, object]]:
    out: list[dict[str, object]] = api.get("/tunnel_sessions").json()["tunnel_sessions"]
    return out


def test_the_sdk_authenticates_and_its_session_is_listed(own_server: Server) -> None:
    with own_server.client() as api:
        cred = api.post("/credentials", json={"description": "site 1"}).json()
        for host in ("localhost", "127.0.0.1"):
            proc = agent(own_server, cred["token"], 3, host)
            assert proc.stdout is not None
            assert proc.stdout.readline().strip() == "CONNECTED"
            (s,) = sessions(api)
            assert s["credential"] == {"id": cred["id"], "uri": cred["uri"]}
            assert (s["metadata"], s["transport"], s["ip"]) == ("site-1", "ngrok/v2",
                                                                "127.0.0.1")
            assert str(s["id"]).startswith("ts_") and s["agent_version"]
            assert api.get(f"/tunnel_sessions/{s['id']}").json() == s
            assert proc.stdout.readline().strip() == "CLOSED"
            proc.wait(10)
            proc.stdout.close()
            deadline = time.monotonic() + 5
            while sessions(api) and time.monotonic() < deadline:
                time.sleep(0.1)
            assert sessions(api) == []


def test_bad_tokens_are_refused_with_a_stable_code(own_server: Server) -> None:
    with own_server.client() as api:
        bot = api.post("/bot_users", json={"name": "site", "active": False}).json()
        sleepy = api.post("/credentials", json={"owner_id": bot["id"]}).json()["token"]
        for token, words in (("not-a-token", "not valid"), (sleepy, "inactive")):
            proc = agent(own_server, token, 0)
            out, _ = proc.communicate(timeout=30)
            assert out.startswith("FAILED") and "ERR_NGROK_107" in out and words in out, out
        assert sessions(api) == []


def test_a_session_without_heartbeats_is_dropped(own_server: Server) -> None:
    from edgeway.tunnel.muxado.aio import MuxConnection

    with own_server.client() as api:
        token = api.post("/credentials", json={}).json()["token"]

        async def silent_agent() -> tuple[dict[str, object], float]:
            ctx = ssl.create_default_context(cafile=str(own_server.data_dir / "ca.pem"))
            r, w = await asyncio.open_connection("localhost", own_server.tunnel_port, ssl=ctx)
            conn = MuxConnection(r, w, client=True)
            auth = await conn.open_stream()
            msg = {"Version": ["3", "2"], "ClientId": "", "Extra": {
                "Authtoken": token, "HeartbeatInterval": 500_000_000,
                "HeartbeatTolerance": 500_000_000}}
            await auth.write(b"\0\0\0\0" + json.dumps(msg).encode() + b"\n")
            reply = json.loads(await auth.read())
            start = time.monotonic()
            await asyncio.wait_for(conn.closed.wait(), 10)
            return reply, time.monotonic() - start

        reply, lasted = asyncio.run(silent_agent())
        assert reply["Version"] == "3" and str(reply["ClientId"]).startswith("ts_")
        assert 0.9 <= lasted < 5
        assert sessions(api) == []


COMMANDED = textwrap.dedent("""
    import asyncio, sys, ngrok
    token, addr, ca = sys.argv[1], sys.argv[2], sys.argv[3]
    async def main():
        stopped = asyncio.Event()
        loop = asyncio.get_running_loop()
        def on_stop():
            print("STOP", flush=True)
            loop.call_soon_threadsafe(stopped.set)
        s = await (ngrok.SessionBuilder().authtoken(token).server_addr(addr)
                   .ca_cert(bytearray(open(ca, "rb").read())).handle_stop_command(on_stop)
                   .connect())
        print("CONNECTED", flush=True)
        await asyncio.wait_for(stopped.wait(), 30)
        await s.close()
    asyncio.run(main())
""")


def test_session_actions_reach_the_agent(own_server: Server) -> None:
    with own_server.client() as api:
        token = api.post("/credentials", json={}).json()["token"]
        proc = subprocess.Popen(
            [sys.executable, "-c", COMMANDED, token, f"localhost:{own_server.tunnel_port}",
             str(own_server.data_dir / "ca.pem")], stdout=subprocess.PIPE, text=True)
        assert proc.stdout is not None
        assert proc.stdout.readline().strip() == "CONNECTED"
        (s,) = sessions(api)
        url = f"/tunnel_sessions/{s['id']}"
        for action in ("restart", "update"):
            r = api.post(f"{url}/{action}")
            assert r.status_code == 400, r.text
            assert "has not defined a callback" in r.json()["msg"] and action in r.json()["msg"]
        assert api.post(f"{url}/stop", json={"x": 1}).status_code == 400
        r = api.post(f"{url}/stop", json={})
        assert r.status_code == 204 and r.content == b""
        assert proc.stdout.readline().strip() == "STOP"
        proc.wait(15)
        proc.stdout.close()
        assert api.post(f"/tunnel_sessions/ts_{'0' * 27}/stop").status_code == 404


@pytest.mark.skipif("postgres" not in BACKENDS, reason="two nodes share a PostgreSQL database")
def test_a_restarted_node_forgets_its_sessions_but_not_other_nodes(tmp_path: Path) -> None:
    from tests.server import fresh_pg_database

    with fresh_pg_database() as url:
        node_a = start(tmp_path / "a", url)
        node_b = start(tmp_path / "b", url, token=node_a.token)
        try:
            with node_a.client() as api:
                token = api.post("/credentials", json={}).json()["token"]
            procs = []
            for node in (node_a, node_b):
                proc = agent(node, token, 60)
                procs.append(proc)
                assert proc.stdout is not None
                assert proc.stdout.readline().strip() == "CONNECTED"
                proc.stdout.close()
            with node_a.client() as api:
                assert len(sessions(api)) == 2
            node_a.proc.kill()  # a crash: no chance to clean up
            node_a.proc.wait()
            node_a.stop()
            procs[0].kill()  # and its agent gives up, so it cannot reconnect to the new node
            procs[0].wait()
            again = start(tmp_path / "a", url, token=node_a.token)
            try:
                with again.client() as api:
                    left = sessions(api)
                assert len(left) == 1  # node b's agent is still connected there
            finally:
                assert again.stop() == 0
            procs[1].kill()
            procs[1].wait()
        finally:
            assert node_b.stop() == 0


@pytest.mark.parametrize("leaves", [True, False])
def test_an_agent_that_stops_before_answering_stop_has_stopped(own_server: Server,
                                                               leaves: bool) -> None:
    """Stop, then the agent ends its session before its answer went out (the SDK can, when
    its handler closes the session at once): that is a stop done, 204. A command stream
    closed by an agent that stays connected is not an answer: 400."""
    from edgeway.tunnel.muxado.aio import MuxConnection

    with own_server.client() as api:
        token = api.post("/credentials", json={}).json()["token"]

        async def raw_agent() -> httpx.Response:
            ctx = ssl.create_default_context(cafile=str(own_server.data_dir / "ca.pem"))
            r, w = await asyncio.open_connection("localhost", own_server.tunnel_port, ssl=ctx)
            conn = MuxConnection(r, w, client=True)
            auth = await conn.open_stream()
            msg = {"Version": ["3", "2"], "ClientId": "", "Extra": {"Authtoken": token}}
            await auth.write(b"\0\0\0\0" + json.dumps(msg).encode() + b"\n")
            client_id = json.loads(await auth.read())["ClientId"]
            asked = asyncio.create_task(asyncio.to_thread(
                api.post, f"/tunnel_sessions/{client_id}/stop", json={}))
            command = await asyncio.wait_for(conn.accept(), 10)
            assert command is not None and (await command.read())[:4] == b"\0\0\0\5"
            if leaves:
                await conn.close()
            else:
                command.reset()
            answer = await asyncio.wait_for(asked, 15)
            if not leaves:
                await conn.close()
            return answer

        r = asyncio.run(raw_agent())
        if leaves:
            assert r.status_code == 204, r.text
        else:
            assert r.status_code == 400 and "without answering" in r.json()["msg"]
