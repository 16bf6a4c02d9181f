"""Cluster benchmark: the cost of the hop between nodes, of a second worker, and the time a
node's loss costs. One run on loopback, one PostgreSQL database, the same 13-byte upstream
(Node ``http``) and the official ngrok Python SDK as the agent:

- the hop: wrk through the node that holds the agent's session (direct) and through another
  node of the cluster (the public connection carried over the mutual-TLS node link), at 1 and
  64 connections: requests/s, p50, p99, and the hop's ratios (target: adds < 0.3 ms at p50,
  keeps >= 70% of the requests/s);
- every core: ``edgeway serve --workers 1`` and ``--workers 2`` at 64 connections with one
  tunnel, with four (four agents, whose sessions the kernel spreads over the workers), and
  with one tunnel and a new connection per request (half the connections land on the worker
  without the session, which hands the socket over), nothing pinned (the workers may use
  both cores; wrk shares them): requests/s, the server processes' CPU per request, and the
  connections handed over and carried over the link;
- change propagation: an IP restriction enforced and lifted through one node's API, to the
  other node's traffic answering accordingly (target: within 100 ms);
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
import json
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
    # (workload, workers) -> c64 result
    workers: dict[tuple[str, int], Result] = field(default_factory=dict)
    handed: tuple[int, int] = (0, 0)  # --workers 2: connections handed over, carried
    failover: float = 0.0  # seconds
    propagation: list[float] = field(default_factory=list)  # seconds, change to traffic


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
            _propagation(report, other, nodes[holder], host)
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


def _propagation(report: Report, writer: Server, reader: Server, host: str,
                 rounds: int = 10) -> None:
    """Seconds from a change committed through ``writer``'s API to ``reader`` enforcing it
    on traffic: an IP restriction of type endpoints (allowing only a documentation address)
    enforced, then no longer, ``rounds`` times each."""
    with writer.client() as api, httpx.Client(base_url=f"http://127.0.0.1:{reader.http_port}",
                                              headers={"Host": host}, timeout=5) as web:
        policy = api.post("/ip_policies", json={}).json()["id"]
        api.post("/ip_policy_rules", json={"ip_policy_id": policy, "cidr": "192.0.2.1/32",
                                           "action": "allow"})
        rid = api.post("/ip_restrictions", json={"type": "endpoints", "enforced": False,
                                                 "ip_policy_ids": [policy]}).json()["id"]
        for _ in range(rounds):
            for enforced, status in ((True, 403), (False, 200)):
                r = api.patch(f"/ip_restrictions/{rid}", json={"enforced": enforced})
                committed = time.monotonic()
                if r.status_code != 200:
                    raise BenchError(f"PATCH ip_restrictions: {r.status_code} {r.text}")
                while web.get("/").status_code != status:
                    if time.monotonic() - committed > 10:
                        raise BenchError("a change did not reach the other node in 10 s")
                report.propagation.append(time.monotonic() - committed)
        api.delete(f"/ip_restrictions/{rid}")
    ms = sorted(t * 1000 for t in report.propagation)
    note(f"change propagation: p50 {ms[len(ms) // 2]:.1f} ms, max {ms[-1]:.1f} ms")


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


WORKLOADS = (  # (name, tunnels, a new connection per request)
    ("one tunnel", 1, False),
    ("four tunnels", 4, False),
    ("one tunnel, a connection per request", 1, True),
)


def bench_workers(tmp: Path, args: argparse.Namespace, report: Report, children: Children,
                  up: int) -> None:
    """Each workload on ``--workers 1`` and ``--workers 2``. Four tunnels are bound by four
    agents (the kernel gives each agent's session to either worker), each of wrk's four
    threads asking one of them; a connection per request makes every request a hand-off
    on the worker without the tunnel."""
    for count in (1, 2):
        with fresh_pg_database() as url:
            srv = start(tmp / f"workers{count}", url, "--workers", str(count))
            try:
                pids = _worker_pids(srv) if count > 1 else [srv.proc.pid]
                with srv.client() as api:
                    token = api.post("/credentials", json={}).json()["token"]
                agents = [Agent(children, f"agent{count}-{i}", srv, token) for i in range(4)]
                hosts = [a.bind("http", f"http://127.0.0.1:{up}")[0].split("://")[1]
                         for a in agents]
                for host in hosts:
                    _until_served(srv, host)
                for name, tunnels, close in WORKLOADS:
                    before = sum(cpu_seconds(p) for p in pids)
                    wrk = argparse.Namespace(**{**vars(args), "connections": 64,
                                                "wrk_cpus": None, "threads": 4})
                    res = run_wrk(f"http://127.0.0.1:{srv.http_port}/",
                                  _script(tmp, hosts[:tunnels], close), pids[0], wrk)
                    res.cpu_us = (sum(cpu_seconds(p) for p in pids) - before) * 1e6 / max(
                        res.rps * (args.duration * max(args.repeat, 1) + args.warmup), 1)
                    report.workers[(name, count)] = res
                    note(f"--workers {count}, {name}, c64: {res.rps:,.0f} req/s, "
                         f"p50 {res.p50:.3f} ms, {res.cpu_us:.0f} µs CPU/req")
                for agent in agents:
                    agent.close()
            finally:
                srv.stop()
            if count > 1:
                report.handed = _handed(srv)


def _handed(srv: Server) -> tuple[int, int]:
    """Connections handed over between the workers, and carried over their link."""
    log = [json.loads(line) for line in srv.log().splitlines() if line.startswith("{")]
    handed = sum(sum(e["sent"].values()) for e in log if e.get("event") == "handoff_stopped")
    carried = sum(e.get("carried", 0) for e in log if e.get("event") == "node_left")
    return handed, carried


def _script(tmp: Path, hosts: list[str], close: bool) -> Path:
    """A wrk script: each thread asks one of ``hosts``; with ``close``, on a new
    connection each time."""
    script = tmp / "workers.lua"
    names = ", ".join(f'"{h}"' for h in hosts)
    script.write_text(
        f"local hosts = {{{names}}}\nlocal n = 0\n"
        "function setup(thread)\n  n = n + 1\n"
        "  thread:set(\"host\", hosts[(n - 1) % #hosts + 1])\nend\n"
        "function init(args)\n  wrk.headers[\"Host\"] = host\n"
        + ('  wrk.headers["Connection"] = "close"\n' if close else "") + "end\n")
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
        print("\n| workload | workers | c64 req/s | p50 ms | p99 ms | server CPU µs/req |\n"
              "|---|---:|---:|---:|---:|---:|")
        for (name, count), r in report.workers.items():
            print(f"| {name} | {count} | {r.rps:,.0f} | {r.p50:.3f} | {r.p99:.3f} "
                  f"| {r.cpu_us:.0f} |")
        for name, _, _ in WORKLOADS:
            one, two = report.workers.get((name, 1)), report.workers.get((name, 2))
            if one and two:
                print(f"\n{name}: --workers 2 / --workers 1: {two.rps / one.rps:.2f}x the "
                      f"requests/s, {two.cpu_us / one.cpu_us:.2f}x the CPU per request")
        print(f"\n--workers 2: {report.handed[0]:,} connections handed over between the "
              f"workers, {report.handed[1]:,} carried over their link")
    if report.propagation:
        ms = sorted(t * 1000 for t in report.propagation)
        print(f"\nchange propagation ({len(ms)} changes through one node's API, enforced on "
              f"the other's traffic): p50 {ms[len(ms) // 2]:.1f} ms, max {ms[-1]:.1f} ms "
              "(target < 100)")
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
