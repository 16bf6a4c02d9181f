"""TCP tunnels at the edge: a listener per bound address; each public connection becomes a
proxy stream to the agent (stream type 3, the ProxyHeader, then the bytes both ways).

Backpressure runs end to end: while the agent's window for a stream is exhausted, the writer
blocks, so the public socket is not read; while the public client is slow, ``drain`` blocks,
so the stream is not read and the agent's window is not reopened.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import struct

from edgeway.tunnel.muxado.aio import MuxConnection, MuxStream, StreamClosed
from edgeway.tunnel.muxado.session import StreamError
from edgeway.tunnel.rpc import StreamType


def client_addr(peer: tuple[str, int] | None) -> str:
    if not peer:
        return "0.0.0.0:0"
    host = peer[0]
    return f"[{host}]:{peer[1]}" if ipaddress.ip_address(host).version == 6 else \
        f"{host}:{peer[1]}"


def proxy_preamble(tunnel_id: str, client: str, proto: str) -> bytes:
    header = json.dumps({"Id": tunnel_id, "ClientAddr": client, "Proto": proto,
                         "EdgeType": "", "PassthroughTLS": False}).encode()
    return struct.pack(">I", StreamType.PROXY) + struct.pack("<q", len(header)) + header


async def _upstream(reader: asyncio.StreamReader, stream: MuxStream) -> None:
    while data := await reader.read(65536):
        await stream.write(data)
    await stream.write_eof()


async def _downstream(stream: MuxStream, writer: asyncio.StreamWriter) -> None:
    while data := await stream.read():
        writer.write(data)
        await writer.drain()
    if writer.can_write_eof():
        writer.write_eof()


async def splice(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                 stream: MuxStream) -> None:
    up = asyncio.create_task(_upstream(reader, stream))
    try:
        await _downstream(stream, writer)
        await up
    except (StreamClosed, ConnectionError, OSError):
        stream.reset()
    finally:
        up.cancel()
        with contextlib.suppress(ConnectionError, OSError):
            writer.close()


class TcpTunnel:
    def __init__(self, tunnel_id: str, conn: MuxConnection, host: str, port: int) -> None:
        self.id = tunnel_id
        self.conn = conn
        self.host, self.port = host, port
        self.url = f"tcp://{host}:{port}"
        self._server: asyncio.Server | None = None
        self._clients: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._client, self.host, self.port)

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._clients.add(task)
        try:
            try:
                stream = await self.conn.open_stream()
                await stream.write(proxy_preamble(self.id, client_addr(
                    writer.get_extra_info("peername")), "tcp"))
            except (StreamError, StreamClosed):
                writer.close()  # the agent is going away: a closed connection, not a hang
                return
            await splice(reader, writer, stream)
        finally:
            self._clients.discard(task)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._clients):
            task.cancel()
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2)
