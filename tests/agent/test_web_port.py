"""``--web-addr HOST:0``: the agent's local API listens on a port the system picks, and the
console and the log say which (a person reads the screen; the API answers there)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import httpx

from tests.agent.terminal import Pty
from tests.server import free_port, trust


def test_web_addr_port_0_serves_on_the_port_it_shows(tmp_path: Path) -> None:
    (tmp_path / "home").mkdir()
    home = tmp_path / "home"
    dead = free_port()  # no server: the API is up while the agent keeps connecting
    term = Pty(home, "http", "9", "--web-addr", "127.0.0.1:0", "--authtoken", "x",
               "--server-addr", f"127.0.0.1:{dead}", "--log", "agent.log")
    try:
        term.wait_for("Web Interface", "/inspect/http")
        shown = re.search(r"Web Interface\s+http://127\.0\.0\.1:(\d+)/inspect/http", term.text)
        assert shown, term.text[-3000:]
        port = int(shown.group(1))
        assert port != 0
        r = httpx.get(f"http://127.0.0.1:{port}/api/status", timeout=10, verify=trust())
        assert r.status_code == 200 and r.json()["uri"] == "/api/status", r.text
        page = httpx.get(f"http://127.0.0.1:{port}/inspect/http", timeout=10, verify=trust())
        assert page.status_code == 200 and "Replay with changes" in page.text
        assert term.interrupt() == 0, term.text[-3000:]
        assert "Traceback" not in term.text
    finally:
        term.close()
    logged = [json.loads(line) for line in (home / "agent.log").read_text().splitlines()
              if "web_listening" in line]
    assert [e["url"] for e in logged] == [f"http://127.0.0.1:{port}"]


def test_a_bad_web_addr_is_still_refused(tmp_path: Path) -> None:
    from tests.test_cli import edgeway

    r = edgeway("http", "9", "--web-addr", "127.0.0.1:70000", "--authtoken", "x",
                "--server-addr", "127.0.0.1:9", env={"XDG_CONFIG_HOME": str(tmp_path)})
    assert r.returncode == 2 and "web_addr: port must be from 1 to 65535" in r.stderr, r
    r = edgeway("http", "9", "--web-addr", "no host:0", "--authtoken", "x",
                "--server-addr", "127.0.0.1:9", env={"XDG_CONFIG_HOME": str(tmp_path)})
    assert r.returncode == 2 and "'no host' is not a valid host name" in r.stderr, r
