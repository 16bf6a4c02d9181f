"""The event tables (``schema.event_outbox``, ``event_delivery``, ``event_dead_letters``): the
statements the events package runs on them, inside the caller's transaction.

* ``event_outbox``: one row per (event, destination), written in the transaction of the
  change it describes (``add``), deleted once delivered; ``seq`` orders a destination's rows.
* ``event_delivery``: one row per destination with a backlog. Its ``owner`` holds a lease
  (``claim``) until ``lease_until``: only the lease holder reads and sends that destination's
  rows, so nodes sharing a database never send one row at the same time, and each
  destination's events go out in ``seq`` order. On PostgreSQL the claim skips rows another
  node is claiming (``FOR UPDATE SKIP LOCKED``); SQLite has one writer at a time. The row also
  keeps the back-off (``attempts``, ``next_at``) and what the API shows: the last error, the
  last success, counts of delivered and dropped events.
* ``event_dead_letters``: events that failed every attempt, listed by the API and put back
  into the outbox on request (``resend``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from edgeway import ids
from edgeway.store.db import Tx

DEAD_PREFIX = "edl"


@dataclass(frozen=True)
class Pending:
    seq: int
    event_id: str
    event_type: str
    body: str


@dataclass(frozen=True)
class State:
    """What the API shows of a destination's delivery."""
    backlog: int = 0
    dead_letters: int = 0
    attempts: int = 0
    next_at: float = 0.0
    last_error: str = ""
    last_error_at: str = ""
    last_success_at: str = ""
    delivered: int = 0
    dropped: int = 0


async def add(tx: Tx, destinations: list[str], event_id: str, event_type: str, body: str,
              now: float) -> None:
    for dest in destinations:
        await tx.execute("INSERT INTO event_outbox (destination_id, event_id, event_type, body, "
                         "created_at) VALUES (?, ?, ?, ?, ?)", dest, event_id, event_type,
                         body, now)


async def backlogged(tx: Tx, destinations: list[str]) -> list[str]:
    """Those of ``destinations`` with events waiting (an index probe each)."""
    out = []
    for dest in destinations:
        if await tx.fetchone("SELECT 1 FROM event_outbox WHERE destination_id = ? LIMIT 1",
                             dest) is not None:
            out.append(dest)
    return out


async def _ensure(tx: Tx, dest: str) -> None:
    await tx.execute(
        "INSERT INTO event_delivery (destination_id, owner, lease_until, attempts, next_at, "
        "last_error, last_error_at, last_success_at, delivered, dropped) "
        "VALUES (?, '', 0, 0, 0, '', '', '', 0, 0) ON CONFLICT (destination_id) DO NOTHING",
        dest)


async def claim(tx: Tx, dialect: str, dest: str, owner: str, now: float,
                lease: float) -> tuple[int, float] | None:
    """Take (or keep) the lease on ``dest`` for ``lease`` seconds: its ``(attempts, next_at)``
    back-off, or None while another node holds it."""
    await _ensure(tx, dest)
    free = "(owner = '' OR owner = ? OR lease_until < ?)"
    if dialect == "postgresql":  # skip a row another node is claiming right now
        taken = await tx.execute(
            "UPDATE event_delivery SET owner = ?, lease_until = ? WHERE destination_id IN "
            f"(SELECT destination_id FROM event_delivery WHERE destination_id = ? AND {free} "
            "FOR UPDATE SKIP LOCKED)", owner, now + lease, dest, owner, now)
    else:
        taken = await tx.execute(
            f"UPDATE event_delivery SET owner = ?, lease_until = ? WHERE destination_id = ? "
            f"AND {free}", owner, now + lease, dest, owner, now)
    if taken != 1:
        return None
    row = await tx.fetchone(
        "SELECT attempts, next_at FROM event_delivery WHERE destination_id = ?", dest)
    assert row is not None
    return int(row[0]), float(row[1])


async def release(tx: Tx, dest: str, owner: str) -> None:
    await tx.execute("UPDATE event_delivery SET owner = '', lease_until = 0 "
                     "WHERE destination_id = ? AND owner = ?", dest, owner)


async def head(tx: Tx, dest: str, limit: int) -> list[Pending]:
    rows = await tx.fetchall(
        "SELECT seq, event_id, event_type, body FROM event_outbox WHERE destination_id = ? "
        "ORDER BY seq LIMIT ?", dest, limit)
    return [Pending(int(r[0]), str(r[1]), str(r[2]), str(r[3])) for r in rows]


async def delivered(tx: Tx, dest: str, sent: list[Pending], when: str) -> None:
    """``sent`` (the head of the destination's rows, in order) arrived."""
    # by their seqs, not "up to the last": on PostgreSQL a transaction that took a lower seq
    # may commit after the head was read, and its row must stay
    seqs = [p.seq for p in sent]
    for i in range(0, len(seqs), 500):
        chunk = seqs[i:i + 500]
        marks = ", ".join("?" for _ in chunk)
        await tx.execute(f"DELETE FROM event_outbox WHERE seq IN ({marks})", *chunk)
    await tx.execute("UPDATE event_delivery SET attempts = 0, next_at = 0, last_success_at = ?, "
                     "delivered = delivered + ? WHERE destination_id = ?", when, len(sent), dest)


async def counted(tx: Tx, dest: str, sent: int, dropped: int, when: str | None) -> None:
    """Traffic events (not in the outbox) that arrived, or were dropped on a full queue."""
    await _ensure(tx, dest)
    if when is not None:
        await tx.execute("UPDATE event_delivery SET last_success_at = ? WHERE destination_id = ?",
                         when, dest)
    await tx.execute("UPDATE event_delivery SET delivered = delivered + ?, dropped = dropped + ? "
                     "WHERE destination_id = ?", sent, dropped, dest)


async def failed(tx: Tx, dest: str, attempts: int, next_at: float, error: str,
                 when: str) -> None:
    await _ensure(tx, dest)
    await tx.execute("UPDATE event_delivery SET attempts = ?, next_at = ?, last_error = ?, "
                     "last_error_at = ? WHERE destination_id = ?", attempts, next_at,
                     error[:2000], when, dest)


async def bury(tx: Tx, dest: str, events: list[Pending], error: str, attempts: int,
               when: str) -> None:
    """Move ``events`` to the dead letters (from the outbox, where they are there)."""
    for ev in events:
        await tx.execute(
            "INSERT INTO event_dead_letters (id, destination_id, event_id, event_type, body, "
            "error, attempts, failed_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            ids.new_id(DEAD_PREFIX), dest, ev.event_id, ev.event_type, ev.body, error[:2000],
            attempts, when)
        if ev.seq:
            await tx.execute("DELETE FROM event_outbox WHERE seq = ?", ev.seq)
    await tx.execute("UPDATE event_delivery SET attempts = 0, next_at = 0 "
                     "WHERE destination_id = ?", dest)


async def dead_page(tx: Tx, dest: str, before: str | None, limit: int) -> list[Any]:
    """Dead letters of ``dest``, newest first: (id, event_id, event_type, body, error,
    attempts, failed_at)."""
    if before is None:
        return await tx.fetchall(
            "SELECT id, event_id, event_type, body, error, attempts, failed_at FROM "
            "event_dead_letters WHERE destination_id = ? ORDER BY id DESC LIMIT ?", dest, limit)
    return await tx.fetchall(
        "SELECT id, event_id, event_type, body, error, attempts, failed_at FROM "
        "event_dead_letters WHERE destination_id = ? AND id < ? ORDER BY id DESC LIMIT ?",
        dest, before, limit)


async def resend(tx: Tx, dest: str, only: list[str], now: float) -> int:
    """Put dead letters of ``dest`` (``only`` those ids, or all) back into the outbox, oldest
    first; how many."""
    rows = await tx.fetchall("SELECT id, event_id, event_type, body FROM event_dead_letters "
                             "WHERE destination_id = ? ORDER BY id", dest)
    picked = [r for r in rows if not only or r[0] in only]
    for r in picked:
        await add(tx, [dest], str(r[1]), str(r[2]), str(r[3]), now)
        await tx.execute("DELETE FROM event_dead_letters WHERE id = ?", r[0])
    return len(picked)


async def retry_now(tx: Tx, dest: str) -> None:
    """Forget a destination's back-off (its configuration changed)."""
    await tx.execute("UPDATE event_delivery SET attempts = 0, next_at = 0 "
                     "WHERE destination_id = ?", dest)


async def forget(tx: Tx, dest: str) -> None:
    """A deleted destination's rows."""
    for table in ("event_outbox", "event_delivery", "event_dead_letters"):
        await tx.execute(f"DELETE FROM {table} WHERE destination_id = ?", dest)


async def states(tx: Tx, destinations: list[str]) -> dict[str, State]:
    if not destinations:
        return {}
    marks = ", ".join("?" for _ in destinations)
    # (the delivery rows first: a batch delivered meanwhile then shows in the counts)
    rows = {r[0]: r for r in await tx.fetchall(
        "SELECT destination_id, attempts, next_at, last_error, last_error_at, last_success_at, "
        f"delivered, dropped FROM event_delivery WHERE destination_id IN ({marks})",
        *destinations)}
    # (both counts in one statement, so one snapshot: on PostgreSQL each statement sees the
    # commits made before it, and an event moved to the dead letters between two of them
    # was counted in both)
    counts = await tx.fetchall(
        "SELECT destination_id, SUM(CASE WHEN dead = 0 THEN 1 ELSE 0 END), SUM(dead) FROM ("
        f"SELECT destination_id, 0 AS dead FROM event_outbox WHERE destination_id IN ({marks}) "
        "UNION ALL SELECT destination_id, 1 AS dead FROM event_dead_letters WHERE "
        f"destination_id IN ({marks})) AS queued GROUP BY destination_id",
        *destinations, *destinations)
    backlog = {r[0]: int(r[1]) for r in counts}
    dead = {r[0]: int(r[2]) for r in counts}
    out = {}
    for dest in destinations:
        r = rows.get(dest)
        if r is None:
            out[dest] = State(backlog.get(dest, 0), dead.get(dest, 0))
            continue
        out[dest] = State(backlog.get(dest, 0), dead.get(dest, 0), attempts=int(r[1]),
                          next_at=float(r[2]), last_error=str(r[3]), last_error_at=str(r[4]),
                          last_success_at=str(r[5]), delivered=int(r[6]), dropped=int(r[7]))
    return out
