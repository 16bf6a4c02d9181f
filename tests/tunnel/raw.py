"""A raw agent for tunnel tests: an authenticated muxado session over the tunnel listener's
TLS, speaking the RPCs by hand, whose transport can be dropped without a goodbye."""

from __future__ import annotations

import asyncio
import json
import ssl
from typing import Any

from edgeway.tunnel.muxado.aio import MuxConnection
from tests.server import Server


class Agent:
    """A raw agent: an authenticated muxado session whose transport can be dropped."""

    def __init__(self, conn: MuxConnection, writer: asyncio.StreamWriter) -> None:
        self.conn, self.writer = conn, writer

    @classmethod
    async def connect(cls, srv: Server, token: str, **extra: Any) -> Agent:
        ctx = ssl.create_default_context(cafile=str(srv.data_dir / "ca.pem"))
        reader, writer = await asyncio.open_connection("localhost", srv.tunnel_port, ssl=ctx)
        agent = cls(MuxConnection(reader, writer, client=True), writer)
        reply = await agent.rpc(0, {"Version": ["3"], "Extra": {"AuthToken": token, **extra}})
        assert reply["ClientId"].startswith("ts_"), reply
        return agent

    async def rpc(self, kind: int, msg: dict[str, Any]) -> dict[str, Any]:
        stream = await self.conn.open_stream()
        await stream.write(kind.to_bytes(4, "big") + json.dumps(msg).encode())
        raw = bytearray()
        while chunk := await stream.read():
            raw += chunk
        stream.close()  # (our half too: the server counts the streams an agent holds)
        out: dict[str, Any] = json.loads(raw)
        return out

    async def bind_tcp(self, tunnel_id: str = "", addr: str = "") -> dict[str, Any]:
        return await self.rpc(1, {"Id": tunnel_id, "Proto": "tcp", "Opts": {"Addr": addr},
                                  "Extra": {"Token": ""}})

    async def bind_http(self, tunnel_id: str = "", domain: str = "") -> dict[str, Any]:
        return await self.rpc(1, {"Id": tunnel_id, "Proto": "https",
                                  "Opts": {"Hostname": domain}, "Extra": {"Token": ""}})

    def drop(self) -> None:
        """Gone without a goodbye, as when the network or the agent's host fails."""
        assert self.writer.transport is not None
        self.writer.transport.abort()


def port_of(reply: dict[str, Any]) -> int:
    assert reply.get("URL", "").startswith("tcp://"), reply
    return int(reply["URL"].rsplit(":", 1)[1])
