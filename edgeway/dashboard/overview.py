"""The overview: the live agent sessions with the tunnels each has bound (stop and restart
through the API's ``/tunnel_sessions/{id}/stop|restart``), refreshed in place every ``POLL``
seconds when scripts run (htmx), what needs attention (``attention``), and how many of each
listed kind there are (counted to ``COUNT_TO``: beyond, "100+", as one page of the API
tells), loaded in place once the page has shown (``/dashboard/counts``: a page of the API per
kind; without scripts, a link to it)."""

from __future__ import annotations

import asyncio
from typing import Any

from starlette.responses import Response

from edgeway import catalog
from edgeway.dashboard import attention
from edgeway.dashboard.nav import GROUPS, Entry
from edgeway.dashboard.web import PREFIX, Ctx, Handler, Refusal, api_refusal, polling, redirect

COUNT_TO = 100
POLL = 5  # seconds between two refreshes of the live sessions (htmx)
ACTIONS = {"stop": "Stop", "restart": "Restart"}
RUNTIME = ("tunnel_sessions", "tunnels", "endpoints")


async def _count(ctx: Ctx, entry: Entry) -> dict[str, Any]:
    items, more = await ctx.newest(entry.kind, COUNT_TO)
    return {"entry": entry, "count": f"{len(items)}+" if more else str(len(items))}


async def overview(ctx: Ctx) -> Response:
    (sessions, more), (tunnels, _) = await asyncio.gather(
        ctx.newest(catalog.BY_COLLECTION["tunnel_sessions"], COUNT_TO),
        ctx.newest(catalog.BY_COLLECTION["tunnels"], COUNT_TO))
    by_session: dict[str, list[dict[str, Any]]] = {}
    for t in tunnels:
        owner = (t.get("tunnel_session") or {}).get("id", "")
        by_session.setdefault(owner, []).append(t)
    live = [{**s, "tunnels": by_session.get(s["id"], [])} for s in sessions]
    needs = None
    if not polling(ctx):  # (a refresh of the live part takes only that part)
        needs = await attention.gather(ctx)
    done = ctx.request.query_params.get("done", "")
    return ctx.page("overview.html", live=live, more=more, poll=POLL, needs=needs,
                    actions=ACTIONS if ctx.can("POST", "/tunnel_sessions/x/stop") else {},
                    notice=f"Sent {done} to the agent." if done in ACTIONS else "")


async def counts(ctx: Ctx) -> Response:
    """``/dashboard/counts``: how many of each kind (the overview loads it in place)."""
    out = []
    for group, entries in GROUPS:
        found = [await _count(ctx, e) for e in entries if e.kind.collection not in RUNTIME]
        if found:
            out.append((group, found))
    return ctx.page("counts.html", counts=out)


async def command(ctx: Ctx) -> Response:
    action = ctx.params["action"]
    if action not in ACTIONS:
        raise Refusal(404, "Not found", f"Agent sessions have no action '{action}'.")
    answer = await ctx.call("POST", f"/tunnel_sessions/{ctx.params['id']}/{action}")
    if not answer.ok:
        raise api_refusal(answer)
    return redirect(f"{PREFIX}/?done={action}")


def routes() -> list[tuple[str, str, Handler, bool]]:
    return [("/", "GET", overview, False), ("/counts", "GET", counts, False),
            ("/tunnel_sessions/{id}/{action}", "POST", command, False)]
