"""The command an SSH client runs on the gateway (``ssh -R 0:localhost:8080 v2@host http
--domain=app.example.com``), parsed strictly, and each remote forward's bind request made from
it. Sans I/O: text in, a ``Command`` or a ``CommandError`` (one readable line for the user's
terminal) out.

The bind request is built as an agent's Bind message and read by ``tunnel.binds`` (the same
checks and messages as for agents: domain names, basic auth credentials, labels)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field

from edgeway.tunnel import binds, rpc
from edgeway.tunnel.binds import BindRequest

PROTOS = ("http", "https", "tcp", "tls")
# the options of each protocol (``--name=value``, or ``--name value``; ``--quiet`` alone)
OPTIONS = {"http": ("domain", "basic-auth", "label", "quiet"),
           "https": ("domain", "basic-auth", "label", "quiet"),
           "tcp": ("label", "quiet"),
           "tls": ("domain", "label", "quiet")}
FLAGS = ("quiet",)
REPEATED = ("basic-auth", "label")
MAX_COMMAND = 4096
# what a forward's bind address may be (OpenSSH sends "localhost" unless told otherwise)
ANY_HOST = ("", "localhost", "127.0.0.1", "::1", "0.0.0.0", "::", "*")
USAGE = """\
usage: ssh -p PORT -R 0:localhost:LOCAL_PORT v2@HOST COMMAND [OPTIONS]
commands (one tunnel per -R forward; no command: http):
  http  [--domain=NAME] [--basic-auth=USER:PASSWORD]... [--label=KEY=VALUE]... [--quiet]
  https [--domain=NAME] [--basic-auth=USER:PASSWORD]... [--label=KEY=VALUE]... [--quiet]
  tcp   [--label=KEY=VALUE]... [--quiet]   (-R PORT:... asks for that public port)
  tls   [--domain=NAME] [--label=KEY=VALUE]... [--quiet]   (TLS passed through by SNI)
  help
--label makes a labeled tunnel, reached through edges whose tunnel group backends select
its labels; --quiet leaves out the line per request.
"""


class CommandError(ValueError):
    """A command the gateway refuses; the message is for the user's terminal."""


@dataclass(frozen=True)
class Command:
    proto: str = "http"
    domain: str = ""
    basic_auth: tuple[str, ...] = ()  # "user:password"
    labels: dict[str, str] = field(default_factory=dict)
    quiet: bool = False
    help: bool = False


def _words(text: str) -> list[str]:
    if len(text) > MAX_COMMAND:
        raise CommandError(f"the command is longer than {MAX_COMMAND} characters")
    try:
        return shlex.split(text)
    except ValueError as exc:
        raise CommandError(f"cannot read the command: {exc}") from None


def _options(proto: str, words: list[str]) -> dict[str, list[str]]:
    """``--name=value`` and ``--name value`` pairs, each name one this protocol takes."""
    out: dict[str, list[str]] = {}
    allowed = OPTIONS[proto]
    listed = ", ".join(f"--{name}" for name in allowed)
    rest = iter(words)
    for word in rest:
        if not word.startswith("--") or len(word) == 2:
            raise CommandError(f"unexpected argument '{word}': {proto} takes options only "
                               f"({listed})")
        name, sep, value = word[2:].partition("=")
        if name not in allowed:
            raise CommandError(f"unknown option '--{name}' for {proto} (options: {listed})")
        if name in FLAGS:
            if sep:
                raise CommandError(f"--{name} takes no value")
            value = ""
        elif not sep:
            value = next(rest, None) or ""
            if not value or value.startswith("--"):
                raise CommandError(f"--{name} needs a value (--{name}=VALUE)")
        if name in out and name not in REPEATED:
            raise CommandError(f"--{name} is given twice")
        out.setdefault(name, []).append(value)
    return out


def _labels(values: list[str]) -> dict[str, str]:
    labels: dict[str, str] = {}
    for text in values:
        key, sep, value = text.partition("=")
        if not sep or not key:
            raise CommandError(f"--label '{text}' must be KEY=VALUE")
        if key in labels:
            raise CommandError(f"--label {key} is given twice")
        labels[key] = value
    return labels


def parse(text: str | None) -> Command:
    """The command of a session (None or blank: an HTTP tunnel with no options)."""
    words = _words(text or "")
    if not words:
        return Command()
    proto = words[0].lower()
    if proto in ("help", "--help", "-h"):
        return Command(help=True)
    if proto not in PROTOS:
        raise CommandError(f"unknown command '{words[0]}': use http, https, tcp or tls "
                           "(or help)")
    opts = _options(proto, words[1:])
    command = Command(proto, (opts.get("domain") or [""])[0],
                      tuple(opts.get("basic-auth") or ()), _labels(opts.get("label") or []),
                      "quiet" in opts)
    if command.labels and (command.domain or command.basic_auth):
        raise CommandError("a labeled tunnel (--label) is reached through edges: its domain "
                           "and modules are the edge's; leave out --domain and --basic-auth")
    return command


def check_bind_host(host: str) -> None:
    """CommandError unless a forward's bind address is one that means "the gateway"."""
    if host.lower() not in ANY_HOST:
        raise CommandError(f"the forward's bind address '{host}' is not used by this "
                           "gateway: forward 0:localhost:PORT and name the domain with "
                           "--domain")


def bind_request(command: Command, port: int, tcp_host: str, base_domain: str,
                 forwards_to: str) -> BindRequest:
    """The bind request of one remote forward asking for ``port`` (0: any) under
    ``command``; BindRefused with the reason when it cannot be bound."""
    if port and port not in (80, 443) and (command.proto != "tcp" or command.labels):
        what = "a labeled tunnel" if command.labels else f"an {command.proto} tunnel"
        raise binds.BindRefused(f"remote port {port}: {what} has no port of its own on this "
                                "gateway; forward port 0 (-R 0:localhost:PORT)")
    if command.labels:
        return binds.parse_labeled({"labels": command.labels, "forwardsto": forwards_to})
    opts: dict[str, object] = {}
    if command.proto == "tcp" and port:
        opts["Addr"] = f"{tcp_host}:{port}"
    if command.domain:
        opts["Domain"] = command.domain
    if command.basic_auth:
        pairs = [text.partition(":") for text in command.basic_auth]
        if any(not sep for _, sep, _ in pairs):
            raise binds.BindRefused("--basic-auth must be USER:PASSWORD")
        opts["BasicAuth"] = {"Credentials": [{"Username": user, "CleartextPassword": password}
                                             for user, _, password in pairs]}
    message = {"Proto": command.proto, "Opts": opts, "ForwardsTo": forwards_to}
    return binds.parse(message, rpc.folded(message), base_domain)
