"""``/dashboard/dns_checks``: the DNS check of every reserved domain and agent ingress (the
newest ``LOOK_AT`` of each), run through the API's own ``dns_check`` operations, at most
``AT_ONCE`` at a time; the page lists those whose records are missing or wrong (each record
with what was expected and found) and those that could not be checked. The overview loads
its list in place (htmx) after it has shown; without scripts, it links here."""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.responses import Response

from edgeway import catalog
from edgeway.dashboard.web import Ctx, Handler

LOOK_AT = 100
AT_ONCE = 8
CHECKED = (("reserved_domains", "Domain"), ("agent_ingresses", "Agent ingress"))


async def _checked(ctx: Ctx, collection: str, item: dict[str, Any],
                   gate: asyncio.Semaphore) -> dict[str, Any]:
    async with gate:
        answer = await ctx.call("GET", f"/{collection}/{item['id']}/dns_check")
    if answer.ok:
        return {"item": item, "collection": collection, **answer.body}
    msg, code, _member = answer.error()
    return {"item": item, "collection": collection, "ok": False, "records": [],
            "error": f"{msg} ({code})"}


async def dns_checks(ctx: Ctx) -> Response:
    gate = asyncio.Semaphore(AT_ONCE)
    runs = []
    labels = dict(CHECKED)
    for collection, _label in CHECKED:
        if not ctx.can("GET", f"/{collection}/x/dns_check"):
            continue
        items, _more = await ctx.newest(catalog.BY_COLLECTION[collection], LOOK_AT)
        runs += [_checked(ctx, collection, item, gate) for item in items]
    checks = await asyncio.gather(*runs)
    failing = [c for c in checks if not c.get("ok")]
    return ctx.page("dns_checks.html", failing=failing, checked=len(checks), labels=labels)


def routes() -> list[tuple[str, str, Handler, bool]]:
    return [("/dns_checks", "GET", dns_checks, False)]
