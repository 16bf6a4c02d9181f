"""What ``certificate_management_status`` says, and when a job runs next: pure functions.

A job that fails is retried with back-off: 1 minute after the first failure, doubling up to
6 hours. An issued certificate is renewed ``renew_before`` its expiry (30 days by default);
when that window is longer than the certificate's whole lifetime, halfway through its
lifetime instead (so a short-lived certificate does not make the platform ask the CA again
and again).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any

FIRST_RETRY, LAST_RETRY = 60, 6 * 3600


def stamp(t: float) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def job(msg: str, started: float, code: str | None = None,
        retries: float | None = None) -> dict[str, Any]:
    return {"error_code": code, "msg": msg, "started_at": stamp(started),
            "retries_at": stamp(retries) if retries is not None else None}


def status(renews_at: float | None, provisioning: dict[str, Any] | None) -> dict[str, Any]:
    return {"renews_at": stamp(renews_at) if renews_at is not None else None,
            "provisioning_job": provisioning}


def retry_after(attempts: int) -> int:
    """Seconds until the next try after ``attempts`` failed ones in a row."""
    return int(min(FIRST_RETRY * 2 ** max(attempts - 1, 0), LAST_RETRY))


def renewal(not_after: float, issued: float, renew_before: float) -> float:
    due = not_after - renew_before
    return due if due > issued else issued + (not_after - issued) / 2


def now() -> float:
    return time.time()
