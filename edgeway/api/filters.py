"""The ``filter`` query parameter of lists: a CEL expression over each listed resource as the
API renders it (``obj``), compiled once per request.

``obj``'s timestamps (``created_at`` and the other ``*_at`` members) are CEL timestamps, so
``obj.created_at >= timestamp(time.now).subtract("7d")`` works as in the reference API;
``time.now`` is the time of the request; ``<timestamp>.subtract("<n><s|m|h|d>")`` and
``.add(...)`` move a timestamp. A filter that does not parse, names a member the resource
does not have, or is not true or false for a resource is refused (400 ``ERR_EDGEWAY_250``,
naming the reason).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

from edgeway.celpkg import cel
from edgeway.errors import Invalid

MAX_LENGTH = 4096
_DURATION = re.compile(r"^(\d{1,9})(s|m|h|d)$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}
_STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")


def _duration(text: object) -> timedelta:
    found = _DURATION.match(str(text))
    if found is None:
        raise ValueError(f"'{text}' is not a duration such as 30s, 15m, 24h or 7d")
    return timedelta(**{_UNITS[found.group(2)]: int(found.group(1))})


def _subtract(stamp: datetime, amount: str) -> datetime:
    return stamp - _duration(amount)


def _add(stamp: datetime, amount: str) -> datetime:
    return stamp + _duration(amount)


def _typed(value: Any, key: str = "") -> Any:
    """A rendered value as CEL should see it: ``*_at`` timestamps as timestamps."""
    if isinstance(value, dict):
        return {k: _typed(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_typed(v) for v in value]
    if isinstance(value, str) and key.endswith("_at") and _STAMP.match(value):
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    return value


class Filter:
    def __init__(self, text: str, title: str) -> None:
        if len(text) > MAX_LENGTH:
            raise Invalid("filter", f"must be at most {MAX_LENGTH} characters", 250)
        try:
            self.program = cel.compile(text)
        except (ValueError, RuntimeError) as exc:
            raise Invalid("filter", f"is not a valid CEL expression: {_first(exc)}",
                          250) from None
        unknown = sorted(set(self.program.references()["variables"]) - {"obj", "time"})
        if unknown:
            raise Invalid("filter", f"names {', '.join(unknown)}: a filter sees only obj (the "
                          "listed resource) and time.now", 250)
        self.text, self.title = text, title
        self.context = cel.Context()
        self.context.add_variable("time", {"now": datetime.now(UTC)})
        self.context.add_function("subtract", _subtract)
        self.context.add_function("add", _add)

    def matches(self, obj: dict[str, Any]) -> bool:
        self.context.add_variable("obj", _typed(obj))
        try:
            out = self.program.execute(self.context)
        except KeyError as exc:
            raise Invalid("filter", f"names {exc.args[0]!r}, which a {self.title} does not "
                          "have", 250) from None
        except Exception as exc:  # the library's evaluation errors are plain exceptions
            raise Invalid("filter", f"failed on resource '{obj.get('id', '')}': "
                          f"{_first(exc)}", 250) from None
        if not isinstance(out, bool):
            raise Invalid("filter", f"must be true or false for each resource, not "
                          f"{type(out).__name__} ({out!r:.60})", 250)
        return out


def _first(exc: BaseException) -> str:
    return str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
