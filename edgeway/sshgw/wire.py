"""What the gateway changes in how asyncssh puts a connection's packets on the wire, measured
on its HTTP path (py-spy and perf under 64 connections): asyncssh writes every packet to the
socket on its own, so each request and each answer cost the gateway a system call and, on a
loaded core, a wake-up of the client; and it sends an empty ``SSH_MSG_IGNORE`` before every
packet after the key exchange, each one built, padded, encrypted and authenticated.

- ``coalesce``: the packets of one event-loop pass go out in one write (``writelines``: a
  ``writev``), scheduled by the first; closing or aborting sends what is held first, so a
  disconnect message still precedes the end.
- ``no_cbc_ignores``: the empty ``SSH_MSG_IGNORE`` is the countermeasure RFC 4251 §9.3.1
  gives for CBC mode (an attacker who can predict the next IV); the gateway offers no CBC
  cipher (``server.ENCRYPTION``: counter and GCM modes only, as OpenSSH, which sends no such
  packets), so it is not sent. Other ignore packets go as asyncssh sends them.

- ``quiet``: asyncssh formats a line for every packet a connection or channel sends or
  receives (the packet type's name, its length) and only then asks its logger whether packet
  logging (its debug level 3) is on; unless it is, a handler's two packet-logging methods do
  nothing.

They reach into asyncssh's connection (its ``_transport``, its ``send_packet``) and logger
(its debug level), which the pinned version (``asyncssh<3``) has; tests/sshgw/test_wire.py
fails if it stops having them.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import asyncssh

MSG_IGNORE = 2  # RFC 4253 §11.2
_EMPTY = b"\x00\x00\x00\x00"  # an empty SSH string: what asyncssh's ignore packets carry
PACKET_LOGGING = 3  # asyncssh's debug level that logs every packet


class Coalesced:
    """A transport whose writes within one event-loop pass reach the socket as one."""

    def __init__(self, transport: asyncio.Transport) -> None:
        self.transport = transport
        self._held: list[bytes] = []
        self._loop = asyncio.get_running_loop()

    def write(self, data: bytes) -> None:
        if not self._held:
            self._loop.call_soon(self.flush)
        self._held.append(data)

    def flush(self) -> None:
        held, self._held = self._held, []
        if held and not self.transport.is_closing():
            with contextlib.suppress(ConnectionError):  # (as asyncssh's own write: its end
                self.transport.writelines(held)       # comes through connection_lost)

    def close(self) -> None:
        self.flush()
        self.transport.close()

    def abort(self) -> None:
        self.flush()
        self.transport.abort()

    def __getattr__(self, name: str) -> Any:  # the rest is the transport's own
        return getattr(self.transport, name)


def coalesce(conn: asyncssh.SSHServerConnection) -> None:
    """Hold ``conn``'s writes to the end of the loop pass (from its ``connection_made``)."""
    transport = getattr(conn, "_transport", None)
    if transport is not None and not isinstance(transport, Coalesced):
        conn._transport = Coalesced(transport)  # type: ignore[assignment]


def no_cbc_ignores(conn: asyncssh.SSHServerConnection) -> None:
    """Drop the empty ignore packet asyncssh sends before each packet (see above)."""
    send = conn.send_packet

    def send_packet(pkttype: int, *args: bytes, **kwargs: Any) -> None:
        if pkttype == MSG_IGNORE and args == (_EMPTY,):
            return
        send(pkttype, *args, **kwargs)

    conn.send_packet = send_packet  # type: ignore[method-assign]


def _unlogged(pkttype: int, pktid: int | None, packet: object, note: str = "") -> None:
    return None


def quiet(handler: asyncssh.SSHServerConnection | asyncssh.SSHTCPChannel[bytes]) -> None:
    """Skip the packet log lines of ``handler`` (a connection or a channel) when asyncssh's
    debug level does not write them (below 3, its default is 1; it is read here, once)."""
    if handler.logger._debug_level < PACKET_LOGGING:
        handler.log_sent_packet = _unlogged  # type: ignore[method-assign]
        handler.log_received_packet = _unlogged  # type: ignore[method-assign]
