"""The server's heap trimmer (``edgeway.heap``) on this process's real glibc allocator: the
pages a burst freed are handed back within a few samples, also those freed while a trim runs
on its thread, and a trim that fails (here: the worker thread it runs on could not start) is
logged once and tried again, the task alive."""

from __future__ import annotations

import asyncio
import gc
import threading
from collections.abc import Callable

import pytest
import structlog.testing

from edgeway import heap
from tests.waiting import until

MIB = 1 << 20

allocator = heap.Allocator.find()
pytestmark = pytest.mark.skipif(allocator is None, reason="glibc's malloc_trim is not here")


def handed_back() -> int:
    """What the heap of this process holds free handed back (a test worker's is large, and
    the chunks would reuse its resident pages): its resident size then."""
    assert allocator is not None
    allocator.trim(0)
    return heap.resident()


def chunks() -> list[bytearray]:
    """~120 MiB in chunks of 2 kB (from malloc's heap, not mmap), touched: resident."""
    made = [bytearray(2048) for _ in range(60_000)]
    for c in made:
        c[::512] = b"x" * 4
    return made


def burst() -> list[bytearray]:
    """``chunks``, all but every 64th freed: the survivors keep the heap from shrinking at
    its top, so only a trim returns the free pages between them."""
    made = chunks()
    kept = made[::64]
    del made
    gc.collect()
    return kept


async def _trimmed(trims: heap.Allocator, then: Callable[[], bool] = lambda: True
                   ) -> tuple[int, int]:
    before = handed_back()
    task = asyncio.create_task(heap.Trimmer(trims).run(every=0.05))  # (sizes taken: now)
    kept = burst()
    high = heap.resident()
    assert high > before + 60 * MIB  # (the freed chunks are still resident)
    try:
        await until(lambda: heap.resident() < high - 60 * MIB and then(),
                    "the freed pages were not handed back", within=20)
        return high, heap.resident()
    finally:
        task.cancel()
        del kept


def test_the_pages_a_burst_freed_are_handed_back() -> None:
    assert allocator is not None
    high, low = asyncio.run(_trimmed(allocator))
    assert low < high - 60 * MIB


def test_a_failed_trim_is_logged_once_and_tried_again() -> None:
    assert allocator is not None
    failures = 3

    def trim(pad: int) -> int:
        nonlocal failures
        if failures:
            failures -= 1
            raise RuntimeError("can't start new thread")
        return allocator.trim(pad)

    with structlog.testing.capture_logs() as logs:
        asyncio.run(_trimmed(heap.Allocator(trim, allocator.info),
                             lambda: any(e["event"] == "heap_trim_recovered" for e in logs)))
    events = [e["event"] for e in logs]
    assert failures == 0
    assert events.count("heap_trim_failed") == 1
    assert "heap_trim_recovered" in events


def test_what_is_freed_while_a_trim_runs_is_trimmed_after() -> None:
    """The loop frees a burst while a trim runs on its thread (past where that trim
    looked): the fall from what was in use when it began calls for another trim."""
    assert allocator is not None
    began, go_on = threading.Event(), threading.Event()
    trims = 0

    def trim(pad: int) -> int:
        nonlocal trims
        trims += 1
        got = allocator.trim(pad)
        if trims == 1:  # (the first: the burst is freed meanwhile)
            began.set()
            go_on.wait(10)
        return got

    async def main() -> tuple[int, int]:
        handed_back()
        task = asyncio.create_task(heap.Trimmer(heap.Allocator(trim, allocator.info))
                                   .run(every=0.05))  # (its sizes taken: now)
        made = chunks()  # all in use: the first trim returns nothing of them
        await until(began.is_set, "no trim began", within=10)
        kept = made[::64]
        del made
        gc.collect()
        high = heap.resident()
        go_on.set()
        try:
            await until(lambda: heap.resident() < high - 60 * MIB,
                        "what was freed during the trim stayed resident", within=10)
            return high, heap.resident()
        finally:
            task.cancel()
            del kept

    high, low = asyncio.run(main())
    assert trims >= 2 and low < high - 60 * MIB
