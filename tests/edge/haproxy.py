"""HAProxy (Debian's package) as the load balancer in front of Edgeway's public listeners in
tests: a real ``haproxy`` process in TCP mode, with a configuration written here, that sends
a PROXY protocol header (``send-proxy`` for version 1, ``send-proxy-v2``) to each backend
server from one loopback address of its own (``SOURCE``: the address the nodes trust). A
frontend's servers are the nodes' ports (one ``server`` line each, round robin)."""

from __future__ import annotations

import csv
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.server import free_port

SOURCE = "127.0.0.5"  # where HAProxy's connections to the nodes come from


@dataclass(frozen=True)
class Front:
    """One frontend: the nodes' ports it balances over, and how it tells them the client."""

    servers: tuple[int, ...]
    send: str = "send-proxy-v2"  # or send-proxy (version 1), or "" (no header)


@dataclass
class HAProxy:
    ports: dict[str, int]  # frontend name: the port clients connect to
    stats_socket: Path

    def stats(self) -> list[dict[str, str]]:
        """``show stat``: a row per frontend, backend and server (``stot``: the sessions it
        has had, ``status``: UP, DOWN, no check...)."""
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(10)
            sock.connect(str(self.stats_socket))
            sock.sendall(b"show stat\n")
            raw = b""
            while chunk := sock.recv(65536):
                raw += chunk
        lines = raw.decode().lstrip("# ").splitlines()
        return list(csv.DictReader(line for line in lines if line))

    def sessions(self, backend: str) -> dict[str, int]:
        """Sessions each server of ``backend`` has had, by server name (n0, n1...)."""
        return {row["svname"]: int(row["stot"]) for row in self.stats()
                if row["pxname"] == backend and row["svname"] not in ("FRONTEND", "BACKEND")}


def config(fronts: dict[str, Front], ports: dict[str, int], stats: Path,
           check: bool = False) -> str:
    out = ["global", "    maxconn 4000", f"    stats socket {stats} level admin",
           "defaults", "    mode tcp", "    timeout connect 5s", "    timeout client 60s",
           "    timeout server 60s"]
    for name, front in fronts.items():
        out += [f"frontend {name}", f"    bind 127.0.0.1:{ports[name]}",
                f"    default_backend {name}", f"backend {name}", "    balance roundrobin"]
        out += [f"    server n{i} 127.0.0.1:{port} {front.send} source {SOURCE}"
                + (" check inter 500ms" if check else "")
                for i, port in enumerate(front.servers)]
    return "\n".join(out) + "\n"


def listening(port: int) -> bool:
    """Whether a socket listens on 127.0.0.1:``port`` (read from the kernel: no connection
    is made, so the backends see none)."""
    want = f"0100007F:{port:04X}"
    text = Path("/proc/net/tcp").read_text()
    return any(fields[1] == want and fields[3] == "0A"
               for fields in (line.split() for line in text.splitlines()[1:]))


@contextmanager
def running(tmp_path: Path, fronts: dict[str, Front], check: bool = False
            ) -> Iterator[HAProxy]:
    exe = shutil.which("haproxy") or shutil.which("haproxy", path="/usr/sbin")
    if exe is None:
        pytest.fail("haproxy is missing (scripts/test installs Debian's package)")
    ports = {name: free_port() for name in fronts}
    stats = tmp_path / "haproxy.sock"
    path = tmp_path / "haproxy.cfg"
    path.write_text(config(fronts, ports, stats, check))
    checked = subprocess.run([exe, "-c", "-f", str(path)], capture_output=True, text=True)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    log = (tmp_path / "haproxy.log").open("w")
    proc = subprocess.Popen([exe, "-db", "-f", str(path)], stdout=log, stderr=log)
    try:
        deadline = time.monotonic() + 30
        while not (all(listening(p) for p in ports.values()) and stats.exists()):
            assert proc.poll() is None, (tmp_path / "haproxy.log").read_text()
            assert time.monotonic() < deadline, "haproxy did not listen"
            time.sleep(0.02)
        yield HAProxy(ports, stats)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
