"""``edgeway config add-authtoken|add-server-addr|add-root-cas|check|edit``: the agent's config
file from the command line. The file is the default config
(``$XDG_CONFIG_HOME/edgeway/agent.yml``) or the one ``--config`` names; a missing file is
created first with a commented starter (mode 0600: it holds the authtoken). Edits keep the
file's comments and order (ruamel's round trip) and replace it atomically; a value is checked
before it is written, and ``edit`` checks the file after the editor closes. Once the file has
a server address, ``add-server-addr`` and ``add-root-cas`` say whether the server's
certificate is trusted (``edgeway.agent.trust``)."""

from __future__ import annotations

import argparse
import os
import shlex
import ssl
import subprocess
import sys
from pathlib import Path

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap
from ruamel.yaml.error import YAMLError

from edgeway.agent import configcheck as check
from edgeway.agent import trust
from edgeway.agent.config import ConfigError, default_config, load_merged, split_paths, to_yaml

STARTER = """\
# The Edgeway agent's configuration (the ngrok agent config format, version 2).
# `edgeway config check` validates it; the README's "The agent" section lists every key.
#
#   authtoken    a credential's token (POST /credentials on the server's management API);
#                `edgeway config add-authtoken TOKEN` writes it here
#   server_addr  the server's tunnel listener, HOST:PORT (`edgeway config add-server-addr`)
#   root_cas     the server's CA file: `edgeway ca export > ca.pem` on the server, then
#                `edgeway config add-root-cas ca.pem` here
#   web_addr     the local API and web inspector (default 127.0.0.1:4040; false: off)
#
# Tunnels, started with `edgeway start NAME...` or `edgeway start --all`:
#
# tunnels:
#   web:
#     proto: http
#     addr: 3000
#     basic_auth: ["alice:a-long-password"]
#   ssh:
#     proto: tcp
#     addr: 22
version: 2
"""


VALUES = {"TOKEN": "a credential's token (POST /credentials on the server gives one)",
          "HOST:PORT": "the server's tunnel listener (its --tunnel-addr, as agents reach it)",
          "FILE": "a PEM file of CA certificates (host or trusted: the system's CAs)"}


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser], name: str) -> None:
    config = sub.add_parser(name, help="the agent's config file: add-authtoken, "
                                       "add-server-addr, add-root-cas, check, edit")
    config_sub = config.add_subparsers(dest="config_action", required=True)
    for action, what, arg in (
            ("add-authtoken", "save the authtoken in the config file", "TOKEN"),
            ("add-server-addr", "save the server's tunnel listener address", "HOST:PORT"),
            ("add-root-cas", "save the CA file the server's certificate must chain to (on "
                             "the server: edgeway ca export > ca.pem)", "FILE"),
            ("check", "validate the merged config (as start does) and print it", None),
            ("edit", "open the config file in $VISUAL or $EDITOR, then check it", None)):
        p = config_sub.add_parser(action, help=what, description=what)
        if arg:
            p.add_argument("value", metavar=arg, help=VALUES.get(arg, what))
        p.add_argument("--config", action="append", default=[], metavar="FILE[,FILE]",
                       help=f"the config file(s) (default: {default_config()})")


def _target(args: argparse.Namespace) -> Path:
    paths = split_paths(args.config)
    if len(paths) > 1:
        raise ValueError("name one config file to change (--config FILE)")
    return Path(paths[0]) if paths else default_config()


def ensure(path: Path) -> bool:
    """Create ``path`` with the starter if it is missing; whether it was created."""
    if path.exists():
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(STARTER)
    return True


def set_key(path: Path, key: str, value: str) -> None:
    yaml = YAML()  # round trip: comments and order stay
    yaml.width = 4096  # (a long path stays on its key's line)
    try:
        doc = yaml.load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, YAMLError) as exc:
        raise ValueError(f"{path}: cannot be read as YAML: {exc}") from None
    if doc is None:
        doc = CommentedMap()
    if not isinstance(doc, CommentedMap):
        raise ValueError(f"{path}: the top level must be a mapping")
    doc[key] = value
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        yaml.dump(doc, f)
    tmp.replace(path)


def _check(paths: list[str]) -> str:
    """Validate as ``start`` does; the merged config as YAML."""
    cfg, doc = load_merged(paths)
    if missing := cfg.missing():
        raise ConfigError(missing)
    return to_yaml(doc)


KEYS = {"add-authtoken": "authtoken", "add-server-addr": "server_addr",
        "add-root-cas": "root_cas"}
SAVED = {"authtoken": "Authtoken", "server_addr": "Server address", "root_cas": "Root CAs"}


def _value(key: str, value: str, path: Path) -> str:
    """The checked value to write; a CA file must load as CA certificates."""
    try:
        if key == "authtoken":
            return check.authtoken(value)
        if key == "server_addr":
            return check.server_addr(value)
        given = value if value in ("trusted", "host") else \
            os.path.abspath(os.path.expanduser(value))  # (relative to here, not to the file)
        found = check.root_cas(given, str(path))
        if found not in ("trusted", "host"):
            ssl.create_default_context(cafile=found)
        return found
    except check.Invalid as exc:
        raise ConfigError(f"{key}: {exc}") from None
    except ssl.SSLError as exc:
        raise ConfigError(f"{key}: {value} does not load as CA certificates: {exc}") from None


def _trust(path: Path, named: bool) -> None:
    """With a server address in the file: whether its certificate is trusted."""
    try:
        cfg = load_merged([str(path)])[0]
    except ConfigError as exc:
        print(f"The server's certificate could not be checked: {exc}", file=sys.stderr)
        return
    if cfg.server_addr:
        verdict, said = trust.check(cfg, path, named)
        print(said[0].upper() + said[1:], file=sys.stdout if verdict == "trusted" else sys.stderr)


def main(args: argparse.Namespace) -> None:
    action = args.config_action
    try:
        if action == "check":
            paths = split_paths(args.config) or [str(default_config())]
            print(_check(paths), end="")
            print(f"Valid configuration: {', '.join(paths)}", file=sys.stderr)
            return
        path = _target(args)
        created = ensure(path)
        if created:
            print(f"Created {path}", file=sys.stderr)
        if action == "edit":
            editor = os.environ.get("VISUAL") or os.environ.get("EDITOR") or "vi"
            subprocess.run([*shlex.split(editor), str(path)], check=False)
            cfg, _doc = load_merged([str(path)])
            print(f"Valid configuration: {path}" + (f"; note: {cfg.missing()}" if cfg.missing()
                                                   else ""), file=sys.stderr)
            return
        key = KEYS[action]
        set_key(path, key, _value(key, args.value, path))
        print(f"{SAVED[key]} saved to {path}")
        if key != "authtoken":
            _trust(path, bool(args.config))
    except ConfigError as exc:
        print(f"edgeway config: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
