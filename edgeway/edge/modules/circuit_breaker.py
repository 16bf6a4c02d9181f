"""The circuit_breaker module: when too many of a route's recent responses are server
errors, stop sending it traffic for a while (503 at the edge) so the upstream can recover.
The configuration is compiled with the snapshot; the counts live with the HTTP edge and are
kept across snapshots while the configuration stays the same."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Config:
    tripped_duration: float = 10.0
    rolling_window: float = 10.0
    num_buckets: int = 10
    volume_threshold: int = 20
    error_threshold: float = 0.5


def compile(module: dict[str, Any]) -> Config:
    return Config(float(module.get("tripped_duration", 10)),
                  float(module.get("rolling_window", 10)) or 10.0,
                  max(1, int(module.get("num_buckets", 10))),
                  int(module.get("volume_threshold", 20)),
                  float(module.get("error_threshold_percentage", 0.5)))


@dataclass
class Breaker:
    config: Config
    buckets: dict[int, list[int]] = field(default_factory=dict)  # slot -> [requests, errors]
    open_until: float = 0.0

    def allows(self, now: float | None = None) -> bool:
        return (time.monotonic() if now is None else now) >= self.open_until

    def record(self, error: bool, now: float | None = None) -> None:
        c = self.config
        now = time.monotonic() if now is None else now
        slot = int(now / (c.rolling_window / c.num_buckets))
        for old in [s for s in self.buckets if s <= slot - c.num_buckets]:
            del self.buckets[old]
        counts = self.buckets.setdefault(slot, [0, 0])
        counts[0] += 1
        counts[1] += error
        total = sum(b[0] for b in self.buckets.values())
        errors = sum(b[1] for b in self.buckets.values())
        if total >= max(1, c.volume_threshold) and errors / total >= c.error_threshold:
            self.open_until = now + c.tripped_duration
            self.buckets.clear()
