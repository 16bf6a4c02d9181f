"""Reloads that traffic never waits on for long: one at a time, in a task of its own.

The edge, the tunnel listener and the API keep what they read from the database (routing
snapshots, IP restrictions) and read it again after a change. A request that needs the
reload (a change of this node's API just before it) waits for it, but only until
``PATIENCE`` seconds after the reload started; then it goes on with what was loaded last, as
does every later request while that reload runs. A database that went silent thus costs
traffic at most ``PATIENCE`` once per change instead of the store's deadlines on every
request; the reload itself ends within the store's deadline.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import structlog

log = structlog.get_logger()
PATIENCE = 1.0  # seconds after a reload started that requests needing it wait for it


class Reload:
    """Runs ``load`` (True when it loaded; False when it could not, and said so). ``changed``
    marks what was loaded as stale; a reload reflects the changes made before it started."""

    def __init__(self, load: Callable[[], Awaitable[bool]], what: str) -> None:
        self._load, self._what = load, what
        self.wanted, self.loaded = 1, 0
        self._task: asyncio.Task[None] | None = None
        self._started, self._covers = 0.0, 0  # the running reload's start and ``wanted``

    @property
    def stale(self) -> bool:
        return self.loaded < self.wanted

    def changed(self) -> None:
        self.wanted += 1

    def start(self) -> asyncio.Task[None]:
        """The reload under way, or a new one."""
        if self._task is None or self._task.done():
            loop = asyncio.get_running_loop()
            self._started, self._covers = loop.time(), self.wanted
            self._task = loop.create_task(self._run(self.wanted))
        return self._task

    async def settle(self, patience: float | None = PATIENCE) -> None:
        """Until a reload that started after the changes made before this call has ended,
        or ``patience`` seconds after the reload under way started (None: no limit)."""
        asked, loop = self.wanted, asyncio.get_running_loop()
        for _ in range(2):  # a reload already under way, then (if it predates) a new one
            if self.loaded >= asked:
                return
            task = self.start()
            covers = self._covers >= asked
            left = None if patience is None else self._started + patience - loop.time()
            if left is not None and left <= 0:
                return
            await asyncio.wait((task,), timeout=left)
            if covers or not task.done():
                return

    async def _run(self, wanted: int) -> None:
        try:
            if await self._load():
                self.loaded = max(self.loaded, wanted)
        except Exception:  # a fault of ours: logged, the last data keeps serving
            log.exception("reload_failed", what=self._what)
