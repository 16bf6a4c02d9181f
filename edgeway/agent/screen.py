"""Where the console's screens go: the terminal (or pipe), written by a thread of its own, so
that the agent never waits for it. A terminal that does not read (output paused with Ctrl+S,
a pipe whose reader is busy, a test that reads the screen only now and then) would otherwise
hold the event loop in a write, and every tunnel with it.

Each ``flush`` hands one frame to the thread. While it is still writing one, the console
skips drawing (``busy``) and draws once more when the thread catches up (``caught_up``): the
screen then shows the newest state, never a backlog of old frames."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from typing import TextIO


class Screen:
    """A text file for rich (``write``, ``flush``, ``isatty``, ``fileno``, ``encoding``)
    whose writes never block."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.caught_up: Callable[[], None] = lambda: None  # called from the writing thread
        self._parts: list[str] = []
        self._frames: deque[str] = deque()
        self._writing = False
        self._closed = False
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._write, name="screen", daemon=True)
        self._thread.start()

    @property
    def encoding(self) -> str:
        return getattr(self.out, "encoding", None) or "utf-8"

    def isatty(self) -> bool:
        return self.out.isatty()

    def fileno(self) -> int:
        return self.out.fileno()

    def write(self, text: str) -> int:
        self._parts.append(text)
        return len(text)

    def flush(self) -> None:
        if not self._parts:
            return
        frame = "".join(self._parts)
        self._parts.clear()
        with self._changed:
            self._frames.append(frame)
            self._changed.notify_all()

    @property
    def busy(self) -> bool:
        """A frame is still on its way to the terminal."""
        with self._changed:
            return bool(self._frames) or self._writing

    def close(self, timeout: float) -> bool:
        """Send what is left, waiting up to ``timeout`` seconds; whether it all went."""
        self.flush()
        with self._changed:
            done = self._changed.wait_for(lambda: not self._frames and not self._writing,
                                          timeout)
            self._closed = True
            self._changed.notify_all()
        return done

    def _write(self) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(lambda: self._frames or self._closed)
                if not self._frames:
                    return
                frame = self._frames.popleft()
                self._writing = True
            try:
                self.out.write(frame)
                self.out.flush()
            except (OSError, ValueError):  # (the terminal is gone: nothing more to show)
                pass
            with self._changed:
                self._writing = False
                idle = not self._frames
                self._changed.notify_all()
            if idle:
                self.caught_up()
