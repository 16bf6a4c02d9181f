"""Request and response shapes derived from a kind's fields, as msgspec Structs.

``create`` and ``update`` decode request bodies strictly (unknown members refused; absent
members are ``UNSET``). ``response`` and ``page`` exist to describe responses in OpenAPI; the
API renders responses from stored documents (``api.render``), checked against these shapes by
the tests.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Annotated, Any

import msgspec

from edgeway.catalog.model import Field, Kind, Ref


@dataclass(frozen=True)
class Shapes:
    create: type[msgspec.Struct]
    update: type[msgspec.Struct]
    response: type[msgspec.Struct]
    page: type[msgspec.Struct]


def _annotated(f: Field, typ: Any) -> Any:
    meta: dict[str, Any] = {}
    if f.doc:
        meta["description"] = f.doc
    if f.max_bytes:
        meta["max_length"] = f.max_bytes
    return Annotated[typ, msgspec.Meta(**meta)] if meta else typ


def _optional(f: Field, typ: Any = None) -> tuple[str, Any, Any]:
    return (f.name, _annotated(f, typ or f.type) | msgspec.UnsetType, msgspec.UNSET)


def _out_type(f: Field) -> tuple[str, Any]:
    if f.link is not None and f.link.render_as:
        many = f.type is not str
        return f.link.render_as, list[Ref] if many else Ref
    typ = f.out_type if f.out_type is not None else f.type
    if f.default is None and f.create != "required" and typ is not None:
        typ = typ | None
    return f.name, typ


def _struct(name: str, fields: list[Any]) -> type[msgspec.Struct]:
    return msgspec.defstruct(name, fields, kw_only=True, forbid_unknown_fields=True)


@cache
def shapes(kind: Kind) -> Shapes:
    create: list[Any] = []
    for f in kind.fields:
        if f.create == "required":
            create.append((f.name, _annotated(f, f.type)))
        elif f.create == "optional":
            create.append(_optional(f))
    update = [_optional(f, f.update_type) for f in kind.fields if f.update or f.immutable]
    out: list[Any] = [("id", str), ("uri", str), ("created_at", str)]
    for f in kind.fields:
        if f.response or (f.link and f.link.render_as):
            name, typ = _out_type(f)
            out.append((name, _annotated(f, typ)))
    response = msgspec.defstruct(kind.title, out, kw_only=True)
    page = msgspec.defstruct(f"{kind.title}List", [
        (kind.list_key, list[response]),  # type: ignore[valid-type]
        ("uri", str), ("next_page_uri", str | None)], kw_only=True)
    return Shapes(_struct(f"{kind.title}Create", create),
                  _struct(f"{kind.title}Update", update), response, page)
