"""The links between nodes: a public connection that arrived at one node for a tunnel whose
agent is connected to another travels to that node on a stream of a muxado session over
mutual TLS (``nodes.tls``), one session per pair of nodes and direction, dialed on first use.

A stream starts with a header, a 4-byte big-endian length then JSON: the tunnel's id, the
client's address, the protocol, the edge type and whether TLS passes through, which is what
the holding node's agent is told in its proxy header. The holding node opens a pipe to its
agent (or the SSH gateway's client) and the bytes run both ways; if it cannot, it resets the
stream, and the arriving node's edge answers as for an agent that went away. Nothing is
answered before the bytes, so the hop costs no round trip. This is the protocol and the
listening end; the dialing end is ``nodes.peers``."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import ssl
import struct
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from edgeway import caps
from edgeway.accept import Acceptor
from edgeway.config import listen_socket, parse_addr
from edgeway.nodes import tls
from edgeway.platform import AgentCommands
from edgeway.tunnel.muxado.aio import MuxConnection
from edgeway.tunnel.muxado.events import StreamError
from edgeway.tunnel.muxado.stream import MuxStream, StreamClosed
from edgeway.tunnel.pipes import READ_MAX, Pipe, UpstreamGone
from edgeway.tunnel.registry import Tunnel

log = structlog.get_logger()
HEADER_MAX = 4096
HEADER_TIMEOUT = 10.0
DIAL_TIMEOUT = 3.0
ASK_WAIT = 1.0  # seconds a node waits for the others to follow a bind or its leave, at most
QUESTIONS = ("serves", "left")
LINK_STREAMS = 65536  # public connections one link carries at once


def frame(message: dict[str, Any]) -> bytes:
    body = json.dumps(message).encode()
    return struct.pack(">I", len(body)) + body


def header(tunnel_id: str, client: str, proto: str, edge: str, passthrough: bool) -> bytes:
    return frame({"tunnel": tunnel_id, "client": client, "proto": proto, "edge": edge,
                   "passthrough": passthrough})


async def read_header(stream: MuxStream) -> dict[str, Any]:
    """A stream's header: a public connection's (``tunnel``), an agent command's
    (``command``: the API's stop, restart or update of a session held there) or a question
    (``ask``: ``serves`` a tunnel another node just recorded, or forgot a node that
    ``left``; answered yes once it is so here), or requests another node served for
    tunnels held here whose holder is told of each (``observed``: [tunnel, method, target,
    status] each)."""
    (size,) = struct.unpack(">I", await stream.readexactly(4))
    if size > HEADER_MAX:
        raise ValueError(f"a link header of {size} bytes")
    head = json.loads(await stream.readexactly(size))
    if not isinstance(head, dict) or not (isinstance(head.get("tunnel"), str)
                                          or isinstance(head.get("command"), int)
                                          or head.get("ask") in QUESTIONS
                                          or isinstance(head.get("observed"), list)):
        raise ValueError("a link header with neither a tunnel, a command, a question nor "
                         "observed requests")
    return head


class LinkServer:
    """This node's end of the links: other nodes' streams, each carried to a tunnel held here
    (``local``: the registry's tunnels whose agent is connected to this node)."""

    def __init__(self, context: ssl.SSLContext, local: Callable[[str], Tunnel | None],
                 agents: AgentCommands,
                 answers: dict[str, Callable[[str, float], Awaitable[bool]]]) -> None:
        self.context, self.local, self.agents = context, local, agents
        self.answers = answers  # (one for each of ``QUESTIONS``: whether it is so in time)
        self._server: Acceptor | None = None
        self._links: set[MuxConnection] = set()
        self._carrying: dict[MuxConnection, set[asyncio.Task[None]]] = {}
        self.carried = 0  # public connections carried here from other nodes, so far

    def start(self, addr: str, reuse_port: bool = False) -> None:
        """Listen at HOST:PORT (mutual TLS) or unix:PATH (a socket file only this user may
        open: the workers of one machine)."""
        door = caps.process().door("node link", own=True)
        if addr.startswith("unix:"):
            self._server = Acceptor.streams(_unix_socket(addr[5:]), door, self._link).start()
            return
        self._server = Acceptor.streams(
            listen_socket("node link", *parse_addr(addr), reuse_port), door, self._link,
            self.context, HEADER_TIMEOUT).start()

    async def _link(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    _peer: tuple[str, int]) -> None:
        over_tls = writer.get_extra_info("sslcontext") is not None
        if over_tls and not tls.is_node(writer.get_extra_info("peercert")):
            log.warning("node_link_refused", peer=writer.get_extra_info("peername"),
                        reason="the client certificate is not a node's")
            return
        conn = MuxConnection(reader, writer, client=False, max_streams=LINK_STREAMS)
        self._links.add(conn)
        tasks: set[asyncio.Task[None]] = set()
        self._carrying[conn] = tasks
        try:
            while (stream := await conn.accept()) is not None:
                task = asyncio.create_task(self._carry(stream))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
        finally:
            self._links.discard(conn)
            self._carrying.pop(conn, None)
            for task in list(tasks):
                task.cancel()
            await conn.close()

    async def idle(self, timeout: float) -> int:
        """Until the connections carried now have ended (at most ``timeout`` seconds); how
        many were left."""
        carrying = [t for links in self._carrying.values() for t in links]
        if carrying:
            _, left = await asyncio.wait(carrying, timeout=timeout)
            return len(left)
        return 0

    async def _carry(self, stream: MuxStream) -> None:
        try:
            async with asyncio.timeout(HEADER_TIMEOUT):
                head = await read_header(stream)
            if "command" in head:
                await self._command(stream, head)
                return
            if "observed" in head:
                self._observed(head["observed"])
                await stream.write(frame({"yes": True}), eof=True)
                return
            if "ask" in head:
                timeout = min(float(head.get("timeout") or ASK_WAIT), ASK_WAIT)
                yes = await self.answers[head["ask"]](str(head.get("about") or ""), timeout)
                await stream.write(frame({"yes": yes}), eof=True)
                return
            tunnel = self.local(head["tunnel"])
            if tunnel is None:
                raise UpstreamGone("the tunnel is not held by this node")
            self.carried += 1
            pipe = await tunnel.open(str(head.get("client") or ""), str(head.get("proto") or ""),
                                     str(head.get("edge") or ""), bool(head.get("passthrough")))
        except (StreamClosed, StreamError, UpstreamGone, TimeoutError, ValueError, TypeError,
                asyncio.IncompleteReadError) as exc:
            log.info("node_link_stream_refused", error=str(exc) or type(exc).__name__)
            with contextlib.suppress(StreamClosed, StreamError):
                stream.reset()
            return
        await relay(stream, pipe)

    def _observed(self, lines: list[Any]) -> None:
        """Tell the tunnels held here of the requests another node served for them."""
        for line in lines:
            if not (isinstance(line, list) and len(line) == 4
                    and all(isinstance(v, str) for v in line[:3])
                    and isinstance(line[3], int)):
                raise ValueError("an observed request is not [tunnel, method, target, status]")
            tunnel = self.local(line[0])
            if tunnel is not None and tunnel.observer is not None:
                tunnel.observer(line[1].encode("latin-1"), line[2].encode("latin-1"), line[3])

    async def _command(self, stream: MuxStream, head: dict[str, Any]) -> None:
        timeout = min(float(head.get("timeout") or 10.0), 60.0)
        answer = await self.agents.command(str(head.get("session") or ""), int(head["command"]),
                                           dict(head.get("body") or {}), timeout)
        await stream.write(frame({"answer": answer}), eof=True)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for conn in list(self._links):
            await conn.close()
        if self._server is not None:
            await self._server.wait_closed()


def _unix_socket(path: str) -> socket.socket:
    """A listening Unix socket at ``path`` (a stale file of a previous run replaced), mode
    0600: the same user's processes only."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        old = os.umask(0o177)
        try:
            sock.bind(path)
        finally:
            os.umask(old)
        sock.listen(1024)
    except OSError as exc:
        sock.close()
        raise OSError(exc.errno, f"cannot listen for the node link on unix:{path}: "
                      f"{exc.strerror or exc}") from None
    return sock


async def relay(stream: MuxStream, pipe: Pipe) -> None:
    """Bytes both ways between a link's stream and the pipe to the agent, half-closes passed
    on, until both directions ended or one failed (then both are reset)."""
    async def up() -> None:
        try:
            while data := await stream.read(READ_MAX):
                await pipe.write(data)
        except StreamClosed as exc:
            raise UpstreamGone(str(exc)) from None
        await pipe.write_eof()

    async def down() -> None:
        while data := await pipe.read():
            await stream.write(data)
        await stream.write_eof()

    tasks = {asyncio.create_task(up()), asyncio.create_task(down())}
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        if any(not t.cancelled() and t.exception() is not None for t in done):
            pipe.abort()
            with contextlib.suppress(StreamClosed, StreamError):
                stream.reset()
    finally:
        for task in tasks:
            task.cancel()
        pipe.close()
        stream.close()
