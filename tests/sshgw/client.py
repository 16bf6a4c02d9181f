"""The real OpenSSH client against the gateway, non-interactive: its own key pair (made with
ssh-keygen), a known_hosts file naming the gateway's host key (or trusting an SSH certificate
authority with ``@cert-authority``), BatchMode, StrictHostKeyChecking, ExitOnForwardFailure,
no user configuration or agent."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from tests.server import Server

DEADLINE = 20.0


def unique(prefix: str) -> str:
    """A name no other test on the shared server uses."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def made(api: httpx.Client, path: str, body: dict[str, Any]) -> dict[str, Any]:
    r = api.post(path, json=body)
    assert r.status_code == 201, r.text
    out: dict[str, Any] = r.json()
    return out


def poll(check: Any, what: str, timeout: float = DEADLINE) -> Any:
    """``check()``'s first truthy answer, polled until the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@dataclass
class Ssh:
    """A running ``ssh``: its stdout and stderr go to files, read while it runs."""
    proc: subprocess.Popen[bytes]
    out: Path
    err: Path

    def stdout(self) -> str:
        return self.out.read_bytes().decode(errors="replace")  # (CR LF kept)

    def stderr(self) -> str:
        return self.err.read_bytes().decode(errors="replace")

    def wait_for(self, pattern: str, timeout: float = DEADLINE, stream: str = "stdout"
                 ) -> re.Match[str]:
        def seen() -> re.Match[str] | None:
            text = self.stdout() if stream == "stdout" else self.stderr()
            if self.proc.poll() is not None and not re.search(pattern, text):
                raise AssertionError(f"ssh exited ({self.proc.returncode}) before printing "
                                     f"{pattern!r}:\n{self.stdout()}\n{self.stderr()}")
            return re.search(pattern, text)
        found: re.Match[str] = poll(seen, f"{pattern!r} from ssh", timeout)
        return found

    def urls(self, count: int = 1) -> list[str]:
        """The public URLs printed, once there are ``count`` of them."""
        def printed() -> list[str]:
            found = re.findall(r"Forwarding (\S+)\r?\n", self.stdout())
            if self.proc.poll() is not None and len(found) < count:
                raise AssertionError(f"ssh exited ({self.proc.returncode}):\n"
                                     f"{self.stdout()}\n{self.stderr()}")
            return found if len(found) >= count else []
        urls: list[str] = poll(printed, f"{count} URLs from ssh")
        return urls

    def exited(self, timeout: float = DEADLINE) -> int:
        return self.proc.wait(timeout)

    def stop(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class SshUser:
    """A key pair, a known_hosts file for ``srv``'s gateway, and ssh runs with them."""

    def __init__(self, srv: Server, directory: Path, port: int = 0) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.srv, self.dir, self.port = srv, directory, port or srv.ssh_port
        self.key = directory / "id_ed25519"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "test",
                        "-f", str(self.key)], check=True)
        self.public = (directory / "id_ed25519.pub").read_text().strip()
        host_key = (srv.data_dir / "ssh_host_ed25519_key.pub").read_text().split()
        self.known_hosts = directory / "known_hosts"
        self.trust(f"[127.0.0.1]:{self.port} {host_key[0]} {host_key[1]}")
        self.certificate: Path | None = None
        self.runs: list[Ssh] = []

    def trust(self, line: str) -> None:
        self.known_hosts.write_text(line + "\n")

    def credential(self, api: httpx.Client, acl: list[str] | None = None) -> dict[str, Any]:
        return made(api, "/ssh_credentials", {"public_key": self.public, "acl": acl or []})

    def args(self, forwards: tuple[str, ...], command: list[str] | None,
             *options: str) -> list[str]:
        out = ["ssh", "-F", "/dev/null", "-p", str(self.port), "-i", str(self.key),
               "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
               "-o", f"UserKnownHostsFile={self.known_hosts}",
               "-o", "GlobalKnownHostsFile=/dev/null", "-o", "IdentitiesOnly=yes",
               "-o", "IdentityAgent=none", "-o", "ExitOnForwardFailure=yes",
               "-o", "ConnectTimeout=10", *options]
        if self.certificate is not None:
            out += ["-o", f"CertificateFile={self.certificate}"]
        for forward in forwards:
            out += ["-R", forward]
        out.append("v2@127.0.0.1")
        return out + (command or [])

    def start(self, *forwards: str, command: list[str] | None = None,
              options: tuple[str, ...] = (), stdin: int | None = subprocess.DEVNULL) -> Ssh:
        """``ssh -R forward... v2@gateway command`` (``command`` None: ``ssh -N``)."""
        n = len(self.runs)
        out, err = self.dir / f"ssh{n}.out", self.dir / f"ssh{n}.err"
        opts = options if command is not None else ("-N", *options)
        with out.open("wb") as o, err.open("wb") as e:
            proc = subprocess.Popen(self.args(forwards, command, *opts), stdin=stdin,
                                    stdout=o, stderr=e, env={**os.environ, "LC_ALL": "C"})
        run = Ssh(proc, out, err)
        self.runs.append(run)
        return run

    def close(self) -> None:
        for run in self.runs:
            run.stop()
