"""Waiting for a condition in a test's event loop: polled with a deadline, for conditions no
event announces (a row leaving a list, a count inside a library)."""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable

EVERY = 0.01  # seconds between two looks


async def until(check: Callable[[], bool | Awaitable[bool]], what: str | Callable[[], str] = "",
                within: float = 10.0) -> None:
    """Until ``check()`` (a bool, or an awaitable of one) holds; past ``within`` seconds the
    test fails, saying ``what`` (a callable: what it says then)."""
    deadline = time.monotonic() + within
    while True:
        held = check()
        if await held if inspect.isawaitable(held) else held:
            return
        assert time.monotonic() < deadline, \
            f"condition not met in {within} s: {what() if callable(what) else what}"
        await asyncio.sleep(EVERY)
