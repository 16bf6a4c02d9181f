"""ACME state shared by every node through the database: challenge answers (``http:<token>``
-> key authorization for the HTTP listener, ``dns:<name>`` -> TXT value for the built-in DNS)
and the managed certificates' job rows, which one node at a time claims for a lease (an
``UPDATE ... WHERE claimed_until < now`` that only one node's statement can win), so several
nodes on one database never issue the same certificate twice. The ACME account (key and
URL, sealed) is a row of ``settings``, one per ACME directory."""

from __future__ import annotations

import time
from typing import Any

import msgspec

from edgeway.store.db import Database, Tx, UniqueViolation
from edgeway.store.repo import Repo

_enc = msgspec.json.Encoder()
_dec = msgspec.json.Decoder(dict[str, Any])


def now() -> int:
    return int(time.time())


async def settle(tx: Tx, id_: str, node: str, doc: dict[str, Any], due: int) -> bool:
    """(In a write transaction.) Record a job's outcome and release it, if ``node`` still
    holds it; whether it did (a node whose lease ran out lost the job to another)."""
    changed: int = await tx.execute(
        "UPDATE managed_certificates SET doc = ?, due = ?, claimed_by = '', claimed_until = 0 "
        "WHERE id = ? AND claimed_by = ?", _enc.encode(doc).decode(), due, id_, node)
    return changed == 1


class AcmeStore:
    def __init__(self, db: Database) -> None:
        self.db = db

    # -- challenges --------------------------------------------------------------------------

    async def dns_challenges(self) -> list[tuple[str, str]]:
        rows = await self.db.reader().fetchall(
            "SELECT key, value FROM acme_challenges WHERE key LIKE 'dns:%' AND expires > ? "
            "ORDER BY key, value", now())
        return [(str(r[0])[4:], str(r[1])) for r in rows]

    async def http_answer(self, token: str) -> str | None:
        row = await self.db.reader().fetchone(
            "SELECT value FROM acme_challenges WHERE key = ? AND expires > ?",
            "http:" + token, now())
        return str(row[0]) if row else None

    async def put_challenge(self, owner: str, key: str, value: str, ttl: int = 900) -> None:
        async with self.db.write() as tx:
            await tx.execute("DELETE FROM acme_challenges WHERE key = ? AND value = ?",
                             key, value)
            await tx.execute("INSERT INTO acme_challenges (key, value, owner_id, expires) "
                             "VALUES (?, ?, ?, ?)", key, value, owner, now() + ttl)

    async def drop_challenges(self, owner: str) -> None:
        async with self.db.write() as tx:
            await tx.execute("DELETE FROM acme_challenges WHERE owner_id = ? OR expires <= ?",
                             owner, now())

    # -- the account -------------------------------------------------------------------------

    async def account(self, slot: str) -> str | None:
        return await Repo(self.db.reader()).setting(slot)

    async def save_account(self, slot: str, sealed: str) -> str:
        """Store the account unless another node stored one first; the one kept."""
        try:
            async with self.db.write() as tx:
                await Repo(tx).put_setting(slot, sealed)
        except UniqueViolation:
            pass
        kept = await self.account(slot)
        assert kept is not None
        return kept

    async def forget_account(self, slot: str) -> None:
        """The CA no longer knows the account: the next order registers a new one."""
        async with self.db.write() as tx:
            await tx.execute("DELETE FROM settings WHERE key = ?", slot)

    # -- certificate jobs --------------------------------------------------------------------

    async def jobs(self) -> dict[str, dict[str, Any]]:
        rows = await self.db.reader().fetchall("SELECT id, doc FROM managed_certificates")
        return {str(r[0]): _dec.decode(r[1]) for r in rows}

    async def retry_now(self, id_: str, every: int) -> bool:
        """A job whose last order failed on the user's DNS (``DNS_ERROR``, what a DNS check
        can see fixed) and waits for its retry is tried again at once; at most once every
        ``every`` seconds (``retried_at`` in its doc), so that asking does not defeat the
        back-off. Whether it was."""
        row = await self.db.reader().fetchone(
            "SELECT doc FROM managed_certificates WHERE id = ?", id_)
        if row is None:
            return False
        t, raw = now(), str(row[0])
        doc = _dec.decode(raw)
        if not doc.get("attempts") or doc.get("error_code") != "DNS_ERROR" \
                or t - int(doc.get("retried_at") or 0) < every:
            return False
        async with self.db.write() as tx:  # (unless the job changed or was claimed meanwhile)
            changed: int = await tx.execute(
                "UPDATE managed_certificates SET due = ?, doc = ? "
                "WHERE id = ? AND claimed_until < ? AND doc = ?",
                t, _enc.encode({**doc, "retried_at": t}).decode(), id_, t, raw)
        return changed == 1

    async def add_job(self, id_: str, doc: dict[str, Any]) -> None:
        try:
            async with self.db.write() as tx:
                await tx.execute("INSERT INTO managed_certificates (id, doc, due, claimed_by, "
                                 "claimed_until) VALUES (?, ?, ?, '', 0)",
                                 id_, _enc.encode(doc).decode(), now())
        except UniqueViolation:
            pass  # another node added it

    async def drop_job(self, id_: str) -> None:
        async with self.db.write() as tx:
            await tx.execute("DELETE FROM managed_certificates WHERE id = ?", id_)
            await tx.execute("DELETE FROM acme_challenges WHERE owner_id = ?", id_)

    async def claim(self, node: str, lease: int) -> list[str]:
        """Claim the due jobs nobody holds; the ids this node now holds for ``lease`` s."""
        t = now()
        due = await self.db.reader().fetchall(
            "SELECT id FROM managed_certificates WHERE due <= ? AND claimed_until < ?", t, t)
        won = []
        for (id_,) in due:
            async with self.db.write() as tx:
                if await tx.execute(
                        "UPDATE managed_certificates SET claimed_by = ?, claimed_until = ? "
                        "WHERE id = ? AND due <= ? AND claimed_until < ?",
                        node, t + lease, id_, t, t) == 1:
                    won.append(str(id_))
        return won

    async def finish(self, id_: str, node: str, doc: dict[str, Any], due: int) -> bool:
        """Record the job's outcome and release it, if this node still holds it (whether it
        did)."""
        async with self.db.write() as tx:
            return await settle(tx, id_, node, doc, due)

    async def reschedule(self, id_: str, due: int, doc: dict[str, Any] | None = None) -> None:
        async with self.db.write() as tx:
            if doc is None:
                await tx.execute("UPDATE managed_certificates SET due = ? WHERE id = ?",
                                 due, id_)
            else:
                await tx.execute("UPDATE managed_certificates SET due = ?, doc = ? "
                                 "WHERE id = ?", due, _enc.encode(doc).decode(), id_)
