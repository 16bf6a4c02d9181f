"""A command run as a person runs it: on a pseudo-terminal of its own (stdin, stdout and
stderr all on it, 160x48), its screen read as the bytes the terminal received, with the
escape sequences taken out. No extra flags, no redirection: what a traceback would print
reaches the screen the test reads. As a terminal emulator does, it reads all the time (a
thread): a program is never held up writing to a screen no one reads, whatever the test does
meanwhile."""

from __future__ import annotations

import fcntl
import os
import re
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
from pathlib import Path

_ESCAPES = re.compile(rb"\x1b(\[[0-9;?]*[ -/]*[@-~]|\][^\x07]*\x07|[()][A-Z0-9]|[=>])")


class Pty:
    """``python -m edgeway ARGV`` (or ``program ARGV``) on a pseudo-terminal, with ``home``
    as its home."""

    def __init__(self, home: Path, *argv: str, program: tuple[str, ...] = (),
                 env: dict[str, str] | None = None) -> None:
        master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 48, 160, 0, 0))
        environ = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
        environ.update(HOME=str(home), XDG_CONFIG_HOME=str(home / ".config"),
                       XDG_STATE_HOME=str(home / ".state"), TERM="xterm-256color",
                       **(env or {}))
        self.proc = subprocess.Popen([*(program or (sys.executable, "-m", "edgeway")), *argv],
                                     stdin=slave,
                                     stdout=slave, stderr=slave, env=environ, cwd=home,
                                     start_new_session=True)
        os.close(slave)
        self.master, self.raw = master, bytearray()
        self._grew = threading.Condition()
        self._ended = False  # every holder of the terminal is gone
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    def _drain(self) -> None:
        while True:
            try:
                chunk = os.read(self.master, 65536)
            except OSError:  # EIO: every holder of the terminal is gone (or it was closed)
                chunk = b""
            with self._grew:
                self.raw += chunk
                self._ended = not chunk
                self._grew.notify_all()
            if not chunk:
                return

    @property
    def text(self) -> str:
        """Everything the terminal received so far, without escape sequences."""
        with self._grew:
            raw = bytes(self.raw)
        return _ESCAPES.sub(b"", raw).decode("utf-8", "replace")

    def _read(self, timeout: float) -> bool:
        """Wait up to ``timeout`` for more on the screen; False at the end (the process
        closed it)."""
        with self._grew:
            if not self._ended:
                self._grew.wait(timeout)
            return not self._ended

    def wait_for(self, *words: str, timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        while not all(w in self.text for w in words):
            if time.monotonic() > deadline or not self._read(0.1):
                raise AssertionError(f"not on the screen: {words}\n{self.text[-3000:]}")
        return self.text

    def type(self, keys: bytes) -> None:
        """Keys typed on the terminal (``b"\\x03"``: Ctrl+C as the terminal sends it)."""
        os.write(self.master, keys)

    def interrupt(self, timeout: float = 20) -> int:
        """Ctrl+C (SIGINT to the process), then the whole screen until it exits: its code."""
        self.proc.send_signal(signal.SIGINT)
        return self.finish(timeout)

    def finish(self, timeout: float = 20) -> int:
        deadline = time.monotonic() + timeout
        while self._read(0.1):
            if self.proc.poll() is not None:  # (exited: the rest of its screen is read
                self._reader.join(1)  # once the terminal is closed, or within a second)
                break
            if time.monotonic() > deadline:
                self.proc.kill()
                raise AssertionError(f"still running after {timeout} s\n{self.text[-3000:]}")
        return self.proc.wait(timeout)

    @classmethod
    def run(cls, home: Path, *argv: str, env: dict[str, str] | None = None
            ) -> tuple[int, str]:
        """A command that ends by itself, on a terminal: its exit code and its screen, which
        must show no traceback."""
        term = cls(home, *argv, env=env)
        try:
            code = term.finish()
        finally:
            term.close()
        assert "Traceback" not in term.text, term.text
        return code, term.text

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(5)  # (it ends when the last holder of the terminal is gone)
        os.close(self.master)
