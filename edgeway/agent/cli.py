"""The agent's commands: ``edgeway start`` (also ``edgeway agent start``: tunnels from the
config), the one-liners ``edgeway http|tcp|tls ADDR`` (``oneliner``), and ``edgeway config …``
(also ``edgeway agent config …``; ``configcmd``). Each loads the config files, merges the
command line's flags after them, checks the result as ``config check`` does, and runs the
agent (``run``)."""

from __future__ import annotations

import argparse
import ipaddress
import re
import sys
from typing import Any

from edgeway import runner
from edgeway.agent import configcmd, oneliner
from edgeway.agent.configcheck import is_host

AGENT_COMMANDS = ("agent", "start", "http", "tcp", "tls", "config")
_RESOLVE = re.compile(r"(?P<host>[^:\[\]\s]+):(?:(?P<port>\d{1,5}):)?(?P<addr>\S+)")


def _start_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str,
                  what: str) -> None:
    start = sub.add_parser(name, help=what, description=what)
    start.add_argument("names", nargs="*", metavar="NAME", help="tunnels to start")
    which = start.add_mutually_exclusive_group()
    which.add_argument("--all", action="store_true", help="start every tunnel in the config")
    which.add_argument("--none", action="store_true",
                       help="start no tunnel (use the local API to start them)")
    oneliner.session_flags(start)


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    agent = sub.add_parser("agent", help="the agent's commands under one name: agent start, "
                                         "agent config ...")
    agent_sub = agent.add_subparsers(dest="action", required=True)
    _start_parser(agent_sub, "start", "connect and start tunnels from the config")
    configcmd.add_parser(agent_sub, "config")
    _start_parser(sub, "start", "connect and start tunnels from the config (NAME..., --all "
                                "or --none)")
    oneliner.add_oneliners(sub)
    configcmd.add_parser(sub, "config")


def parse_resolve(items: list[str]) -> dict[str, str]:
    """``HOST:ADDRESS`` or curl's ``HOST:PORT:ADDRESS`` (then only for that port): keys are
    ``host`` or ``host:port``."""
    resolve = {}
    for item in items:
        m = _RESOLVE.fullmatch(item.strip())
        address = m.group("addr").strip("[]") if m else ""
        try:
            ipaddress.ip_address(address)
            ok = True
        except ValueError:
            ok = bool(address) and ":" not in address and is_host(address)
        if m is None or not ok or not is_host(m.group("host")) or (
                m.group("port") is not None and not 0 < int(m.group("port")) < 65536):
            raise ValueError(f"--resolve {item!r} must be HOST:ADDRESS or HOST:PORT:ADDRESS "
                             "(an IP address or host name to dial for HOST)")
        key = m.group("host").lower()
        resolve[f"{key}:{m.group('port')}" if m.group("port") else key] = address
    return resolve


def _load(args: argparse.Namespace, tunnels: dict[str, Any] | None) -> Any:
    from edgeway.agent import config as agent_config

    given = agent_config.split_paths(args.config)
    default = agent_config.default_config()
    paths = given or ([str(default)] if default.exists() or tunnels is None else [])
    command_line = oneliner.session_doc(args)
    if tunnels:
        command_line["tunnels"] = tunnels
    try:
        cfg, _doc = agent_config.load_merged(paths, command_line or None)
    except agent_config.ConfigError as exc:
        print(f"edgeway: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    return cfg


def _names(args: argparse.Namespace, cfg: Any) -> list[str]:
    names = list(cfg.tunnels) if args.all else [] if args.none else list(args.names)
    problems = [n for n in names if n not in cfg.tunnels]
    if problems:
        raise ValueError(f"no tunnel named {', '.join(problems)} in "
                         f"{', '.join(cfg.files)} (defined: {', '.join(cfg.tunnels) or 'none'})")
    if not names and not (args.none or args.all):
        raise ValueError("name the tunnels to start, or pass --all or --none")
    return names


def main(args: argparse.Namespace) -> None:
    command = args.command if args.command != "agent" else args.action
    if command == "config":
        configcmd.main(args)
        return
    if command in ("http", "tcp", "tls"):
        name = oneliner.tunnel_name(args)
        cfg = _load(args, {name: oneliner.tunnel_doc(args)})
        names = [name]
    else:
        cfg = _load(args, None)
        names = _names(args, cfg)
    if missing := cfg.missing():
        raise ValueError(missing)
    resolve = parse_resolve(args.resolve)
    console, target = cfg.options.plan(sys.stdout.isatty(), sys.stderr.isatty())
    cfg.options.configure_logs(target)
    from edgeway.agent.run import run

    refused = runner.run(run(cfg, names, resolve, console))
    if refused:
        print(f"edgeway: {refused}", file=sys.stderr)
        raise SystemExit(1)
