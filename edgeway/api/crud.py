"""The generic handlers every kind gets from its declaration: create, get, list, update,
delete. Handlers validate, call the repository inside one transaction, and render."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any
from urllib.parse import parse_qsl

from starlette.requests import Request
from starlette.responses import Response

from edgeway import catalog, ids
from edgeway.api import validate
from edgeway.api.http import body_bytes, decode, json_response, no_content
from edgeway.api.platform import Caller, Platform
from edgeway.api.render import render
from edgeway.catalog.model import Context, Kind
from edgeway.catalog.shapes import shapes
from edgeway.errors import ApiError, Conflict, Invalid, NotFound
from edgeway.store.db import UniqueViolation
from edgeway.store.repo import Repo

MAX_PAGE = 100


def now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


def context(platform: Platform, caller: Caller) -> Context:
    return Context(platform.settings, now(), caller.owner_id, caller.is_admin,
                   platform.sealer)


def _codes(kind: Kind) -> dict[str, int]:
    return {f.name: f.code for f in kind.fields}


def _unique_error(kind: Kind, doc: dict[str, Any]) -> Conflict:
    return Conflict(kind.unique_msg.format(**doc), kind.unique_code)


def _not_found(kind: Kind, id_: str) -> NotFound:
    return NotFound(f"{kind.title} '{id_}' was not found.", kind.not_found_code)


async def create(request: Request, platform: Platform, caller: Caller, kind: Kind) -> Response:
    body = decode(await body_bytes(request, True), shapes(kind).create, _codes(kind))
    ctx = context(platform, caller)
    given = validate.members(kind, body, ctx, update=False)
    if kind.check:
        kind.check(given, ctx)
    doc = {f.name: f.default_value() for f in kind.fields}
    doc.update(given)
    if kind.derive:
        doc.update(kind.derive(given, ctx, None))
    doc["created_at"] = ctx.now.strftime("%Y-%m-%dT%H:%M:%SZ")
    id_ = ids.new_id(kind.prefix)
    token = ids.new_token(id_) if kind.secret else None
    async with platform.db.write() as tx:
        repo = Repo(tx)
        links = await validate.links(repo, kind, doc, None)
        try:
            await repo.insert(kind, id_, doc, ids.token_hash(token) if token else None)
        except UniqueViolation:
            raise _unique_error(kind, doc) from None
        await repo.set_links(kind, id_, links)
    platform.changed(kind.collection)
    return json_response(201, render(kind, id_, doc, platform.settings.public_url, token))


async def get(request: Request, platform: Platform, caller: Caller, kind: Kind) -> Response:
    await body_bytes(request, False)
    id_ = validate.id_in_path(kind, request.path_params["id"])
    doc = await Repo(platform.db.reader()).get(kind, id_)
    if doc is None:
        raise _not_found(kind, id_)
    return json_response(200, render(kind, id_, doc, platform.settings.public_url))


def page_params(request: Request, kind: Kind) -> tuple[str | None, int]:
    seen: dict[str, str] = {}
    for key, value in parse_qsl(request.url.query, keep_blank_values=True):
        if key not in ("before_id", "limit"):
            raise ApiError(f"Unknown query parameter '{key}'; supported: before_id, limit.",
                           231)
        if key in seen:
            raise ApiError(f"The query parameter '{key}' was given more than once.", 232)
        seen[key] = value
    limit_text = seen.get("limit", str(MAX_PAGE))
    if not (limit_text.isascii() and limit_text.isdigit()):
        raise Invalid("limit", f"'{limit_text}' is not a whole number", 244)
    limit = int(limit_text)
    if not 1 <= limit <= MAX_PAGE:
        raise Invalid("limit", f"page size limit must be between 1 and {MAX_PAGE}", 233)
    before = seen.get("before_id")
    if before is not None:
        validate.id_in_path(kind, before)
    return before, limit


async def list_(request: Request, platform: Platform, caller: Caller, kind: Kind) -> Response:
    await body_bytes(request, False)
    before, limit = page_params(request, kind)
    items = await Repo(platform.db.reader()).page(kind, before, limit + 1)
    base = platform.settings.public_url
    uri = f"{base}/{kind.collection}"
    more = len(items) > limit
    items = items[:limit]
    nxt = f"{uri}?before_id={items[-1].id}&limit={limit}" if more else None
    return json_response(200, {
        kind.list_key: [render(kind, it.id, it.doc, base) for it in items],
        "uri": uri, "next_page_uri": nxt})


async def update(request: Request, platform: Platform, caller: Caller, kind: Kind) -> Response:
    id_ = validate.id_in_path(kind, request.path_params["id"])
    body = decode(await body_bytes(request, True), shapes(kind).update, _codes(kind))
    ctx = context(platform, caller)
    given = validate.members(kind, body, ctx, update=True)
    async with platform.db.write() as tx:
        repo = Repo(tx)
        old = await repo.get(kind, id_)
        if old is None:
            raise _not_found(kind, id_)
        doc = {**old, **given}
        if kind.check:
            kind.check(doc, ctx)
        if kind.derive:
            doc.update(kind.derive(doc, ctx, old))
        links = await validate.links(repo, kind, doc, old)
        try:
            await repo.replace(kind, id_, doc)
        except UniqueViolation:
            raise _unique_error(kind, doc) from None
        if any(doc.get(f.name) != old.get(f.name) for f in kind.links):
            await repo.set_links(kind, id_, links)
    platform.changed(kind.collection)
    return json_response(200, render(kind, id_, doc, platform.settings.public_url))


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
    id_ = validate.id_in_path(kind, request.path_params["id"])
    async with platform.db.write() as tx:
        repo = Repo(tx)
        if await repo.get(kind, id_) is None:
            raise _not_found(kind, id_)
        deleted: dict[str, Kind] = {}
        await remove(repo, kind, id_, deleted)
    for gone in {k.collection for k in deleted.values()}:
        platform.changed(gone)
    return no_content()
