"""The declaration language of the catalog: what a resource kind and its members are.

A ``Kind`` is declared once; the API routes, request and response shapes, tables, OpenAPI
document and the generic CRUD tests are all derived from it. Nothing here does I/O: checks are
pure functions of the submitted value and a ``Context`` of platform settings.

A ``Field`` says how one member behaves on create, on update and in responses:

* ``create`` — ``required``, ``optional`` or ``no`` (server-derived or response-only);
* ``update`` — accepted by PATCH; ``immutable`` members are accepted by the shape only to be
  refused with a clear message;
* ``link`` — the member holds ids of other resources; the store records the link, the API checks
  the target exists and renders ``Ref`` objects under ``link.render_as``;
* ``check`` — normalises and validates the value, raising ``errors.Invalid``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, Protocol

import msgspec

from edgeway.pki.seal import Sealer
from edgeway.settings import Settings

Presence = Literal["required", "optional", "no"]
OnDelete = Literal["restrict", "cascade", "keep"]


@dataclass(frozen=True)
class Context:
    settings: Settings
    now: datetime
    caller_id: str
    caller_is_admin: bool
    sealer: Sealer


Check = Callable[[Any, Context], Any]
# (new document, context, stored document or None on create) -> members to set
Derive = Callable[[dict[str, Any], Context, dict[str, Any] | None], dict[str, Any]]
class Fetch(Protocol):
    """Reads of the store for ``Resolve``: one document by id, or every one of a (small)
    kind."""

    async def __call__(self, collection: str, id_: str) -> dict[str, Any] | None: ...

    async def all(self, collection: str) -> list[tuple[str, dict[str, Any]]]: ...


# (new document, context, fetch) -> members to set; runs on create only, inside the write
# transaction after the reference checks, for members computed from other stored resources
# (e.g. a certificate signed with its CA's sealed key)
Resolve = Callable[[dict[str, Any], Context, Fetch], Awaitable[dict[str, Any]]]
# (new document, context, fetch, stored document or None on create) -> None; runs on create
# and update inside the write transaction after the reference checks, for rules that read
# other stored resources (e.g. an uploaded certificate must cover the domain)
Verify = Callable[[dict[str, Any], Context, Fetch, dict[str, Any] | None], Awaitable[None]]
# (stored documents, fetch) -> the same documents as they are rendered now: members copied
# from other resources read again (a secret's ``vault_name``: its vault may have been renamed)
Refresh = Callable[[list[dict[str, Any]], Fetch], Awaitable[list[dict[str, Any]]]]


@dataclass(frozen=True)
class Where:
    """Where a response is rendered: the public base URL and the resource's own id and uri;
    for an HTTPS edge route, ``site``: the base URL of its own host (``https://host[:port]``,
    "" while its edge has no hostport)."""

    public_url: str
    id: str
    uri: str
    site: str = ""


def uri_of(public_url: str, id_: str) -> str:
    """The absolute URI of a top-level resource, found by its id's prefix."""
    from edgeway.catalog import BY_PREFIX

    kind = BY_PREFIX.get(id_.split("_", 1)[0])
    return f"{public_url}{kind.url if kind else '/resources'}/{id_}"


def ref(public_url: str, id_: str | None) -> dict[str, str] | None:
    return None if id_ is None else {"id": id_, "uri": uri_of(public_url, id_)}


@dataclass(frozen=True)
class Child:
    """Resources of ``collection`` whose ``via`` member names this one, rendered under
    ``member`` (an HTTPS edge's ``routes``)."""

    member: str
    collection: str
    via: str


@dataclass(frozen=True)
class Link:
    """Ids in this member point at resources of ``kinds``.

    ``on_delete`` says what deleting the target does: ``restrict`` refuses while linked,
    ``cascade`` deletes this resource too, ``keep`` leaves a dangling reference (rendered as a
    Ref still, and treated by enforcement as an empty resource).
    """

    kinds: tuple[str, ...]
    on_delete: OnDelete
    render_as: str | None = None
    code: int = 380
    # refuse links that would let a resource reach itself through links of this member
    acyclic: bool = False


@dataclass(frozen=True)
class Field:
    name: str
    type: Any
    doc: str = ""
    create: Presence = "optional"
    update: bool = False
    immutable: bool = False
    default: Any = None
    link: Link | None = None
    check: Check | None = None
    empty_is_unset: bool = False
    response: bool = True
    out_type: Any = None
    max_bytes: int | None = None
    # (stored value, where) -> response value, for members rendered with server data
    present: Callable[[Any, Where], Any] | None = None
    code: int = 215
    # PATCH shape of the member when it differs (e.g. also accepting "" for "unchanged")
    update_type: Any = None
    # (stored value) -> [(member path, id)] of the ids a link member holds, when it is not
    # simply an id, a list of ids or a map keyed by ids
    refs: Callable[[Any], list[tuple[str, str]]] | None = None
    # on PATCH, null leaves the member as it was (modules are removed only by their DELETE)
    null_is_unset: bool = False
    # every value is claimed platform-wide under this namespace (e.g. edge hostports)
    claim: str | None = None
    # a flag of the request itself (e.g. ``force``): never stored nor rendered
    transient: bool = False
    # JSON Schema the member's check enforces, for the OpenAPI document (see jsonschema.py;
    # id references get their pattern from ``link``)
    schema: dict[str, Any] | None = None

    def default_value(self) -> Any:
        d = self.default
        return d() if callable(d) else d


@dataclass(frozen=True)
class Kind:
    collection: str
    prefix: str
    list_key: str
    title: str
    fields: tuple[Field, ...]
    ops: frozenset[str] = frozenset({"create", "get", "list", "update", "delete"})
    unique: tuple[tuple[str, ...], ...] = ()
    unique_msg: str = "already exists"
    unique_code: int = 413
    check: Callable[[dict[str, Any], Context], None] | None = None
    derive: Derive | None = None
    resolve: Resolve | None = None
    verify: Verify | None = None
    refresh: Refresh | None = None
    # times a create runs again (``resolve`` picking again) when a unique key refuses what
    # ``resolve`` picked: a create running at the same time took it (PostgreSQL)
    repick: int = 0
    secret: bool = False
    not_found_code: int | None = None
    describe: str = ""
    routed: bool = True
    # URL of the collection when it is nested, e.g. "/edges/https/{edge_id}/routes": each
    # {member} comes from the path and is stored on the resource
    path: str | None = None
    children: tuple[Child, ...] = ()
    # why a stored item may not be changed or deleted (an agent's endpoint), or "": the API
    # refuses such a change (400 7130) and the dashboard offers none
    fixed: Callable[[dict[str, Any]], str] | None = None

    @property
    def table(self) -> str:
        return self.collection.replace("/", "_")

    def field(self, name: str) -> Field:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(name)

    @property
    def url(self) -> str:
        return self.path or f"/{self.collection}"

    def uri(self, public_url: str, id_: str, doc: dict[str, Any]) -> str:
        return public_url + self.url.format(**doc) + "/" + id_

    @property
    def links(self) -> tuple[Field, ...]:
        return tuple(f for f in self.fields if f.link is not None)


class Ref(msgspec.Struct, kw_only=True):
    id: str
    uri: str


def standard(description: bool = True) -> tuple[Field, ...]:
    """The ``description`` and ``metadata`` members most kinds carry."""
    if not description:
        return ()
    return (
        Field("description", str, "human-readable description, at most 255 bytes", update=True,
              default="", max_bytes=255),
        Field("metadata", str, "arbitrary machine-readable data, at most 4096 bytes",
              update=True, default="", max_bytes=4096),
    )
