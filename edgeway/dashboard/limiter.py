"""Failed sign-ins per client address (an IPv4 address, or an IPv6 /64: ``caps``): after
``per_minute`` failures within a minute, every attempt of that address is refused until the
oldest of them is a minute old (a right key too: guessing must not go on meanwhile). Kept in
this node's memory (a client spreading its guesses over several nodes gets each node's
allowance), bounded: past ``MAX_CLIENTS`` addresses the oldest are forgotten."""

from __future__ import annotations

import time
from collections import OrderedDict, deque

from edgeway.caps import address_key

WINDOW = 60.0
MAX_CLIENTS = 10_000


class Limiter:
    def __init__(self, per_minute: int) -> None:
        self.per_minute = per_minute
        self._failed: OrderedDict[str, deque[float]] = OrderedDict()

    def wait(self, client: str, now: float | None = None) -> float:
        """0 when ``client`` may try to sign in, else the seconds it must wait."""
        now = time.monotonic() if now is None else now
        times = self._failed.get(address_key(client))
        if times is None:
            return 0.0
        while times and times[0] <= now - WINDOW:
            times.popleft()
        if len(times) < self.per_minute:
            return 0.0
        return times[0] + WINDOW - now

    def failed(self, client: str, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        key = address_key(client)
        times = self._failed.pop(key, None) or deque()
        times.append(now)
        self._failed[key] = times  # (now the newest)
        if len(self._failed) > MAX_CLIENTS:
            self._failed.popitem(last=False)
