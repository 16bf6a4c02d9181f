"""The flood guard of the structured log: a token bucket per event name."""

from __future__ import annotations

from typing import Any

import pytest
import structlog

from edgeway.logs import FloodGuard


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def passes(guard: FloodGuard, event: str) -> dict[str, Any] | None:
    try:
        return dict(guard(None, "info", {"event": event}))
    except structlog.DropEvent:
        return None


def test_a_flood_is_cut_to_the_burst_then_the_rate_and_the_rest_is_counted() -> None:
    clock = Clock()
    guard = FloodGuard(burst=5, rate=2.0, clock=clock)
    out = [passes(guard, "junk") for _ in range(100)]
    assert sum(x is not None for x in out) == 5
    assert passes(guard, "other") == {"event": "other"}  # each event has its own bucket
    clock.now = 1.0  # two more tokens: the first line to pass carries the count
    assert passes(guard, "junk") == {"event": "junk", "suppressed": 95}
    assert passes(guard, "junk") == {"event": "junk"}
    assert passes(guard, "junk") is None
    assert guard.take_dropped() == {"junk": 1}
    assert guard.take_dropped() == {}


@pytest.mark.parametrize("n", [1, 10_000])
def test_the_access_log_is_never_thinned(n: int) -> None:
    guard = FloodGuard(burst=1, rate=0.0, clock=Clock())
    assert all(passes(guard, "request") for _ in range(n))


def test_a_first_start_logs_the_servers_events_not_alembics(
        tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The migrations of a first start run quietly: no line of alembic's own (its plugins,
    each revision) among the server's. A new process, as a person starts it (the test
    servers' fork server imported alembic before any log was set up)."""
    import json

    from tests import forkserver
    from tests.server import start
    monkeypatch.setattr(forkserver, "FORK", False)
    srv = start(tmp_path / "srv")
    assert srv.stop() == 0  # (then its log is whole: "start" comes after the API listens)
    lines = [json.loads(line) for line in srv.log().splitlines() if line.startswith("{")]
    assert any(e.get("event") == "start" for e in lines), lines[-5:]
    assert not [e for e in lines if str(e.get("logger", "")).startswith("alembic")], \
        [e for e in lines if str(e.get("logger", "")).startswith("alembic")][:3]


def test_a_library_flooding_the_log_is_thinned_without_raising_into_it() -> None:
    """Standard-library records past the burst (uvicorn's or asyncio's warnings about junk,
    by the thousand) are held back by the handler: the code that logged never sees the flood
    guard (its DropEvent is a BaseException no handler catches), and the next record of that
    message that gets through carries how many were held back."""
    import io
    import json
    import logging

    from edgeway import logs
    out = io.StringIO()
    root = logging.getLogger()
    handlers, level, clock = root.handlers[:], root.level, logs._guard.clock
    logs._guard.clock = fake = Clock()
    logs.configure(out)
    try:
        noisy = logging.getLogger("some.library")
        for i in range(logs.BURST + 500):
            noisy.warning("bad request from %s", f"client {i}")  # (raises nothing)
        lines = [json.loads(line) for line in out.getvalue().splitlines()]
        theirs = [line for line in lines if line.get("logger") == "some.library"]
        assert len(theirs) == logs.BURST, len(theirs)
        assert theirs[0]["event"] == "bad request from client 0"
        fake.now += 1.0  # (tokens back)
        noisy.warning("bad request from %s", "a later client")
        last = json.loads(out.getvalue().splitlines()[-1])
        assert last["event"] == "bad request from a later client" and last["suppressed"] >= 500
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        logs._guard.clock = clock
        logs._guard.take_dropped()
