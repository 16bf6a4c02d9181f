"""Who may hold an agent session: the address (IP restrictions of type ``agent``), the
authtoken (a credential that exists), its owner (a bot user that exists and is active). Asked
at Auth and again whenever credentials, bot users or restrictions change (``TunnelServer``
ends the sessions that no longer pass)."""

from __future__ import annotations

from edgeway import catalog, ids
from edgeway.catalog.identity import MACHINE_USERS
from edgeway.platform import Platform
from edgeway.store.repo import Repo

CREDENTIALS = catalog.BY_COLLECTION["credentials"]
MACHINES = {catalog.BY_COLLECTION[c].prefix: catalog.BY_COLLECTION[c] for c in MACHINE_USERS}


class AuthFailed(Exception):
    def __init__(self, message: str, code: int = 107) -> None:
        super().__init__(message)
        self.code = code  # the ERR_NGROK_<code> line the SDKs show


class Admission:
    def __init__(self, platform: Platform) -> None:
        self.platform = platform

    async def address(self, peer: str) -> None:
        """IP restrictions of type ``agent``: AuthFailed (ERR 220) when one refuses ``peer``."""
        r = await self.platform.restrictions.refusing("agent", peer)
        if r is not None:
            raise AuthFailed(f"the address {peer} may not start agent sessions: IP "
                             f"restriction '{r.id}' refuses it", 220)

    async def token(self, token: str) -> tuple[str, list[str]]:
        """The credential an authtoken belongs to, and its ACL."""
        if not token:
            raise AuthFailed("authentication failed: no authtoken was sent")
        repo = Repo(self.platform.db.reader())
        item = await repo.by_token(CREDENTIALS, ids.token_hash(token))
        if item is None:
            raise AuthFailed("authentication failed: the authtoken is not valid (unknown or "
                             "deleted credential)")
        await self._owner_active(repo, str(item.doc.get("owner_id") or ""))
        return item.id, list(item.doc.get("acl") or [])

    async def still_valid(self, credential: str) -> list[str]:
        """The ACL of a credential a live session holds; AuthFailed when it is gone."""
        repo = Repo(self.platform.db.reader())
        doc = await repo.get(CREDENTIALS, credential)
        if doc is None:
            raise AuthFailed("the credential was deleted")
        await self._owner_active(repo, str(doc.get("owner_id") or ""))
        return list(doc.get("acl") or [])

    @staticmethod
    async def _owner_active(repo: Repo, owner: str) -> None:
        machine = MACHINES.get(owner.split("_", 1)[0])
        if machine is not None:
            bot = await repo.get(machine, owner)
            if bot is None or not bot.get("active", True):
                raise AuthFailed(f"authentication failed: the authtoken's {machine.title} is "
                                 "inactive or was deleted")
