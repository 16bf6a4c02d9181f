"""The real clients of the compatibility tests, as scripts/test installs them: the official
API client ``ngrok-api`` in ``.venv-ngrok-api`` (its own virtualenv: it installs a top-level
``ngrok`` package, as the agent SDK does), and from npm (``tests/vendor/peers``) the classic
ngrok agent 2.3 and the Node SDK. Helpers run them as processes on loopback."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.server import Server

ROOT = Path(__file__).resolve().parents[2]
PEERS = ROOT / "tests" / "vendor" / "peers" / "node_modules"
API_PYTHON = ROOT / ".venv-ngrok-api" / "bin" / "python"
CLASSIC = PEERS / "@expo" / "ngrok-bin-linux-x64" / "ngrok"
_URL = re.compile(r'msg="started tunnel".* url=(\S+)')


def need(path: Path) -> Path:
    if not path.exists():
        pytest.fail(f"{path} is missing: bash scripts/test installs it")
    return path


def drive_api(srv: Server, script: str, *args: str, timeout: float = 120) -> object:
    """Run ``script`` (the body of a function of ``c``, an ``ngrok.Client`` on ``srv``, and
    ``args``) with the official client; what it returns, as JSON."""
    program = ("import json, sys, ngrok\n"
               "c = ngrok.Client(sys.argv[1], base_url=sys.argv[2])\n"
               "def run(c, args):\n" + textwrap.indent(textwrap.dedent(script), "    ")
               + "\nprint(json.dumps(run(c, sys.argv[3:])))\n")
    done = subprocess.run([str(need(API_PYTHON)), "-c", program, srv.token, srv.base_url,
                           *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, "NO_PROXY": "127.0.0.1"})
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@dataclass
class Classic:
    """A classic ngrok agent process and its log (``-log stdout``)."""
    proc: subprocess.Popen[bytes]
    log: Path

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def urls(self, count: int, timeout: float = 20) -> list[str]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            found = _URL.findall(self.text())
            if len(found) >= count:
                return sorted(found[-count:])
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"the classic agent started no {count} tunnels:\n{self.text()}")

    def exited(self, timeout: float = 20) -> str:
        """Its log once it exited by itself (a refused bind ends it)."""
        self.proc.wait(timeout)
        return self.text()

    def stop(self, sig: signal.Signals = signal.SIGINT) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(20)


def classic_config(path: Path, srv: Server, token: str, tunnels: str = "") -> Path:
    path.write_text(f"server_addr: localhost:{srv.tunnel_port}\n"
                    f"root_cas: {srv.data_dir / 'ca.pem'}\nauthtoken: {token}\n"
                    "web_addr: false\nupdate_check: false\n" + tunnels)
    return path


def classic(config: Path, command: str, *args: str) -> Classic:
    """``ngrok <command> -config <config> -log stdout <args>`` (flags before the port)."""
    log = config.with_suffix(f".{time.monotonic_ns()}.log")
    with log.open("wb") as out:
        proc = subprocess.Popen([str(need(CLASSIC)), command, "-config", str(config),
                                 "-log", "stdout", *args], stdout=out,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    return Classic(proc, log)
