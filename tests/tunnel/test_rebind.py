"""Re-binding a tunnel by id after a reconnect keeps its address, even before the old session
timed out; another credential cannot take the tunnel."""

from __future__ import annotations

import asyncio
import json
import ssl
from typing import Any

from edgeway.tunnel.muxado.aio import MuxConnection
from tests.server import Server


async def rpc(conn: MuxConnection, kind: int, msg: dict[str, Any]) -> dict[str, Any]:
    stream = await conn.open_stream()
    await stream.write(kind.to_bytes(4, "big") + json.dumps(msg).encode())
    raw = bytearray()
    while chunk := await stream.read():
        raw += chunk
    out: dict[str, Any] = json.loads(raw)
    return out


async def agent(srv: Server, token: str) -> MuxConnection:
    ctx = ssl.create_default_context(cafile=str(srv.data_dir / "ca.pem"))
    r, w = await asyncio.open_connection("localhost", srv.tunnel_port, ssl=ctx)
    conn = MuxConnection(r, w, client=True)
    reply = await rpc(conn, 0, {"Version": ["3"], "Extra": {"AuthToken": token}})
    assert reply["ClientId"].startswith("ts_"), reply
    return conn


def bind(tunnel_id: str = "") -> dict[str, Any]:
    return {"Id": tunnel_id, "Proto": "tcp", "Opts": {"Addr": "", "ProxyProto": 0},
            "Extra": {"Token": ""}}


def test_rebind_keeps_the_address(own_server: Server) -> None:
    with own_server.client() as api:
        token = api.post("/credentials", json={}).json()["token"]
        other = api.post("/credentials", json={}).json()["token"]

        async def main() -> None:
            first = await agent(own_server, token)
            made = await rpc(first, 1, bind())
            assert made["URL"].startswith("tcp://") and made["Extra"] == {"Token": ""}
            thief = await agent(own_server, other)
            stolen = await rpc(thief, 1, bind(made["Id"]))
            assert "another credential" in stolen["Error"]
            second = await agent(own_server, token)  # the agent reconnected
            again = await rpc(second, 1, bind(made["Id"]))
            assert (again["Id"], again["URL"]) == (made["Id"], made["URL"])
            tunnels = api.get("/tunnels").json()["tunnels"]
            assert [t["id"] for t in tunnels] == [made["Id"]]
            assert await rpc(second, 2, {"Id": made["Id"]}) == {}
            assert await rpc(second, 2, {"Id": made["Id"]}) == {}  # idempotent
            assert api.get("/tunnels").json()["tunnels"] == []
            for conn in (first, thief, second):
                await conn.close()

        asyncio.run(main())
