"""Running a coroutine as a command's main: on uvloop when it is installed (it comes with
uvicorn[standard]), else on asyncio's own loop."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def run(main: Coroutine[Any, Any, T]) -> T:
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(main)
