"""RPC streams on an agent session: each is closed once answered, by both sides, so that a
long-lived session's binds, unbinds and the API's commands never use up the streams a session
may hold; a peer's GOAWAY ends its connection; malformed Auth and Bind messages get an
answer that names what is wrong. Over the real server, with the Edgeway agent and raw
muxado peers."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path
from typing import Any

import pytest

from edgeway.tunnel.muxado import frames
from edgeway.tunnel.muxado.aio import MuxConnection
from edgeway.tunnel.muxado.frames import ErrorCode
from tests.agent.test_agent import run_agent, write_config
from tests.edge import upstream
from tests.edge.agents import EdgeClient
from tests.server import Server, free_port
from tests.tunnel.raw import Agent


def test_binds_unbinds_and_commands_do_not_use_up_a_long_sessions_streams(
        own_server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A session may hold 128 streams it opened and 448 the server opened: 140 tunnels
    started and stopped through the agent's local API, then 460 commands the agent refuses,
    all in one session, and its tunnel still serves (before, the 64th start failed, and the
    449th command hung)."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    with own_server.client() as api:
        token = api.post("/credentials", json={}).json()["token"]
    web = free_port()
    with upstream.running("svc") as svc:
        cfg = write_config(tmp_path / "a.yml", own_server, token, web,
                           f"tunnels:\n  web:\n    proto: http\n    addr: {svc}\n")
        agent = run_agent("web", "--config", str(cfg), web_port=web)
        try:
            for n in range(140):  # (more than the 128 the agent may open)
                r = agent.api("POST", "/api/tunnels", json={"name": "t", "proto": "http",
                                                            "addr": str(svc)})
                assert r.status_code == 201, (n, r.text)
                assert agent.api("DELETE", "/api/tunnels/t").status_code == 204, n
            with own_server.client() as api:
                (session,) = api.get("/tunnel_sessions").json()["tunnel_sessions"]
                for n in range(460):  # (more than the 448 the server may open)
                    r = api.post(f"/tunnel_sessions/{session['id']}/update")
                    assert r.status_code == 400 and "updated with its package" in r.text, \
                        (n, r.text)
                assert [s["id"] for s in api.get("/tunnel_sessions").json()[
                    "tunnel_sessions"]] == [session["id"]]  # one session throughout
            url = agent.api("GET", "/api/tunnels/web").json()["public_url"]
            with EdgeClient(own_server) as client:
                assert client.get(url + "/still").text == "svc /still"
        finally:
            log = agent.stop()
    assert "session_lost" not in log


def _context(srv: Server) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(srv.data_dir / "ca.pem"))


def test_a_peers_goaway_ends_its_connection(own_server: Server) -> None:
    """Before authenticating or after, a GOAWAY from the peer closes the connection at once
    (it had stopped the session's watchdog and left the connection open for good)."""
    with own_server.client() as api:
        token = api.post("/credentials", json={}).json()["token"]

    async def main() -> None:
        r, w = await asyncio.open_connection("localhost", own_server.tunnel_port,
                                             ssl=_context(own_server))
        w.write(frames.encode(frames.goaway(0, ErrorCode.NONE)))
        assert await asyncio.wait_for(r.read(), 30) is not None  # (the server's end: EOF)
        w.close()
        agent = await Agent.connect(own_server, token)
        agent.writer.write(frames.encode(frames.goaway(0, ErrorCode.NONE)))
        await asyncio.wait_for(agent.conn.closed.wait(), 30)
        agent.writer.close()

    asyncio.run(main())


async def _auth(srv: Server, message: Any) -> dict[str, Any]:
    """The server's answer to an Auth ``message`` on a fresh connection."""
    reader, writer = await asyncio.open_connection("localhost", srv.tunnel_port,
                                                   ssl=_context(srv))
    conn = MuxConnection(reader, writer, client=True)
    try:
        return await Agent(conn, writer).rpc(0, message)
    finally:
        await conn.close()


def test_malformed_auth_and_bind_messages_are_answered_with_what_is_wrong(
        own_server: Server) -> None:
    with own_server.client() as api:
        token = api.post("/credentials", json={}).json()["token"]

    async def main() -> None:
        for message, words in (
                ({"Version": 3, "Extra": {"AuthToken": token}}, "protocol version"),
                ({"Version": ["3"], "Extra": "x"}, "Extra must be a JSON object"),
                ({"Version": ["3"], "Extra": {"AuthToken": token,
                                              "HeartbeatInterval": "soon"}},
                 "HeartbeatInterval"),
                ({"Version": ["3"], "Extra": {"AuthToken": token,
                                              "HeartbeatTolerance": 1e30}},
                 "HeartbeatTolerance")):
            reply = await asyncio.wait_for(_auth(own_server, message), 10)
            assert reply["ClientId"] == "" and words.lower() in reply["Error"].lower(), \
                (message, reply)
        agent = await Agent.connect(own_server, token)
        try:
            cases: list[tuple[object, str]] = [
                    ([], "Opts must be a JSON object"),
                    ({"Addr": "", "ProxyProto": "v2"}, "Opts.ProxyProto must be a number"),
                    ({"IPRestriction": "10.0.0.0/8"}, "Opts.IPRestriction must be a JSON"),
                    ({"IPRestriction": {"AllowCIDRs": "10.0.0.0/8"}},
                     "AllowCIDRs must be a JSON array")]
            for opts, words in cases:
                reply = await asyncio.wait_for(agent.rpc(1, {
                    "Id": "", "Proto": "tcp", "Opts": opts, "Extra": {}}), 10)
                assert reply["URL"] == "" and words in reply["Error"], (opts, reply)
            http_cases: list[tuple[object, object, str]] = [
                    ({"BasicAuth": {"Credentials": [7]}}, {},
                     "Credentials must be a JSON object"),
                    ({"RequestHeaders": ["X-A: 1"]}, {},
                     "RequestHeaders must be a JSON object"),
                    ({"OAuth": {"Provider": "google", "Scopes": "email"}}, {},
                     "Opts.OAuth.Scopes must be a JSON array"),
                    ({}, "x", "Extra must be a JSON object")]
            for opts, extra, words in http_cases:
                reply = await asyncio.wait_for(agent.rpc(1, {
                    "Id": "", "Proto": "http", "Opts": opts, "Extra": extra}), 10)
                assert reply["URL"] == "" and words in reply["Error"], (opts, reply)
            made = await agent.bind_tcp()  # the session still binds
            assert made["URL"].startswith("tcp://"), made
        finally:
            await agent.conn.close()

    asyncio.run(main())
    log = own_server.log()
    assert "Traceback" not in log and "never retrieved" not in log, log[-3000:]
