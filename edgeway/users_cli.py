"""``edgeway users set-password NAME``: a person's name and password for the dashboard's
sign-in, set by whoever runs the server (there is no API for it). The password is read from
the terminal twice, or as the first line of standard input when that is no terminal; it is
stored as a scrypt hash (``edgeway.passwords``). A user of that name is created when there
is none; setting a new password ends the sessions opened with the old one."""

from __future__ import annotations

import argparse
import getpass
import sys
from datetime import UTC, datetime

from edgeway import datadir, serve_cli

ROLES = ("admin", "operator", "read_only")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    users = sub.add_parser("users", help="the people who sign in to the dashboard")
    users_sub = users.add_subparsers(dest="action", required=True)
    set_pw = users_sub.add_parser("set-password", help="set a user's dashboard password "
                                  "(read from the terminal, or the first line of stdin)")
    set_pw.add_argument("name", help="the user's name, as typed at sign-in (created when new)")
    set_pw.add_argument("--role", choices=ROLES, default=None,
                        help="what the user's sessions may do, as an API key of that role "
                             "(default: admin for a new user; unchanged for one that exists)")
    serve_cli.store_options(set_pw)


def read_password() -> str:
    if not sys.stdin.isatty():
        return sys.stdin.readline().rstrip("\r\n")
    first = getpass.getpass("New password: ")
    if getpass.getpass("Again: ") != first:
        raise ValueError("the two passwords differ")
    return first


async def set_password(args: argparse.Namespace) -> None:
    # (the store and the catalog are imported here: the other commands start without them)
    from edgeway import catalog, ids, passwords
    from edgeway.store.migrate import open_database
    from edgeway.store.repo import Repo

    users = catalog.BY_COLLECTION["users"]
    name = args.name.strip()
    if not name or len(name.encode()) > 255:
        raise ValueError("a user's name must be 1 to 255 bytes")
    hashed = passwords.hash_password(read_password())  # (a ValueError says what is wrong)
    if not args.database_url:
        if not (args.data_dir / "edgeway.db").exists():
            raise ValueError(f"{args.data_dir} is not a data directory a server has used (no "
                             "edgeway.db): pass the server's --data-dir")
        datadir.prepare(args.data_dir)
    db = await open_database(args.database_url, args.data_dir)
    try:
        async with db.write() as tx:
            repo = Repo(tx)
            found = [(i, d) for i, d in await repo.all_docs(users) if d.get("name") == name]
            if found:
                user_id, doc = found[0]
                doc = {**doc, "password_hash": hashed, "role": args.role or doc.get("role")
                       or "admin"}
                await repo.replace(users, user_id, doc)
            else:
                user_id, role = ids.new_id(users.prefix), args.role or "admin"
                await repo.insert(users, user_id, {
                    "name": name, "admin": role == "admin", "password_hash": hashed,
                    "role": role,
                    "created_at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")})
        print(f"The password of {name} ({user_id}) is set.")
    finally:
        await db.close()
