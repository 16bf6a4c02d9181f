"""TLS termination: where TLS ends (the edge or the upstream) and the minimum version."""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from edgeway.catalog.model import Context
from edgeway.catalog.modules import Module
from edgeway.errors import Invalid

VERSIONS = ("1.0", "1.1", "1.2", "1.3")


class TLSTermination(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    enabled: bool = True
    terminate_at: Literal["edge", "upstream"] = "edge"
    min_version: str | None = None


class TLSTerminationAtEdge(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    enabled: bool = True
    min_version: str | None = None


class EndpointTLSTermination(msgspec.Struct, kw_only=True):
    enabled: bool
    terminate_at: str
    min_version: str | None


def _check(value: dict[str, Any], _ctx: Context, at: str) -> dict[str, Any]:
    where = value.get("terminate_at", "edge")
    version = value.get("min_version")
    if where == "upstream" and version is not None:
        raise Invalid(at + "min_version", "must be null when terminate_at is 'upstream': the "
                      "upstream chooses the TLS versions", 215)
    if version is not None and version not in VERSIONS:
        raise Invalid(at + "min_version", f"'{version}' is not a TLS version; one of "
                      + ", ".join(VERSIONS), 219)
    return {"enabled": value.get("enabled", True), "terminate_at": where,
            "min_version": version}


MODULES = (
    Module("tls_termination", TLSTermination, EndpointTLSTermination,
           frozenset({"https_edge", "tls_edge"}),
           "terminate TLS at the edge (or, on TLS edges, pass it through to the upstream)",
           _check, variants=(("https_edge", TLSTerminationAtEdge),)),
)
