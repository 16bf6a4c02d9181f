"""First start: the admin user and the first API key; also ``edgeway api-keys create``."""

from __future__ import annotations

from datetime import UTC, datetime

from edgeway import catalog, ids
from edgeway.store.db import Database, UniqueViolation
from edgeway.store.repo import Changes, Repo

USERS = catalog.BY_COLLECTION["users"]
API_KEYS = catalog.BY_COLLECTION["api_keys"]


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def admin_user(repo: Repo) -> str:
    """The id of the platform's admin user, created on first use."""
    existing = await repo.setting("admin_user_id")
    if existing:
        return existing
    user_id = ids.new_id(USERS.prefix)
    await repo.insert(USERS, user_id, {"name": "admin", "admin": True, "created_at": _now()})
    await repo.put_setting("admin_user_id", user_id)
    return user_id


async def _mark_bootstrapped(repo: Repo) -> bool:
    """True if this call marked the database; False if it was marked before."""
    if await repo.setting("bootstrapped"):
        return False
    await repo.put_setting("bootstrapped", _now())
    return True


async def _issue(repo: Repo, owner_id: str, description: str, role: str = "admin") -> str:
    key_id = ids.new_id(API_KEYS.prefix)
    token = ids.new_token(key_id)
    doc = {"description": description, "metadata": "", "owner_id": owner_id,
           "token": None, "created_at": _now(), "role": role}
    await repo.insert(API_KEYS, key_id, doc, ids.token_hash(token))
    await repo.set_links(API_KEYS, key_id, [("owner_id", owner_id)])
    return token


async def create_api_key(db: Database, description: str, role: str = "admin",
                         changes: Changes | None = None) -> str:
    """A new API key (``changes``: where its ``api_key_created.v0`` event is written)."""
    async with db.write() as tx:
        repo = Repo(tx, changes)
        await _mark_bootstrapped(repo)  # a database with a key is no longer empty
        return await _issue(repo, await admin_user(repo), description, role)


async def first_start(db: Database) -> str | None:
    """On an empty database, create the admin user and its first API key; else None."""
    try:
        async with db.write() as tx:
            repo = Repo(tx)
            if not await _mark_bootstrapped(repo):
                return None
            return await _issue(repo, await admin_user(repo), "created on first start")
    except UniqueViolation:
        return None  # another node bootstrapped at the same moment


async def announce_first_start(db: Database) -> None:
    """On an empty database, create the first API key and print it, once."""
    token = await first_start(db)
    if token:
        print(f"First start: created an admin API key. It is shown only this once:\n"
              f"  {token}", flush=True)
