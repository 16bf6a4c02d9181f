"""The websocket_tcp_converter module: the edge accepts a client's WebSocket itself and carries
the bytes of its messages to the backend as a plain TCP stream; what the backend sends comes
back as binary messages. The WebSocket side (handshake, masking, fragments, ping/pong, the
close handshake) is the ``websockets`` library's sans-I/O server protocol; this file moves
bytes between it, the public connection and the backend's pipe.
"""

from __future__ import annotations

import asyncio
import contextlib

from websockets.exceptions import InvalidState
from websockets.frames import Frame, Opcode
from websockets.http11 import Request as WsRequest
from websockets.protocol import State
from websockets.server import ServerProtocol

from edgeway.edge import h1
from edgeway.edge.h1 import Request, header
from edgeway.tunnel.pipes import Pipe, UpstreamGone

MAX_MESSAGE = 16 << 20
DATA = (Opcode.TEXT, Opcode.BINARY, Opcode.CONT)


def wants(req: Request) -> bool:
    """A WebSocket opening handshake (rather than some other upgrade)."""
    return req.upgrade and b"websocket" in header(req.headers, b"upgrade").lower()


def handshake(req: Request) -> tuple[ServerProtocol, bytes, bool]:
    """The protocol object, the bytes of the answer to the handshake, and whether it was
    accepted (a malformed handshake gets the library's 4xx answer)."""
    ws = ServerProtocol(max_size=MAX_MESSAGE)
    ws.receive_data(h1.head(b"%b %b HTTP/1.1\r\n" % (req.method, req.target), req.headers))
    events = ws.events_received()
    if not events or not isinstance(events[0], WsRequest):
        return ws, b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n", \
            False
    response = ws.accept(events[0])
    ws.send_response(response)
    return ws, b"".join(ws.data_to_send()), response.status_code == 101


async def convert(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, req: Request,
                  early: bytes, pipe: Pipe) -> None:
    """Serve one converted connection until both sides end (``early``: client bytes that
    followed the handshake)."""
    ws, answer, accepted = handshake(req)
    writer.write(answer)
    await writer.drain()
    if not accepted:
        pipe.close()
        return

    def flush() -> None:
        for chunk in ws.data_to_send():
            if chunk:
                writer.write(chunk)
            else:  # the library's "close the connection now" (the close handshake is done)
                writer.close()

    async def take(data: bytes) -> None:
        if data:
            ws.receive_data(data)
        else:
            ws.receive_eof()
        for frame in ws.events_received():
            if not isinstance(frame, Frame):
                continue
            if frame.opcode in DATA and frame.data:
                await pipe.write(bytes(frame.data))
            elif frame.opcode is Opcode.CLOSE:
                await pipe.write_eof()
        flush()

    async def inbound() -> None:  # client messages -> backend bytes
        if early:
            await take(early)
        while ws.state is not State.CLOSED:
            data = await reader.read(65536)
            await take(data)
            if not data:
                await pipe.write_eof()
                return

    pump = asyncio.create_task(inbound())
    try:
        while data := await pipe.read():  # backend bytes -> binary messages
            if ws.state is not State.OPEN:
                break
            ws.send_binary(data)
            flush()
            await writer.drain()
        with contextlib.suppress(InvalidState):
            if ws.state is State.OPEN:
                ws.send_close(1000, "the backend closed the connection")
        flush()
        await writer.drain()
        await asyncio.wait_for(pump, 5)
    except (UpstreamGone, ConnectionError, OSError, TimeoutError):
        pipe.abort()
    finally:
        pump.cancel()
        with contextlib.suppress(ConnectionError, OSError, RuntimeError):
            writer.close()
