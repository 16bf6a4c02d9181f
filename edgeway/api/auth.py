"""API-key authentication: ``Authorization: Bearer <token>`` (or the token's hash, which a
dashboard session keeps) to the calling identity."""

from __future__ import annotations

from starlette.requests import Request

from edgeway import catalog, ids
from edgeway.api.platform import AuthCache, Caller
from edgeway.catalog.identity import MACHINE_USERS
from edgeway.errors import Forbidden
from edgeway.platform import Platform
from edgeway.store.repo import Repo

_TOKEN_SHAPE = "a token shaped FIRSTPART_SECONDPART"


def _bearer(request: Request) -> str:
    header = request.headers.get("authorization")
    if header is None:
        raise Forbidden("The Authorization header is missing. Send "
                        "'Authorization: Bearer <API key>'.", 200)
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise Forbidden("The Authorization header could not be parsed; expected "
                        "'Bearer <API key>'.", 201)
    return check_token(token.strip())


def check_token(token: str) -> str:
    """``token`` if it is shaped like an API key's; else 403 saying what it is."""
    first, sep, second = token.partition("_")
    if not sep or len(first) != ids.KSUID_LEN or not second:
        if ids.split_id(token):
            raise Forbidden("That is an API key id, not its token; send the token shown "
                            "when the key was created.", 208)
        raise Forbidden(f"The credential is not a valid API key: expected {_TOKEN_SHAPE}.",
                        202)
    return token


async def authenticate(request: Request, platform: Platform, cache: AuthCache) -> Caller:
    return await by_digest(ids.token_hash(_bearer(request)), platform, cache)


async def by_digest(digest: str, platform: Platform, cache: AuthCache) -> Caller:
    """The caller whose API key's token hashes to ``digest`` (the dashboard's sessions keep
    the digest and authenticate by it on every request), or 403 as for a bearer token."""
    cached = cache.get(digest)
    if cached is not None:
        return cached
    repo = Repo(platform.db.reader())
    item = await repo.by_token(catalog.BY_COLLECTION["api_keys"], digest)
    if item is None:
        if await repo.by_token(catalog.BY_COLLECTION["credentials"], digest):
            raise Forbidden("That is an agent authtoken; the API needs an API key.", 206)
        raise Forbidden("The API key is not valid: it does not exist or was deleted.", 203)
    owner = item.doc["owner_id"]
    is_admin = False
    machine = catalog.BY_PREFIX.get(owner.split("_", 1)[0])
    if machine is not None and machine.collection in MACHINE_USERS:
        bot = await repo.get(machine, owner)
        if bot is None or not bot.get("active", True):
            raise Forbidden(f"The API key belongs to an inactive {machine.title}.", 203)
    else:
        user = await repo.get(catalog.BY_COLLECTION["users"], owner)
        is_admin = bool(user and user.get("admin"))
    role = str(item.doc.get("role") or "admin")
    # an admin is an admin user's key of the admin role (an operator key of the same user
    # may not act as another identity: owner_id)
    caller = Caller(item.id, owner, is_admin and role == "admin", role)
    cache.put(digest, caller)
    return caller
