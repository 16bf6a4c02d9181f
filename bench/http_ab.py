"""Two (or more) source trees of Edgeway side by side on the HTTP path: each tree's ``edgeway
serve`` (started from that tree, ``subprocess``, as users start it) with an SDK agent forwarding
a plain-HTTP endpoint to the same 13-byte Node upstream, wrk at ``--connections`` in interleaved
rounds, and per tree the medians of requests/s, the server's CPU per request and its system
calls and context switches per request. For weighing a change to the hot path against the
commit before it on the same machine at the same time, where a lone run's figures drift with
the host's load.

Run from the repository root:
    git worktree add /tmp/before HEAD~1
    python -m bench.http_ab --tree before=/tmp/before --tree after=. [--kind http-modules]
    python -m bench.http_ab --tree pure=. --tree compiled=. --pure pure
    python -m bench.http_ab --tree before=/tmp/before --tree after=. --agent edgeway

``--agent edgeway``: each tree's own Edgeway agent (``edgeway http``, inspection off) instead
of the SDK, and its CPU per request beside the server's; ``--agent edgeway-inspect``: the
same with inspection on; ``--agent ssh``: each tree's SSH gateway, an OpenSSH ``ssh -R`` to
it (as ``sshgw_bench``: needs ``ssh``, and ``sshd`` for the key pair's setup, run as root),
the client's CPU beside the server's.

Pinned like ``http_paths`` (server side on the last CPU, wrk on the first). Needs wrk, Node and
the SDK as ``edge_bench`` does.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
os.environ["EDGEWAY_TEST_FORK"] = "0"  # each tree's own server process, not a fork of ours


from bench.api_bench import parse_wrk, pin  # noqa: E402
from bench.common import Children  # noqa: E402
from bench.common import edgeway_agent as start_edgeway_agent  # noqa: E402
from bench.edge_bench import Agent, cpu_split, upstream  # noqa: E402
from bench.sshgw_bench import OpenSsh, gateway_tunnel  # noqa: E402
from tests.server import Server, start  # noqa: E402


def _proc(pid: int) -> tuple[float, int, int, int]:
    """(CPU seconds, read and write system calls, context switches) of process ``pid``."""
    cpu = sum(cpu_split(pid))
    io = dict(line.split(": ") for line in Path(f"/proc/{pid}/io").read_text().splitlines())
    status = dict(line.split(":\t") for line in
                  Path(f"/proc/{pid}/status").read_text().splitlines() if ":\t" in line)
    switches = int(status["voluntary_ctxt_switches"]) + int(
        status["nonvoluntary_ctxt_switches"])
    return cpu, int(io["syscr"]), int(io["syscw"]), switches


@dataclass
class Tree:
    name: str
    path: Path
    pure: bool = False  # EDGEWAY_PURE=1: its protocol cores from source, not compiled
    server: Server | None = None
    host: str = ""
    agent: int = 0  # the Edgeway agent's pid (0: the SDK's, not measured)
    rows: list[tuple[float, ...]] = field(default_factory=list)


def serve(tree: Tree, tmp: Path, children: Children, up: int, kind: str,
          cpus: set[int] | None, which: str = "sdk") -> None:
    here = Path.cwd()
    os.chdir(tmp)  # (``python -m edgeway`` must not find the repository's package first)
    try:
        tree.server = start(tmp / tree.name, env={"PYTHONPATH": str(tree.path.resolve()),
                                                  "EDGEWAY_PURE": "1" if tree.pure else ""})
    finally:
        os.chdir(here)
    pin(tree.server.proc.pid, cpus)
    with tree.server.client() as api:
        token = api.post("/credentials", json={"description": tree.name}).json()["token"]
    if which == "ssh":
        tree.host = ssh_tunnel(tree, tmp, children, up)
        return
    if which != "sdk":
        tree.host = edgeway_agent(tree, tmp, children, token, up, which == "edgeway-inspect")
        return
    agent = Agent(children, f"agent-{tree.name}", tree.server, token)
    url = agent.bind(kind, f"http://127.0.0.1:{up}")[0]
    tree.host = url.split("://", 1)[1].split("/", 1)[0]


def edgeway_agent(tree: Tree, tmp: Path, children: Children, token: str, up: int,
                  inspect: bool) -> str:
    """The tree's own ``edgeway http`` for ``up`` (plain HTTP); its host."""
    assert tree.server is not None
    before = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = str(tree.path.resolve())
    try:
        proc, host = start_edgeway_agent(children, f"edgeway-agent-{tree.name}", tree.server,
                                         token, up, inspect, cwd=tmp)
    finally:
        if before is None:
            del os.environ["PYTHONPATH"]
        else:
            os.environ["PYTHONPATH"] = before
    tree.agent = proc.pid
    return host


def ssh_tunnel(tree: Tree, tmp: Path, children: Children, up: int) -> str:
    """An OpenSSH ``ssh -R`` to the tree's SSH gateway for ``up`` (plain HTTP); its host."""
    assert tree.server is not None
    keys = tmp / f"ssh-{tree.name}"
    keys.mkdir()
    ssh = OpenSsh(keys, children, None, sshd=f"sshd-{tree.name}")
    with tree.server.client() as api:
        ssh.register(api)
    name = f"ssh-{tree.name}"
    url = gateway_tunnel(children, ssh, tree.server, name, up, "http")
    tree.agent = children.procs[name].pid
    return url.split("://", 1)[1].split("/", 1)[0]


def measure(tree: Tree, args: argparse.Namespace, warm: bool) -> None:
    assert tree.server is not None
    pid, port = tree.server.proc.pid, tree.server.http_port
    seconds = args.warmup if warm else args.duration
    cmd = ["wrk", f"-t{1 if args.connections == 1 else 2}", f"-c{args.connections}",
           f"-d{seconds}s", "--latency", "-H", f"Host: {tree.host}",
           *(["-H", "Connection: close"] if args.close else []), f"http://127.0.0.1:{port}/"]
    before = _proc(pid)
    agent_before = sum(cpu_split(tree.agent)) if tree.agent else 0.0
    out = subprocess.run(cmd, capture_output=True, text=True, check=True,
                         preexec_fn=(lambda: os.sched_setaffinity(0, args.wrk_cpus))
                         if args.wrk_cpus else None).stdout
    after = _proc(pid)
    agent = (sum(cpu_split(tree.agent)) - agent_before) if tree.agent else 0.0
    if warm:
        return
    result, n = parse_wrk(out)
    cpu, reads, writes, switches = (b - a for a, b in zip(before, after, strict=True))
    tree.rows.append((result.rps, cpu / n * 1e6, reads / n, writes / n, switches / n,
                      agent / n * 1e6))
    print(f"  {tree.name}: {result.rps:,.0f} req/s, {cpu / n * 1e6:.1f} µs/req, "
          f"{reads / n:.2f} reads + {writes / n:.2f} writes, {switches / n:.2f} switches "
          f"per request" + (f"; agent {agent / n * 1e6:.1f} µs/req" if tree.agent else ""),
          flush=True)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tree", action="append", required=True, help="NAME=PATH, two or more")
    p.add_argument("--pure", action="append", default=[],
                   help="NAME of a tree to run with EDGEWAY_PURE=1 (its cores from source)")
    p.add_argument("--kind", default="http", help="http or http-modules (edge_bench's AGENT)")
    p.add_argument("--connections", type=int, default=64)
    p.add_argument("--duration", type=int, default=5)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--agent", choices=("sdk", "edgeway", "edgeway-inspect", "ssh"),
                   default="sdk",
                   help="the agent each tree's server is measured with")
    p.add_argument("--close", action="store_true",
                   help="a new connection for every request (Connection: close)")
    args = p.parse_args()
    trees = [Tree(n, Path(v), n in args.pure)
             for n, _, v in (t.partition("=") for t in args.tree)]
    cpus = sorted(os.sched_getaffinity(0))
    server_cpus = {cpus[-1]} if len(cpus) > 1 else None
    args.wrk_cpus = {cpus[0]} if len(cpus) > 1 else None
    with tempfile.TemporaryDirectory(prefix="edgeway-http-ab-") as name:
        tmp = Path(name)
        children = Children(tmp, server_cpus)
        try:
            up, _ = upstream(children, "http")
            for tree in trees:
                serve(tree, tmp, children, up, args.kind, server_cpus, args.agent)
                measure(tree, args, warm=True)
            for r in range(args.rounds):
                print(f"round {r + 1}", flush=True)
                for tree in trees if r % 2 == 0 else trees[::-1]:
                    measure(tree, args, warm=False)
        finally:
            children.stop_all()
            for tree in trees:
                if tree.server is not None:
                    tree.server.stop()
    print(f"\nmedians of {args.rounds} rounds, -c{args.connections}, {args.kind}, "
          f"{args.agent} agent:\n")
    print("| tree | req/s | server µs/req | reads/req | writes/req | switches/req | "
          "agent µs/req |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for tree in trees:
        cols = [statistics.median(c) for c in zip(*tree.rows, strict=True)]
        print(f"| {tree.name} | {cols[0]:,.0f} | {cols[1]:.1f} | {cols[2]:.2f} | "
              f"{cols[3]:.2f} | {cols[4]:.2f} | "
              f"{f'{cols[5]:.1f}' if tree.agent else '-'} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
