"""Render stored resources for a response, with their children (an HTTPS edge's routes)."""

from __future__ import annotations

from typing import Any

from edgeway import catalog
from edgeway.api.render import render
from edgeway.catalog.model import Kind
from edgeway.store.repo import Item, Repo


async def many(repo: Repo, kind: Kind, items: list[Item], public_url: str,
               token: str | None = None) -> list[dict[str, Any]]:
    out = [render(kind, it.id, it.doc, public_url, token) for it in items]
    for child in kind.children:
        child_kind = catalog.BY_COLLECTION[child.collection]
        found = await repo.docs_where(child_kind, child.via, [it.id for it in items])
        by_parent: dict[str, list[dict[str, Any]]] = {}
        for cid, cdoc in sorted(found):
            by_parent.setdefault(cdoc[child.via], []).append(
                render(child_kind, cid, cdoc, public_url))
        for shown in out:
            shown[child.member] = by_parent.get(shown["id"], [])
    return out


async def one(repo: Repo, kind: Kind, id_: str, doc: dict[str, Any], public_url: str,
              token: str | None = None) -> dict[str, Any]:
    return (await many(repo, kind, [Item(id_, doc)], public_url, token))[0]
