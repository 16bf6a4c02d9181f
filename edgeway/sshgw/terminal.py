"""What the SSH user sees: the session channel (``TerminalSession``, asyncssh's server session
of the one ``session`` channel a client opens) and the lines written to it (``Terminal``): a
line per tunnel, errors on stderr, a line per request unless ``--quiet``; nothing under
``ssh -N``, which opens no session. Ctrl-C or Ctrl-D typed on a terminal ends the session;
an end of input does not (``ssh ... http < /dev/null`` keeps running).

Request lines are dropped, and counted, while the client reads too slowly (more than
``MAX_BUFFERED`` bytes unsent): a busy tunnel never makes the gateway buffer without bound.
Text from the public side (methods, paths) is written with unprintable characters replaced,
so it cannot drive the user's terminal.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping
from http import HTTPStatus

import asyncssh

MAX_BUFFERED = 256 * 1024
MAX_TARGET = 200
QUIT_KEYS = (b"\x03", b"\x04")  # Ctrl-C, Ctrl-D


def printable(raw: bytes, limit: int = MAX_TARGET) -> str:
    text = raw.decode("utf-8", "replace")
    text = "".join(c if c.isprintable() else "?" for c in text)
    return text if len(text) <= limit else text[:limit - 3] + "..."


class Terminal:
    def __init__(self) -> None:
        self.chan: asyncssh.SSHServerChannel[bytes] | None = None
        self.newline = "\n"
        self.quiet = False
        self.dropped = 0

    def attach(self, chan: asyncssh.SSHServerChannel[bytes], pty: bool) -> None:
        self.chan, self.newline = chan, "\r\n" if pty else "\n"

    def say(self, text: str, error: bool = False) -> None:
        chan = self.chan
        if chan is None or chan.is_closing():
            return
        data = text.replace("\n", self.newline).encode() + self.newline.encode()
        with contextlib.suppress(asyncssh.Error, OSError):
            if error:
                chan.write_stderr(data)
            else:
                chan.write(data)

    def _note(self, text: str) -> None:
        """A request line, unless --quiet or the client is behind."""
        chan = self.chan
        if self.quiet or chan is None or chan.is_closing():
            return
        if chan.get_write_buffer_size() > MAX_BUFFERED:
            self.dropped += 1
            return
        if self.dropped:
            text = f"{text}  ({self.dropped} lines left out: the terminal was behind)"
            self.dropped = 0
        self.say(f"{time.strftime('%H:%M:%S')} {text}")

    def request(self, method: bytes, target: bytes, status: int) -> None:
        """An HTTP request answered through one of the session's tunnels."""
        try:
            reason = HTTPStatus(status).phrase
        except ValueError:
            reason = ""
        self._note(f"{printable(method, 16):<7} {printable(target)}  {status} {reason}")

    def connection(self, url: str, client: str) -> None:
        """A TCP or TLS connection through one of the session's tunnels."""
        self._note(f"{url}  connection from {client}")

    def exit(self, status: int) -> None:
        chan = self.chan
        if chan is not None and not chan.is_closing():
            with contextlib.suppress(asyncssh.Error, OSError):
                chan.exit(status)


class TerminalSession(asyncssh.SSHServerSession[bytes]):
    """The client's session channel: its command (None: a shell, or nothing given) goes to
    ``started`` once the client asked for it; ``quit`` when the user ends it."""

    def __init__(self, started: Callable[[str | None, asyncssh.SSHServerChannel[bytes],
                                          bool], None],
                 quit_: Callable[[str], None]) -> None:
        self._started, self._quit = started, quit_
        self.chan: asyncssh.SSHServerChannel[bytes] | None = None
        self.command: str | None = None
        self.pty = False

    def connection_made(self, chan: asyncssh.SSHServerChannel[bytes]) -> None:
        self.chan = chan

    def pty_requested(self, term_type: str, term_size: tuple[int, int, int, int],
                      term_modes: Mapping[int, int]) -> bool:
        self.pty = True
        return True

    def shell_requested(self) -> bool:
        return True

    def exec_requested(self, command: str) -> bool:
        self.command = command
        return True

    def subsystem_requested(self, subsystem: str) -> bool:
        return False

    def session_started(self) -> None:
        assert self.chan is not None
        self._started(self.command, self.chan, self.pty)

    def data_received(self, data: bytes, datatype: asyncssh.DataType) -> None:
        if any(key in data for key in QUIT_KEYS):
            self._quit("the user ended the session")

    def eof_received(self) -> bool:
        return True  # (the input ended: the tunnels stay)

    def connection_lost(self, exc: Exception | None) -> None:
        self._quit("the session channel closed")
