"""The console as a person sees it: the agent runs in a real terminal (tmux), and the screen is
read with ``capture-pane``: a refused bind with the server's reason next to a bound tunnel,
the last HTTP requests, no log line on the screen; and a session failing on a wrong CA with
its hint."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.agent.test_agent import write_config
from tests.certs import make_cert
from tests.edge import upstream
from tests.edge.agents import EdgeClient
from tests.server import Server, free_port

if not shutil.which("tmux"):
    pytest.skip("tmux is not installed (scripts/test installs it)", allow_module_level=True)


class Terminal:
    def __init__(self, socket: str, name: str) -> None:
        self.socket, self.name = socket, name

    def screen(self) -> str:
        return subprocess.run(["tmux", "-L", self.socket, "capture-pane", "-p", "-t",
                               self.name], capture_output=True, text=True, check=True).stdout

    def wait_for(self, *words: str, timeout: float = 20) -> str:
        deadline = time.monotonic() + timeout
        while True:
            text = self.screen()
            if all(w in text for w in words):
                return text
            if time.monotonic() > deadline:
                raise AssertionError(f"not on the screen: {words}\n{text}")
            time.sleep(0.1)


@contextmanager
def terminal(tmp_path: Path, *argv: str) -> Iterator[Terminal]:
    """``edgeway ARGV`` in a 160x48 tmux terminal of its own."""
    socket, name = f"edgeway-test-{os.getpid()}-{free_port()}", "agent"
    env = " ".join(f"{k}={shlex.quote(os.environ[k])}" for k in (
        "XDG_CONFIG_HOME", "XDG_STATE_HOME", "PATH") if k in os.environ)
    command = f"env -u COLUMNS -u LINES {env} TERM=xterm-256color " + \
        " ".join(map(shlex.quote, [sys.executable, "-m", "edgeway", *argv])) + \
        f" 2>{shlex.quote(str(tmp_path / 'stderr'))}"
    subprocess.run(["tmux", "-L", socket, "-f", "/dev/null", "new-session", "-d", "-s", name,
                    "-x", "160", "-y", "48", command], check=True)
    try:
        yield Terminal(socket, name)
    finally:
        subprocess.run(["tmux", "-L", socket, "send-keys", "-t", name, "C-c"], check=False)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and subprocess.run(
                ["tmux", "-L", socket, "has-session", "-t", name],
                capture_output=True).returncode == 0:
            time.sleep(0.1)
        subprocess.run(["tmux", "-L", socket, "kill-server"], capture_output=True, check=False)


def test_the_console_shows_refusals_and_requests(srv: Server, tmp_path: Path) -> None:
    with srv.client() as api:
        token = api.post("/credentials", json={}).json()["token"]
    web = free_port()
    with upstream.running("svc") as svc:
        cfg = write_config(tmp_path / "a.yml", srv, token, web, (
            f"tunnels:\n  site:\n    proto: http\n    addr: {svc}\n"
            f"  taken:\n    proto: http\n    addr: {svc}\n    domain: nobody.example.net\n"
            f"  api:\n    proto: http\n    addr: {web}\n    allow_unauthenticated: true\n"))
        with terminal(tmp_path, "start", "--all", "--config", str(cfg)) as term:
            screen = term.wait_for("Session Status", "online", "refused:")
            assert "nobody.example.net" in screen and "is not reserved" in screen
            assert "publishes this agent's API" in screen  # the api tunnel, allowed unguarded
            url = next(w for line in screen.splitlines() if "-> http://127.0.0.1:" +
                       str(svc) in line and "https://" in line for w in line.split()
                       if w.startswith("https://"))
            with EdgeClient(srv) as client:
                for path in ("/first", "/second?q=1"):
                    assert client.get(url + path).status_code == 200
            screen = term.wait_for("GET     /second?q=1", "GET     /first")
            lines = screen.splitlines()
            assert "200 OK" in next(line for line in lines if "/second?q=1" in line)
            assert not any(line.lstrip().startswith("{") for line in lines)  # no log lines
            assert "uvicorn" not in screen.lower() and "Started server" not in screen
        assert "Traceback" not in (tmp_path / "stderr").read_text()


def test_a_wrong_ca_is_explained_on_the_console(srv: Server, tmp_path: Path) -> None:
    other_ca = tmp_path / "other-ca.pem"
    other_ca.write_text(make_cert("Some other CA"))
    cfg = write_config(tmp_path / "a.yml", srv, "abcdefgh", free_port(), "")
    with terminal(tmp_path, "start", "--none", "--config", str(cfg), "--root-cas",
                  str(other_ca)) as term:
        screen = term.wait_for("CERTIFICATE_VERIFY_FAILED", "edgeway ca export")
        assert "reconnecting" in screen or "connecting" in screen
