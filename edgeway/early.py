"""Listening before the imports: ``edgeway serve`` binds the listeners agents and visitors
reach (tunnel, public HTTP, public HTTPS) first thing, before the second or so of imports and
the store's opening. A restarted server then holds its ports within a fraction of a second:
an agent retrying after the drop (the SDKs try again 50 ms and 2.5 s later, then only after
two minutes) connects, and its handshake completes as soon as the server is up, where it
would have been refused. The server adopts these sockets (``config.listen_socket``); one it
binds elsewhere, or does not use, is closed (``drop``, ``release``).

Not with ``--reuse-port`` (a rolling restart: the old server answers meanwhile, and a socket
that accepts nothing yet would take its share of the connections) nor ``--workers``. Standard
library only, so that it runs before the rest is imported."""

from __future__ import annotations

import socket
from collections.abc import Mapping, Sequence

# option -> (its environment variable, its default): as serve_cli declares them
LISTENERS = {"--tunnel-addr": ("EDGEWAY_TUNNEL_ADDR", "127.0.0.1:4443"),
             "--http-addr": ("EDGEWAY_HTTP_ADDR", "127.0.0.1:8880"),
             "--https-addr": ("EDGEWAY_HTTPS_ADDR", "127.0.0.1:8443")}
BACKLOG = 1024
_bound: dict[tuple[str, int], socket.socket] = {}


def _given(argv: Sequence[str], env: Mapping[str, str], flag: str, variable: str) -> str:
    """An option's value as serve will read it: the command line, its variable, a default."""
    for i, arg in enumerate(argv):
        if arg == flag and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(flag + "="):
            return arg.partition("=")[2]
    return env.get(variable, "") or ""


def prebind(argv: Sequence[str], env: Mapping[str, str]) -> None:
    """For ``serve`` (the first word of ``argv`` that is not an option), bind its listeners."""
    words = [a for a in argv if not a.startswith("-")]
    if not words or words[0] != "serve" or "-h" in argv or "--help" in argv:
        return
    if "--reuse-port" in argv or env.get("EDGEWAY_REUSE_PORT", "") not in ("", "0", "false"):
        return
    workers = _given(argv, env, "--workers", "EDGEWAY_WORKERS")
    if workers not in ("", "1"):
        return
    for flag, (variable, default) in LISTENERS.items():
        text = _given(argv, env, flag, variable) or default
        host, sep, port = text.rpartition(":")
        if not sep or not (port.isascii() and port.isdigit()) or not 0 < int(port) < 65536:
            continue  # ("off", or a mistake serve will name)
        host = host.strip("[]") or "127.0.0.1"
        try:
            _bound[(host, int(port))] = socket.create_server(
                (host, int(port)), backlog=BACKLOG,
                family=socket.AF_INET6 if ":" in host else socket.AF_INET)
        except OSError:
            continue  # (serve binds it again and says why it cannot)


def take(host: str, port: int) -> socket.socket | None:
    """The socket bound early for ``host:port``, if any; one bound for another address on
    ``port`` is closed (it would stand in the way)."""
    sock = _bound.pop((host, port), None)
    if sock is None:
        drop(port)
    return sock


def drop(port: int) -> None:
    for key in [k for k in _bound if k[1] == port]:
        _bound.pop(key).close()


def release() -> None:
    """Close what the server did not adopt (a listener it turned off, say)."""
    for sock in _bound.values():
        sock.close()
    _bound.clear()
