"""The dashboard's browser sessions, in the database every node shares (``dashboard_sessions``).

A session is opened by a sign-in with an API key. The browser holds a random secret in its
cookie; the row is keyed by the secret's SHA-256, so neither a copy of the database nor a
backup lets anyone present a session (a row's id sent as a cookie is hashed again and found
nowhere). The row keeps the API key's id and its token hash (what the ``api_keys`` table
holds already): every request authenticates the key again, so a revoked or deleted key ends
its sessions at once, on every node. ``seen`` (last activity) is written at most every
``touch_every`` seconds; a session unused for its time to live is expired and deleted.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from dataclasses import dataclass

from edgeway import ids
from edgeway.store.db import Database

_COLUMNS = "id, ref, key_id, key_hash, created, seen, client, user_agent"


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


@dataclass(frozen=True)
class Session:
    id: str  # the digest of the cookie's secret
    ref: str  # shown and revoked by (``dsess_...``)
    key_id: str
    key_hash: str
    created: float
    seen: float
    client: str
    user_agent: str


class SessionStore:
    def __init__(self, db: Database, ttl: float) -> None:
        self.db = db
        self.ttl = ttl
        self.touch_every = min(60.0, ttl / 10)

    async def open(self, key_id: str, key_hash: str, client: str, user_agent: str
                   ) -> tuple[str, Session]:
        """A new session: the cookie's secret (given to the browser only) and the row."""
        secret = secrets.token_urlsafe(32)
        now = time.time()
        row = Session(digest(secret), ids.new_id("dsess"), key_id, key_hash, now, now,
                      client[:64], user_agent[:300])
        async with self.db.write() as tx:
            await tx.execute("DELETE FROM dashboard_sessions WHERE seen < ?", now - self.ttl)
            await tx.execute(f"INSERT INTO dashboard_sessions ({_COLUMNS}) "
                             "VALUES (?, ?, ?, ?, ?, ?, ?, ?)", row.id, row.ref, row.key_id,
                             row.key_hash, row.created, row.seen, row.client, row.user_agent)
        return secret, row

    async def find(self, secret: str, touch: bool = True) -> Session | None:
        """The live session of a cookie's secret; an expired one is deleted; a used one has
        its ``seen`` moved on (at most every ``touch_every`` seconds), unless ``touch`` is
        false (a page refreshing itself is no sign of a person)."""
        if not secret or len(secret) > 100:
            return None
        found = await self.db.reader().fetchone(
            f"SELECT {_COLUMNS} FROM dashboard_sessions WHERE id = ?", digest(secret))
        if found is None:
            return None
        row = Session(*found)
        now = time.time()
        if row.seen + self.ttl < now:
            await self.end(row.id)
            return None
        if touch and now - row.seen >= self.touch_every:
            async with self.db.write() as tx:
                await tx.execute("UPDATE dashboard_sessions SET seen = ? WHERE id = ?", now,
                                 row.id)
        return row

    async def end(self, id_: str) -> None:
        async with self.db.write() as tx:
            await tx.execute("DELETE FROM dashboard_sessions WHERE id = ?", id_)

    async def revoke(self, ref: str, key_id: str | None) -> bool:
        """End the session shown as ``ref`` (only one of ``key_id``'s, unless None); whether
        there was one."""
        sql, args = "DELETE FROM dashboard_sessions WHERE ref = ?", [ref]
        if key_id is not None:
            sql, args = sql + " AND key_id = ?", [ref, key_id]
        async with self.db.write() as tx:
            deleted: int = await tx.execute(sql, *args)
        return deleted > 0

    async def listed(self, key_id: str | None) -> list[Session]:
        """Live sessions, most recently used first (only ``key_id``'s, unless None)."""
        sql = f"SELECT {_COLUMNS} FROM dashboard_sessions WHERE seen >= ?"
        args: list[object] = [time.time() - self.ttl]
        if key_id is not None:
            sql += " AND key_id = ?"
            args.append(key_id)
        rows = await self.db.reader().fetchall(sql + " ORDER BY seen DESC LIMIT 500", *args)
        return [Session(*r) for r in rows]
