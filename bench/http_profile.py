"""Where the server's time goes on the HTTP path: ``edgeway serve`` pinned to one core, the
official SDK agent forwarding a plain-HTTP endpoint to the Node upstream of ``edge_bench`` (13
bytes), wrk at --connections on the other core, and py-spy sampling the server meanwhile. Prints
the server CPU per request and, from the samples, the share of each function (its own time and
with what it calls) and of each module, so that a change to the hot path can be weighed.

Run from the repository root:  python -m bench.http_profile [--connections 64] [--seconds 15]
[--agent sdk|edgeway [--inspect]] [--route http|http-modules] [--profile server|agent]
(the process sampled)
Needs wrk, Node and the SDK as edge_bench does, and py-spy (``pip install py-spy``; found on
PATH or beside this Python). ``--raw FILE`` keeps py-spy's collapsed stacks.

``--perf``: Linux perf instead of py-spy (``perf record -g``), which sees into the compiled
modules (mypyc's C functions, llhttp, the interpreter, the kernel) and counts CPU only; prints
the symbols' own shares and each shared object's.
"""

from __future__ import annotations

import argparse
import collections
import functools
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.api_bench import note  # noqa: E402
from bench.common import Run, edgeway_agent, edgeway_run  # noqa: E402
from bench.edge_bench import Agent, port_of, upstream  # noqa: E402

TOP = 30


def _cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _frame(text: str) -> tuple[str, str]:
    """(function, module file) of one py-spy frame ``name (path:line)``."""
    name, _, where = text.partition(" (")
    path = where.rsplit(":", 1)[0]
    mark = "/edgeway/"
    module = path[path.rindex(mark) + 1:] if mark in path else Path(path).name
    return f"{name} ({module})", module


def summarize(collapsed: str) -> None:
    own: collections.Counter[str] = collections.Counter()
    total: collections.Counter[str] = collections.Counter()
    modules: collections.Counter[str] = collections.Counter()
    samples = 0
    for line in collapsed.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = [_frame(f) for f in stack.split(";") if f.strip()]
        if not frames:
            continue
        samples += n
        own[frames[-1][0]] += n
        modules[frames[-1][1]] += n
        for name in {f[0] for f in frames}:
            total[name] += n
    print(f"\n{samples} samples of the server's main thread while it was running\n")
    print("| own % | function (module) |\n|---:|---|")
    for name, n in own.most_common(TOP):
        print(f"| {100 * n / samples:.1f} | {name} |")
    print("\n| with callees % | function (module) |\n|---:|---|")
    for name, n in total.most_common(TOP):
        print(f"| {100 * n / samples:.1f} | {name} |")
    print("\n| own % | module |\n|---:|---|")
    for name, n in modules.most_common(TOP):
        print(f"| {100 * n / samples:.1f} | {name} |")


def _spy() -> str:
    found = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(found).exists():
        sys.exit("py-spy is missing: pip install py-spy")
    return found


def profile(run: Run, args: argparse.Namespace) -> None:
    children = run.children
    up, _pid = upstream(children, "http")
    server = run.serve()
    with server.client() as api:
        token = api.post("/credentials", json={"description": "profile"}).json()["token"]
    stop: Callable[[], None]
    if args.agent == "edgeway":
        proc, host = edgeway_agent(children, "agent", server, token, up, args.inspect)
        agent_pid = proc.pid
        stop = functools.partial(children.stop, "agent")
    else:
        agent = Agent(children, "agent", server, token)
        url = agent.bind(args.route, f"http://127.0.0.1:{up}")[0]
        host = url.split("://", 1)[1].split("/", 1)[0]
        assert port_of(url) == server.http_port
        agent_pid, stop = agent.proc.pid, agent.close
    pid, who = (agent_pid, "agent") if args.profile == "agent" else (server.proc.pid, "server")
    raw = Path(args.raw) if args.raw else Path(tempfile.mkdtemp()) / "stacks.txt"
    wrk = ["wrk", f"-t{1 if args.connections == 1 else 2}", f"-c{args.connections}",
           f"-d{args.seconds}s", "-H", f"Host: {host}", f"http://127.0.0.1:{server.http_port}/"]
    cpus = args.client_cpus
    before = _cpu(pid)
    load = subprocess.Popen(wrk, stdout=subprocess.PIPE, text=True,
                            preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None)
    time.sleep(1)  # (past the first connections: the steady state is what is sampled)
    if args.perf:
        data = raw.with_suffix(".perf")
        graph = ["--call-graph", "dwarf,16384"] if args.dwarf else ["-g"]
        subprocess.run(["perf", "record", "-F", "1999", *graph, "-o", str(data), "-p",
                        str(pid), "--", "sleep", str(max(1, args.seconds - 3))],
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        out, _ = load.communicate(timeout=args.seconds + 60)
        spent = _cpu(pid) - before
        stop()
        print(out)
        requests = next((int(line.split()[0]) for line in out.splitlines()
                         if "requests in" in line), 0)
        if requests:
            print(f"{who} CPU: {spent / requests * 1e6:.1f} µs per request "
                  f"({requests} requests, perf's sampling included)")
        for sort in ("symbol", "dso"):
            report = subprocess.run(
                ["perf", "report", "-i", str(data), "--stdio", "--no-children", "-g", "none",
                 "--percent-limit", "0.5", "--sort", sort], capture_output=True, text=True,
                check=True).stdout
            print("\n".join(line for line in report.splitlines()
                            if line.strip() and not line.startswith("#")))
        note(f"perf data: {data} (perf report -i {data})")
        return
    subprocess.run([_spy(), "record", "--pid", str(pid), "--duration",
                    str(max(1, args.seconds - 3)), "--rate", "500", "--format", "raw",
                    "--output", str(raw), "--nonblocking"], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    out, _ = load.communicate(timeout=args.seconds + 60)
    spent = _cpu(pid) - before
    requests = next((int(line.split()[0]) for line in out.splitlines()
                     if "requests in" in line), 0)
    stop()
    print(out)
    if requests:
        print(f"{who} CPU: {spent / requests * 1e6:.1f} µs per request "
              f"({requests} requests, py-spy's sampling included)")
    summarize(raw.read_text())
    note(f"collapsed stacks: {raw}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--seconds", type=int, default=15)
    parser.add_argument("--raw", default="")
    parser.add_argument("--perf", action="store_true",
                        help="sample with Linux perf (native frames, CPU only) for py-spy")
    parser.add_argument("--dwarf", action="store_true",
                        help="with --perf: call graphs from DWARF (what compiled code calls)")
    parser.add_argument("--agent", choices=("sdk", "edgeway"), default="sdk",
                        help="the agent: the official SDK, or the Edgeway agent (edgeway http)")
    parser.add_argument("--inspect", action="store_true", help="the Edgeway agent inspecting")
    parser.add_argument("--route", choices=("http", "http-modules"), default="http",
                        help="the SDK's endpoint: every module off, or a typical route's "
                        "modules (bench.http_paths' edgeway-http-modules)")
    parser.add_argument("--profile", choices=("server", "agent"), default="server",
                        help="the process sampled")
    args = parser.parse_args()
    cpus = sorted(os.sched_getaffinity(0))
    args.server_cpus = {cpus[0]} if len(cpus) > 1 else None
    args.client_cpus = set(cpus[1:]) if len(cpus) > 1 else None
    with tempfile.TemporaryDirectory() as tmp, edgeway_run(Path(tmp), args) as run:
        profile(run, args)


if __name__ == "__main__":
    main()
