"""``edgeway agent start`` and ``edgeway agent config check``: the agent's commands, their
options and what they run."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from edgeway import runner


def default_config() -> Path:
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "edgeway" / "agent.yml"


def _config_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", action="append", default=[], metavar="FILE[,FILE]",
                   help="config file(s), merged in order; repeatable or comma-separated "
                        f"(default: {default_config()})")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    agent = sub.add_parser("agent", help="the Edgeway agent: expose local services")
    agent_sub = agent.add_subparsers(dest="action", required=True)
    start = agent_sub.add_parser("start", help="connect and start tunnels from the config")
    start.add_argument("names", nargs="*", metavar="NAME", help="tunnels to start")
    which = start.add_mutually_exclusive_group()
    which.add_argument("--all", action="store_true", help="start every tunnel in the config")
    which.add_argument("--none", action="store_true",
                       help="start no tunnel (use the local API to start them)")
    _config_option(start)
    start.add_argument("--log", action="store_true",
                       help="structured log lines instead of the console screen")
    start.add_argument("--resolve", action="append", default=[], metavar="HOST:ADDRESS",
                       help="dial ADDRESS for server_addr's HOST (TLS still checks HOST); "
                            "repeatable")
    config = agent_sub.add_parser("config", help="agent config files")
    config_sub = config.add_subparsers(dest="config_action", required=True)
    check = config_sub.add_parser("check", help="validate and print the merged config")
    _config_option(check)


def _resolve(items: list[str]) -> dict[str, str]:
    resolve = {}
    for item in items:
        host, sep, address = item.rpartition(":")
        if not sep or not host or not address:
            raise ValueError(f"--resolve {item!r} must be HOST:ADDRESS")
        resolve[host] = address
    return resolve


def main(args: argparse.Namespace) -> None:
    from edgeway.agent import config as agent_config

    paths = agent_config.split_paths(args.config) or [str(default_config())]
    try:
        cfg, doc = agent_config.load_merged(paths)
        if args.action == "config":
            print(agent_config.to_yaml(doc), end="")
            return
    except agent_config.ConfigError as exc:
        print(f"edgeway agent: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    names = list(cfg.tunnels) if args.all else [] if args.none else list(args.names)
    problems = [n for n in names if n not in cfg.tunnels]
    if problems:
        raise ValueError(f"no tunnel named {', '.join(problems)} in "
                         f"{', '.join(cfg.files)} (defined: {', '.join(cfg.tunnels) or 'none'})")
    if not names and not (args.none or args.all):
        raise ValueError("name the tunnels to start, or pass --all or --none")
    if not cfg.authtoken or not cfg.server_addr:
        raise ValueError("the config needs authtoken and server_addr to start")
    resolve = _resolve(args.resolve)
    cfg.options.configure_logs()
    from edgeway.agent.run import run

    refused = runner.run(run(cfg, names, resolve, args.log))
    if refused:
        print(f"edgeway agent: {refused}", file=sys.stderr)
        raise SystemExit(1)
