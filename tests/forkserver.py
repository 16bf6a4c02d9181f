"""Start ``edgeway`` server processes by forking one that has imported the server already.

A server's start costs about a second of CPU, nearly all of it importing the server's modules;
the suite starts a few hundred, on two cores. A fork server (``python -m tests.forkserver
SOCKET``, one per test process, started on first use) imports them once; each start is then
a fork of it that runs ``edgeway.cli.main`` with the command's arguments, environment, working
directory and standard streams, and exits as ``python -m edgeway`` would (the interpreter's own
shutdown). The child is a real process of its own: signals, exit codes, pids and pipes are the
ones a test of ``subprocess.Popen`` would see. ``EDGEWAY_TEST_FORK=0`` starts every server with
``subprocess.Popen`` instead.

The protocol, on a Unix socket: the client sends one JSON request (``argv``, ``env``, ``cwd``)
with its standard input, output and error as SCM_RIGHTS descriptors; the server answers the
child's pid as a line, then, when the child has ended, its wait status as a line."""

from __future__ import annotations

import array
import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

FORK = os.environ.get("EDGEWAY_TEST_FORK", "1") != "0"


class Forked:
    """A child of the fork server, as the tests use a ``subprocess.Popen``."""

    def __init__(self, conn: socket.socket, pid: int, stdout: IO[str] | None) -> None:
        self._conn = conn
        self.pid = pid
        self.stdout = stdout
        self.returncode: int | None = None
        self._buffer = b""

    def _read_status(self, timeout: float | None) -> None:
        if self.returncode is not None:
            return
        ready, _, _ = select.select([self._conn], [], [], timeout)
        if not ready:
            return
        while not self._buffer.endswith(b"\n"):
            chunk = self._conn.recv(64)
            if not chunk:
                raise RuntimeError(f"the fork server went away before child {self.pid} ended")
            self._buffer += chunk
        self.returncode = os.waitstatus_to_exitcode(int(self._buffer))
        self._conn.close()

    def poll(self) -> int | None:
        self._read_status(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.returncode is None:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise subprocess.TimeoutExpired(f"edgeway (pid {self.pid})", timeout or 0)
            self._read_status(left)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Client:
    """This test process's fork server, started on first use."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[bytes] | None = None
        self._path = ""

    def _ensure(self) -> str:
        if self._proc is None or self._proc.poll() is not None:
            here = Path(__file__).resolve().parent.parent
            path = f"/tmp/edgeway-fork-{os.getpid()}-{time.monotonic_ns()}.sock"
            self._proc = subprocess.Popen([sys.executable, "-m", "tests.forkserver", path],
                                          cwd=here, stdin=subprocess.DEVNULL)
            deadline = time.monotonic() + 60
            while not os.path.exists(path):
                if self._proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the fork server did not start")
                time.sleep(0.02)
            self._path = path
        return self._path

    def spawn(self, argv: list[str], env: dict[str, str], stdout: int, stderr: int
              ) -> Forked:
        """``edgeway *argv``; its standard output a pipe (read as text) when ``stdout`` is
        ``subprocess.PIPE``, else that descriptor; its standard error the descriptor
        ``stderr``."""
        read_end: IO[str] | None = None
        if stdout == subprocess.PIPE:
            r, w = os.pipe()
            read_end, out = os.fdopen(r, "r"), w
        else:
            out = stdout
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(self._ensure())
            request = json.dumps({"argv": argv, "env": env, "cwd": os.getcwd()}).encode()
            fds = array.array("i", [0 if _usable(0) else _devnull(), out, stderr])
            conn.sendmsg([len(request).to_bytes(4, "big") + request],
                          [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
            line = b""
            while not line.endswith(b"\n"):
                chunk = conn.recv(1)
                if not chunk:
                    raise RuntimeError("the fork server did not start the command")
                line += chunk
        except BaseException:
            conn.close()
            if read_end is not None:
                read_end.close()
            raise
        finally:
            if stdout == subprocess.PIPE:
                os.close(out)  # (the child holds its own: the pipe ends with it)
        return Forked(conn, int(line), read_end)

    def close(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            self._proc.wait(10)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._path)


def _usable(fd: int) -> bool:
    try:
        os.fstat(fd)
    except OSError:
        return False
    return True


_null: int | None = None


def _devnull() -> int:
    global _null
    if _null is None:
        _null = os.open(os.devnull, os.O_RDONLY)
    return _null


# -- the server side ------------------------------------------------------------------------

def _receive(conn: socket.socket) -> tuple[dict[str, Any], list[int]]:
    fds = array.array("i")
    head, ancillary, _, _ = conn.recvmsg(4, socket.CMSG_SPACE(3 * fds.itemsize))
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(data[:len(data) - len(data) % fds.itemsize])
    size = int.from_bytes(head, "big")
    body = b""
    while len(body) < size:
        chunk = conn.recv(size - len(body))
        if not chunk:
            raise ConnectionError("the request ended early")
        body += chunk
    return json.loads(body), list(fds)


def _serve(path: str) -> tuple[dict[str, Any], list[int]]:
    """Accept requests until the parent goes; in a forked child, return its request."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path + ".new")
    listener.listen(64)
    os.rename(path + ".new", path)  # (the client waits for the name: it now accepts)
    parent = os.getppid()
    children: dict[int, socket.socket] = {}
    while True:
        ready, _, _ = select.select([listener], [], [], 0.05)
        while children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if pid == 0:
                break
            conn = children.pop(pid, None)
            if conn is not None:
                with contextlib.suppress(OSError):
                    conn.sendall(f"{status}\n".encode())
                conn.close()
        if os.getppid() != parent:  # (the test process is gone: so is this)
            for pid in children:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            raise SystemExit(0)
        if not ready:
            continue
        conn, _ = listener.accept()
        try:
            request, fds = _receive(conn)
        except (OSError, ValueError):
            conn.close()
            continue
        pid = os.fork()
        if pid == 0:
            listener.close()
            conn.close()
            for other in children.values():
                other.close()
            return request, fds
        for fd in fds:
            os.close(fd)
        conn.sendall(f"{pid}\n".encode())
        children[pid] = conn


def _become(request: dict[str, Any], fds: list[int]) -> None:
    """This forked child becomes ``python -m edgeway *argv``."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
    for fd in set(fds) - {0, 1, 2}:
        os.close(fd)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    sys.argv = [sys.executable, *request["argv"]]


def main() -> None:
    # What ``edgeway serve`` imports, before any fork.
    import edgeway.cli
    import edgeway.server
    import edgeway.workers

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    request, fds = _serve(sys.argv[1])
    _become(request, fds)
    edgeway.cli.main(request["argv"])


if __name__ == "__main__":
    main()
