"""Request and response shapes derived from a kind's fields, as msgspec Structs.

``create`` and ``update`` decode request bodies strictly (unknown members refused; absent
members are ``UNSET``). ``response`` and ``page`` exist to describe responses in OpenAPI; the
API renders responses from stored documents (``api.render``), checked against these shapes by
the tests.
"""

from __future__ import annotations

import functools
import operator
from dataclasses import dataclass
from functools import cache
from typing import Annotated, Any, get_args, get_origin

import msgspec

from edgeway.catalog.model import Field, Kind, Ref


@dataclass(frozen=True)
class Shapes:
    create: type[msgspec.Struct]
    update: type[msgspec.Struct]
    response: type[msgspec.Struct]
    page: type[msgspec.Struct]


def _schema(f: Field, typ: Any, collection: str) -> dict[str, Any]:
    """What the OpenAPI document says beyond the type: the member's declared schema, and the
    id pattern of the kinds a reference member may name."""
    from edgeway.catalog.jsonschema import BY_MEMBER, id_pattern, items  # (needs the catalog)

    out = dict(f.schema or BY_MEMBER.get((collection, f.name)) or {})
    if f.link is not None and f.refs is None and typ is not None:
        pattern = id_pattern(f.link.kinds)
        if "list" in str(typ):
            out = {**items({"pattern": pattern}), **out}
        elif "dict" not in str(typ):  # ("" leaves an optional one unset)
            out.setdefault("pattern", pattern if f.create == "required" else
                           f"^$|{pattern}")
    return out


def _annotated(f: Field, typ: Any, collection: str = "") -> Any:
    """``typ`` with the member's description, and for requests (``collection`` given) the
    JSON Schema of its rules."""
    meta: dict[str, Any] = {}
    if f.doc:
        meta["description"] = f.doc
    if f.max_bytes:
        meta["max_length"] = f.max_bytes
    if collection and (extra := _schema(f, typ, collection)):
        item = extra.pop("items", None)
        if item is not None:  # (msgspec keeps its own "items": annotate the item type)
            typ = _with_items(typ, item)
        value = extra.pop("additionalProperties", None)
        if value is not None:  # (the same for a mapping's values)
            typ = _with_values(typ, value)
        if extra:
            meta["extra_json_schema"] = extra
    return Annotated[typ, msgspec.Meta(**meta)] if meta else typ


def _with_values(typ: Any, value: dict[str, Any]) -> Any:
    """``dict[str, str]`` with the value schema on its values."""
    if get_origin(typ) is dict:
        key, val = get_args(typ)
        return dict[key, Annotated[val, msgspec.Meta(extra_json_schema=value)]]  # type: ignore
    return typ


def _with_items(typ: Any, item: dict[str, Any]) -> Any:
    """``list[str]`` (or ``list[str] | None``) with the item schema on its strings."""
    args = get_args(typ)
    if get_origin(typ) is list:
        return list[Annotated[args[0], msgspec.Meta(extra_json_schema=item)]]  # type: ignore
    if args:  # a union: the list in it
        return functools.reduce(operator.or_, [_with_items(a, item) if get_origin(a) is list
                                               else a for a in args])
    return typ


def _optional(f: Field, collection: str, typ: Any = None) -> tuple[str, Any, Any]:
    return (f.name, _annotated(f, typ or f.type, collection) | msgspec.UnsetType,
            msgspec.UNSET)


def _out_type(f: Field) -> tuple[str, Any]:
    if f.link is not None and f.link.render_as:
        if get_origin(f.type) is list:
            return f.link.render_as, list[Ref]
        return f.link.render_as, Ref if f.type is str else Ref | None
    typ = f.out_type if f.out_type is not None else f.type
    if f.default is None and f.create != "required" and typ is not None:
        typ = typ | None
    return f.name, typ


def _struct(name: str, fields: list[Any]) -> type[msgspec.Struct]:
    return msgspec.defstruct(name, fields, kw_only=True, forbid_unknown_fields=True)


@cache
def response_of(kind: Kind) -> type[msgspec.Struct]:
    """The response shape alone: kinds declare their children's with it, as they load."""
    out: list[Any] = [("id", str), ("uri", str), ("created_at", str)]
    for f in kind.fields:
        if f.response or (f.link and f.link.render_as):
            name, typ = _out_type(f)
            out.append((name, _annotated(f, typ)))
    return msgspec.defstruct(kind.title, out, kw_only=True)


@cache
def shapes(kind: Kind) -> Shapes:
    create: list[Any] = []
    for f in kind.fields:
        if f.create == "required":
            create.append((f.name, _annotated(f, f.type, kind.collection)))
        elif f.create == "optional":
            create.append(_optional(f, kind.collection))
    update = [_optional(f, kind.collection, f.update_type) for f in kind.fields
              if f.update or f.immutable]
    response = response_of(kind)
    page = msgspec.defstruct(f"{kind.title}List", [
        (kind.list_key, list[response]),  # type: ignore[valid-type]
        ("uri", str), ("next_page_uri", str | None)], kw_only=True)
    return Shapes(_struct(f"{kind.title}Create", create),
                  _struct(f"{kind.title}Update", update), response, page)
