"""Structured logs: one JSON object per line on stderr, through structlog, for our own events
and for the libraries' (uvicorn, asyncio) through the standard library's logging.

Every line has ``event``, ``level`` and ``ts`` (UTC, ISO 8601) and the event's own members.

Floods are bounded. A hostile or broken client can make the same event happen thousands of
times a second (junk on the tunnel listener, a reconnect storm); each event name gets a token
bucket (``BURST`` lines at once, ``RATE`` a second after that). What the bucket refuses is
counted, and the count is carried by the next line of that event that gets through
(``suppressed``) or, when the flood stopped, by a ``log_suppressed`` line that
``report_suppressed`` writes (the server calls it every few seconds and at exit). The access
log of the management API (``request``) is never thinned out.
"""

from __future__ import annotations

import logging
import sys
import threading
import time
from collections.abc import MutableMapping
from typing import Any, TextIO

import msgspec
import structlog

BURST = 50
RATE = 20.0  # lines a second per event name, after the burst
UNLIMITED = frozenset({"request"})
_encode = msgspec.json.Encoder(decimal_format="number")


def _dumps(obj: Any, **_kw: Any) -> str:
    return _encode.encode(obj).decode()


class FloodGuard:
    """A structlog processor: a token bucket per event name (see the module docstring)."""

    def __init__(self, burst: int = BURST, rate: float = RATE,
                 clock: Any = time.monotonic) -> None:
        self.burst, self.rate, self.clock = burst, rate, clock
        self._buckets: dict[str, tuple[float, float]] = {}  # event -> (tokens, at)
        self._dropped: dict[str, int] = {}
        self._lock = threading.Lock()

    def __call__(self, _logger: Any, _method: str,
                 event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
        passes, dropped = self.allow(str(event.get("event", "")))
        if not passes:
            raise structlog.DropEvent
        if dropped:
            event["suppressed"] = dropped
        return event

    def allow(self, name: str) -> tuple[bool, int]:
        """Whether a line of event ``name`` may be written now, and how many were held back
        before it (counted as held back when it may not)."""
        if name in UNLIMITED:
            return True, 0
        now = self.clock()
        with self._lock:
            tokens, at = self._buckets.get(name, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - at) * self.rate)
            if tokens < 1.0:
                self._buckets[name] = (tokens, now)
                self._dropped[name] = self._dropped.get(name, 0) + 1
                return False, 0
            self._buckets[name] = (tokens - 1.0, now)
            dropped = self._dropped.pop(name, 0)
            if len(self._buckets) > 4096:  # names are ours, but keep the table bounded
                self._buckets.clear()
        return True, dropped

    def take_dropped(self) -> dict[str, int]:
        with self._lock:
            dropped, self._dropped = self._dropped, {}
        return dropped


class _LibraryFloods(logging.Filter):
    """The flood guard for the standard library's records, as a handler filter: a refused
    record is simply not written. (In the formatter it would raise structlog's DropEvent, a
    BaseException that the handler does not catch: it escaped into the code that logged,
    uvicorn's or asyncio's, once a library logged past the burst.) Records are bucketed by
    their message's template."""

    def __init__(self, guard: FloodGuard) -> None:
        super().__init__()
        self.guard = guard

    def filter(self, record: logging.LogRecord) -> bool:
        passes, dropped = self.guard.allow(str(record.msg))
        if dropped:
            record.suppressed = dropped
        return passes


def _suppressed(_logger: Any, _method: str, event: MutableMapping[str, Any]
                ) -> MutableMapping[str, Any]:
    """A library record's count of those held back before it (``_LibraryFloods``)."""
    record = event.get("_record")
    dropped = getattr(record, "suppressed", 0) if record is not None else 0
    if dropped:
        event["suppressed"] = dropped
    return event


_guard = FloodGuard()


def _shared(guard: Any) -> list[Any]:
    return [structlog.contextvars.merge_contextvars, structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True, key="ts"), guard,
            structlog.processors.format_exc_info, _ordered]


def _ordered(_logger: Any, _method: str, event: MutableMapping[str, Any]
             ) -> MutableMapping[str, Any]:
    """``ts``, ``level`` and ``event`` first: the members a reader scans for."""
    head = {k: event.pop(k) for k in ("ts", "level", "event", "logger") if k in event}
    return {**head, **event}


def _renderer(fmt: str) -> Any:
    if fmt == "logfmt":
        return structlog.processors.LogfmtRenderer(key_order=["ts", "level", "event"])
    if fmt == "term":
        return structlog.dev.ConsoleRenderer(colors=False, timestamp_key="ts")
    return structlog.processors.JSONRenderer(serializer=_dumps)


def configure(stream: TextIO | None = None, level: int = logging.INFO,
              fmt: str = "json") -> None:
    """Send our events and the standard library's records to ``stream`` (stderr) as lines,
    at ``level`` and above: JSON objects, or ``logfmt`` or ``term`` (for people) lines."""
    out = stream or sys.stderr
    renderer = _renderer(fmt)
    structlog.configure(
        processors=[*_shared(_guard), renderer],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        logger_factory=structlog.WriteLoggerFactory(out),
        cache_logger_on_first_use=True)
    handler = logging.StreamHandler(out)
    handler.addFilter(_LibraryFloods(_guard))
    handler.setFormatter(structlog.stdlib.ProcessorFormatter(
        processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
        foreign_pre_chain=[structlog.stdlib.add_logger_name, *_shared(_suppressed)]))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # (alembic says at info which of its plugins it set up and which migrations ran: its
    # workings, not the server's; a migration that fails is the server's error to tell)
    logging.getLogger("alembic").setLevel(max(level, logging.WARNING))


def _drop(_logger: Any, _method: str, _event: MutableMapping[str, Any]) -> Any:
    raise structlog.DropEvent


def disable() -> None:
    """No log at all (the agent's ``--log false``, or its console alone on the terminal):
    our events and the standard library's records are dropped."""
    structlog.configure(processors=[_drop],
                        wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL),
                        logger_factory=structlog.ReturnLoggerFactory(),
                        cache_logger_on_first_use=True)
    root = logging.getLogger()
    root.handlers[:] = [logging.NullHandler()]
    root.setLevel(logging.CRITICAL + 1)


def report_suppressed() -> None:
    """One ``log_suppressed`` line with the counts of lines the flood guard held back since
    they were last reported (nothing if none were)."""
    dropped = _guard.take_dropped()
    if dropped:
        structlog.get_logger().warning("log_suppressed", counts=dropped)
