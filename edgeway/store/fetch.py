"""The catalog's ``Fetch`` over a repository: reads of other stored resources by collection,
for the kinds' rules and members that depend on them (``Kind.resolve``, ``verify``,
``refresh``)."""

from __future__ import annotations

from typing import Any

from edgeway import catalog
from edgeway.store.repo import Repo


class Fetcher:
    def __init__(self, repo: Repo) -> None:
        self.repo = repo

    async def __call__(self, collection: str, id_: str) -> dict[str, Any] | None:
        return await self.repo.get(catalog.BY_COLLECTION[collection], id_)

    async def all(self, collection: str) -> list[tuple[str, dict[str, Any]]]:
        return await self.repo.all_docs(catalog.BY_COLLECTION[collection])
