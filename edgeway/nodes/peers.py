"""This node's ends of the links towards the other nodes (``edgeway.nodes.link`` has the
protocol and the listening end): one muxado session per node, dialed on first use and again
after it ended, over which public connections, agent commands, questions and the requests
served for observed tunnels travel."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import ssl
import struct
from typing import Any

import structlog

from edgeway.config import parse_addr
from edgeway.nodes import tls
from edgeway.nodes.link import DIAL_TIMEOUT, HEADER_MAX, LINK_STREAMS, frame
from edgeway.store.nodes import Node
from edgeway.tunnel.muxado.aio import MuxConnection
from edgeway.tunnel.muxado.events import StreamError
from edgeway.tunnel.muxado.stream import StreamClosed
from edgeway.tunnel.pipes import Pipe, StreamPipe, UpstreamGone

log = structlog.get_logger()
FORGET_LINGER = 60.0  # seconds the streams to a node that left may go on, at most
LINGER_CHECK = 0.05  # seconds between looks at whether a forgotten node's streams ended


class Unreachable(UpstreamGone):
    """The link to a node could not be dialed."""


class LinkPeers:
    """This node's ends towards the others: one muxado session per node, dialed on first use
    and again after it ended."""

    def __init__(self, context: ssl.SSLContext) -> None:
        self.context = context
        self._conns: dict[str, MuxConnection] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def _session(self, node: Node) -> MuxConnection:
        conn = self._conns.get(node.id)
        if conn is not None and not conn.closed.is_set():
            return conn
        async with self._locks.setdefault(node.id, asyncio.Lock()):
            conn = self._conns.get(node.id)
            if conn is not None and not conn.closed.is_set():
                return conn
            try:
                async with asyncio.timeout(DIAL_TIMEOUT):
                    reader, writer = await self._dial(node)
            except (OSError, ssl.SSLError, TimeoutError) as exc:
                raise Unreachable(f"the node {node.id} at {node.addr} cannot be reached "
                                   f"({exc or type(exc).__name__})") from None
            with contextlib.suppress(OSError):
                writer.get_extra_info("socket").setsockopt(
                    socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            conn = MuxConnection(reader, writer, client=True, max_streams=LINK_STREAMS)
            self._conns[node.id] = conn
            log.info("node_link_up", node=node.id, addr=node.addr)
            return conn

    async def _dial(self, node: Node) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if node.addr.startswith("unix:"):
            return await asyncio.open_unix_connection(node.addr[5:])
        host, port = parse_addr(node.addr)
        return await asyncio.open_connection(host, port, ssl=self.context,
                                             server_hostname=tls.node_name(node.id))

    async def open(self, node: Node, head: bytes) -> Pipe:
        conn = await self._session(node)
        try:
            stream = await conn.open_stream()
            await stream.write(head)
        except (StreamClosed, StreamError) as exc:
            raise UpstreamGone(f"the link to the node {node.id} failed ({exc})") from None
        return StreamPipe(stream)

    async def command(self, node: Node, session_id: str, kind: int, body: dict[str, Any],
                      timeout: float) -> str | None:
        """An agent command to a session ``node`` holds: the agent's error text ("" when it
        accepted), None when that node holds no such session."""
        conn = await self._session(node)
        try:
            async with asyncio.timeout(timeout + DIAL_TIMEOUT):
                stream = await conn.open_stream()
                await stream.write(frame({"command": kind, "session": session_id,
                                           "body": body, "timeout": timeout}), eof=True)
                (size,) = struct.unpack(">I", await stream.readexactly(4))
                answer = json.loads(await stream.readexactly(min(size, HEADER_MAX)))
        except (StreamClosed, StreamError, TimeoutError, asyncio.IncompleteReadError,
                ValueError) as exc:
            return f"the node {node.id} holding the session did not answer ({exc})"
        found = answer.get("answer") if isinstance(answer, dict) else None
        return None if found is None else str(found)

    async def ask(self, node: Node, question: str, about: str, timeout: float) -> bool:
        """Whether ``node`` says yes to one of ``QUESTIONS`` within ``timeout`` seconds (it
        serves the tunnel ``about`` this node just recorded; it forgot the node ``about``,
        this one, which left); False when it cannot be asked."""
        try:
            async with asyncio.timeout(timeout):
                conn = await self._session(node)
                stream = await conn.open_stream()
                await stream.write(frame({"ask": question, "about": about,
                                           "timeout": timeout}), eof=True)
                (size,) = struct.unpack(">I", await stream.readexactly(4))
                answer = json.loads(await stream.readexactly(min(size, HEADER_MAX)))
        except (StreamClosed, StreamError, TimeoutError, asyncio.IncompleteReadError,
                ValueError, UpstreamGone):
            return False
        return isinstance(answer, dict) and answer.get("yes") is True

    async def tell(self, node: Node, message: dict[str, Any], timeout: float) -> bool:
        """Send ``node`` a message it only acknowledges (``observed``); False: it could not
        be told within ``timeout`` seconds."""
        try:
            async with asyncio.timeout(timeout):
                conn = await self._session(node)
                stream = await conn.open_stream()
                await stream.write(frame(message), eof=True)
                (size,) = struct.unpack(">I", await stream.readexactly(4))
                await stream.readexactly(min(size, HEADER_MAX))
        except (StreamClosed, StreamError, TimeoutError, asyncio.IncompleteReadError,
                ValueError, UpstreamGone):
            return False
        return True

    def retire(self, node_id: str) -> None:
        """Open no more streams to ``node_id`` (it left; ``forget`` it next)."""
        conn = self._conns.get(node_id)
        if conn is not None:
            conn.retire()

    async def forget(self, node_id: str, linger: float = 0.0) -> None:
        """No more streams to ``node_id``; its link closed once the streams it carries now
        ended (``linger`` seconds at most: a node that left lets them finish before it
        exits, and a dead one's link ends with it)."""
        self.retire(node_id)
        conn = self._conns.pop(node_id, None)
        if conn is None:
            return
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(linger):
                while conn.session.stream_count and not conn.closed.is_set():
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(conn.closed.wait(), LINGER_CHECK)
        await conn.close()

    async def close(self) -> None:
        for node_id in list(self._conns):
            await self.forget(node_id)
