"""What the public listeners need to hand a connection to the worker holding its tunnel
(``edgeway serve --workers N``; the hand-off itself is ``edgeway.nodes.handoff``): the tunnels
a new connection may reach, known before a byte of it is consumed.

- On the HTTP listener, the Host of the first request, from a peek at its head
  (``head_host``). A head that has not arrived whole with the first bytes, or names its host
  twice, is served here: the hand-off is an optimisation, never a second parser whose answer
  could differ from the real one (the worker that serves the connection parses it again).
- On the TLS port, the ClientHello's server name, peeked already: a TLS edge's or tunnel's
  name, or an HTTPS one (an edge's routes, or the agents' tunnels bound to it).
- On a TCP edge's port, the tunnels behind its backend.

Only a connection every tunnel of which is held by one sibling worker is handed over; any
other (some held here, a static backend, a fixed answer, nothing bound) is served where it
arrived."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Sequence

from edgeway.edge import backends
from edgeway.edge.snapshot import Edge, Snapshot
from edgeway.edge.sni import ClientHello, NotTLS, parse_client_hello
from edgeway.tunnel.registry import Registry, Tunnel

HEAD_PEEK = 8192  # bytes of a request head looked at; a longer head is served here
PEEK_TIMEOUT = 10.0
MAX_HELLO = 65536 + 4096


def head_host(data: bytes) -> str | None:
    """The host the complete request head at the start of ``data`` names (as routed: lower
    case, without its port or a trailing dot), or None: no whole head, no Host, or two."""
    end = data.find(b"\r\n\r\n")
    if end < 0:
        return None
    hosts = [line.split(b":", 1)[1] for line in data[:end].split(b"\r\n")[1:]
             if line[:5].lower() == b"host:"]
    if len(hosts) != 1:
        return None
    host = hosts[0].strip().decode("latin-1").lower()
    host = host.rsplit(":", 1)[0] if not host.endswith("]") else host
    return host.rstrip(".") or None


async def peek_head(sock: socket.socket, timeout: float) -> bytes:
    """The bytes waiting on ``sock`` (once it is readable, when none are yet), left unread;
    b"" if none come within ``timeout`` or the socket fails."""
    try:
        return sock.recv(HEAD_PEEK, socket.MSG_PEEK)  # (most clients sent it already)
    except BlockingIOError:
        pass
    except OSError:
        return b""
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()
    loop.add_reader(sock.fileno(), _wake, ready)
    try:
        await asyncio.wait_for(ready, timeout)
        return sock.recv(HEAD_PEEK, socket.MSG_PEEK)
    except (TimeoutError, OSError):
        return b""
    finally:
        loop.remove_reader(sock.fileno())


def _wake(ready: asyncio.Future[None]) -> None:
    if not ready.done():
        ready.set_result(None)


async def peek_hello(sock: socket.socket) -> ClientHello | None:
    """The ClientHello waiting on ``sock``, left unread; None if it is not TLS or too slow."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + PEEK_TIMEOUT
    first = True
    while loop.time() < deadline:
        if first:  # (most clients sent it already: no wait for the socket to be readable)
            first = False
            with contextlib.suppress(BlockingIOError, OSError):
                data = sock.recv(MAX_HELLO, socket.MSG_PEEK)
                with contextlib.suppress(NotTLS):
                    if data and (hello := parse_client_hello(data)) is not None:
                        return hello
        ready: asyncio.Future[None] = loop.create_future()
        loop.add_reader(sock.fileno(), _wake, ready)
        try:
            await asyncio.wait_for(ready, deadline - loop.time())
        except TimeoutError:
            return None
        finally:
            loop.remove_reader(sock.fileno())
        try:
            data = sock.recv(MAX_HELLO, socket.MSG_PEEK)
        except BlockingIOError:
            continue
        except OSError:
            return None
        if not data:
            return None
        try:
            hello = parse_client_hello(data)
        except NotTLS:
            return None
        if hello is not None:
            return hello
        await asyncio.sleep(0.005)  # a partial hello stays readable: wait for the rest
    return None


def behind(snap: Snapshot, registry: Registry, edge: Edge, host: str | None = None
           ) -> list[Tunnel] | None:
    """The tunnels an edge's connection may reach (an HTTPS edge: through any route for
    ``host``); None when it may reach something else."""
    plans = [r.plan for r in edge.routes if not r.host or r.host == host] \
        if edge.kind == "https" else [edge.plan]
    tunnels: list[Tunnel] = []
    for plan in plans:
        found = backends.tunnels_behind(snap.backends, plan.backend_id, registry) \
            if plan.backend_id else None
        if found is None:
            return None
        tunnels += found
    return tunnels


def agents(registry: Registry, host: str, scheme: str) -> Sequence[Tunnel]:
    """The agents' tunnels a request for ``host`` over ``scheme`` may reach (as
    ``EdgeRouter.agent_tunnel`` picks among them)."""
    tunnels = registry.for_host(host)
    return [t for t in tunnels if t.proto == scheme and t.alive] or tunnels
