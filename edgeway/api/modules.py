"""Module operations: ``PUT`` replaces, ``GET`` returns and ``DELETE`` removes one module of an
edge or route, at ``<edge or route URL>/<module name>``. An empty body, ``{}`` or ``null`` is
an empty module."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from edgeway import catalog
from edgeway.api import crud, present, validate
from edgeway.api.http import body_bytes, decode, json_response, no_content
from edgeway.api.platform import Caller
from edgeway.catalog.model import Kind
from edgeway.catalog.modules import REGISTRY, On
from edgeway.errors import NotFound
from edgeway.platform import Platform
from edgeway.store.repo import Repo

ATTACHED: dict[str, On] = {"edges/https": "https_edge", "edges/https/routes": "route",
                           "edges/tcp": "tcp_edge", "edges/tls": "tls_edge"}
Handler = Callable[[Request, Platform, Caller], Awaitable[Response]]


def _unset(kind: Kind, name: str, id_: str) -> NotFound:
    return NotFound(f"{kind.title} '{id_}' has no {name} module.", kind.not_found_code)


async def _shown(repo: Repo, platform: Platform, kind: Kind, name: str, id_: str,
                 doc: dict[str, Any]) -> Any:
    return (await present.one(repo, kind, id_, doc, platform.settings.public_url,
                              https_port=platform.settings.https_port))[name]


async def put(request: Request, platform: Platform, caller: Caller, kind: Kind,
              name: str) -> Response:
    raw = await body_bytes(request, True)
    shape = REGISTRY[name].request_for(ATTACHED[kind.collection])
    body = decode(b"" if raw.strip() == b"null" else raw, shape, {})
    ctx = crud.context(platform, caller)
    given = validate.members(kind, {name: body}, ctx, update=False)
    async with platform.db.write() as tx:
        repo = Repo(tx)
        id_, old = await crud.load(repo, request, kind)
        doc = await crud.apply(repo, kind, id_, old, given, ctx)
        shown = await _shown(repo, platform, kind, name, id_, doc)
    platform.changed(kind.collection)
    return json_response(200, shown)


async def get(request: Request, platform: Platform, _caller: Caller, kind: Kind,
              name: str) -> Response:
    await body_bytes(request, False)
    repo = Repo(platform.db.reader())
    id_, doc = await crud.load(repo, request, kind)
    if doc.get(name) is None:
        raise _unset(kind, name, id_)
    return json_response(200, await _shown(repo, platform, kind, name, id_, doc))


async def delete(request: Request, platform: Platform, caller: Caller, kind: Kind,
                 name: str) -> Response:
    await body_bytes(request, False)
    ctx = crud.context(platform, caller)
    async with platform.db.write() as tx:
        repo = Repo(tx)
        id_, old = await crud.load(repo, request, kind)
        if old.get(name) is None:
            raise _unset(kind, name, id_)
        await crud.apply(repo, kind, id_, old, {name: None}, ctx)
    platform.changed(kind.collection)
    return no_content()


def routes() -> list[tuple[str, str, Handler]]:
    out: list[tuple[str, str, Handler]] = []
    for collection in ATTACHED:
        kind = catalog.BY_COLLECTION[collection]
        for f in kind.fields:
            if f.name not in REGISTRY:
                continue
            path = f"{kind.url}/{{id}}/{f.name}"
            for method, fn in (("PUT", put), ("GET", get), ("DELETE", delete)):
                out.append((path, method, functools.partial(fn, kind=kind, name=f.name)))
    return out
