"""Dashboard benchmark: the overview with 1,000 live tunnels (ten agent sessions of 100 HTTP
tunnels) and 10,000 resources of each kind the dashboard lists, on SQLite, the server pinned
to one core and the clients on the other.

- Time to first byte of ``/dashboard/`` (p50/p99 over --loads loads, one at a time), and the
  full load in Debian's Chromium: navigation until the parts loaded in place (htmx) have come
  in, the DNS checks and the counts, p50/p99 over --loads loads.
- What a page costs the server in CPU, next to the API calls it makes: the overview (the
  sessions and their tunnels, what needs attention), its counts (a page of 100 of each kind),
  a list page and one resource's page, each beside the API request(s) behind it.

Run from the repository root:  python -m bench.dashboard_bench [--loads 100] [--rows 10000]
Rows past the first of each kind (made through the API) are copied straight into the database
with new ids (the values of unique columns suffixed); the runtime never loads them (no reload
is asked), the dashboard reads them through the API as it reads everything. DNS checks ask the
built-in DNS (it refuses foreign names at once). Exits non-zero if a load failed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from bench.api_bench import note, pin  # noqa: E402
from edgeway import ids  # noqa: E402
from edgeway.dashboard.nav import GROUPS  # noqa: E402
from tests.api.samples import SAMPLES  # noqa: E402
from tests.dashboard.visitor import signed_in  # noqa: E402
from tests.server import Server, free_port, start  # noqa: E402
from tests.tunnel.raw import Agent  # noqa: E402

SESSIONS, PER_SESSION = 10, 100


def _cpu(pid: int) -> float:
    """The process's CPU seconds (user + system, its threads included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


@contextlib.contextmanager
def live_tunnels(srv: Server) -> Iterator[int]:
    """Ten agent sessions of 100 HTTP tunnels each, kept in a thread's loop."""
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    agents: list[Agent] = []
    bound: list[int] = [0]

    async def connect() -> None:
        with srv.client() as api:
            token = api.post("/credentials", json={}).json()["token"]
        for _ in range(SESSIONS):
            agent = await Agent.connect(srv, token, HeartbeatInterval=3600 * 10**9)
            agents.append(agent)
            for _ in range(PER_SESSION):
                if not (await agent.bind_http()).get("Error"):
                    bound[0] += 1
        ready.set()

    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    asyncio.run_coroutine_threadsafe(connect(), loop).result(300)
    try:
        yield bound[0]
    finally:
        async def close() -> None:
            for agent in agents:
                await agent.conn.close()
        asyncio.run_coroutine_threadsafe(close(), loop).result(60)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


def seed(srv: Server, rows: int) -> list[str]:
    """One of each listed kind through the API, then copies up to ``rows`` in the database."""
    made: dict[str, str] = {}
    with srv.client() as api:
        for _group, entries in GROUPS:
            for e in entries:
                sample = SAMPLES.get(e.kind.collection)
                if sample is None:
                    continue
                r = api.post(e.kind.url, json=sample.create(api))
                if r.status_code != 201:
                    raise SystemExit(f"POST {e.kind.url}: {r.status_code} {r.text}")
                made[e.kind.table] = e.kind.prefix
    with contextlib.closing(sqlite3.connect(srv.data_dir / "edgeway.db", timeout=30)) as db, db:
        for table, prefix in made.items():
            cols = [c[1] for c in db.execute(f'PRAGMA table_info("{table}")')]
            unique = {info[2] for index in db.execute(f'PRAGMA index_list("{table}")')
                      if index[2] for info in db.execute(f'PRAGMA index_info("{index[1]}")')}
            unique.discard("id")
            first = db.execute(f'SELECT * FROM "{table}" LIMIT 1').fetchone()
            have = db.execute(f'SELECT count(*) FROM "{table}"').fetchone()[0]
            copies = []
            for i in range(rows - have):
                row = list(first)
                row[cols.index("id")] = ids.new_id(prefix)
                for j, col in enumerate(cols):
                    if col in unique and row[j] is not None:
                        row[j] = f"{row[j]}-{i}"
                copies.append(row)
            marks = ", ".join("?" * len(cols))
            db.executemany(f'INSERT INTO "{table}" VALUES ({marks})', copies)
    return sorted(made)


def ttfb(browser: httpx.Client, path: str, loads: int) -> list[float]:
    out = []
    for _ in range(loads):
        started = time.perf_counter()
        with browser.stream("GET", path) as r:
            out.append((time.perf_counter() - started) * 1000)
            if r.status_code != 200:
                raise SystemExit(f"GET {path}: {r.status_code}")
            r.read()
    return out


def full_loads(srv: Server, loads: int) -> list[float]:
    from tests.dashboard.browser import chromium, sign_in

    out = []
    with chromium() as chrome:
        page = chrome.new_context().new_page()
        sign_in(page, srv)
        for _ in range(loads):
            started = time.perf_counter()
            page.goto(srv.base_url + "/dashboard/")
            page.wait_for_selector("section#dns-failing", timeout=60_000)
            page.wait_for_selector("div.counts#counts", timeout=60_000)
            out.append((time.perf_counter() - started) * 1000)
    return out


def cost(srv: Server, call: Callable[[], Any], times: int) -> float:
    """Server CPU µs per call of ``call`` (made ``times`` times)."""
    call()  # (warm)
    before = _cpu(srv.proc.pid)
    for _ in range(times):
        call()
    return (_cpu(srv.proc.pid) - before) / times * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--loads", type=int, default=100)
    parser.add_argument("--rows", type=int, default=10_000)
    args = parser.parse_args()
    cpus = os.sched_getaffinity(0)
    server_cpus, client_cpus = ({min(cpus)}, cpus - {min(cpus)}) if len(cpus) > 1 else (cpus, cpus)
    os.sched_setaffinity(0, client_cpus)
    with tempfile.TemporaryDirectory() as tmp:
        dns = free_port()
        srv = start(Path(tmp) / "srv", None, "--dns-addr", f"127.0.0.1:{dns}",
                    "--public-ip", "127.0.0.1", "--dns-check-resolver", f"127.0.0.1:{dns}",
                    "--acme-directory", "off")
        pin(srv.proc.pid, server_cpus)
        try:
            with live_tunnels(srv) as bound:
                t0 = time.monotonic()
                kinds = seed(srv, args.rows)
                note(f"{bound} live tunnels; {args.rows} rows of each of {len(kinds)} kinds "
                     f"({time.monotonic() - t0:.0f} s seeding)")
                report(srv, args, bound, kinds)
        finally:
            srv.stop()


def report(srv: Server, args: argparse.Namespace, bound: int, kinds: list[str]) -> None:
    with signed_in(srv) as browser, srv.client() as api:
        first = ttfb(browser, "/dashboard/", args.loads)
        page = browser.get("/dashboard/").text
        if not re.search(r'<li class="card" id="ts-', page):
            raise SystemExit("the overview shows no agent session")
        one = api.get("/ip_policies", params={"limit": "1"}).json()["ip_policies"][0]["id"]
        runtime = ("/tunnel_sessions", "/tunnels")
        lists = [e.kind.url for _, entries in GROUPS for e in entries
                 if e.kind.url not in (*runtime, "/endpoints")]

        def calls(urls: list[str] | tuple[str, ...]) -> Callable[[], None]:
            def run() -> None:  # (what a page asks the API, one after another)
                for url in urls:
                    api.get(url, params={"limit": "100"})
            return run

        rows = [
            ("overview /dashboard/", cost(srv, lambda: browser.get("/dashboard/"), 20),
             "sessions and tunnels, 100 each", cost(srv, calls(runtime), 20)),
            ("its counts /dashboard/counts", cost(srv, lambda: browser.get("/dashboard/counts"),
                                                  20),
             f"{len(lists)} lists of 100", cost(srv, calls(lists), 20)),
            ("list /dashboard/ip_policies", cost(srv, lambda: browser.get(
                "/dashboard/ip_policies"), 50), "GET /ip_policies?limit=50",
             cost(srv, lambda: api.get("/ip_policies", params={"limit": "50"}), 50)),
            ("one /dashboard/ip_policies/ID", cost(srv, lambda: browser.get(
                f"/dashboard/ip_policies/{one}"), 100), "GET /ip_policies/ID",
             cost(srv, lambda: api.get(f"/ip_policies/{one}"), 100)),
        ]
    loads = full_loads(srv, args.loads)
    print(f"\nDashboard, {bound} live tunnels in {SESSIONS} sessions, {args.rows:,} rows of each "
          f"of {len(kinds)} kinds (SQLite), server on one core, {args.loads} loads:\n")
    print("| measure | p50 ms | p99 ms |\n|---|---:|---:|")
    print(f"| overview, time to first byte | {statistics.median(first):.1f} | "
          f"{_pct(first, 0.99):.1f} |")
    print("| overview, full load in Chromium (DNS checks and counts in) | "
          f"{statistics.median(loads):.1f} | {_pct(loads, 0.99):.1f} |")
    print("\n| page | server CPU µs | API call(s) it wraps | server CPU µs | page / API |")
    print("|---|---:|---|---:|---:|")
    for name, page_us, wrapped, api_us in rows:
        print(f"| {name} | {page_us:,.0f} | {wrapped} | {api_us:,.0f} | {page_us / api_us:.2f} |")


if __name__ == "__main__":
    main()
