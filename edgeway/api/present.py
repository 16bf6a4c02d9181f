"""Render stored resources for a response, with their children (an HTTPS edge's routes),
live members (the tunnels a tunnel group backend selects, the groups a tunnel is in) and, for
routes, the base URL of their own host (their SAML service provider's URLs)."""

from __future__ import annotations

from typing import Any

from edgeway import catalog
from edgeway.api import events
from edgeway.api.render import render
from edgeway.catalog.model import Kind, ref
from edgeway.catalog.modules import saml
from edgeway.store.fetch import Fetcher
from edgeway.store.repo import Item, Repo

ROUTES = "edges/https/routes"


def _selects(labels: dict[str, str], tunnel_labels: dict[str, str]) -> bool:
    return bool(labels) and bool(tunnel_labels) and all(
        tunnel_labels.get(k) == v for k, v in labels.items())


async def _live_matches(repo: Repo, kind: Kind, out: list[dict[str, Any]],
                        public_url: str) -> None:
    """Tunnel groups list the live tunnels whose labels match; tunnels list those groups."""
    if kind.collection == "backends/tunnel_group":
        tunnels = [(id_, doc.get("labels") or {})
                   for id_, doc in await repo.all_docs(catalog.BY_COLLECTION["tunnels"])]
        for shown in out:
            shown["tunnels"] = [ref(public_url, id_) for id_, labels in sorted(tunnels)
                                if _selects(shown.get("labels") or {}, labels)]
    elif kind.collection == "tunnels" and any(shown.get("labels") for shown in out):
        groups = await repo.all_docs(catalog.BY_COLLECTION["backends/tunnel_group"])
        for shown in out:
            shown["backends"] = [ref(public_url, id_) for id_, doc in sorted(groups)
                                 if _selects(doc.get("labels") or {}, shown.get("labels") or {})]


async def _sites(repo: Repo, kind: Kind, items: list[Item], https_port: int
                 ) -> dict[str, str]:
    """HTTPS edge routes: the base URL of each one's own host (where its SAML service
    provider lives), by route id."""
    if kind.collection != ROUTES or not items:
        return {}
    edges = catalog.BY_COLLECTION["edges/https"]
    parents: dict[str, dict[str, Any]] = {}
    for it in items:
        edge_id = str(it.doc.get("edge_id", ""))
        if edge_id not in parents:
            parents[edge_id] = await repo.get(edges, edge_id) or {}
    return {it.id: saml.site(saml.route_host(parents[str(it.doc.get("edge_id", ""))], it.doc),
                             https_port) for it in items}


async def many(repo: Repo, kind: Kind, items: list[Item], public_url: str,
               token: str | None = None, https_port: int = 443) -> list[dict[str, Any]]:
    if kind.refresh is not None and items:
        docs = await kind.refresh([it.doc for it in items], Fetcher(repo))
        items = [Item(it.id, doc) for it, doc in zip(items, docs, strict=True)]
    sites = await _sites(repo, kind, items, https_port)
    out = [render(kind, it.id, it.doc, public_url, token, sites.get(it.id, ""))
           for it in items]
    await _live_matches(repo, kind, out, public_url)
    if kind.collection == "event_destinations":
        await events.present(repo, out)
    for child in kind.children:
        child_kind = catalog.BY_COLLECTION[child.collection]
        found = await repo.docs_where(child_kind, child.via, [it.id for it in items])
        parents = {it.id: it.doc for it in items}
        by_parent: dict[str, list[dict[str, Any]]] = {}
        for cid, cdoc in sorted(found):
            host = saml.route_host(parents[cdoc[child.via]], cdoc)
            by_parent.setdefault(cdoc[child.via], []).append(
                render(child_kind, cid, cdoc, public_url, site=saml.site(host, https_port)))
        for shown in out:
            shown[child.member] = by_parent.get(shown["id"], [])
    return out


async def one(repo: Repo, kind: Kind, id_: str, doc: dict[str, Any], public_url: str,
              token: str | None = None, https_port: int = 443) -> dict[str, Any]:
    return (await many(repo, kind, [Item(id_, doc)], public_url, token, https_port))[0]
