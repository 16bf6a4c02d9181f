"""The generic handlers every kind gets from its declaration: create, get, list, update,
delete. Handlers validate, call the repository inside one transaction, and render."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from edgeway import catalog, ids
from edgeway.api import guards, hostports, present, validate
from edgeway.api.http import (
    body_bytes,
    create_body,
    decode,
    json_response,
    no_content,
    without_echoes,
)
from edgeway.api.platform import Caller
from edgeway.api.render import render
from edgeway.catalog.model import Context, Kind
from edgeway.catalog.runtime import CLOUD_CHANGED
from edgeway.catalog.shapes import shapes
from edgeway.errors import Conflict, NotFound
from edgeway.events.changes import ChangeLog, actor
from edgeway.platform import Platform
from edgeway.store.db import Tx, UniqueViolation
from edgeway.store.fetch import Fetcher
from edgeway.store.repo import Repo


def now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def context(platform: Platform, caller: Caller) -> Context:
    return Context(platform.settings, now(), caller.owner_id, caller.is_admin,
                   platform.sealer)


def writing(tx: Tx, platform: Platform, caller: Caller) -> Repo:
    """The repository of a write transaction: its changes write their events to the outbox
    in the same transaction (``events/changes.py``)."""
    return Repo(tx, ChangeLog(platform.settings.public_url, render,
                              actor(caller.key_id, caller.owner_id)))


def _codes(kind: Kind) -> dict[str, int]:
    return {f.name: f.code for f in kind.fields}


def _flags(kind: Kind, given: dict[str, Any]) -> dict[str, Any]:
    """Take the request's own flags (``force``) out of the members to store."""
    return {f.name: given.pop(f.name) for f in kind.fields if f.transient and f.name in given}


def _client(request: Request) -> str | None:
    return request.client.host if request.client else None


def _unique_error(kind: Kind, doc: dict[str, Any]) -> Conflict:
    return Conflict(kind.unique_msg.format(**doc), kind.unique_code)


def _path_members(request: Request, kind: Kind) -> dict[str, str]:
    """Members a nested kind takes from its URL (``edge_id`` of a route)."""
    return {k: v for k, v in request.path_params.items() if k != "id"}


async def _parents_exist(repo: Repo, kind: Kind, members: dict[str, str]) -> None:
    for name, value in members.items():
        link = kind.field(name).link
        assert link is not None
        await validate.found(repo, catalog.BY_COLLECTION[link.kinds[0]], value)


async def load(repo: Repo, request: Request, kind: Kind) -> tuple[str, dict[str, Any]]:
    """The resource the URL names; a nested one must sit under the parent the URL names."""
    id_ = validate.id_in_path(kind, request.path_params["id"])
    doc = await repo.get(kind, id_)
    path = _path_members(request, kind)
    if doc is None or any(doc.get(k) != v for k, v in path.items()):
        where = "".join(f" under '{v}'" for v in path.values())
        raise NotFound(f"{kind.title} '{id_}' was not found{where}.", kind.not_found_code)
    return id_, doc


async def create(request: Request, platform: Platform, caller: Caller, kind: Kind) -> Response:
    body = decode(without_echoes(await create_body(request), _path_members(request, kind)),
                  shapes(kind).create, _codes(kind))
    ctx = context(platform, caller)
    given = validate.members(kind, body, ctx, update=False)
    flags = _flags(kind, given)
    given.update(_path_members(request, kind))
    if kind.check:
        kind.check(given, ctx)
    doc = {f.name: f.default_value() for f in kind.fields if not f.transient}
    doc.update(given)
    if kind.derive:
        # in a thread: deriving may generate keys (an RSA 4096 CA key takes ~0.5 s)
        doc.update(await asyncio.to_thread(kind.derive, given, ctx, None))
    doc["created_at"] = ctx.now.strftime("%Y-%m-%dT%H:%M:%SZ")
    id_ = ids.new_id(kind.prefix)
    token = ids.new_token(id_) if kind.secret else None
    for left in range(kind.repick, -1, -1):
        try:
            shown = await _insert(request, platform, caller, kind, ctx, id_, token, dict(doc),
                                  flags.get("force", False), left)
        except _Taken:  # (a create running at the same time took what resolve picked)
            continue
        break
    _changed(platform, kind.collection)
    return json_response(201, shown)


def _changed(platform: Platform, collection: str) -> None:
    platform.changed(collection)
    if collection == "endpoints":  # (through the API: a cloud endpoint)
        platform.changed(CLOUD_CHANGED)


class _Taken(Exception):
    """The unique value ``resolve`` picked was taken meanwhile: pick again."""


async def _insert(request: Request, platform: Platform, caller: Caller, kind: Kind,
                  ctx: Context, id_: str, token: str | None, doc: dict[str, Any], force: bool,
                  repicks: int) -> dict[str, Any]:
    """One transaction of a create; the resource as shown. ``_Taken`` while ``repicks`` are
    left and a unique key refuses the insert (PostgreSQL runs creates side by side: two can
    pick the same free value)."""
    async with platform.db.write() as tx:
        repo = writing(tx, platform, caller)
        await _parents_exist(repo, kind, _path_members(request, kind))
        await guards.before(repo, caller, kind, None, doc)
        links = await validate.links(repo, kind, doc, None)
        if kind.verify:
            await kind.verify(doc, ctx, Fetcher(repo), None)
        if kind.resolve:
            doc.update(await kind.resolve(doc, ctx, Fetcher(repo)))
            links = await validate.links(repo, kind, doc, None)  # (it may fill references)
        try:
            await repo.insert(kind, id_, doc, ids.token_hash(token) if token else None)
        except UniqueViolation:
            if repicks:
                raise _Taken from None
            err = _unique_error(kind, doc)
            if kind.repick:
                err.msg += (f"; creates running at the same time took what was picked "
                            f"{kind.repick + 1} times in a row: try again")
            raise err from None
        await repo.set_links(kind, id_, links + await hostports.bind(repo, kind, id_, doc,
                                                                 ctx.settings))
        await guards.after(repo, caller, kind, _client(request), force)
        return await present.one(repo, kind, id_, doc, platform.settings.public_url, token,
                                 platform.settings.https_port)


async def get(request: Request, platform: Platform, caller: Caller, kind: Kind) -> Response:
    await body_bytes(request, False)
    repo = Repo(platform.db.reader())
    id_, doc = await load(repo, request, kind)
    return json_response(200, await present.one(repo, kind, id_, doc,
                                                platform.settings.public_url,
                                                https_port=platform.settings.https_port))


async def apply(repo: Repo, kind: Kind, id_: str, old: dict[str, Any],
                given: dict[str, Any], ctx: Context) -> dict[str, Any]:
    """Write ``given`` over the stored ``old``: rules, derived members, references, claims."""
    doc = {**old, **given}
    if kind.check:
        kind.check(doc, ctx)
    if kind.derive:
        doc.update(await asyncio.to_thread(kind.derive, doc, ctx, old))
    links = await validate.links(repo, kind, doc, old, id_)
    if kind.verify:
        await kind.verify(doc, ctx, Fetcher(repo), old)
    try:
        await repo.replace(kind, id_, doc)
    except UniqueViolation:
        raise _unique_error(kind, doc) from None
    await repo.set_links(kind, id_, links + await hostports.bind(repo, kind, id_, doc,
                                                                 ctx.settings))
    return doc


async def update(request: Request, platform: Platform, caller: Caller, kind: Kind) -> Response:
    validate.id_in_path(kind, request.path_params["id"])
    body = decode(without_echoes(await body_bytes(request, True), {
        "id": request.path_params["id"], **_path_members(request, kind)}),
                  shapes(kind).update, _codes(kind))
    ctx = context(platform, caller)
    given = validate.members(kind, body, ctx, update=True)
    flags = _flags(kind, given)
    async with platform.db.write() as tx:
        repo = writing(tx, platform, caller)
        id_, old = await load(repo, request, kind)
        await guards.before(repo, caller, kind, {"id": id_, **old}, {"id": id_, **old, **given})
        doc = await apply(repo, kind, id_, old, given, ctx)
        await guards.after(repo, caller, kind, _client(request), flags.get("force", False))
        shown = await present.one(repo, kind, id_, doc, platform.settings.public_url,
                                  https_port=platform.settings.https_port)
    _changed(platform, kind.collection)
    return json_response(200, shown)


async def remove(repo: Repo, kind: Kind, id_: str, seen: dict[str, Kind]) -> None:
    """Delete one resource, honouring each referring member's ``on_delete``; ``seen`` collects
    everything deleted."""
    seen[id_] = kind
    for src_kind_name, src_id, member in await repo.links_to(id_):
        src_kind = catalog.BY_COLLECTION[src_kind_name]
        link = src_kind.field(member).link
        assert link is not None
        if link.on_delete == "restrict":
            raise Conflict(f"{kind.title} '{id_}' is still referenced by {src_kind.title} "
                           f"'{src_id}' ({member}); remove that reference first.", 446)
        if link.on_delete == "cascade" and src_id not in seen:
            await remove(repo, src_kind, src_id, seen)
    await repo.delete(kind, id_)


async def delete(request: Request, platform: Platform, caller: Caller, kind: Kind) -> Response:
    await body_bytes(request, False)
    async with platform.db.write() as tx:
        repo = writing(tx, platform, caller)
        id_, old = await load(repo, request, kind)
        if kind.collection == "certificate_authorities" \
                and id_ in platform.settings.agent_client_cas:
            raise Conflict(f"{kind.title} '{id_}' is the server's agent client certificate "
                           "authority (--agent-client-cas): agents' certificates are checked "
                           "against it; restart the server without it first.", 446)
        if id_ == platform.settings.ssh_host_ca:
            raise Conflict(f"{kind.title} '{id_}' signs the SSH gateway's host certificate "
                           "(--ssh-host-ca); restart the server without it first.", 446)
        await guards.before(repo, caller, kind, {"id": id_, **old}, None)
        deleted: dict[str, Kind] = {}
        await remove(repo, kind, id_, deleted)
        await guards.after(repo, caller, kind, _client(request), False)
    for gone in {k.collection for k in deleted.values()}:
        _changed(platform, gone)
    return no_content()
