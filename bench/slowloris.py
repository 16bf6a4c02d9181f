"""Slowloris against the connection caps: slow-header connections (a request head never
finished) to the management API from one address, beyond the per-address cap, and to the
public HTTP listener from several addresses, beyond the process's cap; then the server's
open descriptors, the refusals by status, the latency of normal requests meanwhile (the API,
and the public listener through an SDK agent's tunnel), and how long the API's slow heads
last (its head deadline).

The server runs with ``--max-connections-per-address 1000``, ``--api-head-timeout 10`` and a
descriptor reserve that leaves public listeners 5,000 connections in all. Run from the
repository root:  python -m bench.slowloris   (also the last part of ``bench.soak``)
"""

from __future__ import annotations

import asyncio
import os
import resource
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx

from tests.edge import upstream
from tests.edge.agents import agent
from tests.edge.test_streams import fetch
from tests.server import HEADERS, Server, start

PER_ADDRESS, HEAD_TIMEOUT, PUBLIC = 1000, 10, 5000
HEAD = b"GET /slow HTTP/1.1\r\nHost: slow.example\r\nX-Slow: "


def options() -> list[str]:
    limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]  # (the server inherits it)
    return ["--max-connections-per-address", str(PER_ADDRESS), "--api-head-timeout",
            str(HEAD_TIMEOUT), "--fd-reserve", str((limit - PUBLIC) // 2)]


async def _slow(port: int, source: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, local_addr=(source, 0))
    writer.write(HEAD)
    return reader, writer


async def _status(reader: asyncio.StreamReader) -> str:
    """The status a refused connection got (429, 503), or "held" if it is still open."""
    try:
        line = await asyncio.wait_for(reader.readline(), 0.5)
    except TimeoutError:
        return "held"
    except OSError:
        return "reset"
    return line.split(b" ")[1].decode() if line.startswith(b"HTTP/1.1 ") else "closed"


def _latency(seconds: list[float]) -> str:
    ms = sorted(s * 1000 for s in seconds)
    return f"median {statistics.median(ms):.1f} ms, max {ms[-1]:.1f} ms"


async def _timed(call: Callable[[], Awaitable[object]], n: int = 50
                 ) -> tuple[list[float], Counter[str]]:
    """How long ``n`` calls took, and what they answered."""
    times, answers = [], Counter[str]()
    for _ in range(n):
        t0 = time.monotonic()
        got = await call()
        times.append(time.monotonic() - t0)
        answers[str(getattr(got, "status_code", got))] += 1
    return times, answers


async def flood(srv: Server, host: str) -> None:
    api_port = int(srv.base_url.rsplit(":", 1)[1])
    t0 = time.monotonic()
    api = [await _slow(api_port, "127.0.5.1") for _ in range(PER_ADDRESS + 200)]
    public = [await _slow(srv.http_port, f"127.0.6.{i % 6 + 1}") for i in range(6 * 1000)]
    opened = time.monotonic() - t0
    statuses = await asyncio.gather(*[_status(r) for r, _ in api + public])
    fds = len(os.listdir(f"/proc/{srv.proc.pid}/fd"))
    print(f"  {len(api):,} slow heads to the API from one address, {len(public):,} to the "
          f"public listener from six, opened in {opened:.1f} s")
    print(f"  API: {dict(Counter(statuses[:len(api)]))}; public: "
          f"{dict(Counter(statuses[len(api):]))}; server descriptors in use: {fds:,}")
    client = httpx.AsyncClient(base_url=srv.base_url, timeout=10,
                               headers={**HEADERS, "Authorization": f"Bearer {srv.token}"})
    async with client:
        api_times, api_got = await _timed(lambda: client.get("/credentials"))
    tunnel_times, tunnel_got = await _timed(lambda: fetch(srv.http_port, host))
    print(f"  meanwhile, 50 API requests: {_latency(api_times)} {dict(api_got)}; 50 public "
          f"requests through the tunnel: {_latency(tunnel_times)} {dict(tunnel_got)}")
    t0 = time.monotonic()
    held = [(r, w) for (r, w), s in zip(api, statuses, strict=False) if s == "held"]
    await asyncio.gather(*[r.read() for r, _ in held])
    print(f"  the API closed its {len(held):,} slow heads {time.monotonic() - t0:.1f} s later "
          f"(--api-head-timeout {HEAD_TIMEOUT})")
    for _, writer in api + public:
        writer.close()


def main() -> int:
    srv = start(Path(tempfile.mkdtemp()) / "slowloris", None, *options())
    try:
        with srv.client() as api:
            token = api.post("/credentials", json={}).json()["token"]
        with upstream.running("svc") as port:
            sdk = agent(srv, token, {"kind": "http", "forward": f"http://127.0.0.1:{port}"})
            print("Slowloris against the connection caps:")
            asyncio.run(flood(srv, sdk.urls[0].split("://", 1)[1]))
            sdk.stop()
    finally:
        srv.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
