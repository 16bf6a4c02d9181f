"""A start-up step: seal the module secrets an earlier version stored in the clear (a route's
OAuth or OIDC ``client_secret``, its webhook verification ``secret``).

It runs on every start, in one write transaction, and does nothing once every secret is
sealed (several nodes sharing a database may all run it). On SQLite the file keeps no copy of
the cleartext afterwards: deleted content is zeroed (``secure_delete``, set on every
connection) and the write-ahead log is truncated.
"""

from __future__ import annotations

import sqlite3
from contextlib import closing

import structlog

from edgeway import catalog
from edgeway.catalog import modules
from edgeway.catalog.edges import MODULES_OF
from edgeway.pki.seal import Sealer
from edgeway.store.db import Database
from edgeway.store.repo import Repo

log = structlog.get_logger()


async def seal_stored(db: Database, sealer: Sealer) -> int:
    """Seal every module secret still in the clear; the number of resources rewritten."""
    done = 0
    async with db.write() as tx:
        repo = Repo(tx)
        for collection, names in MODULES_OF.items():
            kind = catalog.BY_COLLECTION[collection]
            for id_, doc in await repo.all_docs(kind):
                changed = modules.stored_plain(doc, sealer, names)
                if changed:
                    await repo.replace(kind, id_, {**doc, **changed})
                    done += 1
    if done:
        url = db.url
        if url.startswith("sqlite:///"):
            with closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as conn:
                conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        log.info("module_secrets_sealed", resources=done,
                 why="stored in the clear by an earlier version")
    return done
