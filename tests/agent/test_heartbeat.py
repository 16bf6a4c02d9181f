"""The session latency the agent reports (``/api/status``, the console) is the heartbeat's
round trip as measured, to the nanosecond: a loopback round trip is well under a millisecond,
and on uvloop a clock of whole milliseconds read it as 0 (the console showed "-")."""

from __future__ import annotations

import time
from pathlib import Path

from tests.agent.test_agent import run_agent, write_config
from tests.server import Server, free_port


def test_the_session_latency_is_the_measured_round_trip(srv: Server, tmp_path: Path) -> None:
    with srv.client() as api:
        token = api.post("/credentials", json={}).json()["token"]
    web = free_port()
    cfg = write_config(tmp_path / "a.yml", srv, token, web, "", heartbeat="20ms")
    a = run_agent("--none", "--config", str(cfg), web_port=web)
    try:
        # A beat every 20 ms; a clock of whole milliseconds gives nothing but multiples of
        # 1,000,000 ns (give or take the float's last digit), 0 most often.
        seen: list[int] = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            ns = a.api("GET", "/api/status").json()["session"]["legs"][0]["latency"]
            seen.append(ns)
            if 1_000 < ns % 1_000_000 < 999_000:
                break
            time.sleep(0.03)
        assert 1_000 < seen[-1] % 1_000_000 < 999_000, \
            f"every latency read was whole milliseconds: {sorted(set(seen))}"
        assert seen[-1] < 5 * 10**9  # (past the 2 s tolerance the session would have ended)
    finally:
        a.stop()
