"""The catalog: every resource kind, declared once (see ``model`` for the language)."""

from __future__ import annotations

from edgeway.catalog import (
    abuse,
    addrs,
    apps,
    authorities,
    backends,
    domains,
    edges,
    events,
    identity,
    ip,
    runtime,
    ssh,
    ssh_certs,
    tls,
    vaults,
)
from edgeway.catalog.model import Context, Field, Kind, Link, Ref

ALL: tuple[Kind, ...] = (
    *identity.KINDS, *domains.KINDS, *ip.KINDS, *authorities.KINDS, *events.KINDS,
    *runtime.KINDS, *ssh.KINDS, *ssh_certs.KINDS, *tls.KINDS, *backends.KINDS, *edges.KINDS,
    *addrs.KINDS, *vaults.KINDS, *apps.KINDS, *abuse.KINDS,
)
BY_COLLECTION: dict[str, Kind] = {k.collection: k for k in ALL}
BY_PREFIX: dict[str, Kind] = {k.prefix: k for k in ALL}

__all__ = ["ALL", "BY_COLLECTION", "BY_PREFIX", "Context", "Field", "Kind", "Link", "Ref"]
