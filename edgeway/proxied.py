"""The PROXY protocol on the public listeners (``--proxy-protocol``, ``--trusted-proxies``):
which peers are trusted load balancers, and the read of the header a connection from one
begins with (the parser is ``edgeway.proxy_protocol``; the accept loop, ``edgeway.accept``,
calls ``read_header`` before the listener's handler sees the connection).

A connection from a trusted address must begin with a valid header within ``timeout``
seconds, else it is closed; its client is then the header's source (the load balancer's own
address for a header without one: a health check). A connection from any other address is a
direct client with its own address, and whatever it sends is its own bytes: a PROXY header
from it is never read as one. The public listeners are the HTTP, HTTPS/TLS, TCP edge and TCP
tunnel listeners; the tunnel listener agents dial, the management API, the SSH gateway and
the DNS server never read a header.

The header is read off the socket with ``MSG_PEEK`` and only its own bytes are consumed, so
what follows it (a TLS ClientHello, an HTTP request) stays unread for the listener. Bytes that
did not end the header are consumed as they come (they are the header's, whatever follows),
so the socket is readable again only when more arrive: no busy waiting on a slow sender.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
from dataclasses import dataclass

import structlog

from edgeway.ippolicy import Network, address
from edgeway.proxy_protocol import MAX, Header, NeedMore, Refused, parse

log = structlog.get_logger()
TIMEOUT = 5.0  # the default deadline of a trusted connection's header, from its accept


@dataclass(frozen=True)
class Trust:
    """The load balancers whose PROXY headers are believed, and the header's deadline."""

    networks: tuple[Network, ...]
    timeout: float = TIMEOUT

    def trusts(self, host: str) -> bool:
        """Whether a connection from ``host`` comes from a trusted load balancer."""
        addr = address(host)
        return addr is not None and any(addr.version == net.version and addr in net
                                        for net in self.networks)


def network(text: str) -> Network:
    """A trusted network from its text (an address is its /32 or /128); ValueError says why
    it is not one."""
    text = text.strip()
    try:
        net = ipaddress.ip_network(text)
    except ValueError:
        try:
            loose = ipaddress.ip_network(text, strict=False)
        except ValueError:
            raise ValueError(f"{text!r} is not an IP address or CIDR") from None
        raise ValueError(f"{text!r} has bits set after its prefix: {loose} is the network "
                         "it is in") from None
    if net.prefixlen == 0:
        raise ValueError(f"{text!r} would believe a PROXY header from any address, so every "
                         "client could claim any address: name the load balancers' "
                         "addresses or network")
    return net


_PROCESS: list[Trust | None] = [None]


def configure(trust: Trust | None) -> None:
    """Set the process's trusted proxies (``edgeway serve``, before its listeners open);
    None: the public listeners read no header."""
    _PROCESS[0] = trust


def trust() -> Trust | None:
    """The process's trusted proxies, which the public listeners take as they open."""
    return _PROCESS[0]


async def read_header(sock: socket.socket, timeout: float) -> Header | Refused:
    """The PROXY header ``sock`` begins with, consumed and no byte more; or why not (also:
    closed, or not complete within ``timeout`` seconds)."""
    got = bytearray()
    try:
        async with asyncio.timeout(timeout):
            while True:
                await _readable(sock)
                try:
                    data = sock.recv(MAX - len(got), socket.MSG_PEEK)
                except BlockingIOError:
                    continue
                if not data:
                    return Refused(f"closed after {len(got)} bytes, before a complete "
                                   "PROXY header" if got else "closed before a PROXY header")
                result = parse(bytes(got) + data)
                if isinstance(result, NeedMore):
                    _consume(sock, len(data))
                    got += data
                    continue
                if isinstance(result, Header):
                    _consume(sock, result.length - len(got))
                return result
    except TimeoutError:
        return Refused(f"no complete PROXY header within {timeout:g} s ({len(got)} bytes "
                       "came)")
    except OSError as exc:
        return Refused(f"the connection failed: {exc.strerror or exc}")


def _consume(sock: socket.socket, count: int) -> None:
    """Read ``count`` bytes a peek saw (they are in the socket's buffer already)."""
    while count > 0:
        chunk = sock.recv(count)
        if not chunk:
            raise ConnectionError("the peeked bytes were gone")
        count -= len(chunk)


def _wake(ready: asyncio.Future[None]) -> None:
    if not ready.done():
        ready.set_result(None)


async def _readable(sock: socket.socket) -> None:
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()
    loop.add_reader(sock.fileno(), _wake, ready)
    try:
        await ready
    finally:
        with contextlib.suppress(ValueError, OSError):
            loop.remove_reader(sock.fileno())


def refused(listener: str, peer: tuple[str, int], why: Refused) -> None:
    """Log a trusted peer's connection closed for its header (quietly for one that closed
    without a byte: a load balancer's plain TCP health check)."""
    level = log.info if why.reason == "closed before a PROXY header" else log.warning
    level("proxy_header_refused", listener=listener, proxy=f"{peer[0]}:{peer[1]}",
          reason=why.reason)
