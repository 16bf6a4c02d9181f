"""Event sources: the event types a subscription delivers, each with an optional ``filter``
(a CEL expression an event must make true) and, for traffic events, ``fields`` (the members of
its object to send). Checked when written; ``events/routing.py`` compiles them."""

from __future__ import annotations

from typing import Any

import msgspec

from edgeway.catalog.event_types import EVENT_TYPES, TRAFFIC, is_traffic
from edgeway.catalog.model import Context, Where
from edgeway.celpkg import cel
from edgeway.errors import Invalid


class _Strict(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    pass


class SourceIn(_Strict):
    type: str
    filter: str = ""
    fields: list[str] = msgspec.field(default_factory=list)


class SourceUpdate(_Strict):
    filter: str | msgspec.UnsetType = msgspec.UNSET
    fields: list[str] | msgspec.UnsetType = msgspec.UNSET


class EventSource(msgspec.Struct, kw_only=True):
    type: str
    uri: str
    filter: str
    fields: list[str]


FILTER_LENGTH = 4096
MAX_FIELDS = 64


def source_type(member: str, value: str) -> str:
    if value not in EVENT_TYPES:
        raise Invalid(member, f"'{value}' is not an event type; types look like "
                      "'ip_policy_created.v0' (see the API reference for the list)", 238)
    return value


def filter_names(type_: str) -> frozenset[str]:
    """What a source's filter may name: a traffic event's top-level members, or the resource
    (``obj``) and who changed it (``actor``)."""
    if is_traffic(type_):
        return frozenset(f.split(".", 1)[0] for f in TRAFFIC[type_])
    return frozenset({"obj", "actor"})


def _filter(member: str, type_: str, text: str) -> str:
    if not text:
        return ""
    if len(text) > FILTER_LENGTH:
        raise Invalid(member, f"must be at most {FILTER_LENGTH} characters", 215)
    try:
        program = cel.compile(text)
    except (ValueError, RuntimeError) as exc:
        first = (str(exc).strip().splitlines() or [""])[0]
        raise Invalid(member, f"is not a valid CEL expression: {first}", 215) from None
    unknown = sorted(set(program.references()["variables"]) - filter_names(type_))
    if unknown:
        raise Invalid(member, f"names {', '.join(unknown)}: a filter of {type_} sees "
                      f"{', '.join(sorted(filter_names(type_)))}", 215)
    return text


def _fields(member: str, type_: str, fields: list[str]) -> list[str]:
    if not fields:
        return []
    if not is_traffic(type_):
        raise Invalid(member, f"{type_} carries the resource as the API renders it: only "
                      f"traffic events ({', '.join(TRAFFIC)}) select fields", 215)
    if len(fields) > MAX_FIELDS:
        raise Invalid(member, f"at most {MAX_FIELDS} fields", 215)
    known = TRAFFIC[type_]
    for i, name in enumerate(fields):
        if not any(k == name or k.startswith(name + ".") for k in known):
            raise Invalid(f"{member}[{i}]", f"'{name}' is not a field of {type_}; its fields "
                          f"are {', '.join(known)} (or a prefix of them)", 215)
    return list(dict.fromkeys(fields))


def source(prefix: str, item: dict[str, Any]) -> dict[str, Any]:
    """A source as stored: its type, filter and fields, each checked (errors name the
    members under ``prefix``, e.g. ``sources[0].``)."""
    type_ = source_type(f"{prefix}type", item["type"])
    return {"type": type_, "filter": _filter(f"{prefix}filter", type_, item.get("filter", "")),
            "fields": _fields(f"{prefix}fields", type_, item.get("fields") or [])}


def sources(value: list[dict[str, Any]], _ctx: Context) -> list[dict[str, Any]]:
    """A subscription's ``sources``: each checked, each type once."""
    seen: set[str] = set()
    out = []
    for i, item in enumerate(value):
        out.append(source(f"sources[{i}].", item))
        if item["type"] in seen:
            raise Invalid(f"sources[{i}].type", f"'{item['type']}' is listed twice", 215)
        seen.add(item["type"])
    return out


def present_source(base_uri: str, s: dict[str, Any]) -> dict[str, Any]:
    return {"type": s["type"], "uri": f"{base_uri}/sources/{s['type']}",
            "filter": s.get("filter", ""), "fields": list(s.get("fields") or [])}


def present_sources(value: list[dict[str, Any]], where: Where) -> list[dict[str, Any]]:
    return [present_source(where.uri, s) for s in value]
