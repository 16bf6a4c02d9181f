"""The hand-off between the workers of one machine (``edgeway serve --workers N``): a public
connection accepted by a worker that does not hold its tunnel's agent is passed, as the socket
itself, to the worker that does (``SCM_RIGHTS`` over a Unix ``SOCK_SEQPACKET`` socket, one
message per connection), instead of being carried there over the node link. The accepting
worker has read nothing of it by then: the TLS ClientHello and the HTTP request head are
peeked, never consumed, and a PROXY header it consumed is replaced by the client address the
message carries. The receiving worker serves the connection from its first byte, as if it had
accepted it, and the accepting one closes its copy: the cost of the second worker is one
``sendmsg``, not a relay of every byte.

A worker is a sibling when its node link is a Unix socket (``unix:<dir>/link.sock``, as
``--workers`` sets it): its hand-off socket is ``<dir>/handoff.sock``, mode 0600 in a 0700
directory, and every connection to it is checked to come from a process of the same user
(``SO_PEERCRED``). A message is a JSON object (``Handed``) and exactly one descriptor; anything
else is dropped, its descriptors closed. A hand-off that cannot be made (the sibling is gone,
its queue stays full) is not an error: the connection is served here, over the link."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import struct
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import structlog

from edgeway.accept import Peer
from edgeway.tunnel.registry import Tunnel

log = structlog.get_logger()
NAME = "handoff.sock"
KINDS = ("http", "tls", "tcp", "tcp_edge")  # the listener that accepted it, which takes it
MESSAGE_MAX = 1024
SEND_WAIT = 1.0  # seconds a hand-off waits for room in a busy sibling's queue, at most
RETRY_AFTER = 1.0  # seconds a sibling that could not be reached is left alone


@dataclass(frozen=True)
class Handed:
    """What comes with a handed socket: the listener kind, the client (the PROXY header's
    when a load balancer sent one), and for a TCP listener the tunnel id or edge port it
    listens for."""

    kind: str
    peer: Peer
    ref: str = ""


def encode(handed: Handed) -> bytes:
    return json.dumps({"kind": handed.kind, "peer": list(handed.peer),
                       "ref": handed.ref}).encode()


def decode(data: bytes) -> Handed:
    """The message's ``Handed``; ValueError says why it is not one."""
    if len(data) > MESSAGE_MAX:
        raise ValueError(f"a message of {len(data)} bytes")
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(doc, dict) or set(doc) != {"kind", "peer", "ref"}:
        raise ValueError("not a hand-off message")
    kind, peer, ref = doc["kind"], doc["peer"], doc["ref"]
    if kind not in KINDS or not isinstance(ref, str):
        raise ValueError(f"unknown kind {kind!r}")
    if not (isinstance(peer, list) and len(peer) == 2 and isinstance(peer[0], str)
            and isinstance(peer[1], int) and 0 <= peer[1] <= 65535):
        raise ValueError("the peer is not [host, port]")
    return Handed(kind, (peer[0], peer[1]), ref)


def _wake(ready: asyncio.Future[None]) -> None:
    if not ready.done():
        ready.set_result(None)


def sibling_path(link_addr: str) -> str | None:
    """The hand-off socket of the node whose link listens at ``link_addr``: a worker of this
    machine (a Unix-socket link) has one; a node elsewhere (HOST:PORT) does not."""
    if not link_addr.startswith("unix:"):
        return None
    return str(Path(link_addr.removeprefix("unix:")).with_name(NAME))


Receiver = Callable[[socket.socket, Handed], Awaitable[None]]
Holder = Callable[[Tunnel], str | None]  # a tunnel's sibling hand-off path, or None


class Handoff:
    def __init__(self, own: str, holder: Holder) -> None:
        self.own, self.holder = own, holder  # our socket's path; where a tunnel is held
        self.receivers: dict[str, Receiver] = {}  # by kind (set by ``edgeway serve``)
        self.sent: dict[str, int] = dict.fromkeys(KINDS, 0)  # connections, by kind
        self.received: dict[str, int] = dict.fromkeys(KINDS, 0)
        self._listening: socket.socket | None = None
        self._accepting: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._out: dict[str, socket.socket] = {}  # connected to each sibling, on first use
        self._down: dict[str, float] = {}  # siblings not reached: when to try again
        self._in: set[socket.socket] = set()

    def start(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.own)  # (a stale file of a previous run)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        old = os.umask(0o177)
        try:
            sock.bind(self.own)
        finally:
            os.umask(old)
        sock.listen(64)
        sock.setblocking(False)
        self._listening = sock
        self._accepting = asyncio.create_task(self._accept(sock))

    # -- sending ---------------------------------------------------------------------------

    def target(self, tunnels: Sequence[Tunnel]) -> str | None:
        """The one sibling holding every tunnel of ``tunnels`` (those a connection may reach),
        or None: some are held here or elsewhere, or on more than one sibling."""
        paths = {self.holder(t) for t in tunnels}
        return paths.pop() if len(paths) == 1 else None

    async def offer(self, sock: socket.socket, kind: str, peer: Peer, ref: str,
                    tunnels: Sequence[Tunnel]) -> bool:
        """Pass ``sock`` to the sibling holding ``tunnels`` (then closed here); False: no
        such sibling, or it could not take it (the socket is still this worker's)."""
        handed = Handed(kind, peer, ref)
        path = self.target(tunnels)
        loop = asyncio.get_running_loop()
        if path is None or path == self.own or self._down.get(path, 0.0) > loop.time():
            return False
        try:
            out = await self._connected(path)
            await self._send(out, encode(handed), sock.fileno())
        except (OSError, TimeoutError) as exc:
            self._drop(path)
            self._down[path] = loop.time() + RETRY_AFTER
            log.warning("handoff_failed", to=path, kind=handed.kind,
                        error=getattr(exc, "strerror", None) or type(exc).__name__)
            return False
        sock.close()  # (the sibling's copy is the connection now)
        self.sent[handed.kind] += 1
        return True

    async def _connected(self, path: str) -> socket.socket:
        out = self._out.get(path)
        if out is None:
            out = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
            out.setblocking(False)
            try:
                await asyncio.get_running_loop().sock_connect(out, path)
            except BaseException:
                out.close()
                raise
            self._out[path] = out
        return out

    @staticmethod
    async def _send(out: socket.socket, data: bytes, fd: int) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + SEND_WAIT
        while True:
            try:
                socket.send_fds(out, [data], [fd])
                return
            except BlockingIOError:
                pass
            room: asyncio.Future[None] = loop.create_future()
            loop.add_writer(out.fileno(), _wake, room)
            try:
                await asyncio.wait_for(room, deadline - loop.time())
            finally:
                loop.remove_writer(out.fileno())

    def _drop(self, path: str) -> None:
        out = self._out.pop(path, None)
        if out is not None:
            out.close()

    # -- receiving -------------------------------------------------------------------------

    async def _accept(self, listening: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                conn, _ = await loop.sock_accept(listening)
            except OSError:
                if listening.fileno() < 0:
                    return
                await asyncio.sleep(0.05)  # (out of descriptors: soon again)
                continue
            creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                    struct.calcsize("3i"))
            pid, uid, _gid = struct.unpack("3i", creds)
            if uid != os.getuid():
                log.warning("handoff_refused", pid=pid, uid=uid, reason="another user")
                conn.close()
                continue
            conn.setblocking(False)
            self._in.add(conn)
            loop.add_reader(conn.fileno(), self._readable, conn)

    def _readable(self, conn: socket.socket) -> None:
        while True:
            try:
                data, fds, flags, _ = socket.recv_fds(conn, MESSAGE_MAX + 1, 4)
            except BlockingIOError:
                return
            except OSError:
                self._close_in(conn)
                return
            if not data and not fds:
                self._close_in(conn)  # (the sibling stopped)
                return
            self._take(data, fds, flags)

    def _take(self, data: bytes, fds: list[int], flags: int) -> None:
        socks = [socket.socket(fileno=fd) for fd in fds]
        try:
            if len(socks) != 1 or flags & (socket.MSG_CTRUNC | socket.MSG_TRUNC):
                raise ValueError(f"{len(socks)} descriptors")
            handed = decode(data)
            receiver = self.receivers.get(handed.kind)
            if receiver is None:
                raise ValueError(f"no {handed.kind} listener here")
        except ValueError as exc:
            log.warning("handoff_dropped", error=str(exc))
            for sock in socks:
                sock.close()
            return
        sock = socks[0]
        sock.setblocking(False)
        self.received[handed.kind] += 1
        task = asyncio.get_running_loop().create_task(self._serve(receiver, sock, handed))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @staticmethod
    async def _serve(receiver: Receiver, sock: socket.socket, handed: Handed) -> None:
        try:
            await receiver(sock, handed)
        except Exception:  # one connection's failure is logged, never the hand-off's end
            log.exception("connection_failed", listener=f"handed {handed.kind}")
            with contextlib.suppress(OSError):
                sock.close()

    def _close_in(self, conn: socket.socket) -> None:
        if conn in self._in:
            self._in.discard(conn)
            asyncio.get_running_loop().remove_reader(conn.fileno())
            conn.close()

    async def stop(self) -> None:
        """Take no more; the connections taken end with their listeners (or are cancelled
        here, after their listeners stopped)."""
        if self._accepting is not None:
            self._accepting.cancel()
        if self._listening is not None:
            self._listening.close()
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.own)
        for conn in list(self._in):
            self._close_in(conn)
        for path in list(self._out):
            self._drop(path)
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=2.0)
        log.info("handoff_stopped", sent=self.sent, received=self.received)

