"""The gateway's command line, without sockets: what each form binds, and the one readable
line each mistake gets."""

from __future__ import annotations

import pytest

from edgeway.sshgw import command
from edgeway.sshgw.command import Command, CommandError
from edgeway.tunnel.binds import BindRefused, BindRequest

BASE = "edgeway.localhost"


def bind(text: str | None, port: int = 0) -> BindRequest:
    return command.bind_request(command.parse(text), port, "127.0.0.1", BASE, "ssh")


def test_the_forms_of_the_issue() -> None:
    assert command.parse(None) == command.parse("  ") == Command("http")
    assert command.parse("tcp") == Command("tcp")
    assert command.parse("tls --domain=app.example.com") == Command("tls", "app.example.com")
    got = command.parse("http --domain app.example.com --basic-auth=user:password --quiet "
                        "--basic-auth u2:password2")
    assert got == Command("http", "app.example.com", ("user:password", "u2:password2"), {},
                          True)
    assert command.parse("tcp --label app=db --label 'team=a b'").labels == {
        "app": "db", "team": "a b"}
    assert command.parse("HELP").help and command.parse("--help").help


@pytest.mark.parametrize(("text", "words"), [
    ("ftp", "unknown command 'ftp': use http, https, tcp or tls"),
    ("http --domian=x.example.com", "unknown option '--domian' for http (options: --domain, "
                                    "--basic-auth, --label, --quiet)"),
    ("tcp --domain=x.example.com", "unknown option '--domain' for tcp (options: --label, "
                                   "--quiet)"),
    ("tls --basic-auth=a:b", "unknown option '--basic-auth' for tls"),
    ("http extra", "unexpected argument 'extra'"),
    ("http --domain", "--domain needs a value"),
    ("http --domain --quiet", "--domain needs a value"),
    ("http --quiet=yes", "--quiet takes no value"),
    ("http --domain=a.example.com --domain=b.example.com", "--domain is given twice"),
    ("http --label=novalue", "--label 'novalue' must be KEY=VALUE"),
    ("http --label=a=1 --label=a=2", "--label a is given twice"),
    ("http --label=a=1 --domain=x.example.com", "leave out --domain and --basic-auth"),
    ("http 'unclosed", "cannot read the command"),
    ("http " + "x" * 5000, "longer than 4096 characters"),
])
def test_mistakes_are_named(text: str, words: str) -> None:
    with pytest.raises(CommandError) as caught:
        command.parse(text)
    assert words in str(caught.value)


def test_bind_requests_go_through_the_agents_bind_checks() -> None:
    req = bind("http --domain=App.Example.com --basic-auth=alice:opensesame")
    assert (req.proto, req.domain, req.basic_auth) == (
        "http", "app.example.com", (("alice", "opensesame"),))
    assert bind("tcp", 20005).addr == "127.0.0.1:20005"
    assert bind("http --label=app=web").labels == {"app": "web"}
    assert bind("https", 443).proto == "https"
    for text, port, words in (
            ("http --basic-auth=alice:short", 0, "at least 8 characters"),
            ("http --basic-auth=alice", 0, "USER:PASSWORD"),
            ("http --domain=bad_name!", 0, "Domain"),
            ("http", 8080, "remote port 8080: an http tunnel has no port of its own"),
            ("tcp --label=a=b", 5000, "a labeled tunnel has no port of its own")):
        with pytest.raises(BindRefused) as caught:
            bind(text, port)
        assert words in str(caught.value), caught.value


def test_bind_addresses() -> None:
    for host in ("", "localhost", "127.0.0.1", "*", "0.0.0.0", "::"):
        command.check_bind_host(host)
    with pytest.raises(CommandError, match=r"'app\.example\.com' is not used"):
        command.check_bind_host("app.example.com")
