"""The people who sign in to the dashboard with a name and a password (set with ``edgeway
users set-password``; ``users`` is no collection of the API): a name and password to the
caller their session acts as, and a session's user checked again on every request.

A user's session acts as an API key of the user's ``role`` would (``api.guards``), owned by
the user; an admin only if the user is an admin and the role is admin. Its ``key_id`` is
empty: no API key stands behind it (events name the user as ``owner_id``).
"""

from __future__ import annotations

import asyncio

from edgeway import catalog, passwords
from edgeway.api.platform import Caller
from edgeway.errors import Forbidden
from edgeway.platform import Platform
from edgeway.store.repo import Repo

USERS = catalog.BY_COLLECTION["users"]
WRONG = "The name or the password is wrong."


def caller_of(user_id: str, doc: dict[str, object]) -> Caller:
    role = str(doc.get("role") or "admin")
    return Caller("", user_id, bool(doc.get("admin")) and role == "admin", role)


async def by_password(name: str, password: str, platform: Platform
                      ) -> tuple[Caller, str]:
    """The caller of the user ``name`` if ``password`` is theirs, and the fingerprint of the
    stored hash (what the session keeps); else 403 (the same words whichever was wrong)."""
    found = [(id_, doc) for id_, doc in await Repo(platform.db.reader()).all_docs(USERS)
             if doc.get("name") == name and doc.get("password_hash")]
    stored = str(found[0][1]["password_hash"]) if found else passwords.DECOY
    if not await asyncio.to_thread(passwords.verify, password, stored) or not found:
        raise Forbidden(WRONG, 203)
    user_id, doc = found[0]
    return caller_of(user_id, doc), passwords.fingerprint(stored)


async def by_session(user_id: str, fingerprint: str, platform: Platform) -> Caller:
    """The caller of a password session, if its user still has the password it was opened
    with; else 403."""
    doc = await Repo(platform.db.reader()).get(USERS, user_id)
    stored = str((doc or {}).get("password_hash") or "")
    if doc is None or not stored or passwords.fingerprint(stored) != fingerprint:
        raise Forbidden("The user was removed or their password changed: sign in again.",
                        203)
    return caller_of(user_id, doc)
