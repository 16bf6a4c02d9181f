"""Stopping the server with many live agents: their sessions are closed together, within
``--drain-timeout``, and every agent sees its session end."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import textwrap
import threading
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import BACKENDS
from tests.server import Server, fresh_pg_database, start

if not os.environ.get("CI"):  # CI installs the SDK (scripts/test) and must not skip
    pytest.importorskip("ngrok", reason="install the SDK: pip install "
                        "--ignore-requires-python ngrok==1.7.0")

# One process holding many SDK sessions: it says when all are connected, then once per session
# that the server ended (the SDK's disconnection handler; it would reconnect, to a server that
# is gone).
AGENTS = textwrap.dedent("""
    import asyncio, sys, threading, ngrok
    token, addr, ca, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    ended, lock = set(), threading.Lock()
    def handler(n):
        def ended_(addr, error):  # (called on the SDK's threads)
            with lock:
                if n not in ended:
                    ended.add(n)
                    sys.stdout.write(f"ENDED {n}\\n")
                    sys.stdout.flush()
        return ended_
    async def one(n):
        s = await (ngrok.SessionBuilder().authtoken(token).server_addr(addr)
                   .ca_cert(bytearray(open(ca, "rb").read()))
                   .handle_disconnection(handler(n)).connect())
        await s.tcp_endpoint().listen()
        return s
    async def main():
        sessions = await asyncio.gather(*(one(n) for n in range(count)))
        print("CONNECTED", len(sessions), flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    asyncio.run(main())
""")


class Agents:
    """The agents' process, its output lines read into a queue as they come."""

    def __init__(self, srv: Server, token: str, count: int) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", AGENTS, token,
                                      f"localhost:{srv.tunnel_port}",
                                      str(srv.data_dir / "ca.pem"), str(count)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.lines: queue.Queue[str] = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        try:
            assert self.lines.get(timeout=60).split() == ["CONNECTED", str(count)]
        except BaseException:
            self.close()
            raise

    def _read(self) -> None:
        for line in self.proc.stdout or ():
            self.lines.put(line)

    def ended(self, count: int, deadline: float) -> set[str]:
        """The sessions the agents saw end, waiting for all ``count`` until ``deadline``."""
        seen: set[str] = set()
        while len(seen) < count and (left := deadline - time.monotonic()) > 0:
            with contextlib.suppress(queue.Empty):
                if (line := self.lines.get(timeout=left)).startswith("ENDED"):
                    seen.add(line.split()[1])
        return seen

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait()
        self.reader.join(10)
        for pipe in (self.proc.stdout, self.proc.stdin):
            if pipe is not None:
                pipe.close()


def drained(srv: Server) -> dict[str, Any]:
    lines = [json.loads(line) for line in srv.log().splitlines() if line.startswith("{")]
    return next(line for line in lines if line["event"] == "agent_sessions_drained")


# --drain-timeout 3: all close within about a second (each waits up to one for the agent's TLS
# close); EDGEWAY_DRAIN_TIMEOUT=0: the closes are cut at once, and the agents see that too.
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("extra", "env", "cut"), [(["--drain-timeout", "3"], None, False),
                                                   ([], {"EDGEWAY_DRAIN_TIMEOUT": "0"}, True)])
def test_stopping_closes_all_agent_sessions_together(
        tmp_path: Path, backend: str, extra: list[str], env: dict[str, str] | None,
        cut: bool) -> None:
    count = 30
    with ExitStack() as stack:
        url = stack.enter_context(fresh_pg_database()) if backend == "postgres" else None
        srv = start(tmp_path / "srv", url, *extra, env=env)
        stack.callback(srv.stop)
        _stop_with_agents(srv, count, cut)


def _stop_with_agents(srv: Server, count: int, cut: bool) -> None:
    agents: Agents | None = None
    try:
        with srv.client() as api:
            token = api.post("/credentials", json={}).json()["token"]
            agents = Agents(srv, token, count)
            assert len(api.get("/tunnels").json()["tunnels"]) == count
        began = time.monotonic()
        srv.proc.send_signal(signal.SIGTERM)
        code = srv.proc.wait(30)
        took = time.monotonic() - began
        assert code == 0, srv.log()
        assert took < 5, f"stopping with {count} agents took {took:.1f} s"
        assert len(agents.ended(count, time.monotonic() + 10)) == count
        report = drained(srv)
        assert report["connections"] == count
        assert report["cut"] == (count if cut else 0), report
    finally:
        if agents is not None:
            agents.close()
