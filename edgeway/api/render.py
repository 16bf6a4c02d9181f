"""Stored documents to response objects: every documented member, Refs for links."""

from __future__ import annotations

from typing import Any

from edgeway import catalog
from edgeway.catalog.model import Kind


def uri_of(public_url: str, id_: str) -> str:
    kind = catalog.BY_PREFIX.get(id_.split("_", 1)[0])
    collection = kind.collection if kind else "resources"
    return f"{public_url}/{collection}/{id_}"


def ref(public_url: str, id_: str | None) -> dict[str, str] | None:
    return None if id_ is None else {"id": id_, "uri": uri_of(public_url, id_)}


def render(kind: Kind, id_: str, doc: dict[str, Any], public_url: str,
           token: str | None = None) -> dict[str, Any]:
    uri = f"{public_url}/{kind.collection}/{id_}"
    out: dict[str, Any] = {"id": id_, "uri": uri, "created_at": doc.get("created_at", "")}
    for f in kind.fields:
        value = doc[f.name] if f.name in doc else f.default_value()
        if f.link is not None and f.link.render_as:
            if isinstance(value, list):
                out[f.link.render_as] = [ref(public_url, v) for v in value]
            else:
                out[f.link.render_as] = ref(public_url, value)
        elif f.response:
            out[f.name] = f.present(value, uri) if f.present else value
    if kind.secret:
        out["token"] = token
    return out
