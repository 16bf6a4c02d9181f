"""The generic repository: stored documents of any kind, their links, and settings.

It speaks in kinds, ids and documents (dicts of stored members); it never sees HTTP. SQL is
built here from the catalog's table names, which are identifiers we declared, never input.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import msgspec

from edgeway.catalog.model import Kind
from edgeway.store.db import Tx, UniqueViolation
from edgeway.store.keys import key_columns

_enc = msgspec.json.Encoder()
_dec = msgspec.json.Decoder(dict[str, Any])


class Claimed(Exception):
    def __init__(self, claim: str, holder: str) -> None:
        super().__init__(claim)
        self.claim = claim
        self.holder = holder


@dataclass(frozen=True)
class Item:
    id: str
    doc: dict[str, Any]


def _key_values(kind: Kind, doc: dict[str, Any]) -> list[str]:
    return [str(doc[c.removeprefix("k_")]) for c in key_columns(kind)]


class Changes(Protocol):
    """Told of every write of the kinds it ``wants``, inside the write's transaction (the
    events' outbox, ``edgeway.events.changes``); ``doc`` is the stored document (on delete,
    as it was)."""

    def wants(self, kind: Kind) -> bool: ...

    async def record(self, repo: Repo, kind: Kind, verb: str, id_: str,
                     doc: dict[str, Any]) -> None: ...


class Repo:
    def __init__(self, tx: Tx, changes: Changes | None = None) -> None:
        self.tx = tx
        self.changes = changes

    def _told(self, kind: Kind) -> Changes | None:
        return self.changes if self.changes is not None and self.changes.wants(kind) else None

    async def get(self, kind: Kind, id_: str) -> dict[str, Any] | None:
        raw = await self.tx.doc_by_id(kind.table, id_)
        return _dec.decode(raw) if raw is not None else None

    async def get_for_update(self, kind: Kind, id_: str, dialect: str) -> dict[str, Any] | None:
        """``get`` in a write transaction, the row locked until it ends, so that two
        read-modify-writes of one document do not lose either's change (on PostgreSQL;
        SQLite's writer holds the whole database already)."""
        lock = " FOR UPDATE" if dialect == "postgresql" else ""
        row = await self.tx.fetchone(f"SELECT doc FROM {kind.table} WHERE id = ?{lock}", id_)
        return _dec.decode(row[0]) if row is not None else None

    async def page(self, kind: Kind, before_id: str | None, limit: int) -> list[Item]:
        if before_id is None:
            rows = await self.tx.fetchall(
                f"SELECT id, doc FROM {kind.table} ORDER BY id DESC LIMIT ?", limit)
        else:
            rows = await self.tx.fetchall(
                f"SELECT id, doc FROM {kind.table} WHERE id < ? ORDER BY id DESC LIMIT ?",
                before_id, limit)
        return [Item(r[0], _dec.decode(r[1])) for r in rows]

    async def all_docs(self, kind: Kind) -> list[tuple[str, dict[str, Any]]]:
        """Every resource of a kind, for the small kinds that are compiled whole."""
        rows = await self.tx.fetchall(f"SELECT id, doc FROM {kind.table} ORDER BY id")
        return [(r[0], _dec.decode(r[1])) for r in rows]

    async def docs_where(self, kind: Kind, member: str,
                         values: list[str]) -> list[tuple[str, dict[str, Any]]]:
        """Resources whose unique-key member ``member`` is one of ``values``."""
        if not values:
            return []
        marks = ", ".join("?" for _ in values)
        rows = await self.tx.fetchall(
            f"SELECT id, doc FROM {kind.table} WHERE k_{member} IN ({marks})", *values)
        return [(r[0], _dec.decode(r[1])) for r in rows]

    async def existing(self, kind: Kind, ids: list[str]) -> set[str]:
        if not ids:
            return set()
        marks = ", ".join("?" for _ in ids)
        rows = await self.tx.fetchall(
            f"SELECT id FROM {kind.table} WHERE id IN ({marks})", *ids)
        return {r[0] for r in rows}

    async def insert(self, kind: Kind, id_: str, doc: dict[str, Any],
                     token_hash: str | None = None) -> None:
        cols = ["id", "doc", *key_columns(kind)]
        vals: list[Any] = [id_, _enc.encode(doc).decode(), *_key_values(kind, doc)]
        if kind.secret:
            cols.append("token_hash")
            vals.append(token_hash)
        marks = ", ".join("?" for _ in cols)
        await self.tx.execute(
            f"INSERT INTO {kind.table} ({', '.join(cols)}) VALUES ({marks})", *vals)
        if (changes := self._told(kind)) is not None:
            await changes.record(self, kind, "created", id_, doc)

    async def replace(self, kind: Kind, id_: str, doc: dict[str, Any]) -> None:
        sets = ", ".join(f"{c} = ?" for c in ["doc", *key_columns(kind)])
        await self.tx.execute(f"UPDATE {kind.table} SET {sets} WHERE id = ?",
                              _enc.encode(doc).decode(), *_key_values(kind, doc), id_)
        if (changes := self._told(kind)) is not None:
            await changes.record(self, kind, "updated", id_, doc)

    async def delete(self, kind: Kind, id_: str) -> bool:
        changes = self._told(kind)
        old = await self.get(kind, id_) if changes is not None else None
        await self.tx.execute("DELETE FROM links WHERE src_id = ?", id_)
        await self.tx.execute("DELETE FROM claims WHERE owner_id = ?", id_)
        gone = await self.tx.execute(f"DELETE FROM {kind.table} WHERE id = ?", id_) > 0
        if changes is not None and old is not None and gone:
            await changes.record(self, kind, "deleted", id_, old)
        return gone

    async def by_token(self, kind: Kind, token_hash: str) -> Item | None:
        row = await self.tx.fetchone(
            f"SELECT id, doc FROM {kind.table} WHERE token_hash = ?", token_hash)
        return Item(row[0], _dec.decode(row[1])) if row else None

    async def any(self, kind: Kind) -> bool:
        return await self.tx.fetchone(f"SELECT 1 FROM {kind.table} LIMIT 1") is not None

    async def set_links(self, src_kind: Kind, src_id: str,
                        links: list[tuple[str, str]]) -> None:
        await self.tx.execute("DELETE FROM links WHERE src_id = ?", src_id)
        for member, dst in dict.fromkeys(links):
            await self.tx.execute(
                "INSERT INTO links (src_id, member, dst_id, src_kind) VALUES (?, ?, ?, ?)",
                src_id, member, dst, src_kind.collection)

    async def links_from(self, src_id: str, member: str) -> list[str]:
        rows = await self.tx.fetchall(
            "SELECT dst_id FROM links WHERE src_id = ? AND member = ?", src_id, member)
        return [r[0] for r in rows]

    async def links_to(self, dst_id: str) -> list[tuple[str, str, str]]:
        """``(src_kind, src_id, member)`` for every resource that refers to ``dst_id``."""
        rows = await self.tx.fetchall(
            "SELECT src_kind, src_id, member FROM links WHERE dst_id = ? ORDER BY src_id",
            dst_id)
        return [(r[0], r[1], r[2]) for r in rows]

    async def claim(self, kind: Kind, owner_id: str, claims: list[str]) -> None:
        """Replace the platform-wide claims of ``owner_id``; ``Claimed`` names a holder."""
        await self.tx.execute("DELETE FROM claims WHERE owner_id = ?", owner_id)
        if not claims:
            return
        marks = ", ".join("?" for _ in claims)
        held = await self.tx.fetchone(
            f"SELECT claim, owner_id FROM claims WHERE claim IN ({marks})", *claims)
        if held is not None:
            raise Claimed(held[0], held[1])
        for c in claims:
            try:
                await self.tx.execute(
                    "INSERT INTO claims (claim, owner_id, owner_kind) VALUES (?, ?, ?)",
                    c, owner_id, kind.collection)
            except UniqueViolation:
                raise Claimed(c, "another resource") from None

    async def lock(self, key: str) -> None:
        """Hold ``key`` until the transaction ends, against other transactions asking for it
        (on PostgreSQL: an advisory lock; SQLite's writer holds the whole database already):
        a check of claims and the claim that follows are then one step."""
        if self.tx.dialect == "postgresql":
            await self.tx.execute("SELECT pg_advisory_xact_lock(hashtext(?))", key)

    async def holder(self, claim: str) -> str | None:
        """The owner of the claim ``claim``, if any."""
        row = await self.tx.fetchone("SELECT owner_id FROM claims WHERE claim = ?", claim)
        return str(row[0]) if row is not None else None

    async def claimed(self, prefix: str, but: str = "") -> str | None:
        """The owner of a claim starting with ``prefix`` (other than ``but``), if any."""
        row = await self.tx.fetchone(
            "SELECT owner_id FROM claims WHERE claim LIKE ? AND owner_id != ? "
            "ORDER BY owner_id LIMIT 1", prefix.replace("%", "") + "%", but)
        return str(row[0]) if row is not None else None

    async def claimants(self, kind: Kind) -> list[tuple[str, dict[str, Any]]]:
        """The resources of ``kind`` holding a claim (cloud endpoints among all endpoints)."""
        rows = await self.tx.fetchall(
            "SELECT DISTINCT owner_id FROM claims WHERE owner_kind = ?", kind.collection)
        found = [(str(r[0]), await self.get(kind, str(r[0]))) for r in rows]
        return [(id_, doc) for id_, doc in found if doc is not None]

    async def setting(self, key: str) -> str | None:
        row = await self.tx.fetchone("SELECT value FROM settings WHERE key = ?", key)
        return str(row[0]) if row else None

    async def put_setting(self, key: str, value: str) -> None:
        await self.tx.execute("INSERT INTO settings (key, value) VALUES (?, ?)", key, value)
