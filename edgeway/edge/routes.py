"""Which route of an HTTPS edge a request takes: by the routes' matches (exact beats prefix,
the longest prefix wins, a route naming a host only matches it), except the edge's own login
paths (``/.edgeway/<module>/...``), which belong to the login route they name."""

from __future__ import annotations

from edgeway.edge.h1 import Request
from edgeway.edge.login import base as login
from edgeway.edge.snapshot import Edge, Route


def match(edge: Edge, host: str, path: str) -> Route | None:
    """Exact beats prefix; the longest prefix wins; a route naming a host only matches it."""
    best: Route | None = None
    for r in edge.routes:
        if r.host and r.host != host:
            continue
        if r.exact:
            if path == r.path:
                return r
        elif path.startswith(r.path) and (best is None or len(r.path) > len(best.path)):
            best = r
    return best


def pick(edge: Edge, host: str, req: Request) -> tuple[str, Route | None]:
    """The request's path and route: by the routes' matches, except the edge's own login
    paths (``/.edgeway/<module>/...``), which belong to the login route they name (or the
    first of that module) wherever its match is."""
    path = req.target.decode("latin-1").split("?", 1)[0]
    route = match(edge, host, path)
    own = login.own_path(req.target)
    if own is not None:
        route = next((r for r in edge.routes if (hook := r.plan.find(login.Gate))
                      and hook.kind == own[0] and own[1] in ("", r.id)), route)
    return path, route
