"""Hostports of edges: claimed platform-wide, and for TLS and HTTPS edges covered by a
reserved domain (exact, or a wildcard one label up), which the edge then refers to."""

from __future__ import annotations

from typing import Any

from edgeway.catalog.model import Kind
from edgeway.errors import Conflict, Invalid
from edgeway.store.domains import covering
from edgeway.store.repo import Claimed, Repo

TCP_PORT = "tcp-port"  # the claim of a port by a TCP edge


async def bind(repo: Repo, kind: Kind, id_: str, doc: dict[str, Any]) -> list[tuple[str, str]]:
    """Claim the hostports of ``doc``; return its links to the domains that cover them."""
    out: list[tuple[str, str]] = []
    for f in kind.fields:
        if f.claim is None:
            continue
        values: list[str] = doc.get(f.name) or []
        if f.link is not None:
            for i, hp in enumerate(values):
                host = hp.rsplit(":", 1)[0]
                cover = await covering(repo, host)
                if not cover:
                    raise Invalid(f"{f.name}[{i}]", f"'{host}' is not a reserved domain, nor "
                                  "covered by a reserved wildcard domain; reserve it first",
                                  7121)
                out.append((f.name, cover.get(host) or next(iter(cover.values()))))
        claims = [f"{f.claim}:{v}" for v in values]
        if kind.collection == "edges/tcp":  # it listens on the port, whatever the host
            claims += sorted({f"{TCP_PORT}:{v.rsplit(':', 1)[1]}" for v in values})
        try:
            await repo.claim(kind, id_, claims)
        except Claimed as c:
            what, _, value = c.claim.partition(":")
            if what == TCP_PORT:
                raise Conflict(f"The port {value} is already served by the TCP edge "
                               f"'{c.holder}'.", 7122) from None
            raise Conflict(f"The {f.claim} '{value}' is already used by '{c.holder}'.",
                           7122) from None
    return out
