"""Management API benchmark: create, get and list (page of 100) on ``/ip_policies`` with 1k and
100k rows, on SQLite and PostgreSQL, each next to a bare ASGI app returning fixed JSON, served
by uvicorn the way ``edgeway serve`` serves the API (stdlib asyncio loop, httptools, no access
log, no lifespan), on the same machine in the same run.

Run from the repository root:  python -m bench.api_bench [--backends sqlite,postgres] [--quick]
Needs wrk (``apt-get install wrk``). Rows are seeded straight into the database in bulk. Exit
status 0 whether or not the targets are met (this is a measurement); 1 if the benchmark itself
failed (socket errors or non-2xx responses), 2 if wrk is missing.
"""

from __future__ import annotations

import argparse
import asyncio
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
from contextlib import contextmanager, nullcontext
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


# --- the bare baseline -------------------------------------------------------------------

async def bare_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json"),
                            (b"content-length", str(len(BARE_BODY)).encode())]})
    await send({"type": "http.response.body", "body": BARE_BODY})


def serve_bare(port: int) -> None:
    import uvicorn  # same Config and same asyncio.run(Server.serve()) as edgeway/server.py
    config = uvicorn.Config(bare_app, host="127.0.0.1", port=port, log_config=None,
                            access_log=False, lifespan="off", server_header=False)
    asyncio.run(uvicorn.Server(config).serve())


def wait_port(port: int, proc: subprocess.Popen[Any]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise BenchError(f"bare app exited ({proc.returncode})")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise BenchError("bare app did not start listening")


@contextmanager
def bare_server() -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()),
                             "--serve-bare", str(port)])
    try:
        wait_port(port, proc)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(10)


# --- wrk -----------------------------------------------------------------------------------

@dataclass
class Result:
    rps: float
    p50: float  # ms
    p99: float  # ms


_UNIT = {"us": 1e-3, "ms": 1.0, "s": 1e3, "m": 60e3}


def _ms(text: str) -> float:
    m = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text)
    if not m:
        raise BenchError(f"cannot parse wrk latency {text!r}")
    return float(m[1]) * _UNIT[m[2]]


def parse_wrk(out: str) -> Result:
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    sock = re.search(r"Socket errors: (.*)", out)
    if bad or sock:
        raise BenchError(f"wrk saw errors:\n{out}")
    p50 = re.search(r"^\s+50%\s+(\S+)", out, re.M)
    p99 = re.search(r"^\s+99%\s+(\S+)", out, re.M)
    rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if not (p50 and p99 and rps):
        raise BenchError(f"cannot parse wrk output:\n{out}")
    return Result(float(rps[1]), _ms(p50[1]), _ms(p99[1]))


def lua(tmp: Path, name: str, token: str | None, paths: list[str], post: bool = False) -> Path:
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


def run_wrk(base: str, script: Path, args: argparse.Namespace) -> Result:
    def once(seconds: int) -> str:  # wrk takes whole seconds
        cmd = ["wrk", "--latency", "-t1", f"-c{args.connections}", f"-d{seconds}s",
               "-s", str(script), base]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 60)
        if done.returncode != 0:
            raise BenchError(f"wrk failed: {done.stderr}{done.stdout}")
        return done.stdout
    parse_wrk(once(args.warmup))  # warm-up: page cache, pools, lazy imports
    return parse_wrk(once(args.duration))


# --- seeding -------------------------------------------------------------------------------

def new_rows(n: int) -> list[tuple[str, str]]:
    ts = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    doc = f'{{"description":"bench","metadata":"","created_at":"{ts}"}}'
    return [(ids.new_id("ipp"), doc) for _ in range(n)]


def seed_sqlite(path: Path, n: int) -> list[str]:
    rows = new_rows(n)
    conn = sqlite3.connect(path, isolation_level=None, timeout=30)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany("INSERT INTO ip_policies (id, doc) VALUES (?, ?)", rows)
        conn.execute("COMMIT")
        conn.execute("ANALYZE")
    finally:
        conn.close()
    return [r[0] for r in rows]


async def _seed_pg(url: str, n: int) -> list[str]:
    rows = new_rows(n)
    conn = await asyncpg.connect(url)
    try:
        await conn.copy_records_to_table("ip_policies", records=rows, columns=["id", "doc"])
        await conn.execute("ANALYZE ip_policies")
    finally:
        await conn.close()
    return [r[0] for r in rows]


def count_rows(server: Server) -> int:
    if server.database_url:
        async def q() -> int:
            conn = await asyncpg.connect(server.database_url)
            try:
                return int(await conn.fetchval("SELECT count(*) FROM ip_policies"))
            finally:
                await conn.close()
        return asyncio.run(q())
    with sqlite3.connect(server.data_dir / "edgeway.db") as conn:
        return int(conn.execute("SELECT count(*) FROM ip_policies").fetchone()[0])


def seed(server: Server, n: int) -> list[str]:
    if n <= 0:
        return []
    if server.database_url:
        return asyncio.run(_seed_pg(server.database_url, n))
    return seed_sqlite(server.data_dir / "edgeway.db", n)


# --- one backend ---------------------------------------------------------------------------

Row = tuple[str, int, str, Result]


def check(server: Server, path: str, post: bool = False) -> None:
    """One request by hand first, so a broken setup fails with the server's own words."""
    with server.client() as c:
        r = c.post(path, json={"description": "bench"}) if post else c.get(path)
    if r.status_code >= 300:
        raise BenchError(f"{'POST' if post else 'GET'} {path}: {r.status_code} {r.text}")
    if path.startswith("/ip_policies?") and len(r.json()["ip_policies"]) != 100:
        raise BenchError(f"GET {path} returned {len(r.json()['ip_policies'])} items, not 100")


def bench_backend(backend: str, url: str | None, tmp: Path, bare: str,
                  args: argparse.Namespace) -> list[Row]:
    out: list[Row] = []
    server = start(tmp / backend, url)
    try:
        seeded: list[str] = []  # ascending: new_id is strictly increasing in this process
        for size in args.sizes:
            t0 = time.monotonic()
            seeded += seed(server, size - count_rows(server))
            print(f"[{backend}] {count_rows(server)} rows ({time.monotonic() - t0:.1f}s seeding)",
                  file=sys.stderr, flush=True)
            rnd = random.Random(size)
            gets = [f"/ip_policies/{i}" for i in rnd.sample(seeded, min(GET_SAMPLE, len(seeded)))]
            deep = [f"/ip_policies?limit=100&before_id={i}"
                    for i in rnd.sample(seeded[150:], min(200, len(seeded) - 150))]
            runs = [("bare GET", bare, lua(tmp, "bare", None, ["/"]), False),
                    ("get", gets[0], lua(tmp, "get", server.token, gets), False),
                    ("list", "/ip_policies?limit=100",
                     lua(tmp, "list", server.token, ["/ip_policies?limit=100"]), False),
                    ("list deep", deep[0], lua(tmp, "deep", server.token, deep), False),
                    ("create", "/ip_policies",
                     lua(tmp, "create", server.token, ["/ip_policies"], post=True), True)]
            for name, probe, script, post in runs:
                target = bare if name == "bare GET" else server.base_url
                if name != "bare GET":
                    check(server, probe, post)
                res = run_wrk(target, script, args)
                print(f"[{backend} {size}] {name}: {res.rps:.0f} req/s", file=sys.stderr,
                      flush=True)
                out.append((backend, size, name, res))
    except BenchError as exc:
        tail = "".join(server.log().splitlines(keepends=True)[-20:])
        raise BenchError(f"{exc}\n--- {backend} server log (last lines) ---\n{tail}") from None
    finally:
        server.stop()
    return out


# --- report --------------------------------------------------------------------------------

def report(rows: list[Row]) -> None:
    def find(backend: str, size: int, op: str) -> Result | None:
        return next((r for b, s, o, r in rows if (b, s, o) == (backend, size, op)), None)

    print("| backend | rows | operation | req/s | p50 ms | p99 ms | x bare req/s "
          "| cost vs 1k (1/rps; p50) |")
    print("|---|---:|---|---:|---:|---:|---:|---|")
    for backend, size, op, r in rows:
        bare = find(backend, size, "bare GET")
        ratio = f"{r.rps / bare.rps:.2f}" if bare else "-"
        small = find(backend, SIZES[0], op)
        vs = (f"{small.rps / r.rps:.2f}x; {r.p50 / small.p50:.2f}x"
              if op.startswith("list") and size != SIZES[0] and small else "")
        print(f"| {backend} | {size:,} | {op} | {r.rps:,.0f} | {r.p50:.2f} | {r.p99:.2f} "
              f"| {ratio} | {vs} |")
    print("\nTargets:")
    for backend, size, op, r in rows:
        bare = find(backend, size, "bare GET")
        if op == "get" and bare:
            share = r.rps / bare.rps
            verdict = "PASS" if share >= 0.25 else "FAIL"
            print(f"- {verdict}: {backend} {size:,} rows: get at {share:.0%} of the bare "
                  f"app's rate (target >= 25%)")
        small = find(backend, SIZES[0], op)
        if op.startswith("list") and size != SIZES[0] and small:
            cost = small.rps / r.rps
            verdict = "PASS" if cost <= 1.5 else "FAIL"
            print(f"- {verdict}: {backend} {op} page at {size:,} rows costs {cost:.2f}x "
                  f"its cost at {SIZES[0]:,} (1/rps; p50 {r.p50 / small.p50:.2f}x; "
                  f"target <= 1.5x)")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backends", default="sqlite,postgres",
                   help="comma-separated: sqlite, postgres (default: both)")
    p.add_argument("--duration", type=int, default=5, help="seconds per measured run")
    p.add_argument("--warmup", type=int, default=2, help="seconds of warm-up per run")
    p.add_argument("--connections", type=int, default=32, help="wrk connections (1 thread)")
    p.add_argument("--quick", action="store_true", help="2 s runs, 1 s warm-up")
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
    args.sizes = SIZES
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    unknown = set(backends) - {"sqlite", "postgres"}
    if unknown:
        p.error(f"unknown backend(s): {', '.join(sorted(unknown))}")
    rows: list[Row] = []
    t0 = time.monotonic()
    try:
        with tempfile.TemporaryDirectory(prefix="edgeway-bench-") as tmp, bare_server() as bare:
            for backend in backends:
                pg = fresh_pg_database() if backend == "postgres" else nullcontext(None)
                with pg as url:
                    rows += bench_backend(backend, url, Path(tmp), bare, args)
    except (BenchError, httpx.HTTPError, OSError) as exc:
        if rows:
            report(rows)
        print(f"\nBENCHMARK FAILED: {exc}", file=sys.stderr)
        return 1
    print(f"wrk -t1 -c{args.connections} -d{args.duration}s (+{args.warmup}s warm-up) "
          f"per row; {time.monotonic() - t0:.0f}s total\n")
    report(rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
