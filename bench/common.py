"""What the data-plane benchmarks (``edge_bench``, ``sshgw_bench``) share: the processes a run
starts (``Children``, ``events_bench``'s too), ``edgeway serve`` started and pinned with them
(``edgeway_run``), TCP bulk through the Node bulk upstream (``bench_bulk``), the options they
all take (``parse_args``), and the shape of ``main``: CPU pinning, a temporary directory, a
failed run reported with what it had measured, and the summary line (``bench_main``)."""

from __future__ import annotations

import argparse
import contextlib
import os
import queue
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TypeVar

import httpx

from bench.api_bench import BenchError, cpu_seconds, note, pin
from tests.server import Server, free_port, start

MB = 1e6
R = TypeVar("R")
Bulk = dict[tuple[str, str], tuple[float, float]]  # (path, up|down) -> (MB/s, front busy)


class Children:
    """The processes this run starts: stdout lines queued, stderr to a log; each stopped by its
    own pid at the end."""

    def __init__(self, tmp: Path, cpus: set[int] | None) -> None:
        self.tmp, self.cpus = tmp, cpus
        self.procs: dict[str, subprocess.Popen[str]] = {}
        self.lines: dict[str, queue.Queue[str | None]] = {}
        self.logs: dict[str, IO[str]] = {}

    def start(self, name: str, cmd: list[str], cwd: Path | None = None,
              stdin: bool = False) -> subprocess.Popen[str]:
        cpus = self.cpus
        self.logs[name] = (self.tmp / f"{name}.log").open("w")
        proc = subprocess.Popen(
            cmd, cwd=cwd, text=True, stdout=subprocess.PIPE,
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL, stderr=self.logs[name],
            preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None)
        lines: queue.Queue[str | None] = queue.Queue()

        def pump() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                lines.put(line.rstrip("\n"))
            lines.put(None)

        threading.Thread(target=pump, daemon=True).start()
        self.procs[name], self.lines[name] = proc, lines
        return proc

    def expect(self, name: str, prefix: str, timeout: float = 60) -> str:
        """The next stdout line of ``name`` that starts with ``prefix``."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self.lines[name].get(timeout=left)
            except queue.Empty:
                break
            if line is None:
                raise BenchError(f"{name} exited ({self.procs[name].wait()}):\n{self.log(name)}")
            if line.startswith(prefix):
                return line
            if line.startswith("FAILED"):
                raise BenchError(f"{name}: {line}")
        raise BenchError(f"{name} printed no {prefix!r} in {timeout:.0f}s:\n{self.log(name)}")

    def wait_port(self, port: int, what: str, name: str | None = None,
                  timeout: float = 30) -> None:
        """Until ``what`` accepts connections on loopback ``port``; with ``name``, that child
        exiting first fails at once."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError):
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                return
            if name is not None and self.procs[name].poll() is not None:
                raise BenchError(f"{what} exited:\n{self.log(name)}")
            time.sleep(0.05)
        raise BenchError(f"{what} is not listening on {port}")

    def log(self, name: str) -> str:
        return "".join((self.tmp / f"{name}.log").read_text().splitlines(True)[-20:])

    def stop(self, name: str) -> None:
        proc = self.procs.pop(name)
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.logs.pop(name).close()

    def stop_all(self) -> None:
        for name in list(self.procs):
            self.stop(name)


@dataclass
class Run:
    """One run's processes: ``children``, and ``server`` once ``serve`` has started it."""
    tmp: Path
    cpus: set[int] | None
    children: Children
    server: Server | None = None

    def serve(self) -> Server:
        """``edgeway serve`` in ``tmp/edgeway``, pinned to the server side's CPU."""
        self.server = start(self.tmp / "edgeway")
        pin(self.server.proc.pid, self.cpus)
        return self.server


@contextlib.contextmanager
def edgeway_run(tmp: Path, args: argparse.Namespace) -> Iterator[Run]:
    """A run's processes, all stopped at the end; a BenchError inside gets the tail of the
    serve log."""
    run = Run(tmp, args.server_cpus, Children(tmp, args.server_cpus))
    try:
        yield run
    except BenchError as exc:
        server = run.server
        tail = "".join(server.log().splitlines(keepends=True)[-20:]) if server else ""
        raise BenchError(f"{exc}\n--- edgeway serve log (last lines) ---\n{tail}") from None
    finally:
        run.children.stop_all()
        if run.server is not None:
            run.server.stop()


# --- TCP bulk ---------------------------------------------------------------------------------

def bulk(port: int, total: int, down: bool) -> float:
    """Stream ``total`` bytes to (up) or from (down) the bulk upstream; MB/s, end to end."""
    with socket.create_connection(("127.0.0.1", port), timeout=120) as s:
        t0 = time.perf_counter()
        s.sendall(f"{'DOWN' if down else 'UP'} {total}\n".encode())
        buf = bytearray(4 << 20)
        got, reply = 0, b""
        if down:
            while n := s.recv_into(buf):
                got += n
        else:
            view, left = memoryview(buf), total
            while left:
                s.sendall(view[:min(left, len(view))])
                left -= min(left, len(view))
            while chunk := s.recv(64):
                reply += chunk
            got = int(reply.split()[1]) if reply.startswith(b"OK ") else -1
        elapsed = time.perf_counter() - t0
    if got != total:
        raise BenchError(f"bulk {'down' if down else 'up'}: {got} bytes arrived, not {total}")
    return total / elapsed / MB


def bench_bulk(paths: dict[str, tuple[int, int]], args: argparse.Namespace,
               warmup: int = 32 << 20, out: Bulk | None = None) -> Bulk:
    """path -> (port, front pid) to (path, up|down) -> (best MB/s, the front process's CPU
    time over wall time in that run), each way after a ``warmup``-byte run; into ``out`` (as
    they come, kept if a later one fails) when given."""
    out = {} if out is None else out
    total = args.bulk_mib << 20
    for path, (port, pid) in paths.items():
        for way in ("up", "down"):
            bulk(port, min(total, warmup), way == "down")  # warm-up
            runs = []
            for _ in range(max(args.repeat, 1)):
                cpu, t0 = cpu_seconds(pid), time.monotonic()
                rate = bulk(port, total, way == "down")
                runs.append((rate, (cpu_seconds(pid) - cpu) / (time.monotonic() - t0)))
            out[path, way] = max(runs)
            note(f"[bulk] {path} {way}: {out[path, way][0]:,.0f} MB/s")
    return out


# --- main -------------------------------------------------------------------------------------

def parse_args(doc: str, own: Callable[[argparse.ArgumentParser], None], *, bulk_mib: int,
               repeat_help: str, quick_help: str, no_pin_help: str) -> argparse.Namespace:
    """The options every data-plane bench takes, the bench's ``own`` after ``--bulk-mib``."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    p.add_argument("--duration", type=int, default=5, help="seconds per measured wrk run")
    p.add_argument("--warmup", type=int, default=2, help="seconds of warm-up per wrk run")
    p.add_argument("--repeat", type=int, default=1, help=repeat_help)
    p.add_argument("--bulk-mib", type=int, default=bulk_mib, help="MiB per TCP bulk run each way")
    own(p)
    p.add_argument("--quick", action="store_true", help=quick_help)
    p.add_argument("--no-pin", action="store_true", help=no_pin_help)
    return p.parse_args()


def bench_main(args: argparse.Namespace, report: R,
               run: Callable[[Path, argparse.Namespace, R], None],
               print_report: Callable[[R], None], *, quick_mib: int, tmp_prefix: str,
               prepare: Callable[[], None] = lambda: None) -> int:
    """``prepare``, then ``run`` into ``report`` in a temporary directory, the server side
    pinned to the last CPU and wrk and the bulk client (this process) to the first; the
    summary line and ``print_report``. 0, or 1 if the run failed (what it had is printed)."""
    if args.quick:
        args.duration, args.warmup, args.bulk_mib = 2, 1, min(args.bulk_mib, quick_mib)
    cpus = sorted(os.sched_getaffinity(0))
    pinned = not args.no_pin and len(cpus) >= 2
    args.server_cpus, args.wrk_cpus = ({cpus[-1]}, {cpus[0]}) if pinned else (None, None)
    t0, load = time.monotonic(), os.getloadavg()[0]
    try:
        prepare()
        if pinned:  # the bulk client is this process: wrk's CPU
            os.sched_setaffinity(0, args.wrk_cpus)
        with tempfile.TemporaryDirectory(prefix=tmp_prefix) as tmp:
            run(Path(tmp), args, report)
    except (BenchError, RuntimeError, httpx.HTTPError, OSError,
            subprocess.TimeoutExpired) as exc:
        print_report(report)
        note(f"\nBENCHMARK FAILED: {exc}")
        return 1
    finally:
        os.sched_setaffinity(0, cpus)
    where = (f"server side on CPU {cpus[-1]}, wrk and the bulk client on CPU {cpus[0]}"
             if pinned else "no CPU pinning")
    print(f"\nwrk -t1 --latency -d{args.duration}s (+{args.warmup}s warm-up) per row, best of "
          f"{max(args.repeat, 1)}; TCP bulk {args.bulk_mib} MiB each way (MB = 10^6 bytes); "
          f"{where}; {time.monotonic() - t0:.0f}s in all; load average {load:.2f} at start, "
          f"{os.getloadavg()[0]:.2f} at end\n")
    print_report(report)
    return 0


def edgeway_agent(children: Children, name: str, server: Server, token: str, up: int,
                  inspect: bool = False, cwd: Path | None = None
                  ) -> tuple[subprocess.Popen[str], str]:
    """``edgeway http`` (the Edgeway agent, as this process's environment finds it) for the
    local port ``up``, plain HTTP, to ``server``: the process and its tunnel's host, from
    its local API."""
    web = free_port()
    proc = children.start(name, [
        sys.executable, "-m", "edgeway", "http", f"http://127.0.0.1:{up}", "--scheme", "http",
        "--authtoken", token, "--server-addr", f"localhost:{server.tunnel_port}",
        "--root-cas", str(server.data_dir / "ca.pem"), "--web-addr", f"127.0.0.1:{web}",
        "--inspect", "true" if inspect else "false", "--log", "false"], cwd=cwd)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise BenchError(f"{name} exited:\n{children.log(name)}")
        try:
            tunnels = httpx.get(f"http://127.0.0.1:{web}/api/tunnels", timeout=2).json()
            urls = [t["public_url"] for t in tunnels.get("tunnels", []) if t["public_url"]]
            if urls:
                return proc, str(urls[0]).split("://", 1)[1].split("/", 1)[0]
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(0.1)
    raise BenchError(f"{name} bound no tunnel in 30 s:\n{children.log(name)}")
