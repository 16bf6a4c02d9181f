"""The ``edgeway`` command: ``serve`` (the platform; its options in ``serve_cli.py``), the
agent's commands (``start``, ``http``, ``tcp``, ``tls``, ``config``, ``agent``; in
``agent/cli.py``), ``ca export``, ``api-keys create`` and ``users set-password``
(``users_cli.py``). Every server option also reads an
``EDGEWAY_*`` environment variable; the command line wins."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import cast

from edgeway import __version__, datadir, logs, runner, serve_cli, users_cli
from edgeway.agent import cli as agent_cli
from edgeway.store.db import DatabaseUnavailable, StoreUnavailable  # (standard library only)

# The store's engines, the catalog and the server are imported by the commands that use them:
# the others (the agent's, --version, a refused option) start without them.

DESCRIPTION = """Edgeway: a self-hosted ingress and tunneling platform. Run the platform with
serve; expose local services with the agent (http, tcp, tls for one tunnel, start for the
tunnels of the config file)."""
EXAMPLES = """examples:
  edgeway serve                       run the platform (prints an admin API key once)
  edgeway ca export > ca.pem          the CA agents trust
  edgeway config add-authtoken TOKEN  save a credential's token for the agent
  edgeway http 3000 --basic-auth 'alice:a-long-password'
  edgeway tcp 22
  edgeway start --all                 every tunnel of the agent's config file"""


class Subcommand(argparse.ArgumentParser):
    """A subcommand's parser (and, through ``add_subparsers``, its own subcommands'): an
    argument it does not know is its error, shown with its own usage (argparse would hand it
    up to the top level, whose usage says nothing of the subcommand's options)."""

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None
                         ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="edgeway", description=DESCRIPTION, epilog=EXAMPLES,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    top.add_argument("--version", action="version", version=f"edgeway {__version__}")
    sub = cast("argparse._SubParsersAction[argparse.ArgumentParser]", top.add_subparsers(
        dest="command", required=True, metavar="COMMAND", parser_class=Subcommand))
    serve_cli.add_parser(sub)
    ca = sub.add_parser("ca", help="the platform CA that agents trust")
    ca_sub = ca.add_subparsers(dest="action", required=True)
    export = ca_sub.add_parser("export", help="print the CA certificate (PEM)")
    serve_cli.store_options(export, database=False)
    agent_cli.add_parsers(sub)
    keys = sub.add_parser("api-keys", help="manage API keys from the command line")
    keys_sub = keys.add_subparsers(dest="action", required=True)
    create = keys_sub.add_parser("create", help="create an API key and print its token")
    create.add_argument("--description", default="created with edgeway api-keys create",
                        help="what the key is for, shown in the API's listing (default: "
                             "%(default)s)")
    create.add_argument("--role", choices=("admin", "operator", "read_only"), default="admin",
                        help="admin: everything; operator: all but API keys, bot users and "
                             "the API's IP restrictions; read_only: reads (default: admin)")
    create.add_argument("--init", action="store_true",
                        help="create the database when no server has used the data directory "
                             "yet (provisioning before the first start)")
    serve_cli.store_options(create)
    users_cli.add_parser(sub)
    return top


def _initialised(data_dir: Path, what: str, marker: str) -> None:
    """Refuse a data directory no server has used (a typo would make a new CA or database)."""
    if not (data_dir / marker).exists():
        raise ValueError(f"{data_dir} is not a data directory a server has initialised (no "
                         f"{marker}): pass the server's --data-dir, or start `edgeway serve "
                         f"--data-dir {data_dir}` first{what}")


def _ca_export(args: argparse.Namespace) -> None:
    from edgeway.pki import platform_ca, seal

    _initialised(args.data_dir, "", "ca.pem")
    datadir.prepare(args.data_dir)
    print(platform_ca.ca_pem(args.data_dir, seal.load(args.data_dir)).read_text(), end="")


async def _api_key(args: argparse.Namespace) -> None:
    from edgeway import bootstrap
    from edgeway.api.render import render
    from edgeway.events.changes import ChangeLog
    from edgeway.settings import Settings
    from edgeway.store.migrate import open_database

    if not args.database_url and not args.init:
        _initialised(args.data_dir, " (or pass --init to create it)", "edgeway.db")
    if not args.database_url:  # (the SQLite file is made there)
        datadir.prepare(args.data_dir)
    db = await open_database(args.database_url, args.data_dir)
    try:
        # its event (api_key_created.v0) renders the key's uri with the server's public URL
        base = os.environ.get("EDGEWAY_PUBLIC_URL") or Settings().public_url
        print(await bootstrap.create_api_key(db, args.description, args.role,
                                             ChangeLog(base.rstrip("/"), render)))
    finally:
        await db.close()


def _serve(args: argparse.Namespace, argv: list[str]) -> None:
    config = serve_cli.server_config(args)  # (a refused option: said before the imports)
    logs.configure(level=getattr(logging, args.log_level.upper()),
                   fmt=serve_cli.LOG_FORMATS[args.log_format])
    from edgeway import workers
    from edgeway.server import serve

    if config.nodes.workers > 1:
        raise SystemExit(runner.run(workers.supervise(config, argv)))
    runner.run(serve(config))


def main(argv: Sequence[str] | None = None) -> None:
    raw = list(sys.argv[1:] if argv is None else argv)
    args = parser().parse_args(raw)
    logs.configure()
    try:
        _run(args, raw)
    # (SealError is a ValueError; DatabaseUnavailable: the database went while starting)
    except (ValueError, OSError, StoreUnavailable, DatabaseUnavailable) as exc:
        print(f"edgeway: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    except KeyboardInterrupt:
        pass


def _run(args: argparse.Namespace, raw: list[str]) -> None:
    if args.command == "serve":
        _serve(args, raw)
    elif args.command == "ca":
        _ca_export(args)
    elif args.command in agent_cli.AGENT_COMMANDS:
        agent_cli.main(args)
    elif args.command == "users":
        runner.run(users_cli.set_password(args))
    else:
        runner.run(_api_key(args))
