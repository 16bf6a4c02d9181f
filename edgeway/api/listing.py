"""Lists: paging (``before_id``, ``limit``), the CEL ``filter`` (``edgeway.api.filters``) and
the endpoints' ``id``/``url`` selectors (repeatable; ``ids``/``urls`` as the OpenAPI document
of the reference names them).

Without a filter or selector a page is one query. With one, rows are read newest first in
steps of ``SCAN`` and rendered, until a page of matches is found or the rows run out; the
next page's URI carries the same filter and selectors."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlencode

from starlette.requests import Request
from starlette.responses import Response

from edgeway.api import dialect, present, validate
from edgeway.api.filters import Filter
from edgeway.api.http import body_bytes, json_response
from edgeway.api.platform import Caller
from edgeway.catalog.model import Kind
from edgeway.errors import ApiError, Invalid
from edgeway.platform import Platform
from edgeway.store.repo import Repo

MAX_PAGE = 100
SCAN = 200  # rows read per step while a filter looks for a page of matches
URL_PATTERN = r"^[a-z][a-z0-9+.-]*://[^\x00-\x20/?#]+"  # (the same in Python and ECMA)
SELECTORS = {"endpoints": {"id": "id", "ids": "id", "url": "url", "urls": "url"}}


@dataclass
class Query:
    before: str | None
    limit: int
    filter: Filter | None = None
    select: dict[str, set[str]] = field(default_factory=dict)  # member -> values it may have
    params: list[tuple[str, str]] = field(default_factory=list)  # repeated on the next page

    def picks(self, obj: dict[str, Any]) -> bool:
        return all(obj.get(member) in values for member, values in self.select.items()) \
            and (self.filter is None or self.filter.matches(obj))


# The official JS API client pages with ``beforeId`` (its argument's name, not converted to
# the API's case): in the vendor's dialect it means ``before_id``, or that client would get
# the first page again and again.
VENDOR_ALIASES = {"beforeId": "before_id"}


def query(request: Request, kind: Kind) -> Query:
    selectors = SELECTORS.get(kind.collection, {})
    supported = ["before_id", "limit", "filter", *selectors]
    seen: dict[str, str] = {}
    select: dict[str, set[str]] = {}
    params: list[tuple[str, str]] = []
    for key, value in parse_qsl(request.url.query, keep_blank_values=True):
        if not dialect.current().native:
            key = VENDOR_ALIASES.get(key, key)
        if key not in supported:
            if not dialect.current().native:  # (ignored, as the vendor's API ignores them)
                continue
            raise ApiError(f"Unknown query parameter '{key}'; supported: "
                           f"{', '.join(supported)}.", 231)
        if key in selectors:
            if selectors[key] == "id":
                validate.id_in_path(kind, value)
            elif not re.match(URL_PATTERN, value):
                raise Invalid(key, f"'{value}' is not an endpoint URL (scheme://host[:port])",
                              249)
            select.setdefault(selectors[key], set()).add(value)
            params.append((key, value))
            continue
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
    text = seen.get("filter", "").strip()
    if text:
        params.append(("filter", text))
    return Query(before, limit, Filter(text, kind.title) if text else None, select, params)


async def list_(request: Request, platform: Platform, caller: Caller, kind: Kind) -> Response:
    await body_bytes(request, False)
    q = query(request, kind)
    repo = Repo(platform.db.reader())
    base = platform.settings.public_url
    uri = f"{base}{kind.url}"
    if q.filter is None and not q.select:
        items = await repo.page(kind, q.before, q.limit + 1)
        shown = await present.many(repo, kind, items[:q.limit], base,
                                   https_port=platform.settings.https_port)
        more = len(items) > q.limit
    else:
        shown, more = await _scan(repo, kind, q, base, platform.settings.https_port)
    nxt = None
    if more:
        nxt = f"{uri}?" + urlencode([("before_id", shown[-1]["id"]), ("limit", str(q.limit)),
                                     *q.params])
    return json_response(200, {kind.list_key: shown, "uri": uri, "next_page_uri": nxt})


async def _scan(repo: Repo, kind: Kind, q: Query, base: str, https_port: int
                ) -> tuple[list[dict[str, Any]], bool]:
    """A page of the resources ``q`` picks, and whether more follow."""
    out: list[dict[str, Any]] = []
    cursor = q.before
    while True:
        items = await repo.page(kind, cursor, SCAN)
        for obj in await present.many(repo, kind, items, base, https_port=https_port):
            if q.picks(obj):
                if len(out) == q.limit:
                    return out, True
                out.append(obj)
        if len(items) < SCAN:
            return out, False
        cursor = items[-1].id
