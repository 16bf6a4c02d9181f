"""Cluster benchmark: the cost of the hop between nodes, of a second worker, and the time a
node's loss costs. One run on loopback, one PostgreSQL database, the same 13-byte upstream
(Node ``http``) and the official ngrok Python SDK as the agent:

- the hop: wrk through the node that holds the agent's session (direct) and through another
  node of the cluster (the public connection carried over the mutual-TLS node link), at 1 and
  64 connections: requests/s, p50, p99, and the hop's ratios (target: adds < 0.3 ms at p50,
  keeps >= 70% of the requests/s);
- every core: ``edgeway serve --workers 1`` and ``--workers 2`` at 64 connections, one tunnel
  (half the connections land on the worker without the session and cross the Unix-socket
  link), nothing pinned (the workers may use both cores; wrk shares them): requests/s and the
  server processes' CPU per request;
- failover: SIGKILL of the node holding the session, to the first request served again
  through the other (the SDK reconnects to the shared tunnel address and binds again).

Run from the repository root:  python -m bench.cluster_bench [--quick] [--duration S] [--no-pin]
Needs wrk, Node, the SDK and PostgreSQL ($EDGEWAY_TEST_DATABASE_URL, as the tests). Exit status
0 whether or not the targets are met; 1 if the benchmark itself failed. With pinning (2+ CPUs)
every server-side process runs on the last CPU and wrk on the first.
"""

from __future__ import annotations

import argparse
import base64
import os
import secrets
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from bench.api_bench import BenchError, Result, cpu_seconds, note, pin, run_wrk  # noqa: E402
from bench.common import Children, bench_main  # noqa: E402
from bench.common import parse_args as common_args  # noqa: E402
from bench.edge_bench import Agent, probe, upstream  # noqa: E402
from tests.server import Server, free_port, fresh_pg_database, start  # noqa: E402

CONNS = (1, 64)


@dataclass
class Report:
    hop: dict[tuple[str, int], Result] = field(default_factory=dict)  # (direct|hop, conns)
    workers: dict[int, Result] = field(default_factory=dict)  # workers -> c64 result
    failover: float = 0.0  # seconds


def _wrk(report_row: dict[tuple[str, int], Result], key: tuple[str, int], base: str,
         host: str, pid: int, tmp: Path, args: argparse.Namespace, conns: int) -> None:
    probe(base, host)
    script = tmp / "host.lua"
    script.write_text(f'wrk.headers["Host"] = "{host}"\n')
    before = cpu_seconds(pid)
    res = run_wrk(base, script, pid, argparse.Namespace(**{**vars(args), "connections": conns}))
    report_row[key] = res
    note(f"{key}: {res.rps:,.0f} req/s, p50 {res.p50:.3f} ms, p99 {res.p99:.3f} ms "
         f"({cpu_seconds(pid) - before:.1f} s CPU)")


def _node(tmp: Path, name: str, url: str, token: str | None, env: dict[str, str],
          ports: tuple[int, int, int, int], cpus: set[int] | None) -> Server:
    srv = start(tmp / name, url, "--reuse-port", "--node-addr", f"127.0.0.1:{free_port()}",
                "--node-lease", "5", token=token, env=env, ports=ports)
    pin(srv.proc.pid, cpus)
    return srv


def bench_hop_and_failover(tmp: Path, args: argparse.Namespace, report: Report,
                           children: Children, up: int) -> None:
    env = {"EDGEWAY_SECRET_KEY": base64.b64encode(secrets.token_bytes(32)).decode()}
    tunnel = free_port()
    with fresh_pg_database() as url:
        a = _node(tmp, "a", url, None, env, (free_port(), tunnel, free_port(), free_port()),
                  args.server_cpus)
        nodes = [a]
        try:
            nodes.append(_node(tmp, "b", url, a.token, env,
                               (free_port(), tunnel, free_port(), free_port()), args.server_cpus))
            with a.client() as api:
                token = api.post("/credentials", json={}).json()["token"]
            agent = Agent(children, "agent", a, token)
            pin(agent.proc.pid, args.server_cpus)
            host = agent.bind("http", f"http://127.0.0.1:{up}")[0].split("://")[1]
            holder = _holder_by_log(nodes)  # (the kernel chose the node the agent reached)
            other = nodes[1 - holder]
            _until_served(other, host)
            for conns in CONNS:
                for path, srv in (("direct", nodes[holder]), ("hop", other)):
                    _wrk(report.hop, (path, conns), f"http://127.0.0.1:{srv.http_port}/",
                         host, srv.proc.pid, tmp, args, conns)
            nodes[holder].proc.send_signal(signal.SIGKILL)
            nodes[holder].proc.wait()
            killed = time.monotonic()
            _until_served(other, host, within=60)
            report.failover = time.monotonic() - killed
            note(f"failover: {report.failover:.2f} s")
            agent.close()
        finally:
            for srv in nodes:
                srv.stop()


def _holder_by_log(nodes: list[Server]) -> int:
    for i, srv in enumerate(nodes):
        if "agent_session_start" in srv.log():
            return i
    raise BenchError("no node logged the agent's session")


def _until_served(srv: Server, host: str, within: float = 5.0) -> None:
    began = time.monotonic()
    while time.monotonic() - began < within:
        try:
            if httpx.get(f"http://127.0.0.1:{srv.http_port}/", headers={"Host": host},
                         timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.02)
    raise BenchError(f"{host} not served by {srv.base_url} within {within:g} s")


def _worker_pids(srv: Server) -> list[int]:
    text = Path(f"/proc/{srv.proc.pid}/task/{srv.proc.pid}/children").read_text()
    return [int(p) for p in text.split()]


def bench_workers(tmp: Path, args: argparse.Namespace, report: Report, children: Children,
                  up: int) -> None:
    for count in (1, 2):
        with fresh_pg_database() as url:
            srv = start(tmp / f"workers{count}", url, "--workers", str(count))
            try:
                pids = _worker_pids(srv) if count > 1 else [srv.proc.pid]
                with srv.client() as api:
                    token = api.post("/credentials", json={}).json()["token"]
                agent = Agent(children, f"agent{count}", srv, token)
                host = agent.bind("http", f"http://127.0.0.1:{up}")[0].split("://")[1]
                for _ in range(10):  # (the bind reached the other worker too: a notification)
                    _until_served(srv, host)
                before = sum(cpu_seconds(p) for p in pids)
                res = run_wrk(f"http://127.0.0.1:{srv.http_port}/", _script(tmp, host),
                              pids[0], argparse.Namespace(**{**vars(args), "connections": 64,
                                                             "wrk_cpus": None}))
                res.cpu_us = (sum(cpu_seconds(p) for p in pids) - before) * 1e6 / max(
                    res.rps * (args.duration * max(args.repeat, 1) + args.warmup), 1)
                report.workers[count] = res
                note(f"--workers {count} c64: {res.rps:,.0f} req/s, p50 {res.p50:.3f} ms")
                agent.close()
            finally:
                srv.stop()


def _script(tmp: Path, host: str) -> Path:
    script = tmp / "workers.lua"
    script.write_text(f'wrk.headers["Host"] = "{host}"\n')
    return script


def run(tmp: Path, args: argparse.Namespace, report: Report) -> None:
    children = Children(tmp, args.server_cpus)
    try:
        up, _ = upstream(children, "http")
        bench_hop_and_failover(tmp, args, report, children, up)
        bench_workers(tmp, args, report, children, up)
    finally:
        children.stop_all()


def print_report(report: Report) -> None:
    print("| path | conns | req/s | p50 ms | p99 ms |\n|---|---:|---:|---:|---:|")
    for (path, conns), r in sorted(report.hop.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        print(f"| {path} | {conns} | {r.rps:,.0f} | {r.p50:.3f} | {r.p99:.3f} |")
    for conns in CONNS:
        d, h = report.hop.get(("direct", conns)), report.hop.get(("hop", conns))
        if d and h:
            print(f"\nhop at c{conns}: {h.rps / d.rps:.2f}x the requests/s (target >= 0.70), "
                  f"adds {h.p50 - d.p50:+.3f} ms at p50 (target < 0.3)")
    if report.workers:
        print("\n| workers | c64 req/s | p50 ms | p99 ms | server CPU µs/req |\n"
              "|---:|---:|---:|---:|---:|")
        for count, r in sorted(report.workers.items()):
            print(f"| {count} | {r.rps:,.0f} | {r.p50:.3f} | {r.p99:.3f} | {r.cpu_us:.0f} |")
        if 1 in report.workers and 2 in report.workers:
            print(f"\n--workers 2 / --workers 1: "
                  f"{report.workers[2].rps / report.workers[1].rps:.2f}x the requests/s")
    if report.failover:
        print(f"\nfailover: {report.failover:.2f} s from SIGKILL of the node holding the "
              "session to the first request served again through the other")


def main() -> int:
    args = common_args(__doc__ or "", lambda p: None, bulk_mib=0,
                       repeat_help="wrk runs per row (best of N)",
                       quick_help="2 s runs", no_pin_help="do not pin processes to CPUs")
    os.environ.setdefault("EDGEWAY_TEST_BACKENDS", "sqlite,postgres")
    return bench_main(args, Report(), run, print_report, quick_mib=0, tmp_prefix="cluster-")


if __name__ == "__main__":
    raise SystemExit(main())
