"""``/dashboard/traffic``: the last requests each endpoint served on this node, as the edge
saw them (``edgeway.recent``: kept without a subscription), the endpoint served last first,
refreshed in place while the page is open (htmx, every ``POLL`` seconds). Shown to a key
that may list tunnels; in a cluster, each node shows the requests it served."""

from __future__ import annotations

import datetime

from starlette.responses import Response

from edgeway.dashboard.web import Ctx, Handler, Refusal

POLL = 5


def _when(at: float) -> str:
    return datetime.datetime.fromtimestamp(at, datetime.UTC).strftime("%H:%M:%S")


async def traffic(ctx: Ctx) -> Response:
    if not ctx.can("GET", "/tunnels"):
        raise Refusal(403, "Not allowed", "This key may not list tunnels, nor see their "
                      "traffic.")
    endpoints = [{"key": key, "label": label, "edge": key.startswith("edghts_"),
                  "rows": [{"when": _when(r.at), **{f: getattr(r, f) for f in (
                      "client", "method", "target", "status", "ms", "route", "scheme")}}
                           for r in rows]}
                 for key, label, rows in ctx.shared.platform.recent.endpoints()]
    return ctx.page("traffic.html", endpoints=endpoints, poll=POLL)


def routes() -> list[tuple[str, str, Handler, bool]]:
    return [("/traffic", "GET", traffic, False)]
