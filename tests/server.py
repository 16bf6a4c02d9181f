"""Run a real ``edgeway serve`` process on a loopback port for tests (and benchmarks)."""

from __future__ import annotations

import asyncio
import atexit
import fcntl
import functools
import os
import random
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import certifi
import httpx

from tests import forkserver

PG_URL = os.environ.get("EDGEWAY_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
HEADERS = {"Edgeway-Version": "2"}


# Ports for test listeners come from below the kernel's ephemeral range (32768 and up), where
# no outgoing connection of a busy suite can take one between this check and the server's bind,
# and above the server's default TCP tunnel range (20000-20999). Parallel workers of one run
# (pytest-xdist) each get a slice of the range of their own, so they never hand out the same
# port. Two suites on one machine (a stress run beside a developer's run) share the range
# through chunk locks: a process hands out a port only from a chunk of 64 it holds an flock
# on (in /tmp/edgeway-test-ports), and the kernel drops the lock when the process ends.
def worker_slice(ports: range) -> range:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if not worker.startswith("gw") or count <= 1:
        return ports
    size = len(ports) // count
    low = ports.start + int(worker[2:]) * size
    return range(low, low + size)


_PORTS = worker_slice(range(21000, 32768))
_next_port = random.randrange(len(_PORTS))


_forks = forkserver.Client()  # (servers start as forks of one that imported them: fast)
atexit.register(_forks.close)

_taken: set[int] = set()  # the ports of blocks handed out: free_port never gives them again
_CHUNK = 64
_CHUNKS = Path(tempfile.gettempdir()) / "edgeway-test-ports"
_held: dict[int, int] = {}  # chunk -> the fd that holds its lock


def ours(port: int) -> bool:
    """Whether this process may hand out ``port``: it holds, or now takes, its chunk's lock."""
    chunk = port // _CHUNK
    if chunk not in _held:
        _CHUNKS.mkdir(exist_ok=True)
        fd = os.open(_CHUNKS / str(chunk), os.O_RDWR | os.O_CREAT, 0o666)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return False  # (not remembered: the other suite may end and free it)
        _held[chunk] = fd
    return True


def free_port() -> int:
    global _next_port
    for _ in range(len(_PORTS)):
        port = _PORTS[_next_port % len(_PORTS)]
        _next_port += 1
        if port in _taken or not ours(port):
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free loopback port in {_PORTS}")


def free_block(size: int) -> list[int]:
    """``size`` consecutive free ports (a server's TCP tunnel range), from the same walk as
    free_port and kept out of it for the rest of the run: a server started after this one
    never listens on a port of the block."""
    global _next_port
    for _ in range(len(_PORTS)):
        low = _PORTS[_next_port % len(_PORTS)]
        block = list(range(low, low + size))
        _next_port += 1
        if block[-1] >= _PORTS.stop or _taken.intersection(block) \
                or not all(ours(port) for port in block):
            continue
        try:
            for port in block:
                with socket.socket() as s:
                    s.bind(("127.0.0.1", port))
        except OSError:
            continue
        _next_port += size - 1
        _taken.update(block)
        return block
    raise RuntimeError(f"no {size} free consecutive loopback ports in {_PORTS}")



@functools.cache
def trust() -> ssl.SSLContext:
    """The context every httpx client of the tests verifies with: httpx otherwise loads
    certifi's CA bundle into a new one for each client, about 20 ms of CPU, and the tests make
    thousands of clients (most for plain-HTTP URLs, where it is never used)."""
    return ssl.create_default_context(cafile=certifi.where())

@dataclass
class Server:
    base_url: str
    token: str
    proc: subprocess.Popen[str] | forkserver.Forked
    data_dir: Path
    database_url: str | None
    log_path: Path
    tunnel_port: int = 0
    http_port: int = 0
    https_port: int = 0
    stdout_tail: str = ""
    ssh_port: int = 0

    def client(self, token: str | None = None) -> httpx.Client:
        headers = {**HEADERS, "Authorization": f"Bearer {token or self.token}"}
        return httpx.Client(base_url=self.base_url, headers=headers, timeout=30, verify=trust())

    def log(self) -> str:
        return self.log_path.read_text()

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        assert self.proc.stdout is not None
        self.stdout_tail = self.proc.stdout.read()
        self.proc.stdout.close()
        code = self.proc.poll()
        assert code is not None
        return code


def _read_token(proc: subprocess.Popen[str] | forkserver.Forked, deadline: float) -> str:
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"edgeway serve exited early ({proc.poll()})")
        if line.startswith("First start"):
            return proc.stdout.readline().strip()
    raise RuntimeError("edgeway serve printed no API key")


def _wait_listening(port: int, proc: subprocess.Popen[str] | forkserver.Forked,
                    deadline: float,
                    log_path: Path | None) -> None:
    """Until this process serves: its API port answers and, with ``log_path``, its log says
    it started (when the port may be another server's: a rolling restart's new process
    shares the old one's ports, so a connection could reach the old one)."""
    started = f"Started server process [{proc.pid}]"
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"edgeway serve exited ({proc.returncode})")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            if log_path is None or started in log_path.read_text(errors="replace"):
                return
        except OSError:
            pass
        time.sleep(0.05)
    raise RuntimeError("edgeway serve did not start listening")


def start(data_dir: Path, database_url: str | None = None, *extra: str,
          token: str | None = None, ports: tuple[int, int, int, int] | None = None,
          env: dict[str, str] | None = None) -> Server:
    """Start a server; pass ``token`` when the database was bootstrapped before, ``ports``
    (api, tunnel, http, https) to reuse those of an earlier server, and ``env``: variables
    to set for it."""
    port, tunnel_port, http_port, https_port = ports or (
        free_port(), free_port(), free_port(), free_port())
    ssh_port = free_port()  # (a later --ssh-addr in ``extra`` wins)
    data_dir.mkdir(parents=True, exist_ok=True)
    log_path = data_dir / "server.log"
    cmd = [sys.executable, "-m", "edgeway", "serve", "--api-addr", f"127.0.0.1:{port}",
           "--tunnel-addr", f"127.0.0.1:{tunnel_port}", "--http-addr",
           f"127.0.0.1:{http_port}", "--https-addr", f"127.0.0.1:{https_port}",
           "--data-dir", str(data_dir), "--ssh-addr", f"127.0.0.1:{ssh_port}", *extra]
    if "--acme-directory" not in extra:  # (tests reach no real ACME server)
        cmd += ["--acme-directory", "off"]
    if database_url:
        cmd += ["--database-url", database_url]
    with log_path.open("a") as log:
        proc: subprocess.Popen[str] | forkserver.Forked
        if forkserver.FORK:
            proc = _forks.spawn(cmd[3:], {**os.environ, **(env or {})}, subprocess.PIPE,
                                log.fileno())
        else:
            proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, text=True,
                                    env={**os.environ, **(env or {})})
    deadline = time.monotonic() + 60
    try:
        token = token or _read_token(proc, deadline)
        _wait_listening(port, proc, deadline, log_path if ports else None)
    except Exception:
        proc.kill()
        raise RuntimeError(log_path.read_text()) from None
    return Server(f"http://127.0.0.1:{port}", token, proc, data_dir, database_url, log_path,
                  tunnel_port, http_port, https_port, ssh_port=ssh_port)


async def _admin(sql: str) -> None:
    conn = await asyncpg.connect(PG_URL)
    try:
        await conn.execute(sql)
    finally:
        await conn.close()


@contextmanager
def fresh_pg_database() -> Iterator[str]:
    """A new, empty database on the test server, dropped afterwards."""
    name = f"edgeway_t_{uuid.uuid4().hex[:12]}"
    asyncio.run(_admin(f'CREATE DATABASE "{name}"'))
    try:
        yield PG_URL.rsplit("/", 1)[0] + "/" + name
    finally:
        asyncio.run(_admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
