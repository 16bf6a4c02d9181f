"""The server process's heap: settled once started, and what traffic freed handed back to
the operating system.

CPython frees a connection's buffers when it closes, but glibc's allocator keeps the pages
of the freed memory (its heap only shrinks from the top), and a connection that comes later
and touches other free pages makes them resident too. Under waves of connections (the
abuse rounds of ``bench/soak.py``: 200 TLS connections at a time) the resident size went on
growing, 15-18% over ten rounds, though what was in use did not: ``malloc_trim`` returned
all of it. So a task samples the resident size and the allocator's in-use total every few
seconds and trims the heap (on a worker thread: a trim walks the whole heap, 2 ms when there
is nothing to return and ~30 ms when hundreds of MiB are) when either moved since the last
trim: the resident size grew, or the memory in use fell (a burst that ended).
"""

from __future__ import annotations

import asyncio
import ctypes
import gc
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog

log = structlog.get_logger()

EVERY = 1.0  # seconds between samples
GREW = 1 << 20  # resident bytes above the last trim's that call for another one
FREED = 4 << 20  # bytes in use below the last trim's that call for another one
PAGE = os.sysconf("SC_PAGE_SIZE")


def settle() -> None:
    """Once started: what start-up made lives as long as the server, so it is moved out of
    the garbage collector's way (``gc.freeze``) and a full collection scans only what traffic
    made; and the youngest generation is collected every 7,000 net allocations of
    containers rather than 700, so that a busy node's requests in flight are not promoted to
    the old generation dozens of times a second. Measured at 64 connections through a
    tunnel: full collections of ~80 ms every two or three seconds before, the p99 from
    55-75 ms to 9-14 ms after (``bench/edge_bench.py``; freezing alone: 16-27 ms)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(7000, 10, 10)


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


def resident() -> int:
    """This process's resident set, in bytes."""
    with open("/proc/self/statm", "rb") as f:
        return int(f.read().split()[1]) * PAGE


@dataclass
class Allocator:
    """glibc's ``malloc_trim`` and ``mallinfo2`` (2.33+), where the process has them."""

    trim: Callable[[int], int]
    info: Callable[[], _MallInfo2] | None

    @classmethod
    def find(cls) -> Allocator | None:
        libc = ctypes.CDLL(None)
        trim = getattr(libc, "malloc_trim", None)
        if trim is None or not os.path.exists("/proc/self/statm"):
            return None  # not glibc on Linux (musl, macOS): nothing to trim this way
        trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
        info = getattr(libc, "mallinfo2", None)
        if info is not None:
            info.argtypes, info.restype = [], _MallInfo2
        return cls(trim, info)

    def in_use(self) -> int:
        """Bytes the allocator has handed out (0 where glibc cannot say)."""
        return int(self.info().uordblks) if self.info is not None else 0


@dataclass
class Trimmer:
    """Trims the heap when the resident size grew or the memory in use fell since the last
    trim began."""

    allocator: Allocator
    # the resident size after the last trim, and the memory in use when it began (at first:
    # both when the trimmer was made)
    floor: int = field(init=False)
    used: int = field(init=False)

    def __post_init__(self) -> None:
        self.floor, self.used = resident(), self.allocator.in_use()

    async def run(self, every: float = EVERY) -> None:
        """Until cancelled. A trim that fails (no worker thread could start, the process
        out of descriptors for ``/proc``) is logged and tried again at the next sample: the
        task must not end, or the heap would never be handed back again."""
        failing = False
        while True:
            await asyncio.sleep(every)
            try:
                now, in_use = resident(), self.allocator.in_use()
                if now < self.floor + GREW and in_use > self.used - FREED:
                    self.floor = min(self.floor, now)
                    continue
                t0 = time.perf_counter()
                await asyncio.to_thread(self.allocator.trim, 0)
                # what was in use before it: memory the loop frees while the trim runs (on
                # its thread) is past where it looked, and a fall from there trims again
                self.floor, self.used = resident(), in_use
            except (OSError, RuntimeError) as exc:
                if not failing:  # (a line when it begins to fail, not one a second)
                    log.warning("heap_trim_failed", error=f"{type(exc).__name__}: {exc}")
                failing = True
                continue
            if failing:
                log.info("heap_trim_recovered")
            failing = False
            log.debug("heap_trimmed", returned_mib=round((now - self.floor) / 2**20, 1),
                      resident_mib=round(self.floor / 2**20, 1),
                      ms=round((time.perf_counter() - t0) * 1000, 1))


def trimmer() -> Trimmer | None:
    """A trimmer for this process, or None where the allocator has no trim."""
    allocator = Allocator.find()
    return Trimmer(allocator) if allocator is not None else None
