"""The circuit breaker module: when too many of a route's recent responses are server errors,
stop sending it traffic for a while (503 at the edge) so the upstream can recover."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Breaker:
    tripped_duration: float = 10.0
    rolling_window: float = 10.0
    num_buckets: int = 10
    volume_threshold: int = 20
    error_threshold: float = 0.5
    buckets: dict[int, list[int]] = field(default_factory=dict)  # slot -> [requests, errors]
    open_until: float = 0.0

    @classmethod
    def from_module(cls, module: dict[str, Any]) -> Breaker:
        return cls(float(module.get("tripped_duration", 10)),
                   float(module.get("rolling_window", 10)),
                   max(1, int(module.get("num_buckets", 10))),
                   int(module.get("volume_threshold", 20)),
                   float(module.get("error_threshold_percentage", 0.5)))

    def _slot(self, now: float) -> int:
        return int(now / (self.rolling_window / self.num_buckets))

    def allows(self, now: float | None = None) -> bool:
        return (time.monotonic() if now is None else now) >= self.open_until

    def record(self, error: bool, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        slot = self._slot(now)
        for old in [s for s in self.buckets if s <= slot - self.num_buckets]:
            del self.buckets[old]
        counts = self.buckets.setdefault(slot, [0, 0])
        counts[0] += 1
        counts[1] += error
        total = sum(c[0] for c in self.buckets.values())
        errors = sum(c[1] for c in self.buckets.values())
        if total >= max(1, self.volume_threshold) and errors / total >= self.error_threshold:
            self.open_until = now + self.tripped_duration
            self.buckets.clear()
