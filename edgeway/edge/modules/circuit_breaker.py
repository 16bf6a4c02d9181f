"""The circuit_breaker module: when too many of a route's recent responses are server
errors, stop sending it traffic for a while (503 at the edge) so the upstream can recover.
The configuration is compiled with the snapshot; the counts (``Breaker``) are kept across
snapshots while the configuration stays the same (``Breakers``)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from edgeway.edge.h1 import Headers
from edgeway.edge.hooks import Compiling, Exchange, Hook
from edgeway.edge.pages import Fixed, page


@dataclass(frozen=True)
class Config:
    tripped_duration: float = 10.0
    rolling_window: float = 10.0
    num_buckets: int = 10
    volume_threshold: int = 20
    error_threshold: float = 0.5


def config(module: dict[str, Any]) -> Config:
    return Config(float(module.get("tripped_duration", 10)),
                  float(module.get("rolling_window", 10)) or 10.0,
                  max(1, int(module.get("num_buckets", 10))),
                  int(module.get("volume_threshold", 20)),
                  float(module.get("error_threshold_percentage", 0.5)))


@dataclass(eq=False)
class Breaker(Hook):
    name = "circuit_breaker"
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

    def check(self, ip: str, headers: Headers) -> Fixed | None:
        if self.allows():
            return None
        return page(503, "Circuit open", "Too many recent requests failed; this route is "
                    "paused for a moment.", 4011,
                    (("Retry-After", str(int(self.config.tripped_duration))),))

    def outcome(self, x: Exchange, failed: bool) -> None:
        self.record(failed)


class Breakers:
    """Breakers by key (a route id), one generation per snapshot: a breaker whose key and
    configuration the previous generation had keeps its counts; the rest are dropped."""

    def __init__(self, previous: Breakers | None = None) -> None:
        self._previous = previous.kept if previous is not None else {}
        self.kept: dict[str, Breaker] = {}

    def get(self, key: str, cfg: Config) -> Breaker:
        kept = self.kept.get(key) or self._previous.get(key)
        if kept is None or kept.config != cfg:
            kept = Breaker(cfg)
        self.kept[key] = kept
        return kept


def compile(module: dict[str, Any], ctx: Compiling) -> Breaker:
    cfg = config(module)
    return ctx.breakers.get(ctx.key, cfg) if ctx.breakers is not None else Breaker(cfg)
