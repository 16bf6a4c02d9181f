"""How PostgreSQL connections are opened: deadlines on both ends of every connection, so
that a database that goes silent (a partition, a dead host: packets dropped, nothing reset)
costs seconds, not the kernel's default of minutes, and never holds a lock on the server.

Our end: connecting is bounded by the caller (``retry.CONNECT_TIMEOUT`` or a ``Budget``),
every statement by ``retry.STATEMENT_TIMEOUT`` unless given a shorter one, and the socket
has TCP keepalive and ``TCP_USER_TIMEOUT`` (an idle connection whose peer vanished is found
within ``KEEPALIVE_IDLE + KEEPALIVE_INTERVAL * KEEPALIVE_COUNT`` seconds, one with unanswered
data within ``USER_TIMEOUT``). The server's end, as session settings: ``statement_timeout``,
``idle_in_transaction_session_timeout`` (a transaction whose client vanished releases its
locks) and the same keepalive and user timeout on the server's socket.
"""

from __future__ import annotations

import socket
from collections.abc import Awaitable, Callable
from typing import Any

import asyncpg

from edgeway.store import retry

KEEPALIVE_IDLE, KEEPALIVE_INTERVAL, KEEPALIVE_COUNT = 5, 2, 3  # seconds, seconds, probes
USER_TIMEOUT = 10  # seconds data may stay unacknowledged before the kernel drops the link
SERVER_STATEMENT_TIMEOUT = 30  # seconds: far above ours (the server's own safety net)
SERVER_IDLE_IN_TRANSACTION = 30  # seconds

SERVER_SETTINGS = {
    "statement_timeout": f"{SERVER_STATEMENT_TIMEOUT}s",
    "idle_in_transaction_session_timeout": f"{SERVER_IDLE_IN_TRANSACTION}s",
    "tcp_keepalives_idle": str(KEEPALIVE_IDLE),
    "tcp_keepalives_interval": str(KEEPALIVE_INTERVAL),
    "tcp_keepalives_count": str(KEEPALIVE_COUNT),
    "tcp_user_timeout": str(USER_TIMEOUT * 1000),  # (milliseconds; PostgreSQL 12 and later)
}
_TCP_OPTIONS = (("TCP_KEEPIDLE", KEEPALIVE_IDLE), ("TCP_KEEPINTVL", KEEPALIVE_INTERVAL),
                ("TCP_KEEPCNT", KEEPALIVE_COUNT), ("TCP_USER_TIMEOUT", USER_TIMEOUT * 1000))


def connect_kwargs() -> dict[str, Any]:
    """What every connection is opened with (asyncpg's ``connect`` and ``create_pool``)."""
    return {"command_timeout": retry.STATEMENT_TIMEOUT, "server_settings": SERVER_SETTINGS}


def tune(conn: Any) -> None:
    """Keepalive and ``TCP_USER_TIMEOUT`` on a new connection's socket (TCP only; an option
    the platform lacks is skipped)."""
    sock = conn._transport.get_extra_info("socket")  # (asyncpg offers no public handle)
    if sock is None or sock.family not in (socket.AF_INET, socket.AF_INET6):
        return
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for name, value in _TCP_OPTIONS:
        option = getattr(socket, name, None)
        if option is not None:
            sock.setsockopt(socket.IPPROTO_TCP, option, value)


async def reset(conn: Any) -> None:
    """Replaces asyncpg's default reset on release (RESET ALL, CLOSE ALL, UNLISTEN *, unlock
    all advisory locks: a round trip per query). Our queries leave no session state; only an
    interrupted transaction needs undoing."""
    if conn.is_in_transaction():
        await conn.execute("ROLLBACK")


async def init(conn: Any) -> None:
    """A pool's hook for each new connection."""
    tune(conn)


def connector(dsn: str) -> Callable[[float], Awaitable[Any]]:
    """Opens one tuned connection to ``dsn`` within the given seconds."""
    async def connect(timeout: float = retry.CONNECT_TIMEOUT) -> Any:
        conn = await asyncpg.connect(dsn, timeout=timeout, **connect_kwargs())
        tune(conn)
        return conn
    return connect


def asyncpg_dsn(url: str) -> str:
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.split("+")[0] not in ("postgresql", "postgres"):
        raise ValueError(f"not a PostgreSQL URL: {url!r} (expected postgresql://...)")
    return f"postgresql://{rest}"
