"""Turn a decoded request body into the members to store, applying every declared rule.

Pure up to the reference checks (``links``), which read the store inside the write
transaction so that a reference cannot vanish between the check and the write.
"""

from __future__ import annotations

from typing import Any

from edgeway import catalog, ids
from edgeway.catalog import checks
from edgeway.catalog.model import Context, Field, Kind
from edgeway.errors import Invalid, NotFound
from edgeway.store.repo import Repo


def _empty(value: Any) -> bool:
    return value in ("", [], {}, None)


def members(kind: Kind, body: dict[str, Any], ctx: Context, *, update: bool) -> dict[str, Any]:
    """Byte limits and member checks; on update also immutables and empty-means-unset."""
    out: dict[str, Any] = {}
    for name, value in body.items():
        f = kind.field(name)
        if update and f.immutable:
            raise Invalid(name, "cannot be changed after creation; delete and re-create the "
                          "resource instead", 215)
        if update and ((f.empty_is_unset and _empty(value)) or
                       (f.null_is_unset and value is None)):
            continue
        if f.max_bytes is not None and isinstance(value, str):
            checks.byte_limit(name, value, f.max_bytes)
        if f.check is not None and value is not None:
            value = f.check(value, ctx)
        out[name] = value
    return out


def id_in_path(kind: Kind, value: str) -> str:
    parts = ids.split_id(value)
    if parts is None or parts[0] != kind.prefix:
        raise Invalid("", f"'{value}' is not a valid {kind.title} id: expected an ID with a "
                      f"prefix of '{kind.prefix}_' followed by 27 letters and digits", 227)
    return value


async def found(repo: Repo, kind: Kind, id_: str) -> dict[str, Any]:
    """The stored resource a path names: its id checked (400), then read (404 if gone)."""
    id_in_path(kind, id_)
    doc = await repo.get(kind, id_)
    if doc is None:
        raise NotFound(f"{kind.title} '{id_}' was not found.", kind.not_found_code)
    return doc


def refs(f: Field, value: Any) -> list[tuple[str, str]]:
    """``(member path, id)`` for every id a link member holds."""
    if value is None:
        return []
    if f.refs is not None:
        return f.refs(value)
    if isinstance(value, list):
        return [(f"{f.name}[{i}]", v) for i, v in enumerate(value)]
    if isinstance(value, dict):
        return [(f"{f.name}.{k}", k) for k in value]
    return [(f.name, value)]


async def _reaches(repo: Repo, start: str, goal: str, member: str) -> bool:
    seen, todo = {start}, [start]
    while todo:
        node = todo.pop()
        if node == goal:
            return True
        for nxt in await repo.links_from(node, member):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return False


async def links(repo: Repo, kind: Kind, doc: dict[str, Any],
                old: dict[str, Any] | None, self_id: str = "") -> list[tuple[str, str]]:
    """Check that every newly referenced id exists; return all ``(member, id)`` links.

    Ids already stored are not checked again, so a reference kept to a deleted resource
    (``on_delete="keep"``) does not block unrelated updates.
    """
    out: list[tuple[str, str]] = []
    for f in kind.links:
        assert f.link is not None
        before = {v for _, v in refs(f, old.get(f.name))} if old else set()
        wanted: dict[str, list[tuple[str, str]]] = {}
        for member, v in refs(f, doc.get(f.name)):
            out.append((f.name, v))
            if v in before:
                continue
            parts = ids.split_id(v)
            target = catalog.BY_PREFIX.get(parts[0]) if parts else None
            if target is None or target.collection not in f.link.kinds:
                names = " or ".join(catalog.BY_COLLECTION[k].title for k in f.link.kinds)
                raise Invalid(member, f"'{v}' is not the id of a {names}",
                              223 if parts is None else 227)
            if f.link.acyclic and await _reaches(repo, v, self_id, f.name):
                raise Invalid(member, f"'{v}' leads back to '{self_id}': references of "
                              f"'{f.name}' must not form a cycle", f.link.code)
            wanted.setdefault(target.collection, []).append((member, v))
        for collection, pairs in wanted.items():
            found = await repo.existing(catalog.BY_COLLECTION[collection], [v for _, v in pairs])
            for member, v in pairs:
                if v not in found:
                    raise Invalid(member, f"'{v}' does not exist", f.link.code)
    return out
