"""The circuit_breaker module: when too many of a route's recent responses are server
errors, stop sending it traffic for a while (503 at the edge) so the upstream can recover.
The configuration is compiled with the snapshot; the counts (``Breaker``) are kept across
snapshots while the configuration stays the same (``Breakers``)."""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field
from typing import Any

import structlog

from edgeway.edge.h1 import Headers
from edgeway.edge.hooks import Compiling, Exchange, Hook, Verdict
from edgeway.edge.pages import Fixed, page

log = structlog.get_logger()


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


@dataclass(frozen=True)
class PolicyBreaker(Hook):
    """The traffic policy's ``circuit-breaker`` action (``error_threshold`` 0 to 1,
    ``volume_threshold``, ``window_duration``, ``tripped_duration`` (``10s``), ``num_buckets``
    1 to 128, ``enforce``): as the module, counting the requests its rule lets through
    (``Policy.outcome`` records each one's fate); when tripped, 503 ``ERR_EDGEWAY_4011``, or
    with ``enforce: false`` only a log line."""
    name = "circuit-breaker"
    breaker: Breaker
    enforce: bool

    async def request(self, x: Exchange) -> Verdict:
        if not self.breaker.allows():
            if self.enforce:
                return self.breaker.check(x.ip, x.req.headers)
            log.info("circuit_breaker_not_enforced")
        x.counted.append(self.breaker)
        return None


def _seconds(cfg: dict[str, Any], name: str, default: float) -> float:
    value = cfg.get(name)
    if value is None:
        return default
    m = re.fullmatch(r"(\d+)(ms|s|m)", str(value).strip())
    if not m or int(m[1]) == 0:
        raise ValueError(f"{name} {value!r}: a duration such as 500ms, 10s or 1m")
    return int(m[1]) * {"ms": 0.001, "s": 1.0, "m": 60.0}[m[2]]


def policy_config(cfg: dict[str, Any]) -> tuple[Config, bool]:
    """The action's breaker and ``enforce``; ValueError naming what is wrong."""
    threshold = cfg.get("error_threshold", 0.5)
    volume, buckets = cfg.get("volume_threshold", 10), cfg.get("num_buckets", 10)
    enforce = cfg.get("enforce", True)
    if not isinstance(threshold, int | float) or isinstance(threshold, bool) \
            or not 0 <= threshold <= 1:
        raise ValueError(f"error_threshold {threshold!r}: a ratio from 0 to 1")
    if not isinstance(volume, int) or isinstance(volume, bool) or volume < 1:
        raise ValueError(f"volume_threshold {volume!r}: a whole number, at least 1")
    if not isinstance(buckets, int) or isinstance(buckets, bool) or not 1 <= buckets <= 128:
        raise ValueError(f"num_buckets {buckets!r}: from 1 to 128")
    if not isinstance(enforce, bool):
        raise ValueError(f"enforce {enforce!r} (true or false)")
    return Config(_seconds(cfg, "tripped_duration", 10.0),
                  _seconds(cfg, "window_duration", 10.0), buckets, volume,
                  float(threshold)), enforce
