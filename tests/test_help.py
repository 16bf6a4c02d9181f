"""Help that helps: every option and argument of every command says what it is, a bad option
is answered with its own subcommand's usage, and ``serve --help`` names the ``EDGEWAY_*``
variable each option reads (and that variable is the one it reads)."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from edgeway import cli
from tests.test_cli import edgeway


def commands(p: argparse.ArgumentParser, path: str
             ) -> Iterator[tuple[str, argparse.ArgumentParser]]:
    """Every command's parser, by its words (``edgeway config add-authtoken``)."""
    yield path, p
    for action in p._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from commands(child, f"{path} {name}")


def options(p: argparse.ArgumentParser) -> list[argparse.Action]:
    skip = (argparse._SubParsersAction, argparse._HelpAction)
    return [a for a in p._actions if not isinstance(a, skip)]


def test_every_option_of_every_command_says_what_it_is() -> None:
    missing = [f"{path}: {'/'.join(a.option_strings) or a.metavar or a.dest}"
               for path, p in commands(cli.parser(), "edgeway") for a in options(p)
               if not (a.help or "").strip()]
    found = dict(commands(cli.parser(), "edgeway"))
    assert len(options(found["edgeway http"])) > 40 and "edgeway agent config check" in found
    assert missing == []


BAD = [
    (["http", "--bogus"], "error: the following arguments are required: PORT|ADDR|URL"),
    (["http", "3000", "--bogus"], "error: unrecognized arguments: --bogus"),
    (["serve", "--bogus"], "error: unrecognized arguments: --bogus"),
    (["start", "--all", "--bogus"], "error: unrecognized arguments: --bogus"),
    (["config", "add-authtoken", "x", "--bogus"], "error: unrecognized arguments: --bogus"),
    (["agent", "config", "check", "--bogus"], "error: unrecognized arguments: --bogus"),
    (["api-keys", "create", "--bogus"], "error: unrecognized arguments: --bogus"),
]


@pytest.mark.parametrize(("argv", "words"), BAD, ids=[" ".join(argv) for argv, _ in BAD])
def test_a_bad_option_gets_its_own_commands_usage(argv: list[str], words: str) -> None:
    r = edgeway(*argv)
    command = " ".join(a for a in argv if a[0].isalpha() and a not in ("3000", "x"))
    assert r.returncode == 2 and r.stdout == "", r
    assert r.stderr.startswith(f"usage: edgeway {command} "), r.stderr
    assert f"edgeway {command}: {words}" in r.stderr, r.stderr
    if argv[0] == "http":  # the usage shows the command's own options
        assert "--basic-auth" in r.stderr


def serve_parser() -> argparse.ArgumentParser:
    return dict(commands(cli.parser(), "edgeway"))["edgeway serve"]


def env_names(help_text: str) -> dict[str, list[str]]:
    """Each option of the help's listing and the variables its entry names."""
    entries: dict[str, list[str]] = {}
    flag = ""
    for line in help_text.split("\n"):
        if m := re.match(r"  (?:-\w, )?(--[a-z0-9-]+)", line):
            flag = m.group(1)
            entries[flag] = []
        if flag:
            entries[flag].append(line)
    return {f: re.findall(r"\[env: (EDGEWAY_[A-Z0-9_]+)\]", " ".join(" ".join(lines).split()))
            for f, lines in entries.items()}


def probe(action: argparse.Action) -> tuple[str, Any]:
    """A valid value for the option's variable, and what the option then holds."""
    from edgeway.options import AppendOver

    if action.choices:
        value = next(str(c) for c in action.choices if c != action.default)
        return value, value
    if isinstance(action, argparse._StoreTrueAction):
        return "1", True
    if action.type in (int, float):
        return "7", action.type("7")
    if action.type is Path:
        return "/probe/file", Path("/probe/file")
    if isinstance(action, AppendOver):
        return "1.2.3.4", ["1.2.3.4"]
    return "probe.example", "probe.example"


def test_serve_help_names_the_variable_each_option_reads(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    r = edgeway("serve", "--help", env={"COLUMNS": "100"})
    assert r.returncode == 0, r.stderr
    listed = env_names(r.stdout)
    actions = {a.option_strings[-1]: a for a in options(serve_parser())}
    assert set(listed) == set(actions) | {"--help"} and len(actions) > 40
    bare = {flag: names for flag, names in listed.items() if len(names) != 1}
    assert bare == {"--help": []}, "options whose help names no single variable"
    for flag, (name,) in ((f, n) for f, n in listed.items() if f != "--help"):
        action = actions[flag]
        monkeypatch.delenv(name, raising=False)
        before = serve_parser().parse_args([])
        value, held = probe(action)
        monkeypatch.setenv(name, value)
        after = serve_parser().parse_args([])
        monkeypatch.delenv(name)
        assert getattr(after, action.dest) == held != getattr(before, action.dest), \
            f"{flag} does not read {name}"


def test_the_command_line_wins_over_a_listed_variable(monkeypatch: pytest.MonkeyPatch
                                                      ) -> None:
    monkeypatch.setenv("EDGEWAY_PUBLIC_IP", "192.0.2.1")
    monkeypatch.setenv("EDGEWAY_OAUTH_ENDPOINTS", "a.b=https://x.example")
    p = serve_parser()
    args = p.parse_args([])
    assert args.public_ip == ["192.0.2.1"] and args.oauth_endpoint == ["a.b=https://x.example"]
    args = p.parse_args(["--public-ip", "192.0.2.2", "--public-ip", "192.0.2.3",
                         "--oauth-endpoint", "c.d=https://y.example"])
    assert args.public_ip == ["192.0.2.2", "192.0.2.3"]
    assert args.oauth_endpoint == ["c.d=https://y.example"]
