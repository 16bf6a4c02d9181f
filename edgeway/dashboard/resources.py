"""One page per listed kind (``nav``), all from the catalog: the list as the API pages it
(newest first, ``before_id``, the CEL ``filter`` box), one resource as the API shows it, the
create form, and delete (revoke, for keys and authtokens).

Every read and write is the kind's own operation, called as the signed-in key
(``web.Ctx.call``); an error comes back as the API words it, with its ``ERR_EDGEWAY_`` code,
next to the input its member names (or above the form). A created key or authtoken is shown
on the answer to the create itself, once: it is in no URL and no later page.
"""

from __future__ import annotations

import types
from typing import Any, Literal, Union, get_args, get_origin
from urllib.parse import parse_qsl, urlencode, urlsplit

from starlette.responses import Response

from edgeway import ids
from edgeway.catalog.model import Kind
from edgeway.dashboard import forms
from edgeway.dashboard.nav import BY_SLUG, Entry
from edgeway.dashboard.web import PREFIX, Ctx, Handler, Refusal, api_refusal, redirect

PAGE = 50
COLUMNS = 4  # members shown besides id and created_at (a list must fit 390 pixels)
SIMPLE = (str, bool, int, float)
QUIET = ("metadata", "token", "description")  # (the description: last)


def entry_of(ctx: Ctx) -> Entry:
    entry = BY_SLUG.get(ctx.params["slug"])
    if entry is None:
        raise Refusal(404, "Not found", f"The dashboard has no page at {ctx.request.url.path}.")
    return entry


def _simple(typ: Any) -> bool:
    if get_origin(typ) in (Union, types.UnionType):
        return all(_simple(a) for a in get_args(typ))
    return typ in SIMPLE or typ is type(None) or get_origin(typ) is Literal \
        or (get_origin(typ) is list and get_args(typ) == (str,))


def columns(kind: Kind) -> list[str]:
    """The members a list shows: id, up to ``COLUMNS`` short ones (the description last),
    created_at. A member holding one id shows as its Ref (``ip_policy``)."""
    picked = []
    for f in kind.fields:
        if f.name in QUIET or forms.long_text(f.name) or not _simple(f.type):
            continue
        if f.link is None and f.response:
            picked.append(f.name)
        elif f.link is not None and f.link.render_as:
            picked.append(f.link.render_as)
    if any(f.name == "description" for f in kind.fields):
        picked = [*picked[:COLUMNS - 1], "description"]
    return ["id", *picked[:COLUMNS], "created_at"]


def cell(value: Any) -> str:
    if value is None or value == "" or value == []:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict) and "id" in value:
        return str(value["id"])
    if isinstance(value, list):
        return ", ".join(cell(v) for v in value)[:120]
    text = str(value)
    return text if len(text) <= 80 else text[:79] + "…"


def _query(ctx: Ctx) -> list[tuple[str, str]]:
    params = ctx.request.query_params
    out = [(k, params[k].strip()) for k in ("before_id", "filter") if params.get(k, "").strip()]
    return [*out, ("limit", params.get("limit", "") or str(PAGE))]


def _next_link(slug: str, uri: str | None) -> str:
    if not uri:
        return ""
    kept = [(k, v) for k, v in parse_qsl(urlsplit(uri).query) if k in
            ("before_id", "limit", "filter")]
    return f"{PREFIX}/{slug}?{urlencode(kept)}"


async def _list_page(ctx: Ctx, entry: Entry, status: int = 200, **extra: Any) -> Response:
    kind = entry.kind
    answer = await ctx.call("GET", kind.url, _query(ctx))
    items: list[dict[str, Any]] = []
    filter_error, list_error, nxt = "", "", ""
    if answer.ok:
        items = answer.body[kind.list_key]
        nxt = _next_link(entry.slug, answer.body.get("next_page_uri"))
    else:
        msg, code, member = answer.error()
        if member == "filter":
            filter_error = f"{msg} ({code})"
        else:
            list_error, status = f"{msg} ({code})" if code else msg, answer.status
    cols = columns(kind)
    rows = [{"id": item["id"], "cells": [cell(item.get(c)) for c in cols]} for item in items]
    can_create = "create" in kind.ops and ctx.can("POST", kind.url)
    params = ctx.request.query_params
    created = params.get("created", "")
    deleted = params.get("deleted", "")
    notice = (f"Created {created}." if ids.split_id(created) else
              f"Deleted {deleted}." if ids.split_id(deleted) else "")
    return ctx.page(
        "list.html", status, entry=entry, columns=cols, rows=rows, next_link=nxt,
        paged="before_id" in params, filter=params.get("filter", ""), filter_error=filter_error,
        list_error=list_error, widgets=forms.create_widgets(kind) if can_create else [],
        can_delete="delete" in kind.ops and ctx.can("DELETE", f"{kind.url}/x"),
        notice=notice, **{"values": {}, "errors": {}, "form_error": "", "shown": None,
                          **extra})


async def listing(ctx: Ctx) -> Response:
    return await _list_page(ctx, entry_of(ctx))


async def create(ctx: Ctx) -> Response:
    entry = entry_of(ctx)
    kind = entry.kind
    if "create" not in kind.ops:
        raise Refusal(405, "Method not allowed", f"{entry.label} cannot be created.")
    widgets = forms.create_widgets(kind)
    body, errors = forms.body_of(ctx.form, widgets)
    if errors:
        return await _list_page(ctx, entry, 400, values=ctx.form, errors=errors)
    answer = await ctx.call("POST", kind.url, body=body)
    if answer.ok:
        if kind.secret:  # the token, this once
            return await _list_page(ctx, entry, 201, shown=answer.body)
        return redirect(f"{PREFIX}/{entry.slug}?created={answer.body['id']}")
    msg, code, member = answer.error()
    text = f"{msg} ({code})" if code else msg
    field = forms.input_of(member)
    if field and field in {w.name for w in widgets}:
        return await _list_page(ctx, entry, answer.status, values=ctx.form,
                                errors={field: text})
    return await _list_page(ctx, entry, answer.status, values=ctx.form, form_error=text)


async def delete(ctx: Ctx) -> Response:
    entry = entry_of(ctx)
    id_ = ctx.params["id"]
    answer = await ctx.call("DELETE", f"{entry.kind.url}/{id_}")
    if not answer.ok:
        raise api_refusal(answer)
    return redirect(f"{PREFIX}/{entry.slug}?deleted={id_}")


def routes() -> list[tuple[str, str, Handler, bool]]:
    return [("/{slug}", "GET", listing, False), ("/{slug}", "POST", create, False),
            ("/{slug}/{id}/delete", "POST", delete, False)]
