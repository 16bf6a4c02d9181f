"""The traffic policy's rate-limit windows: request times per (policy, limit name, bucket
key), kept by the HTTP edge across requests and snapshots, bounded in memory."""

from __future__ import annotations

from collections import deque


class RateLimits:
    """Sliding windows of request times per (policy, limit name, bucket key)."""

    def __init__(self, max_buckets: int = 100_000) -> None:
        self._hits: dict[tuple[str, str, str], deque[float]] = {}
        self.max_buckets = max_buckets

    def allow(self, key: tuple[str, str, str], capacity: int, window: float, now: float
              ) -> float:
        """0 when allowed (and counted); else the seconds until a slot frees."""
        hits = self._hits.get(key)
        if hits is None:
            if len(self._hits) >= self.max_buckets:
                self._hits.clear()  # bounded memory: forget every window at once
            hits = self._hits[key] = deque()
        while hits and hits[0] <= now - window:
            hits.popleft()
        if len(hits) >= capacity:
            return hits[0] + window - now
        hits.append(now)
        return 0.0
