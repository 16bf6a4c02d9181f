"""What needs an operator's attention, on the overview: event destinations whose delivery
fails (the last error, when it is tried again, the dead letters), certificates that expire
within ``SOON`` (uploaded ones, by their end of validity), and reserved domains whose managed
certificate cannot be had (the ACME job's error and its retry time). Each read through the
API's own list operations, the newest ``LOOK_AT`` of each kind; not on the live part's
refreshes."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from edgeway import catalog
from edgeway.dashboard.web import Ctx

LOOK_AT = 100  # the newest of each kind looked at (one page of the API)
SOON = timedelta(days=30)


@dataclass
class Attention:
    deliveries: list[dict[str, Any]]  # destinations, their ``delivery`` failing
    expiring: list[dict[str, Any]]  # certificates, with ``days`` left (negative: expired)
    jobs: list[dict[str, Any]]  # reserved domains, their certificate job failing

    @property
    def empty(self) -> bool:
        return not (self.deliveries or self.expiring or self.jobs)


async def _list(ctx: Ctx, collection: str) -> list[dict[str, Any]]:
    kind = catalog.BY_COLLECTION[collection]
    return (await ctx.newest(kind, LOOK_AT))[0] if ctx.can("GET", kind.url) else []


def failing(delivery: dict[str, Any] | None) -> bool:
    """A destination's delivery is failing: attempts are backing off, events are dead
    letters, or its last error is newer than its last success."""
    if not delivery or not delivery.get("last_error"):
        return False
    return bool(delivery.get("attempts") or delivery.get("dead_letters")
                or str(delivery.get("last_error_at") or "")
                > str(delivery.get("last_success_at") or ""))


def _days_left(not_after: str, now: datetime) -> int | None:
    try:
        end = datetime.fromisoformat(not_after.replace("Z", "+00:00"))
    except ValueError:
        return None
    return (end - now) // timedelta(days=1)


async def gather(ctx: Ctx) -> Attention:
    dests, certs, domains = await asyncio.gather(
        _list(ctx, "event_destinations"), _list(ctx, "tls_certificates"),
        _list(ctx, "reserved_domains"))
    now = datetime.now(UTC)
    deliveries = sorted((d for d in dests if failing(d.get("delivery"))),
                        key=lambda d: str(d["delivery"].get("last_error_at") or ""),
                        reverse=True)
    expiring = []
    for cert in certs:
        left = _days_left(str(cert.get("not_after") or ""), now)
        if left is not None and left < SOON.days:
            expiring.append({**cert, "days": left})
    expiring.sort(key=lambda c: int(c["days"]))
    jobs = [d for d in domains
            if ((d.get("certificate_management_status") or {}).get("provisioning_job")
                or {}).get("error_code")]
    return Attention(deliveries, expiring, jobs)
