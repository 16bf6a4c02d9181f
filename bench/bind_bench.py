"""Bind time as tunnels pile up: one raw agent session binds N TCP tunnels (and N HTTP
tunnels) on a server of its own, 32 binds in flight, and prints the mean bind time of each
tenth of them and the ratio of the last tenth to the first. A bind costs a port (or a name),
a listener and two rows in the store; none of it should grow with the tunnels already bound.

Run from the repository root:  python -m bench.bind_bench [--tunnels 10000]
The server gets a TCP range of --tunnels + 1,000 ports from 30000 (ports other processes hold
there are skipped, as in production). Exit status 1 if a bind failed.
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import sys
import tempfile
import time
from pathlib import Path

from tests.server import start
from tests.tunnel.raw import Agent

IN_FLIGHT = 32


async def _bind_all(agent: Agent, count: int, proto: str) -> list[float]:
    times: list[float] = [0.0] * count
    failures: list[str] = []
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(count):
        queue.put_nowait(i)

    async def worker() -> None:
        while not queue.empty():
            i = queue.get_nowait()
            started = time.perf_counter()
            if proto == "tcp":
                reply = await agent.bind_tcp()
            else:
                reply = await agent.rpc(1, {"Id": "", "Proto": "http", "Opts": {},
                                            "Extra": {"Token": ""}})
            times[i] = time.perf_counter() - started
            if reply.get("Error"):
                failures.append(reply["Error"])

    await asyncio.gather(*(worker() for _ in range(IN_FLIGHT)))
    if failures:
        print(f"  {len(failures)} {proto} binds failed, e.g. {failures[0]}")
        sys.exit(1)
    return times


def _report(proto: str, times: list[float], wall: float) -> None:
    tenth = max(1, len(times) // 10)
    means = [sum(times[i:i + tenth]) / len(times[i:i + tenth]) * 1000
             for i in range(0, len(times), tenth)]
    print(f"{proto}: {len(times)} binds in {wall:.1f} s ({len(times) / wall:.0f}/s); "
          "mean ms per bind by tenth: " + " ".join(f"{m:.1f}" for m in means))
    print(f"  last tenth / first tenth: {means[-1] / means[0]:.2f}")


async def _run(count: int) -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < count + 2000:
        sys.exit(f"needs {count + 2000} file descriptors (ulimit -n is {hard})")
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # the server inherits it
    with tempfile.TemporaryDirectory() as tmp:
        srv = start(Path(tmp) / "srv", None, "--tcp-ports", f"30000-{30000 + count + 999}")
        try:
            with srv.client() as api:
                token = api.post("/credentials", json={}).json()["token"]
            # (a raw agent sends no heartbeats: it asks for a long interval instead)
            agent = await Agent.connect(srv, token, HeartbeatInterval=3600 * 10**9)
            for proto in ("tcp", "http"):
                started = time.perf_counter()
                times = await _bind_all(agent, count, proto)
                _report(proto, times, time.perf_counter() - started)
            await agent.conn.close()
        finally:
            srv.stop()
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tunnels", type=int, default=10_000)
    asyncio.run(_run(parser.parse_args().tunnels))


if __name__ == "__main__":
    main()
