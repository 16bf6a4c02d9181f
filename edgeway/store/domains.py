"""Which reserved domains cover a host name: the name itself, or a wildcard one label up."""

from __future__ import annotations

from edgeway import catalog
from edgeway.store.repo import Repo

DOMAINS = catalog.BY_COLLECTION["reserved_domains"]


async def covering(repo: Repo, host: str) -> dict[str, str]:
    """Reserved domain id by name, for the names that could cover ``host``."""
    names = [host]
    if "." in host:
        names.append("*." + host.split(".", 1)[1])
    found = await repo.docs_where(DOMAINS, "domain", names)
    return {doc["domain"]: id_ for id_, doc in found}
