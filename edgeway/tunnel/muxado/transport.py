"""What the muxado shell needs of the transport under it: taking a stream pair's transport
over (``adopt``), regrouping output into whole TLS records (``records``) and re-arming TCP
quick-acks on the descriptor itself (``quickack``)."""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import socket
from typing import cast

TLS_RECORD = 16384  # the most plaintext one TLS record carries
QUICKACK: int | None = getattr(socket, "TCP_QUICKACK", None)
_ONE = ctypes.c_int(1)
try:  # setsockopt on the descriptor itself: uvloop builds a socket object per call otherwise
    _setsockopt = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True).setsockopt
except (OSError, AttributeError):
    QUICKACK = None


def tcp_fd(writer: asyncio.StreamWriter) -> int:
    """The descriptor of a TCP transport (-1: none, or not TCP)."""
    sock = writer.get_extra_info("socket")
    if QUICKACK is None or sock is None or sock.type != socket.SOCK_STREAM \
            or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return -1
    return int(sock.fileno())


def abort(transport: asyncio.WriteTransport) -> None:
    """``transport.abort()``, also on a TLS transport of the standard event loop whose
    connection is already lost: CPython 3.11.2 (Debian 12's) then raises ``AttributeError``
    (its TLS transport has dropped its protocol; later 3.11 releases check for that)."""
    with contextlib.suppress(AttributeError):
        transport.abort()


def quickack(fd: int) -> None:
    """Acknowledge the peer's segments at once (TCP_QUICKACK on descriptor ``fd``)."""
    _setsockopt(fd, socket.IPPROTO_TCP, QUICKACK, ctypes.byref(_ONE), 4)


_HANDLERS: set[asyncio.Task[object]] = set()  # connection handlers kept alive (``adopt``)


def held(reader: asyncio.StreamReader) -> tuple[bytes, bool]:
    """The bytes a stream reader holds, taken from it, and whether it had seen the end (EOF
    or an error): for a protocol that takes its transport's bytes from here on."""
    buffer = getattr(reader, "_buffer", None)
    early = bytes(buffer) if buffer else b""
    if isinstance(buffer, bytearray):
        buffer.clear()
    return early, reader.exception() is not None or bool(getattr(reader, "_eof", False))


def adopt(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
          protocol: asyncio.BaseProtocol) -> tuple[bytes, bool]:
    """Make ``protocol`` the protocol of the transport under a stream pair (from
    ``open_connection``/``start_server``), for code that takes bytes as they arrive rather than
    through the ``StreamReader``. Returns the bytes the reader already held, and whether it had
    seen the end (EOF or an error): then no more will come. The writer stays good for
    ``write``, ``write_eof`` and ``close``, not for ``drain`` or ``wait_closed``."""
    early, ended = held(reader)
    transport = cast(asyncio.Transport, writer.transport)
    previous = transport.get_protocol()
    transport.set_protocol(protocol)
    ended = ended or transport.is_closing()
    if isinstance(previous, asyncio.StreamReaderProtocol):
        # Its life with this transport is over: let it drop the writer, whose link back to
        # it would otherwise make a cycle holding the transport (and its TLS state) until
        # the cycle collector runs. It also drops the task of ``start_server``'s handler,
        # which only it held strongly: the task (ours, running) is kept here instead.
        task = asyncio.current_task()
        if task is not None and not task.done():
            _HANDLERS.add(task)
            task.add_done_callback(_HANDLERS.discard)
        previous.connection_lost(None)
    if not ended and not transport.is_reading():
        transport.resume_reading()  # the stream reader had paused it
    return early, ended


def records(parts: list[bytes | memoryview], size: int = TLS_RECORD
            ) -> list[bytes | memoryview]:
    """``parts`` regrouped for ``writelines`` so that every buffer but the last is a whole
    number of ``size``-byte records. A TLS transport encrypts each buffer it is given on its
    own, so a frame header written alone would be a record of its own, and joining everything
    copies every payload. Here parts of ``size`` bytes or more go out as views; smaller ones,
    with what it takes of the next large part to reach a record boundary, are joined: at most
    ``size`` bytes are copied per large part."""
    out: list[bytes | memoryview] = []
    small: list[bytes | memoryview] = []
    small_len = 0
    for part in parts:
        n = len(part)
        if not n:
            continue
        if n < size:
            small.append(part)
            small_len += n
            continue
        view = memoryview(part)
        if small_len:
            fill = -small_len % size
            small.append(view[:fill])
            out.append(b"".join(small))
            view = view[fill:]
        whole = len(view) - len(view) % size
        if whole:
            out.append(view[:whole])
        small, small_len = ([view[whole:]], len(view) - whole) if whole < len(view) else ([], 0)
    if small:
        out.append(small[0] if len(small) == 1 else b"".join(small))
    return out
