"""Connection caps, one piece for every listener (management API, public HTTP and HTTPS/TLS,
TCP edges and TCP tunnels, the tunnel listener, the SSH gateway, DNS over TCP).

Two caps, checked as a connection is accepted:

- per client address, on each listener: at most ``per_address`` connections at once from one
  IPv4 address or one IPv6 /64 (0: no cap). A connection from a trusted load balancer
  (``edgeway.proxied``) is admitted at first without an address, and counted under its
  client's (the PROXY header's source) once the header is read: the load balancer is not one
  client, and its clients each get their own cap;
- per process, derived from the descriptor limit (``RLIMIT_NOFILE``): public listeners stop at
  the limit minus twice the reserve, the tunnel listener and the management API at the limit
  minus the reserve. Agents and the operator still get in when public clients have taken all
  theirs, and the last reserve stays for the database, upstream connections and files.

A connection over a cap is closed at once (HTTP listeners answer 429 or 503 first, with
``Connection: close``). Each listener logs ``connection_cap_reached`` with the figures at most
once per ``LOG_EVERY`` seconds and per cap, with the number refused since its last line.
"""

from __future__ import annotations

import contextlib
import ipaddress
import resource
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

import structlog

log = structlog.get_logger()
LOG_EVERY = 10.0  # seconds between two lines of one listener's cap
PER_ADDRESS = 4096  # the default cap on one address's connections to one listener
API_HEAD_TIMEOUT = 30.0  # the default deadline of a request head on the management API
Refusal = Callable[[str], bytes]  # the bytes a refused connection gets, by cap ("" if none)


@dataclass(frozen=True)
class CapsConfig:
    per_address: int = PER_ADDRESS  # 0: no cap
    fd_reserve: int | None = None  # None: reserve_for(the descriptor limit)


def descriptor_limit() -> int:
    """The process's soft limit on open descriptors."""
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    return 1 << 20 if soft == resource.RLIM_INFINITY else soft


def reserve_for(limit: int) -> int:
    """The default reserve: a tenth of the limit, at least 128, at most a quarter of it."""
    return min(max(128, limit // 10), limit // 4)


def address_key(host: str) -> str:
    """What one client is counted as: its IPv4 address, or its IPv6 /64."""
    try:
        ip = ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return host
    if isinstance(ip, ipaddress.IPv6Address):
        if ip.ipv4_mapped is not None:
            return str(ip.ipv4_mapped)
        return str(ipaddress.IPv6Network((ip, 64), strict=False))
    return str(ip)


class Ticket:
    """One admitted connection; ``release`` (idempotent) as it ends."""

    __slots__ = ("door", "key")

    def __init__(self, door: Door, key: str | None) -> None:
        self.door: Door | None = door
        self.key = key  # None: not counted under an address (yet)

    def claim(self, peer: tuple[str, int]) -> bool:
        """Count a connection admitted without an address under its client's, ``peer``
        (a trusted load balancer's, once its header named the client); False: that address
        is at its cap (the ticket is still to be released)."""
        assert self.key is None
        if self.door is None:
            return False
        key = address_key(peer[0])
        if not self.door.count(key):
            return False
        self.key = key
        return True

    def release(self) -> None:
        if self.door is not None:
            self.door.release(self.key)
            self.door = None


class Caps:
    """The process's caps: the connections open through every door."""

    def __init__(self, config: CapsConfig = CapsConfig(), limit: int | None = None) -> None:
        self.limit = limit or descriptor_limit()
        self.reserve = reserve_for(self.limit) if config.fd_reserve is None \
            else config.fd_reserve
        self.per_address = config.per_address
        self.open = 0  # connections open through all doors

    def ceiling(self, own: bool) -> int:
        """How many connections the process may hold when one more comes to a public
        listener, or to the tunnel listener or the API (``own``)."""
        return max(self.limit - self.reserve * (1 if own else 2), 1)

    def door(self, listener: str, own: bool = False, refusal: Refusal | None = None) -> Door:
        return Door(self, listener, own, refusal)


class Door:
    """One listener's admission: counts its connections by client address."""

    def __init__(self, caps: Caps, listener: str, own: bool, refusal: Refusal | None) -> None:
        self.caps, self.listener, self.own, self.refusal = caps, listener, own, refusal
        self.by_address: dict[str, int] = {}
        self.open = 0
        self.refused_by = ""  # the cap that refused the last connection refused
        self._refused: dict[str, int] = {}  # by cap, since its last log line
        self._logged: dict[str, float] = {}

    def admit(self, peer: tuple[str, int] | tuple[str, int, int, int] | None,
              by_address: bool = True) -> Ticket | None:
        """A ticket for a connection from ``peer``, or None: refused (and counted).
        ``by_address`` False: only the process's cap is checked (a trusted load balancer's
        connection, whose client ``Ticket.claim`` counts)."""
        key = address_key(str(peer[0])) if peer else ""
        caps = self.caps
        if caps.open >= caps.ceiling(self.own):
            self._refuse("total", key, caps.ceiling(self.own))
            return None
        if by_address and not self.count(key):
            return None
        self.open += 1
        caps.open += 1
        return Ticket(self, key if by_address else None)

    def count(self, key: str) -> bool:
        """Count one more connection of the client ``key``; False: refused, at its cap."""
        count = self.by_address.get(key, 0)
        if self.caps.per_address and count >= self.caps.per_address:
            self._refuse("per_address", key, self.caps.per_address)
            return False
        self.by_address[key] = count + 1
        return True

    def release(self, key: str | None) -> None:
        if key is not None:
            count = self.by_address.get(key, 0) - 1
            if count > 0:
                self.by_address[key] = count
            else:
                self.by_address.pop(key, None)
        self.open -= 1
        self.caps.open -= 1

    def answer(self, cap: str) -> bytes:
        """What a connection refused by ``cap`` is sent before it is closed."""
        return self.refusal(cap) if self.refusal is not None else b""

    def refuse(self, sock: socket.socket) -> None:
        """Close a socket ``admit`` refused at once, after this listener's answer if it has
        one (sent without waiting: whatever does not fit the socket's buffer is dropped)."""
        with contextlib.suppress(OSError):
            sock.setblocking(False)
            if data := self.answer(self.refused_by):
                sock.send(data)
        sock.close()

    def _refuse(self, cap: str, key: str, limit: int) -> None:
        self._refused[cap] = self._refused.get(cap, 0) + 1
        self.refused_by = cap
        now = time.monotonic()
        if now - self._logged.get(cap, -LOG_EVERY) < LOG_EVERY:
            return
        self._logged[cap] = now
        caps = self.caps
        log.warning("connection_cap_reached", listener=self.listener, cap=cap, limit=limit,
                    address=key if cap == "per_address" else None,
                    refused=self._refused.pop(cap), listener_open=self.open,
                    process_open=caps.open, descriptor_limit=caps.limit,
                    fd_reserve=caps.reserve)


_PROCESS: list[Caps] = []  # the caps ``configure`` set up (the defaults until then)


def configure(config: CapsConfig, limit: int | None = None) -> Caps:
    """Set the process's caps (``edgeway serve``, before its listeners open)."""
    _PROCESS[:] = [Caps(config, limit)]
    return _PROCESS[0]


def process() -> Caps:
    """The process's caps, whose doors every listener takes."""
    if not _PROCESS:
        _PROCESS.append(Caps())
    return _PROCESS[0]


MESSAGES = {"per_address": (429, "Too Many Requests",
                            "Too many connections from your address at once."),
            "total": (503, "Service Unavailable",
                      "The server is at its connection limit. Retry later.")}


def http_refusal(body: Callable[[int, str], tuple[bytes, bytes]]) -> Refusal:
    """An HTTP listener's refusal: 429 for the per-address cap, 503 (with ``Retry-After``)
    for the process's, then the connection closes; ``body(status, message)`` gives the
    content type and the body."""
    def answer(cap: str) -> bytes:
        status, reason, message = MESSAGES.get(cap, MESSAGES["total"])
        kind, data = body(status, message)
        retry = b"Retry-After: 5\r\n" if status == 503 else b""
        return (f"HTTP/1.1 {status} {reason}\r\nContent-Type: ".encode() + kind +
                f"\r\nContent-Length: {len(data)}\r\n".encode() + retry +
                b"Connection: close\r\n\r\n" + data)
    return answer


def text_body(_status: int, message: str) -> tuple[bytes, bytes]:
    return b"text/plain; charset=utf-8", message.encode() + b"\n"
