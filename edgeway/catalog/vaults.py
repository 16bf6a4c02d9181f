"""Vaults and their secrets. A secret's value is stored sealed with the platform secret key
(context ``SEAL_CONTEXT``) and never returned; traffic policies read it as
``secrets.get("<vault name>", "<secret name>")`` (the edge unseals it into its routing
snapshot, see ``edge/modules/secrets.py``)."""

from __future__ import annotations

import re
from typing import Any

from edgeway.catalog.model import Context, Fetch, Field, Kind, Link, Ref, Where, ref, standard
from edgeway.errors import Invalid

SEAL_CONTEXT = "vault secret"
NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
MAX_VALUE = 16384  # characters


def _name(value: str, _ctx: Context) -> str:
    if not NAME.match(value):
        raise Invalid("name", f"'{value}' must be 1 to 64 letters, digits, '_', '-' or '.' "
                      "(policies name it in secrets.get)", 215)
    return value


STAMPS = frozenset({"updated_at", "created_by", "last_updated_by"})


def _stamps(doc: dict[str, Any], ctx: Context, old: dict[str, Any] | None) -> dict[str, Any]:
    """When and by whom it was made and last changed (the caller's user or bot id); an
    update that changes nothing changes neither (a secret's new value, even the same text,
    is a change: only its sealed form is kept)."""
    if old is not None and all(doc.get(k) == old.get(k) for k in doc.keys() | old.keys()
                               if k not in STAMPS):
        return {}
    out = {"updated_at": ctx.now.strftime("%Y-%m-%dT%H:%M:%SZ"),
           "last_updated_by": ctx.caller_id}
    if old is None:
        out["created_by"] = ctx.caller_id
    return out


VAULTS = Kind(
    collection="vaults", prefix="vault", list_key="vaults", title="Vault",
    describe="Named groups of secrets that traffic policies read.",
    unique=(("name",),), unique_msg="a vault named '{name}' already exists", unique_code=413,
    fields=(
        Field("name", str, "the vault's name (letters, digits, '_', '-', '.')",
              create="required", update=True, check=_name),
        *standard(),
        Field("updated_at", str, "when it was last changed", create="no", default=""),
        Field("created_by", str, "who made it", create="no", default=""),
        Field("last_updated_by", str, "who changed it last", create="no", default=""),
    ),
    derive=_stamps,
)


def _value(value: str, _ctx: Context) -> str:
    if not value or len(value) > MAX_VALUE:
        raise Invalid("value", f"must be 1 to {MAX_VALUE} characters", 215)
    return value


def _seal(doc: dict[str, Any], ctx: Context, old: dict[str, Any] | None) -> dict[str, Any]:
    out = _stamps(doc, ctx, old)
    if old is None or doc["value"] is not old.get("value"):  # a new value: seal it
        out["value"] = ctx.sealer.seal(doc["value"].encode(), SEAL_CONTEXT)
    return out


async def _vault(doc: dict[str, Any], _ctx: Context, fetch: Fetch) -> dict[str, Any]:
    """The vault, by id or by name (``vault_name``): both must agree when both are given."""
    if doc.get("vault_id"):
        vault = await fetch("vaults", doc["vault_id"])
        name = str((vault or {}).get("name", ""))
        if doc.get("vault_name") and doc["vault_name"] != name:
            raise Invalid("vault_name", f"'{doc['vault_name']}' is not the name of the vault "
                          f"'{doc['vault_id']}' ('{name}'); give one of the two", 215)
        return {"vault_name": name}
    for id_, vault in await fetch.all("vaults"):
        if vault.get("name") == doc.get("vault_name"):
            return {"vault_id": id_}
    raise Invalid("vault_name", f"no vault is named '{doc.get('vault_name')}'", 380)


async def _vault_names(docs: list[dict[str, Any]], fetch: Fetch) -> list[dict[str, Any]]:
    """Secrets as rendered: ``vault_name`` is their vault's name now (the stored copy, made
    on create, goes stale when the vault is renamed)."""
    names: dict[str, str] = {}
    for vault_id in sorted({str(d.get("vault_id") or "") for d in docs} - {""}):
        vault = await fetch("vaults", vault_id)
        if vault is not None:
            names[vault_id] = str(vault.get("name", ""))
    return [{**d, "vault_name": names[str(d.get("vault_id"))]}
            if str(d.get("vault_id")) in names else d for d in docs]


def _one_vault(doc: dict[str, Any], _ctx: Context) -> None:
    if not doc.get("vault_id") and not doc.get("vault_name"):
        raise Invalid("vault_id", "is required: the vault's id (or its name, vault_name)",
                      1405)


def _vault_ref(value: str) -> list[tuple[str, str]]:
    return [("vault_id", value)] if value else []  # (given by name: resolved on create)


def _identity(value: str, where: Where) -> dict[str, str] | None:
    return ref(where.public_url, value or None)


SECRETS = Kind(
    collection="vault_secrets", prefix="secret", list_key="secrets", title="Secret",
    describe="Secrets kept in vaults: the value is stored sealed and never returned.",
    unique=(("vault_id", "name"),), unique_msg="the vault already has a secret named '{name}'",
    unique_code=413,
    fields=(
        Field("name", str, "the secret's name (letters, digits, '_', '-', '.')",
              create="required", update=True, check=_name),
        Field("value", str, "the secret; write-only (sealed at rest, never returned)",
              create="required", update=True, response=False, check=_value),
        *standard(),
        Field("vault_id", str, "the vault holding it", response=False, default="",
              link=Link(("vaults",), "restrict", render_as="vault"), refs=_vault_ref),
        Field("vault_name", str, "the vault's name (in a create: instead of vault_id)",
              default=""),
        Field("updated_at", str, "when it was last changed", create="no", default=""),
        Field("created_by", str, "who made it", create="no", default="", out_type=Ref | None,
              present=_identity),
        Field("last_updated_by", str, "who changed it last", create="no", default="",
              out_type=Ref | None, present=_identity),
    ),
    check=_one_vault, derive=_seal, resolve=_vault, refresh=_vault_names,
)

KINDS = (VAULTS, SECRETS)
