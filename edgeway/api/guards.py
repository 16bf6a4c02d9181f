"""Who may change what: API key roles, the last working admin key, and enforced ``api`` IP
restrictions that would lock the caller out.

Roles: ``admin`` may do everything; ``operator`` everything but managing API keys and bot
users and the IP restrictions (and their IP policies) that guard the API or the dashboard;
``read_only`` may only read. Abuse reports are filed by any key that may write and read back
by id; only admins list and decide them. Service users are managed like bot users. Keys
stored before roles existed are admins.

Two rules hold after every write, checked inside its transaction (a refused write is rolled
back whole): at least one admin API key that works (its bot or service user, if any,
active) remains;
and the calling address still passes the enforced ``api`` restrictions, unless a restriction
write says ``force: true``.
"""

from __future__ import annotations

from typing import Any

from edgeway import catalog
from edgeway.api.platform import Caller
from edgeway.catalog.identity import MACHINE_USERS
from edgeway.catalog.model import Kind
from edgeway.errors import Conflict, Forbidden, Invalid
from edgeway.ippolicy import address
from edgeway.restrictions import compile_all
from edgeway.store.repo import Repo

ROLES = ("admin", "operator", "read_only")
READS = frozenset({"GET", "HEAD"})
OPERATOR_DENIED = frozenset({"api_keys", "bot_users", "service_users"})  # (and guarding
# IP restrictions, below)
GUARDING = ("api", "dashboard")
KEYS = catalog.BY_COLLECTION["api_keys"]
MACHINES = tuple(catalog.BY_COLLECTION[c] for c in MACHINE_USERS)
RESTRICTIONS = catalog.BY_COLLECTION["ip_restrictions"]
POLICIES, RULES = catalog.BY_COLLECTION["ip_policies"], catalog.BY_COLLECTION["ip_policy_rules"]


def role_of(doc: dict[str, Any]) -> str:
    return str(doc.get("role") or "admin")


def authorize(caller: Caller, method: str, path: str) -> None:
    """Refuse what the caller's role may not do, by method and path alone. ``path`` is the
    one the router matched, read as it reads it: by segments, slashes at either end ignored
    (so ``//api_keys`` is ``/api_keys`` here as there)."""
    if caller.role == "admin":
        return
    segments = path.strip("/").split("/")
    if segments[0] == "abuse_reports" and (len(segments) == 1) == (method in READS):
        raise Forbidden(f"This API key's role is {caller.role}: listing abuse reports and "
                        "deciding them need an admin key (any key that may write files one, "
                        "and reads it back by its id).", 260)
    if method in READS:
        return
    if caller.role == "read_only":
        raise Forbidden(f"This API key's role is read_only: it may read, not {method} "
                        f"{path}.", 260)
    collection = path.strip("/").split("/", 1)[0]
    if collection in OPERATOR_DENIED:
        raise Forbidden(f"This API key's role is operator: managing {collection} needs an "
                        "admin key.", 260)


async def _guarding_policies(repo: Repo) -> dict[str, str]:
    """IP policy id -> the api/dashboard restriction that uses it."""
    out: dict[str, str] = {}
    for id_, doc in await repo.all_docs(RESTRICTIONS):
        if doc.get("type") in GUARDING:
            for policy in doc.get("ip_policy_ids") or []:
                out.setdefault(policy, id_)
    return out


async def before(repo: Repo, caller: Caller, kind: Kind, old: dict[str, Any] | None,
                 new: dict[str, Any] | None) -> None:
    """An operator may not touch what guards the API or the dashboard; nobody changes or
    deletes an endpoint the API did not create (an agent's tunnel's, an edge's)."""
    if kind.fixed is not None and old is not None and (why := kind.fixed(old)):
        raise Conflict(why, 7130)
    if caller.role != "operator":
        return
    docs = [d for d in (old, new) if d is not None]
    if kind is RESTRICTIONS and any(d.get("type") in GUARDING for d in docs):
        raise Forbidden("This API key's role is operator: IP restrictions of type api or "
                        "dashboard need an admin key.", 260)
    if kind in (POLICIES, RULES):
        guarding = await _guarding_policies(repo)
        for d in docs:
            policy = d.get("ip_policy_id") if kind is RULES else d.get("id")
            if policy in guarding:
                raise Forbidden(f"This API key's role is operator: IP policy '{policy}' "
                                f"guards the API (IP restriction '{guarding[policy]}'); "
                                "changing it needs an admin key.", 260)


async def after(repo: Repo, caller: Caller, kind: Kind, client: str | None,
                force: bool) -> None:
    """The rules that must hold once the write is done (in its transaction)."""
    if kind is KEYS or kind in MACHINES:
        await _an_admin_remains(repo)
    if kind in (RESTRICTIONS, POLICIES, RULES) and not force:
        await _caller_not_locked_out(repo, kind, client)


async def _an_admin_remains(repo: Repo) -> None:
    machines = {id_: bool(doc.get("active", True)) for kind in MACHINES
                for id_, doc in await repo.all_docs(kind)}
    for _id, doc in await repo.all_docs(KEYS):
        owner = str(doc.get("owner_id") or "")
        machine = owner.split("_", 1)[0] in {k.prefix for k in MACHINES}
        if role_of(doc) == "admin" and (not machine or machines.get(owner)):
            return
    raise Conflict("That would leave no working admin API key: create another admin key "
                   "first (keys of an inactive bot or service user do not count).", 261)


async def _caller_not_locked_out(repo: Repo, kind: Kind, client: str | None) -> None:
    addr = address(client)  # None (an in-process client): enforced restrictions refuse it
    for r in await compile_all(repo):
        if r.enforced and (addr is None or not r.permits(addr)):
            how = ("set 'force': true to do it anyway" if kind is RESTRICTIONS else
                   "make the change from an address the new rules allow, or stop enforcing "
                   "the restriction first")
            raise Invalid("force" if kind is RESTRICTIONS else "", f"the enforced IP "
                          f"restriction '{r.id}' would then refuse this caller's address "
                          f"{client}, locking it out of the API; {how}", 262)
