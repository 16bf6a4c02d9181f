"""Traffic figures of one tunnel, in the shape of the ngrok agent API's ``metrics``: for
connections ``count``, ``gauge`` (open now), ``rate1``/``rate5``/``rate15`` (per second,
exponentially weighted over 1, 5 and 15 minutes, ticked every second) and ``p50``..``p99``
of their durations in nanoseconds; for HTTP tunnels the same for requests (no gauge). A TCP
or TLS tunnel has no ``http`` member.

Durations are kept for the last ``SAMPLES`` connections or requests: percentiles describe
recent traffic. Time comes from a monotonic clock given to each meter (tests pass their own).
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable
from typing import Any

TICK = 1.0  # seconds between rate updates
SAMPLES = 1028
_WINDOWS = {"rate1": 60.0, "rate5": 300.0, "rate15": 900.0}


class Meter:
    """Event count and its moving rates per second (the UNIX load average's weighting)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.count = 0
        self.rates = dict.fromkeys(_WINDOWS, 0.0)
        self._fresh = 0  # events since the last tick
        self._ticked = clock()
        self._started = False

    def mark(self, n: int = 1) -> None:
        self._catch_up()
        self.count += n
        self._fresh += n

    def _catch_up(self) -> None:
        ticks = int((self.clock() - self._ticked) / TICK)
        if ticks <= 0:
            return
        self._ticked += ticks * TICK
        instant, self._fresh = self._fresh / TICK, 0
        for name, window in _WINDOWS.items():
            alpha = 1 - math.exp(-TICK / window)
            rate = instant if not self._started else self.rates[name] + alpha * (
                instant - self.rates[name])
            self.rates[name] = rate * (1 - alpha) ** (ticks - 1)  # the idle ticks after
        self._started = True

    def json(self) -> dict[str, float]:
        self._catch_up()
        return {name: round(rate, 6) for name, rate in self.rates.items()}


class Timer:
    """A meter and the durations (nanoseconds) of the recent events."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.meter = Meter(clock)
        self.samples: deque[int] = deque(maxlen=SAMPLES)

    def record(self, duration_ns: int) -> None:
        self.samples.append(duration_ns)

    def percentiles(self) -> dict[str, float]:
        ordered = sorted(self.samples)
        out = {}
        for name, share in (("p50", 0.5), ("p90", 0.9), ("p95", 0.95), ("p99", 0.99)):
            out[name] = float(_percentile(ordered, share)) if ordered else 0.0
        return out

    def json(self) -> dict[str, Any]:
        return {"count": self.meter.count, **self.meter.json(), **self.percentiles()}


def _percentile(ordered: list[int], share: float) -> float:
    """Linear interpolation between the closest ranks (as go-metrics does)."""
    pos = share * (len(ordered) + 1)
    if pos < 1:
        return ordered[0]
    if pos >= len(ordered):
        return ordered[-1]
    low = ordered[int(pos) - 1]
    return low + (pos - int(pos)) * (ordered[int(pos)] - low)


class TunnelMetrics:
    def __init__(self, http: bool, clock: Callable[[], float] = time.monotonic) -> None:
        self.conns = Timer(clock)
        self.http = Timer(clock) if http else None
        self.gauge = 0  # connections open now

    def opened(self) -> None:
        self.conns.meter.mark()
        self.gauge += 1

    def closed(self, duration_ns: int) -> None:
        self.gauge -= 1
        self.conns.record(duration_ns)

    def request(self, duration_ns: int) -> None:
        if self.http is not None:
            self.http.meter.mark()
            self.http.record(duration_ns)

    def json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"conns": {**self.conns.json(), "gauge": self.gauge}}
        if self.http is not None:
            out["http"] = self.http.json()
        return out
