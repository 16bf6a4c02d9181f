"""The agent's commands typed on a terminal, with every ``--log`` value and none: the screen
says what is going on (connecting, the server's address, why it failed), never a traceback,
and Ctrl+C ends the agent cleanly. The server address is one where nothing listens, as on a
first run before ``edgeway serve`` is up."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.agent.terminal import Pty
from tests.server import free_port

COMMANDS = [["http", "9"], ["tcp", "9"], ["tls", "9"]]
LOGS: list[list[str]] = [[], ["--log", "false"], ["--log", "stderr"], ["--log", "stdout"],
                         ["--log", "agent.log"]]


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    (tmp_path / "home").mkdir()
    yield tmp_path / "home"


@pytest.mark.parametrize("log", LOGS, ids=lambda v: " ".join(v) or "no-log-flag")
@pytest.mark.parametrize("command", COMMANDS, ids=lambda v: v[0])
def test_a_one_liner_on_a_terminal_says_what_it_does(home: Path, command: list[str],
                                                     log: list[str]) -> None:
    port = free_port()  # nothing listens there
    term = Pty(home, *command, "--authtoken", "x", "--server-addr", f"127.0.0.1:{port}", *log)
    try:
        # the console (or, with the log on stdout or stderr, the log) names the failure
        words = ("connecting", f"127.0.0.1:{port}") if log in ([], ["--log", "false"],
                                                              ["--log", "agent.log"]) \
            else ("Connection refused",)
        term.wait_for(*words)
        code = term.interrupt()
        assert "Traceback" not in term.text and "Error:" not in term.text, term.text[-3000:]
        assert code == 0, term.text[-3000:]
    finally:
        term.close()
    if log == ["--log", "agent.log"]:
        assert "Connection refused" in (home / "agent.log").read_text()


@pytest.mark.parametrize("log", LOGS, ids=lambda v: " ".join(v) or "no-log-flag")
def test_start_without_a_config_file_says_so(home: Path, log: list[str]) -> None:
    term = Pty(home, "start", "--none", "--authtoken", "x", "--server-addr", "127.0.0.1:9", *log)
    try:
        code = term.finish()
        assert code == 2 and "agent.yml: no such file" in term.text, term.text
        assert "Traceback" not in term.text
    finally:
        term.close()


def test_config_commands_on_a_terminal(home: Path) -> None:
    """``config add-authtoken``, ``check`` and ``edit`` (with an editor that changes
    nothing) typed on a terminal: each says what it did, none shows a traceback."""
    def run(*argv: str, env_editor: str | None = None) -> tuple[int, str]:
        return Pty.run(home, *argv, env={"EDITOR": env_editor} if env_editor else None)

    code, screen = run("config", "add-authtoken", "tok-123")
    assert code == 0 and "agent.yml" in screen, screen
    code, screen = run("config", "check")  # no server address yet: says what to run
    assert code == 2 and "config add-server-addr" in screen, screen
    code, screen = run("config", "add-server-addr", f"127.0.0.1:{free_port()}")
    assert code == 0 and "could not be checked" in screen, screen
    code, screen = run("config", "check")
    assert code == 0 and "tok-123" not in screen and "authtoken" in screen, screen
    code, screen = run("config", "edit", env_editor="true")
    assert code == 0, screen
    (home / ".config" / "edgeway" / "agent.yml").write_text("version: 3\n")
    code, screen = run("config", "check")
    assert code == 2 and "version" in screen and "Traceback" not in screen, screen
