"""SSH gateway benchmark: one run on loopback, against the same upstreams (Node: an HTTP server
with a fixed 13-byte body, and a TCP bulk service), of

- ``direct``: wrk and the bulk client straight to the upstream;
- ``agent``: Edgeway's public listeners -> muxado tunnel -> the official ngrok Python SDK agent
  -> upstream (the agent protocol);
- ``gateway``: Edgeway's public listeners -> the SSH gateway -> ``forwarded-tcpip`` channels
  -> the OpenSSH client (``ssh -R 0:127.0.0.1:<port> v2@... http|tcp --quiet``) -> upstream;
- ``openssh``: plain OpenSSH, ``ssh -N -R <port>:127.0.0.1:<upstream>`` to a local ``sshd``,
  whose forwarded port wrk and the bulk client dial (sshd forwards, no edge).

HTTP requests/s at 1 and 64 connections (wrk) and TCP bulk MB/s each way; the ciphers the
OpenSSH client negotiated with the gateway and with sshd are printed (the client's default,
chacha20-poly1305, unless ``--cipher``).

Run from the repository root:  python -m bench.sshgw_bench [--quick] [--cipher C] [--no-pin]
Needs wrk, Node, the ngrok SDK (as ``bench.edge_bench``), ``ssh`` and ``/usr/sbin/sshd`` (run
as root: it logs this user in with a key of the run). With pinning (2+ CPUs) every server-side
process (upstreams, Edgeway, the SDK agent, the ssh clients, sshd and its session processes)
runs on the last CPU and wrk and the bulk client on the first. Exit status 0 (a measurement),
1 if the benchmark failed, 2 if a tool is missing.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import pwd
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from bench.api_bench import BenchError, note  # noqa: E402
from bench.common import Children, bench_bulk, bench_main, edgeway_run  # noqa: E402
from bench.common import parse_args as common_args  # noqa: E402
from bench.edge_bench import Agent, bench_http, port_of, upstream  # noqa: E402
from bench.edge_bench import Report as Rows  # noqa: E402
from tests.server import Server, free_port  # noqa: E402

SSHD = "/usr/sbin/sshd"


@dataclass
class Report(Rows):
    """``edge_bench``'s rows (``http``, ``bulk``), and the ciphers ssh negotiated."""
    ciphers: dict[str, str] = field(default_factory=dict)  # gateway|openssh -> cipher


def descendants(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            for child in (task / "children").read_text().split():
                out += [int(child), *descendants(int(child))]
    return out


class OpenSsh:
    """A key pair, a local sshd that logs this user in with it, and ssh client commands."""

    def __init__(self, tmp: Path, children: Children, cipher: str | None,
                 sshd: str = "sshd") -> None:
        self.tmp, self.children, self.cipher = tmp, children, cipher
        self.key = tmp / "id_ed25519"
        for path, kind in ((self.key, "ed25519"), (tmp / "host_key", "ed25519")):
            subprocess.run(["ssh-keygen", "-q", "-t", kind, "-N", "", "-f", str(path)],
                           check=True)
        (tmp / "authorized_keys").write_text((tmp / "id_ed25519.pub").read_text())
        self.sshd_port = free_port()
        (tmp / "sshd_config").write_text("\n".join([
            f"Port {self.sshd_port}", "ListenAddress 127.0.0.1", f"HostKey {tmp}/host_key",
            f"AuthorizedKeysFile {tmp}/authorized_keys", "PasswordAuthentication no",
            "KbdInteractiveAuthentication no", "PermitRootLogin prohibit-password",
            "UsePAM no", "StrictModes no", "PidFile none", "AllowTcpForwarding yes",
            "GatewayPorts no", "LogLevel ERROR", ""]))
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # privilege separation directory
        self.sshd = children.start(sshd, [SSHD, "-D", "-e", "-f", str(tmp / "sshd_config")])
        children.wait_port(self.sshd_port, "sshd")

    def register(self, api: httpx.Client) -> None:
        """The key pair's public key as an SSH credential of the server ``api`` reaches."""
        r = api.post("/ssh_credentials", json={
            "public_key": (self.tmp / "id_ed25519.pub").read_text()})
        if r.status_code != 201:
            raise BenchError(f"POST /ssh_credentials: {r.status_code} {r.text}")

    def command(self, port: int, *args: str) -> list[str]:
        out = ["ssh", "-F", "/dev/null", "-p", str(port), "-i", str(self.key),
               "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
               "-o", "UserKnownHostsFile=/dev/null", "-o", "IdentitiesOnly=yes",
               "-o", "IdentityAgent=none", "-o", "ExitOnForwardFailure=yes",
               "-o", "LogLevel=DEBUG1"]
        return out + (["-c", self.cipher] if self.cipher else []) + list(args)

    def cipher_of(self, name: str) -> str:
        found = re.search(r"kex: server->client cipher: (\S+)",
                          (self.tmp.parent / f"{name}.log").read_text())
        return found[1] if found else "?"


def gateway_tunnel(children: Children, ssh: OpenSsh, server: Server, name: str, up: int,
                   kind: str) -> str:
    """An ``ssh -R`` to the gateway for upstream port ``up``: its public URL."""
    children.start(name, ssh.command(server.ssh_port, "-R", f"0:127.0.0.1:{up}",
                                     "v2@127.0.0.1", kind, "--quiet"))
    return children.expect(name, "Forwarding ").split()[1]


def openssh_forward(children: Children, ssh: OpenSsh, name: str, up: int) -> int:
    """A plain ``ssh -N -R port:127.0.0.1:up`` to sshd: the port sshd listens on."""
    port = free_port()
    user = pwd.getpwuid(os.getuid()).pw_name
    children.start(name, ssh.command(ssh.sshd_port, "-N", "-R", f"{port}:127.0.0.1:{up}",
                                     f"{user}@127.0.0.1"))
    children.wait_port(port, f"sshd's forward for {name}")
    return port


def session_pid(ssh: OpenSsh) -> int:
    """The sshd process carrying the (one) client session's forwards: the newest one."""
    pids = descendants(ssh.sshd.pid)
    if not pids:
        raise BenchError("sshd has no session process")
    return max(pids)


def run(tmp: Path, args: argparse.Namespace, report: Report) -> None:
    with edgeway_run(tmp, args) as procs:
        children = procs.children
        http_up, http_pid = upstream(children, "http")
        bulk_up, bulk_pid = upstream(children, "bulk")
        server = procs.serve()
        ssh_dir = tmp / "ssh"
        ssh_dir.mkdir()
        ssh = OpenSsh(ssh_dir, children, args.cipher)
        with server.client() as api:
            token = api.post("/credentials", json={"description": "sshgw_bench"}).json()["token"]
            ssh.register(api)
        agent = Agent(children, "agent", server, token)
        edge = server.proc.pid
        # TCP bulk
        agent_tcp = port_of(agent.bind("tcp", f"tcp://127.0.0.1:{bulk_up}")[0])
        gw_tcp = port_of(gateway_tunnel(children, ssh, server, "ssh-gateway-tcp", bulk_up,
                                        "tcp"))
        plain_tcp = openssh_forward(children, ssh, "ssh-openssh-tcp", bulk_up)
        bench_bulk({"direct": (bulk_up, bulk_pid), "agent": (agent_tcp, edge),
                    "gateway": (gw_tcp, edge), "openssh": (plain_tcp, session_pid(ssh))},
                   args, 16 << 20, report.bulk)
        report.ciphers = {"gateway": ssh.cipher_of("ssh-gateway-tcp"),
                          "openssh": ssh.cipher_of("ssh-openssh-tcp")}
        children.stop("ssh-openssh-tcp")
        # HTTP
        bench_http(report, "direct", f"http://127.0.0.1:{http_up}/", None, http_pid, tmp,
                   args)
        url = agent.bind("http", f"http://127.0.0.1:{http_up}")[0]
        bench_http(report, "agent", f"http://127.0.0.1:{server.http_port}/",
                   urlsplit(url).netloc, edge, tmp, args)
        url = gateway_tunnel(children, ssh, server, "ssh-gateway-http", http_up, "http")
        bench_http(report, "gateway", f"http://127.0.0.1:{server.http_port}/",
                   urlsplit(url).netloc, edge, tmp, args)
        port = openssh_forward(children, ssh, "ssh-openssh-http", http_up)
        bench_http(report, "openssh", f"http://127.0.0.1:{port}/", None, session_pid(ssh),
                   tmp, args)


def print_report(report: Report) -> None:
    http, bulk_ = report.http, report.bulk
    print("| path | connections | req/s | p50 ms | p99 ms | x agent | x openssh "
          "| front process CPU us/req (busy) |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for (path, conns), r in http.items():
        agent, plain = http.get(("agent", conns)), http.get(("openssh", conns))
        print(f"| {path} | {conns} | {r.rps:,.0f} | {r.p50:.3f} | {r.p99:.3f} "
              f"| {r.rps / agent.rps if agent else 0:.2f} "
              f"| {r.rps / plain.rps if plain else 0:.2f} | {r.cpu_us:,.0f} ({r.busy:.0%}) |")
    if bulk_:
        print("\n| TCP bulk | direction | MB/s | x agent | x openssh | front process busy |\n"
              "|---|---|---:|---:|---:|---:|")
        for (path, way), (v, busy) in bulk_.items():
            by_agent, by_plain = bulk_.get(("agent", way)), bulk_.get(("openssh", way))
            print(f"| {path} | {way} | {v:,.0f} | {v / by_agent[0] if by_agent else 0:.2f} "
                  f"| {v / by_plain[0] if by_plain else 0:.2f} | {busy:.0%} |")
    if report.ciphers:
        print("\nciphers the OpenSSH client negotiated: " + ", ".join(
            f"{path} {cipher}" for path, cipher in report.ciphers.items()))
    print("\n'front process': the upstream (direct), edgeway serve (agent, gateway: without "
          "the SDK agent's or ssh's CPU),\nsshd's session process (openssh); busy is its CPU "
          "time over the run's wall time.")


def own_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cipher", default=None,
                   help="the cipher the ssh clients ask for (default: OpenSSH's choice)")


def main() -> int:
    args = common_args(__doc__, own_args, bulk_mib=512,
                       repeat_help="measured runs per row, best kept",
                       quick_help="2 s wrk runs, 128 MiB bulk", no_pin_help="no CPU pinning")
    missing = [tool for tool in ("wrk", "node", "ssh", "ssh-keygen") if not shutil.which(tool)]
    if not os.path.exists(SSHD):
        missing.append(SSHD)
    if importlib.util.find_spec("ngrok") is None:
        missing.append("the ngrok SDK (pip install --ignore-requires-python ngrok==1.7.0)")
    if os.geteuid() != 0:
        missing.append("root (sshd logs a user in)")
    if missing:
        note(f"sshgw_bench needs {', '.join(missing)}")
        return 2
    return bench_main(args, Report(), run, print_report, quick_mib=128,
                      tmp_prefix="edgeway-sshgw-bench-")


if __name__ == "__main__":
    sys.exit(main())
