"""Identity kinds: users (internal), API keys, bot and service users (machine identities: they
own API keys and credentials, which stop working while they are inactive) and agent
credentials (authtokens)."""

from __future__ import annotations

from typing import Any, Literal

from edgeway.catalog import checks
from edgeway.catalog.model import Context, Field, Kind, Link, standard
from edgeway.errors import Forbidden

MACHINE_USERS = ("bot_users", "service_users")
OWNER = Link(("users", *MACHINE_USERS), "cascade", code=627)


def _default_owner(doc: dict[str, Any], ctx: Context,
                   old: dict[str, Any] | None) -> dict[str, Any]:
    """The owner: the caller unless given. Only an admin (an admin-role API key of an admin
    user) may set one other than itself; keeping the stored owner on an update is no
    setting."""
    owner = doc.get("owner_id")
    kept = old is not None and owner == old.get("owner_id")
    if owner and owner != ctx.caller_id and not ctx.caller_is_admin and not kept:
        raise Forbidden(f"Only an admin may set 'owner_id' to an identity other than itself: "
                        f"this API key is no admin key and may not set '{owner}'.", 630)
    return {"owner_id": owner or ctx.caller_id}


def _owner_field() -> Field:
    return Field("owner_id", str, "owning user, bot or service user; defaults to the caller",
                 link=OWNER)


def _token_field() -> Field:
    return Field("token", str | None, "the secret; returned only by the create call",
                 create="no")


def _name(value: str, _ctx: Context) -> str:
    checks.non_empty("name", value)
    checks.byte_limit("name", value, 255)
    return value


USERS = Kind(
    collection="users", prefix="usr", list_key="users", title="User", routed=False,
    fields=(Field("name", str, "display name"), Field("admin", bool, "admin rights",
                                                       default=True),
            # the dashboard's password sign-in (``edgeway users set-password``)
            Field("password_hash", str, "scrypt hash of the password (edgeway.passwords)",
                  create="no", response=False, default=""),
            Field("role", Literal["admin", "operator", "read_only"], "what a signed-in "
                  "session may do, as an API key's role", create="no", response=False,
                  default="admin")),
)

API_KEYS = Kind(
    collection="api_keys", prefix="ak", list_key="keys", title="APIKey", secret=True,
    describe="API keys authenticate calls to this API; the token is shown once.",
    fields=(*standard(), _token_field(), _owner_field(),
            Field("role", Literal["admin", "operator", "read_only"],
                  "admin: everything; operator: everything but API keys, bot users and the "
                  "IP restrictions guarding the API or dashboard; read_only: reads only",
                  update=True, default="admin")),
    derive=_default_owner,
)

def _machine_user(collection: str, prefix: str, title: str, describe: str) -> Kind:
    return Kind(
        collection=collection, prefix=prefix, list_key=collection, title=title,
        describe=describe,
        fields=(
            Field("name", str, "name of the identity", create="required", update=True,
                  check=_name),
            Field("active", bool, "false refuses every API key and credential it owns",
                  update=True, default=True),
        ),
    )


BOT_USERS = _machine_user("bot_users", "bot", "BotUser",
                          "Identities that belong to no human user, for agents and automation.")
SERVICE_USERS = _machine_user("service_users", "service", "ServiceUser",
                              "Identities of services: like bot users, they own API keys and "
                              "credentials.")

CREDENTIALS = Kind(
    collection="credentials", prefix="cr", list_key="credentials", title="Credential",
    secret=True,
    describe="Agent authtokens; the token is shown once.",
    fields=(
        *standard(), _token_field(),
        Field("acl", list[str], "bind rules: '*' or 'bind:<domain|*.domain|host:port|k=v>'",
              update=True, default=list, check=checks.acl_rules),
        _owner_field(),
    ),
    derive=_default_owner,
)

KINDS = (USERS, API_KEYS, BOT_USERS, SERVICE_USERS, CREDENTIALS)
