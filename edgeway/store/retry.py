"""Lost PostgreSQL connections: which failures mean one, whether a statement left before it,
and how long to wait before the next attempt.

A connection dies under us when its backend is terminated (``pg_terminate_backend``, a
server restart, a failover), the network drops, or asyncpg's protocol state breaks after an
unsolicited FATAL message (``InternalClientError: cannot switch to state ...``). Such a
connection is never used again: the caller terminates it and takes a fresh one.

The decision what to retry lives with the callers in ``pg`` (reads: any statement; write
transactions: only while COMMIT has certainly not been sent); this module supplies the facts
and the pacing. After ``ATTEMPTS`` tries ``pause`` raises ``DatabaseUnavailable``; when those
were attempts to connect, ``Reach`` fails new connections at once for a moment.

Every call has a deadline, so that a database that goes silent (a partition, a dead host:
packets dropped, nothing reset) is told from a slow one within seconds: connecting waits
``CONNECT_TIMEOUT``, a statement's answer ``STATEMENT_TIMEOUT`` (then the connection counts as
lost), and an operation with all its attempts (a read, or one statement of a write
transaction, its connection and replay included) ``DEADLINE``: a ``Budget``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable
from typing import Any, TypeVar

import asyncpg
import structlog

from edgeway.store.db import DatabaseUnavailable

log = structlog.get_logger()
T = TypeVar("T")

ATTEMPTS = 3
BACKOFF = (0.05, 0.25)  # seconds before the 2nd and the 3rd attempt
CONNECT_TIMEOUT = 2.0  # seconds for a new connection (asyncpg's default is 60)
STATEMENT_TIMEOUT = 3.0  # seconds for a statement's answer before its connection is lost
DEADLINE = 3.5  # seconds for an operation and its retries before DatabaseUnavailable
HOLD = 1.0  # seconds new connections are not tried after connecting failed every time

# SQLSTATEs of a connection that is gone or cannot be had right now: class 08 (connection
# exception), 57P01-57P05 (admin/crash shutdown, cannot connect now, database dropped, idle
# session timeout), 53300 (too many connections), 25P03 (idle-in-transaction timeout: FATAL).
_LOST_CLASSES = ("08", "57P")
_LOST_STATES = ("53300", "25P03")
_GONE = "connection is closed"
_RELEASED = "released back to the pool"  # a pooled connection whose loss the pool saw first


def lost(exc: BaseException, conn: Any = None) -> bool:
    """Whether ``exc`` means the connection ``conn`` (None: a connection being opened) is
    gone or could not be opened, so that the work may be tried again on another one."""
    if isinstance(exc, OSError | TimeoutError | asyncpg.InternalClientError):
        return True  # refused, reset, timed out, or asyncpg's protocol state is broken
    if isinstance(exc, asyncpg.PostgresError):
        state = exc.sqlstate or ""
        return state.startswith(_LOST_CLASSES) or state in _LOST_STATES
    if isinstance(exc, asyncpg.InterfaceError):  # also raised for misuse: only when closed
        return _GONE in str(exc) or _RELEASED in str(exc) or _closed(conn)
    return False


def _closed(conn: Any) -> bool:
    if conn is None:
        return False
    try:
        return bool(conn.is_closed())
    except asyncpg.InterfaceError:  # a pool's proxy whose lost connection went back already
        return True


def unsent(exc: BaseException) -> bool:
    """Whether ``exc`` was raised before the statement was written to the socket: asyncpg
    checks that the connection is open and idle first (``_check_open``, ``_set_state``)."""
    text = str(exc)
    if isinstance(exc, asyncpg.InternalClientError):
        return text.startswith(("cannot switch to state ", "not connected"))
    return isinstance(exc, asyncpg.InterfaceError) and (_GONE in text or _RELEASED in text)


def silent(exc: BaseException, connecting: bool) -> bool:
    """Whether ``exc`` says the database is out of reach (not merely that one connection
    was lost): connecting failed at the network (refused, unreachable), or an answer never
    came. A server that answered, if only to end the connection (a terminated backend, a
    restart: SQLSTATE 57P01...), is within reach: the next attempt may well succeed."""
    return isinstance(exc, TimeoutError) or (connecting and isinstance(exc, OSError))


def drop(conn: Any) -> None:
    """Terminate a connection that failed: the server rolls back what it had open, and a
    pooled one goes back to its pool to be replaced on the next acquire."""
    if conn is not None:
        # a pooled connection that the pool already took back (it saw the loss) refuses
        with contextlib.suppress(asyncpg.InterfaceError):
            conn.terminate()


class Budget:
    """The time left to one operation and its attempts (``DEADLINE`` from its creation)."""

    def __init__(self, seconds: float = DEADLINE) -> None:
        self._until = time.monotonic() + seconds

    def left(self, cap: float) -> float:
        """Seconds the next step may wait (at most ``cap``); raises ``DatabaseUnavailable``
        once none are left."""
        left = self._until - time.monotonic()
        if left <= 0:
            raise DatabaseUnavailable(f"the database did not answer within {DEADLINE:g} s")
        return min(cap, left)

    async def wait(self, aw: Awaitable[T]) -> T:
        """``aw`` within the time left (a lock, a pool's free connection)."""
        try:
            async with asyncio.timeout(self.left(DEADLINE)):
                return await aw
        except TimeoutError:
            raise DatabaseUnavailable(
                f"the database did not answer within {DEADLINE:g} s") from None


class Reach:
    """Whether the database could be connected to. When connecting failed on every attempt,
    work that needs a new connection fails at once for ``HOLD`` seconds instead of queueing
    behind more attempts (towards a host that drops packets, each waits ``CONNECT_TIMEOUT``);
    the first attempt after that probes again."""

    def __init__(self) -> None:
        self._until = 0.0

    def check(self) -> None:
        if time.monotonic() < self._until:
            raise DatabaseUnavailable("the database could not be reached moments ago")

    def failed(self) -> None:
        self._until = time.monotonic() + HOLD

    def reached(self) -> None:
        self._until = 0.0


async def pause(attempt: int, exc: BaseException, what: str, reach: Reach | None,
                budget: Budget | None = None) -> None:
    """Wait before attempt ``attempt + 1`` of ``what``; after the last one, or when the
    ``budget`` has no time left for it, give up (and mark the database out of ``reach``
    when that attempt was connecting or went unanswered)."""
    spent = budget is not None and _spent(budget, BACKOFF[min(attempt, len(BACKOFF) - 1)])
    if attempt + 1 >= ATTEMPTS or spent:
        log.warning("store_unavailable", what=what, attempts=attempt + 1, error=_text(exc))
        if reach is not None:
            reach.failed()
        raise DatabaseUnavailable("the database connection was lost and could not be "
                                  "re-established") from exc
    log.warning("store_connection_lost", what=what, attempt=attempt + 1, error=_text(exc))
    await asyncio.sleep(BACKOFF[attempt])


def _spent(budget: Budget, pause: float) -> bool:
    try:
        return budget.left(DEADLINE) <= pause
    except DatabaseUnavailable:
        return True


def _text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
