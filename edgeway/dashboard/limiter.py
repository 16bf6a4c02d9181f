"""Sign-in attempts per client address (an IPv4 address, or an IPv6 /64: ``caps``): at most
``per_minute`` in any minute; more are refused until the oldest of them is a minute old.
Kept in this node's memory (a client spreading its attempts over several nodes gets each
node's allowance), bounded: past ``MAX_CLIENTS`` addresses the oldest are forgotten."""

from __future__ import annotations

import time
from collections import OrderedDict, deque

from edgeway.caps import address_key

WINDOW = 60.0
MAX_CLIENTS = 10_000


class Limiter:
    def __init__(self, per_minute: int) -> None:
        self.per_minute = per_minute
        self._seen: OrderedDict[str, deque[float]] = OrderedDict()

    def attempt(self, client: str, now: float | None = None) -> float:
        """Count an attempt of ``client``: 0 when it may go on, else the seconds it must
        wait (the attempt is then not counted)."""
        now = time.monotonic() if now is None else now
        key = address_key(client)
        times = self._seen.pop(key, None) or deque()
        while times and times[0] <= now - WINDOW:
            times.popleft()
        self._seen[key] = times  # (now the newest)
        if len(self._seen) > MAX_CLIENTS:
            self._seen.popitem(last=False)
        if len(times) >= self.per_minute:
            return times[0] + WINDOW - now
        times.append(now)
        return 0.0
