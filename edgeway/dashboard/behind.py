"""What serves an edge or a route: its backend, followed through failover and weighted backends
to the tunnel groups at the bottom, each with the live tunnels its labels select (their URLs
and where they forward), a static address or a fixed response. Read through the API's own
operations; at most ``DEPTH`` backends deep and ``SHOWN`` tunnels per group."""

from __future__ import annotations

from typing import Any

from edgeway import catalog, ids
from edgeway.dashboard.web import Ctx

DEPTH = 3
SHOWN = 20


def _kind_of(backend_id: str) -> Any:
    parts = ids.split_id(backend_id)
    kind = catalog.BY_PREFIX.get(parts[0]) if parts else None
    return kind if kind is not None and kind.collection.startswith("backends/") else None


async def _tunnels(ctx: Ctx, refs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for ref in refs[:SHOWN]:
        answer = await ctx.call("GET", f"/tunnels/{ref['id']}")
        if answer.ok:
            out.append(answer.body)
    return out


async def backend(ctx: Ctx, backend_id: str, depth: int = 0) -> dict[str, Any] | None:
    """A backend as the page shows it: its kind and slug, what it is, the live tunnels of a
    tunnel group, and the backends under a failover or weighted one."""
    kind = _kind_of(backend_id)
    if kind is None or depth > DEPTH:
        return None
    answer = await ctx.call("GET", f"{kind.url}/{backend_id}")
    if not answer.ok:
        return None
    doc = answer.body
    out: dict[str, Any] = {"id": backend_id, "slug": kind.table, "title": kind.title,
                           "tunnels": None, "under": [], "what": ""}
    if kind.collection == "backends/tunnel_group":
        refs = doc.get("tunnels") or []
        out["tunnels"], out["more"] = await _tunnels(ctx, refs), max(0, len(refs) - SHOWN)
        out["what"] = "labels " + ", ".join(f"{k}={v}" for k, v in doc["labels"].items())
    elif kind.collection == "backends/static":
        out["what"] = doc["address"] + (" over TLS" if doc["tls"]["enabled"] else "")
    elif kind.collection == "backends/http_response":
        out["what"] = f"answers {doc['status_code']}"
    else:
        under = doc.get("backends") or []
        names = list(under) if isinstance(under, dict) else under
        for one in names:
            found = await backend(ctx, one, depth + 1)
            if found is not None:
                if isinstance(under, dict):
                    found["what"] = f"weight {under[one]}; " + found["what"]
                out["under"].append(found)
        out["what"] = "tried in order" if kind.collection == "backends/failover" else \
            "chosen by weight"
    return out


async def of(ctx: Ctx, item: dict[str, Any]) -> dict[str, Any] | None:
    """What serves ``item`` (an edge or route with a ``backend`` module), or None."""
    module = item.get("backend")
    ref = module.get("backend") if isinstance(module, dict) else None
    if not isinstance(ref, dict) or not ref.get("id"):
        return None
    return await backend(ctx, str(ref["id"]))
