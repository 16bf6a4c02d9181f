"""Management API benchmark: create, get and list (page of 100) on ``/ip_policies`` with 1k and
100k rows, on SQLite and PostgreSQL, each next to a bare ASGI app returning fixed JSON, served
by uvicorn the way ``edgeway serve`` serves the API (``uvicorn.Server.serve()`` on the event
loop ``edgeway.cli`` picks (uvloop when installed), httptools, no access log, no lifespan), on
the same machine in the same run.

Run from the repository root:  python -m bench.api_bench [--backends sqlite,postgres] [--quick]
Needs wrk (``apt-get install wrk``). Rows are seeded straight into the database in bulk. Exit
status 0 whether or not the targets are met (this is a measurement); 1 if the benchmark itself
failed (socket errors or non-2xx responses), 2 if wrk is missing.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import re
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import asyncpg  # noqa: E402
import httpx  # noqa: E402

from edgeway import ids  # noqa: E402
from tests.server import HEADERS, Server, free_port, fresh_pg_database, start  # noqa: E402

SIZES = (1_000, 100_000)
GET_SAMPLE = 10_000  # distinct ids a get run rotates over
BARE_BODY = b'{"message":"hello"}'


class BenchError(Exception):
    pass


@dataclass
class Result:
    rps: float
    p50: float  # ms
    p99: float  # ms
    cpu_us: float = 0.0  # server process CPU time (user + system) per request
    busy: float = 0.0  # the server process's CPU time / wall time during the run


Row = tuple[str, int, str, Result]  # backend, rows in the table, operation, result


async def bare_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(BARE_BODY)).encode())]})
    await send({"type": "http.response.body", "body": BARE_BODY})


def serve_bare(port: int) -> None:
    import uvicorn  # the same Config, server and event loop as edgeway.server / edgeway.cli

    from edgeway.runner import loop_factory
    config = uvicorn.Config(bare_app, host="127.0.0.1", port=port, log_config=None,
                            access_log=False, lifespan="off", server_header=False)
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        runner.run(uvicorn.Server(config).serve())


def pin(pid: int, cpus: set[int] | None) -> None:
    """Servers on one core, wrk on the other: much less run-to-run noise on a small box."""
    for tid in os.listdir(f"/proc/{pid}/task") if cpus else []:
        os.sched_setaffinity(int(tid), cpus or set())


@contextlib.contextmanager
def bare_server(cpus: set[int] | None) -> Iterator[tuple[str, int]]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()),
                             "--serve-bare", str(port)])
    try:
        for _ in range(300):
            if proc.poll() is not None:
                raise BenchError(f"bare app exited ({proc.returncode})")
            with contextlib.suppress(OSError):
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            time.sleep(0.1)
        pin(proc.pid, cpus)
        yield f"http://127.0.0.1:{port}", proc.pid
    finally:
        proc.terminate()
        proc.wait(10)


def parse_wrk(out: str) -> tuple[Result, int]:
    """wrk --latency output to a Result and the number of requests; errors raise."""
    if re.search(r"Non-2xx or 3xx responses: \d+|Socket errors: ", out):
        raise BenchError(f"wrk saw errors (non-2xx responses or socket errors):\n{out}")
    unit = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3}
    p50 = re.search(r"^\s+50%\s+([\d.]+)(us|ms|s|m)$", out, re.M)
    p99 = re.search(r"^\s+99%\s+([\d.]+)(us|ms|s|m)$", out, re.M)
    rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    n = re.search(r"(\d+) requests in", out)
    if not (p50 and p99 and rps and n):
        raise BenchError(f"cannot parse wrk output:\n{out}")
    return Result(float(rps[1]), float(p50[1]) * unit[p50[2]],
                  float(p99[1]) * unit[p99[2]]), int(n[1])


def lua(tmp: Path, name: str, token: str | None, paths: list[str], post: bool = False) -> Path:
    """A wrk script that sends the API headers (unless token is None) and rotates paths."""
    lines = [f'wrk.headers["{k}"] = "{v}"' for k, v in HEADERS.items()] if token else []
    if token:
        lines.append(f'wrk.headers["Authorization"] = "Bearer {token}"')
    if post:
        lines += ['wrk.method = "POST"', 'wrk.body = \'{"description":"bench"}\'',
                  'wrk.headers["Content-Type"] = "application/json"']
    lines.append("local paths = {" + ",".join(f'"{p}"' for p in paths) + "}")
    lines += ["local i = 0", "request = function()", "  i = i % #paths + 1",
              "  return wrk.format(nil, paths[i])", "end"]
    script = tmp / f"{name}.lua"
    script.write_text("\n".join(lines) + "\n")
    return script


def cpu_seconds(pid: int) -> float:  # user + system time of the process, all threads
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def note(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def run_wrk(base: str, script: Path, pid: int, args: argparse.Namespace) -> Result:
    def once(seconds: int) -> str:  # wrk takes whole seconds
        cmd = ["wrk", "--latency", f"-t{getattr(args, 'threads', 1)}", f"-c{args.connections}",
               f"-d{seconds}s",
               "-s", str(script), base]
        cpus = args.wrk_cpus
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 60,
                              preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None)
        if done.returncode != 0:
            raise BenchError(f"wrk failed: {done.stderr}{done.stdout}")
        return done.stdout
    parse_wrk(once(args.warmup))  # warm-up: page cache, connection pool, statement caches
    results: list[Result] = []
    for _ in range(max(args.repeat, 1)):  # best of N: the run least disturbed by other load
        cpu, t0 = cpu_seconds(pid), time.monotonic()
        res, n = parse_wrk(once(args.duration))
        cpu, wall = cpu_seconds(pid) - cpu, time.monotonic() - t0
        res.cpu_us, res.busy = cpu * 1e6 / max(n, 1), cpu / wall
        results.append(res)
    return max(results, key=lambda r: r.rps)


def top_up(server: Server, total: int) -> list[str]:
    """Insert rows in bulk, straight into the database, until the table holds ``total``."""
    ts = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    doc = f'{{"description":"bench","metadata":"","created_at":"{ts}"}}'
    sql = "SELECT count(*) FROM ip_policies"
    if server.database_url:
        async def pg(url: str) -> list[str]:
            conn = await asyncpg.connect(url)
            try:
                rows = [(ids.new_id("ipp"), doc) for _ in range(total - await conn.fetchval(sql))]
                await conn.copy_records_to_table("ip_policies", records=rows,
                                                 columns=["id", "doc"])
                await conn.execute("ANALYZE ip_policies")
                return [r[0] for r in rows]
            finally:
                await conn.close()
        return asyncio.run(pg(server.database_url))
    path = server.data_dir / "edgeway.db"
    with contextlib.closing(sqlite3.connect(path, timeout=30)) as conn, conn:  # one transaction
        rows = [(ids.new_id("ipp"), doc) for _ in range(total - conn.execute(sql).fetchone()[0])]
        conn.executemany("INSERT INTO ip_policies (id, doc) VALUES (?, ?)", rows)
    return [r[0] for r in rows]


def check(server: Server, path: str, post: bool) -> None:
    """One request by hand first, so a broken setup fails with the server's own words."""
    with server.client() as c:
        r = c.post(path, json={"description": "bench"}) if post else c.get(path)
    if r.status_code >= 300:
        raise BenchError(f"{'POST' if post else 'GET'} {path}: {r.status_code} {r.text}")
    if path.startswith("/ip_policies?") and len(r.json()["ip_policies"]) != 100:
        raise BenchError(f"GET {path} returned {len(r.json()['ip_policies'])} items, not 100")


def bench_backend(backend: str, url: str | None, tmp: Path, bare: tuple[str, int],
                  args: argparse.Namespace) -> list[Row]:
    out: list[Row] = []
    server = start(tmp / backend, url)
    pin(server.proc.pid, args.server_cpus)
    try:
        seeded: list[str] = []  # ascending: new_id is strictly increasing in this process
        for size in SIZES:
            time.sleep(0.5)  # let creates still in flight when wrk stopped land
            t0 = time.monotonic()
            seeded += top_up(server, size)
            note(f"[{backend}] {size} rows ({time.monotonic() - t0:.1f}s seeding)")
            rnd = random.Random(size)
            gets = [f"/ip_policies/{i}" for i in rnd.sample(seeded, min(GET_SAMPLE, len(seeded)))]
            deep = [f"/ip_policies?limit=100&before_id={i}"  # >= 150 older rows: full pages
                    for i in rnd.sample(seeded[150:], min(200, len(seeded) - 150))]
            first = "/ip_policies?limit=100"
            runs = [("bare GET", None, ["/"], False), ("get", gets[0], gets, False),
                    ("list", first, [first], False), ("list deep", deep[0], deep, False),
                    ("create", "/ip_policies", ["/ip_policies"], True),
                    ("bare GET again", None, ["/"], False)]
            for name, probe, paths, post in runs:
                if probe:
                    check(server, probe, post)
                script = lua(tmp, name.replace(" ", "_"), probe and server.token, paths, post)
                base, pid = bare if probe is None else (server.base_url, server.proc.pid)
                res = run_wrk(base, script, pid, args)
                note(f"[{backend} {size}] {name}: {res.rps:.0f} req/s, {res.cpu_us:.0f} us CPU")
                out.append((backend, size, name, res))
    except BenchError as exc:
        tail = "".join(server.log().splitlines(keepends=True)[-20:])
        raise BenchError(f"{exc}\n--- {backend} server log (last lines) ---\n{tail}") from None
    finally:
        server.stop()
    return out


def report(rows: list[Row]) -> None:
    def find(backend: str, size: int, op: str) -> Result | None:
        return next((r for b, s, o, r in rows if (b, s, o) == (backend, size, op)), None)

    def bare(backend: str, size: int) -> Result:  # the faster, least disturbed, bare run
        return max((r for b, s, o, r in rows if (b, s) == (backend, size) and
                    o.startswith("bare")), key=lambda r: r.rps)

    print("| backend | rows | operation | req/s | p50 ms | p99 ms | x bare req/s "
          "| list cost vs 1k (1/rps; p50) | server CPU us/req (busy) |")
    print("|---|---:|---|---:|---:|---:|---:|---|---:|")
    for backend, size, op, r in rows:
        small = find(backend, SIZES[0], op)
        vs = (f"{small.rps / r.rps:.2f}x; {r.p50 / small.p50:.2f}x"
              if op.startswith("list") and size != SIZES[0] and small else "")
        print(f"| {backend} | {size:,} | {op} | {r.rps:,.0f} | {r.p50:.2f} | {r.p99:.2f} "
              f"| {r.rps / bare(backend, size).rps:.2f} | {vs} | {r.cpu_us:,.0f} "
              f"({r.busy:.0%}) |")
    print("\n'x bare' divides by the faster of the two bare runs of that backend and row count. "
          "'server CPU' is the\nCPU time of the serving process alone (not PostgreSQL's); busy "
          "is that CPU time over the run's wall time:\nbelow ~90% the server was not the "
          "bottleneck (wrk, PostgreSQL or other load on the box was).\n\nTargets:")
    for backend, size, op, r in rows:
        base, small = bare(backend, size), find(backend, SIZES[0], op)
        rps, cpu = base.rps, base.cpu_us
        if op == "bare GET again" and base.busy < 0.9:
            print(f"- NOISE: {backend} {size:,} rows: even the faster bare run kept the app only "
                  f"{base.busy:.0%} busy: something else limited it, so 'x bare' reads too high")
        if op == "get":
            print(f"- {'PASS' if r.rps / rps >= 0.25 else 'FAIL'}: {backend} {size:,} rows: "
                  f"get at {r.rps / rps:.0%} of the bare app's rate (target >= 25%); "
                  f"by server CPU per request {cpu / max(r.cpu_us, 1e-9):.0%}")
        if op.startswith("list") and size != SIZES[0] and small:
            cost = small.rps / r.rps
            print(f"- {'PASS' if cost <= 1.5 else 'FAIL'}: {backend} {op} page at {size:,} "
                  f"rows costs {cost:.2f}x its cost at {SIZES[0]:,} rows (1/rps; p50 "
                  f"{r.p50 / small.p50:.2f}x; server CPU per request "
                  f"{r.cpu_us / max(small.cpu_us, 1e-9):.2f}x; target <= 1.5x)")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backends", default="sqlite,postgres",
                   help="comma-separated: sqlite, postgres (default: both)")
    p.add_argument("--duration", type=int, default=5, help="seconds per measured run")
    p.add_argument("--warmup", type=int, default=2, help="seconds of warm-up per run")
    p.add_argument("--connections", type=int, default=32, help="wrk connections (1 thread)")
    p.add_argument("--repeat", type=int, default=1,
                   help="measured runs per row, the fastest kept (default: 1)")
    p.add_argument("--quick", action="store_true", help="2 s runs, 1 s warm-up")
    p.add_argument("--no-pin", action="store_true",
                   help="do not pin the servers to one CPU and wrk to another")
    p.add_argument("--serve-bare", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.serve_bare:
        serve_bare(args.serve_bare)
        return 0
    if shutil.which("wrk") is None:
        print("api_bench needs wrk on PATH: apt-get update && apt-get install -y wrk "
              "(or build https://github.com/wg/wrk)", file=sys.stderr)
        return 2
    if args.quick:
        args.duration, args.warmup = 2, 1
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    if set(backends) - {"sqlite", "postgres"} or not backends:
        p.error(f"--backends takes sqlite and/or postgres, not {args.backends!r}")
    cpus = sorted(os.sched_getaffinity(0))
    pinned = not args.no_pin and len(cpus) >= 2
    args.server_cpus, args.wrk_cpus = ({cpus[-1]}, {cpus[0]}) if pinned else (None, None)
    rows: list[Row] = []
    t0, load = time.monotonic(), os.getloadavg()[0]
    try:
        with tempfile.TemporaryDirectory(prefix="edgeway-bench-") as tmp, \
                bare_server(args.server_cpus) as bare:
            for backend in backends:
                pg = fresh_pg_database() if backend == "postgres" else contextlib.nullcontext()
                with pg as url:
                    rows += bench_backend(backend, url, Path(tmp), bare, args)
    except (BenchError, RuntimeError, httpx.HTTPError, OSError) as exc:
        if rows:
            report(rows)
        note(f"\nBENCHMARK FAILED: {exc}")
        return 1
    where = f"servers on CPU {cpus[-1]}, wrk on CPU {cpus[0]}" if pinned else "no CPU pinning"
    print(f"\nwrk -t1 -c{args.connections} -d{args.duration}s (+{args.warmup}s warm-up) per row, "
          f"best of {max(args.repeat, 1)}; {where}; {time.monotonic() - t0:.0f}s in all; "
          f"load average {load:.2f} at start, {os.getloadavg()[0]:.2f} at end\n")
    report(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
