"""Stored documents to response objects: every documented member, Refs for links."""

from __future__ import annotations

from typing import Any

from edgeway.catalog.model import Kind, Where, ref


def render(kind: Kind, id_: str, doc: dict[str, Any], public_url: str,
           token: str | None = None, site: str = "") -> dict[str, Any]:
    where = Where(public_url, id_, kind.uri(public_url, id_, doc), site)
    out: dict[str, Any] = {"id": id_, "uri": where.uri, "created_at": doc.get("created_at", "")}
    for f in kind.fields:
        value = doc[f.name] if f.name in doc else f.default_value()
        if f.link is not None and f.link.render_as:
            if isinstance(value, list):
                out[f.link.render_as] = [ref(public_url, v) for v in value]
            else:
                out[f.link.render_as] = ref(public_url, value)
        elif f.response:
            out[f.name] = f.present(value, where) if f.present and value is not None else value
    if kind.secret:
        out["token"] = token
    return out
