"""Who is logged in, in the database every node shares: application users (one per identity
provider and user id there) and their browsers' sessions (``catalog/apps.py``), and the SAML
assertions already used.

The edge opens a session when a login completes and reads it on every request that carries
its cookie (a primary-key read), so a session deleted through the API (or with its user)
logs that browser out on its next request, on any node. ``last_active`` is written at most
once a minute per session. Expired sessions and assertions are swept every few minutes.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import structlog
from ua_parser import parse as parse_ua

from edgeway import catalog, ids
from edgeway.edge.login.base import Common, Identity
from edgeway.pki.seal import Sealer, SealError
from edgeway.store.db import Database, UniqueViolation
from edgeway.store.repo import Repo

log = structlog.get_logger()
USERS = catalog.BY_COLLECTION["app/users"]
SESSIONS = catalog.BY_COLLECTION["app/sessions"]
ROUTES = catalog.BY_COLLECTION["edges/https/routes"]
TUNNELS = catalog.BY_COLLECTION["tunnels"]
TOUCH_AFTER = 60  # seconds between two writes of a session's last_active
MOBILE_OS = ("iOS", "Android")


def stamp(epoch: float) -> str:
    return datetime.fromtimestamp(int(epoch), UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def epoch(text: str) -> float:
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
    except ValueError:
        return 0.0


def seen(doc: dict[str, Any]) -> float:
    """When a session was last used (its ``last_active``, to the millisecond)."""
    return float(doc.get("seen") or 0) or epoch(str(doc.get("last_active", "")))


def user_key(provider: str, url: str, user_id: str) -> str:
    return hashlib.sha256(f"{provider}\n{url}\n{user_id}".encode()).hexdigest()


def browser(ua: str, ip: str) -> dict[str, Any]:
    """The ``browser_session`` member: the user agent as sent and as ua-parser reads it."""
    parsed = parse_ua(ua)
    agent, os_, device = parsed.user_agent, parsed.os, parsed.device
    family = device.family if device else ""
    os_name = os_.family if os_ else ""
    kind = "bot" if family == "Spider" else "tablet" if "iPad" in family or "Tablet" in family \
        else "mobile" if os_name in MOBILE_OS else "desktop" if agent else ""
    return {"user_agent": {
        "raw": ua, "browser_name": agent.family if agent else "",
        "browser_version": ".".join(p for p in (agent.major, agent.minor) if p) if agent else "",
        "device_type": kind, "os_name": os_name,
        "os_version": ".".join(p for p in (os_.major, os_.minor) if p) if os_ else ""},
        "ip_address": ip,
        "location": {"country_code": "", "latitude": 0.0, "longitude": 0.0,
                     "lat_long_radius_km": 0}}


@dataclass(frozen=True)
class Opening:
    """What a completed login knows besides the identity."""
    provider: tuple[str, str]  # identity provider: name, URL
    site: str  # https://host[:port]
    user_agent: str
    ip: str
    token: str = ""  # the provider's access token (OAuth: kept sealed, for re-checks)
    refresh: str = ""
    details: dict[str, str] = field(default_factory=dict)


@dataclass
class Live:
    """A session as stored."""
    id: str
    doc: dict[str, Any]

    @property
    def user_id(self) -> str:
        return str(self.doc.get("application_user_id", ""))


class AppSessions:
    def __init__(self, db: Database, sealer: Sealer, public_url: str) -> None:
        self.db, self.sealer, self.public_url = db, sealer, public_url

    def _ref(self, path: str, id_: str) -> dict[str, str] | None:
        return {"id": id_, "uri": f"{self.public_url}/{path}/{id_}"} if id_ else None

    async def _where(self, key: str) -> dict[str, Any]:
        """The edge, route or endpoint refs of what the login module belongs to."""
        repo = Repo(self.db.reader())
        if key.startswith(ROUTES.prefix + "_"):
            doc = await repo.get(ROUTES, key) or {}
            edge = str(doc.get("edge_id", ""))
            return {"edge": self._ref("edges/https", edge),
                    "route": self._ref(f"edges/https/{edge}/routes", key)}
        tunnel = await repo.get(TUNNELS, key) or {}
        endpoint = tunnel.get("endpoint") or {}
        return {"endpoint": self._ref("endpoints", str(endpoint.get("id", "")))}

    def seal(self, token: str) -> str:
        return self.sealer.seal(token.encode(), "app session token") if token else ""

    def unseal(self, sealed: str) -> str:
        try:
            return self.sealer.open(sealed, "app session token").decode() if sealed else ""
        except SealError:
            return ""

    async def open(self, c: Common, who: Identity, o: Opening) -> tuple[str, float]:
        """A new session of ``who`` (made or updated as an application user): its id and
        when it expires."""
        now = time.time()
        expires = now + c.maximum
        where = await self._where(c.key)
        sid = ids.new_id(SESSIONS.prefix)
        doc = {"public_url": o.site, "browser_session": browser(o.user_agent, o.ip),
               "last_active": stamp(now), "seen": round(now, 3), "expires_at": stamp(expires),
               "endpoint": None,
               "edge": None, "route": None, **where, "realm": c.realm,
               "token_sealed": self.seal(o.token), "refresh_sealed": self.seal(o.refresh),
               "inactivity": c.inactivity, "checked_at": int(now), "details": o.details,
               "created_at": stamp(now)}
        for attempt in range(2):  # a first login of the same user on another node may race
            try:
                async with self.db.write() as tx:
                    repo = Repo(tx)
                    doc["application_user_id"] = await self._user(repo, who, o.provider, now)
                    await repo.insert(SESSIONS, sid, doc)
                    await repo.set_links(SESSIONS, sid,
                                         [("application_user_id", doc["application_user_id"])])
                break
            except UniqueViolation:
                if attempt:
                    raise
        log.info("app_session_start", session=sid, user=doc["application_user_id"],
                 key=c.key, provider=o.provider[0])
        return sid, expires

    async def _user(self, repo: Repo, who: Identity, provider: tuple[str, str],
                    now: float) -> str:
        key = user_key(*provider, who.id)
        found = await repo.docs_where(USERS, "user_key", [key])
        members = {"username": who.username, "email": who.email, "name": who.name,
                   "last_active": stamp(now), "last_login": stamp(now)}
        if found:
            uid, doc = found[0]
            await repo.replace(USERS, uid, {**doc, **members})
            return uid
        uid = ids.new_id(USERS.prefix)
        await repo.insert(USERS, uid, {
            "identity_provider": {"name": provider[0], "url": provider[1]},
            "provider_user_id": who.id, "user_key": key, "created_at": stamp(now), **members})
        return uid

    async def find(self, sid: str) -> Live | None:
        doc = await Repo(self.db.reader()).get(SESSIONS, sid)
        return Live(sid, doc) if doc is not None else None

    async def touch(self, live: Live, now: float, after: float = TOUCH_AFTER) -> None:
        """Record activity (at most once per ``after`` seconds)."""
        if now - seen(live.doc) < after:
            return
        async with self.db.write() as tx:
            repo = Repo(tx)
            doc = await repo.get_for_update(SESSIONS, live.id, self.db.dialect)
            if doc is None:
                return
            doc["last_active"], doc["seen"] = stamp(now), round(now, 3)
            await repo.replace(SESSIONS, live.id, doc)
            user = await repo.get(USERS, live.user_id)
            if user is not None:
                await repo.replace(USERS, live.user_id, {**user, "last_active": stamp(now)})

    async def checked(self, live: Live, now: float, token: str = "", refresh: str = ""
                      ) -> None:
        """The user passed a re-check at the provider (with a refreshed token, and the new
        refresh token of a provider that rotates them, if given)."""
        async with self.db.write() as tx:
            repo = Repo(tx)
            doc = await repo.get_for_update(SESSIONS, live.id, self.db.dialect)
            if doc is None:
                return
            doc["checked_at"] = int(now)
            if token:
                doc["token_sealed"] = self.seal(token)
            if refresh:
                doc["refresh_sealed"] = self.seal(refresh)
            await repo.replace(SESSIONS, live.id, doc)

    async def end(self, sid: str) -> None:
        async with self.db.write() as tx:
            await Repo(tx).delete(SESSIONS, sid)

    async def end_user_sessions(self, provider: tuple[str, str], user_id: str, realm: str,
                                session_index: str = "") -> int:
        """Single logout from the provider: the sessions of that user in ``realm`` (those of
        one provider session, when it says which)."""
        count = 0
        async with self.db.write() as tx:
            repo = Repo(tx)
            found = await repo.docs_where(USERS, "user_key", [user_key(*provider, user_id)])
            for uid, _doc in found:
                for kind, sid, _member in await repo.links_to(uid):
                    doc = await repo.get(SESSIONS, sid) if kind == SESSIONS.collection else None
                    if doc is None or doc.get("realm") != realm:
                        continue
                    if session_index and (doc.get("details") or {}).get("session_index") \
                            not in ("", session_index):
                        continue
                    await repo.delete(SESSIONS, sid)
                    count += 1
        return count

    async def first_use(self, assertion_id: str, expires: float) -> bool:
        """Remember a SAML assertion until it expires; False if it was used before."""
        try:
            async with self.db.write() as tx:
                await tx.execute("INSERT INTO used_assertions (id, expires) VALUES (?, ?)",
                                 assertion_id[:300], int(expires))
        except UniqueViolation:
            return False
        return True

    async def sweep(self, now: float) -> int:
        """Delete sessions past their end (maximum or inactivity) and expired assertions."""
        gone = []
        for sid, doc in await Repo(self.db.reader()).all_docs(SESSIONS):
            idle = int(doc.get("inactivity") or 0)
            if epoch(str(doc.get("expires_at", ""))) < now or (idle and seen(doc) + idle < now):
                gone.append(sid)
        async with self.db.write() as tx:
            repo = Repo(tx)
            for sid in gone:
                await repo.delete(SESSIONS, sid)
            await tx.execute("DELETE FROM used_assertions WHERE expires < ?", int(now))
        return len(gone)
