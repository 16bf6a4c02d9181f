"""What every event looks like on the wire, and the per-source choices applied to it.

The envelope (the same for every type and target)::

    {"event_id": "ev_<27 base62>", "event_type": "ip_policy_created.v0",
     "event_timestamp": "2026-11-24T09:12:03.511Z",
     "actor": {"api_key_id": "ak_...", "owner_id": "usr_..."} | null,
     "object": {...}}

``object`` is the resource as the API renders it (change and agent session events) or what
happened on a connection (traffic events, ``catalog/event_types.TRAFFIC``); ``actor`` is the
API key that made a change (null for changes the server made itself and for traffic).

A source's ``filter`` is compiled once per expression (``program``) and its ``fields`` pick
members of a traffic event's object (``select``).
"""

from __future__ import annotations

import secrets
import time
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

import msgspec

from edgeway import ids
from edgeway.celpkg import cel

_encode = msgspec.json.Encoder().encode


class EventIds:
    """``ev_`` + 27 base62 characters made cheaply (one per traffic event): 18 from the second
    and a per-process random part, then a counter in 9 hex digits. Unique, and increasing
    within a second of a process; not secret."""

    def __init__(self) -> None:
        self._salt = secrets.randbits(90)
        self._second, self._head, self._stamp = -1, "", ""
        self._count = 0

    def _new_second(self, second: int) -> None:
        high = ((second - ids.EPOCH) << 90 | self._salt) % (62 ** 18)
        self._second, self._head = second, ids.encode(high)[-18:]
        self._stamp = datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%S")

    def __call__(self, now: float) -> str:
        second = int(now)
        if second != self._second:
            self._new_second(second)
        self._count = (self._count + 1) & 0xFFFFFFFFF
        return f"ev_{self._head}{self._count:09x}"

    def head(self, event_type: str, now: float) -> str:
        """A new event's envelope as JSON text up to its object (``actor`` null): what
        ``encode(event(event_type, obj, None, now))`` begins with, made in one step for the
        traffic events (one per request)."""
        second = int(now)
        if second != self._second:
            self._new_second(second)
        self._count = count = (self._count + 1) & 0xFFFFFFFFF
        return (f'{{"event_id":"ev_{self._head}{count:09x}","event_type":"{event_type}",'
                f'"event_timestamp":"{self._stamp}.{int((now - second) * 1000):03d}Z",'
                f'"actor":null,"object":')


new_event_id = EventIds()
_second: list[Any] = [-1, ""]


def stamp(now: float) -> str:
    """RFC 3339 in UTC with milliseconds (the formatted second kept for the next call)."""
    second = int(now)
    if second != _second[0]:
        _second[:] = [second, datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%S")]
    return f"{_second[1]}.{int((now - second) * 1000):03d}Z"


def event(event_type: str, obj: dict[str, Any], actor: dict[str, Any] | None = None,
          now: float | None = None) -> dict[str, Any]:
    when = time.time() if now is None else now
    return {"event_id": new_event_id(when), "event_type": event_type,
            "event_timestamp": stamp(when), "actor": actor, "object": obj}


def encode(ev: dict[str, Any]) -> str:
    return _encode(ev).decode()


@lru_cache(maxsize=1024)
def program(text: str) -> Any:
    """A source's filter, compiled once (the API checked it when the source was written)."""
    return cel.compile(text)


def passes(text: str, variables: dict[str, Any]) -> bool:
    """Whether an event passes a source's filter ("" passes everything); an expression that
    cannot be evaluated on this event (a member it lacks) does not pass."""
    if not text:
        return True
    try:
        return program(text).execute(variables) is True
    except Exception:  # the library's evaluation errors are plain exceptions
        return False


def select(obj: dict[str, Any], fields: tuple[str, ...]) -> dict[str, Any]:
    """The members of a traffic event's ``obj`` named by dotted ``fields`` (all when none)."""
    if not fields:
        return obj
    out: dict[str, Any] = {}
    for name in fields:
        src: Any = obj
        parts = name.split(".")
        for part in parts:
            src = src.get(part) if isinstance(src, dict) else None
        dst = out
        for part in parts[:-1]:
            dst = dst.setdefault(part, {})
        dst[parts[-1]] = src
    return out
