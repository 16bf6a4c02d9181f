"""A bound tunnel's ``BindRequest`` as JSON and back: what every node of a cluster needs to
serve a tunnel whose agent is connected to another node (its options compile into the same
hooks there). The JSON is sealed before it is stored (``seal``/``unseal``): it may carry basic
auth passwords, OAuth client secrets and a TLS tunnel's private key."""

from __future__ import annotations

import ipaddress
import json
from typing import Any

from edgeway.ippolicy import Network
from edgeway.pki.seal import Sealer
from edgeway.tunnel.binds import BindRequest, HeaderChanges

CONTEXT = "tunnel bind"  # the sealing context of a stored bind request


def _changes(changes: HeaderChanges) -> dict[str, Any]:
    return {"add": [list(pair) for pair in changes.add], "remove": list(changes.remove)}


def _changes_of(value: dict[str, Any]) -> HeaderChanges:
    return HeaderChanges(tuple((str(k), str(v)) for k, v in value["add"]),
                         tuple(str(name) for name in value["remove"]))


def _networks(values: list[str]) -> tuple[Network, ...]:
    return tuple(ipaddress.ip_network(v, strict=False) for v in values)


def encode(req: BindRequest) -> dict[str, Any]:
    return {"id": req.id, "proto": req.proto, "addr": req.addr, "domain": req.domain,
            "forwards_to": req.forwards_to, "metadata": req.metadata, "opts": req.opts,
            "labels": req.labels, "pooled": req.pooled,
            "allow": [str(n) for n in req.allow], "deny": [str(n) for n in req.deny],
            "request_headers": _changes(req.request_headers),
            "response_headers": _changes(req.response_headers),
            "basic_auth": [list(pair) for pair in req.basic_auth],
            "compression": req.compression, "modules": req.modules,
            "client_cas": req.client_cas,
            "termination": list(req.termination) if req.termination else None}


def decode(doc: dict[str, Any]) -> BindRequest:
    """The request ``encode`` made (KeyError/TypeError/ValueError on anything else)."""
    return BindRequest(
        str(doc["id"]), str(doc["proto"]), str(doc["addr"]), str(doc["domain"]),
        str(doc["forwards_to"]), str(doc["metadata"]), dict(doc["opts"]),
        {str(k): str(v) for k, v in doc["labels"].items()}, bool(doc["pooled"]),
        _networks(doc["allow"]), _networks(doc["deny"]),
        _changes_of(doc["request_headers"]), _changes_of(doc["response_headers"]),
        tuple((str(u), str(p)) for u, p in doc["basic_auth"]), bool(doc["compression"]),
        dict(doc["modules"]), str(doc.get("client_cas") or ""),
        (str(doc["termination"][0]), str(doc["termination"][1]))
        if doc.get("termination") else None)


def seal(sealer: Sealer, req: BindRequest) -> str:
    return sealer.seal(json.dumps(encode(req)).encode(), CONTEXT)


def unseal(sealer: Sealer, sealed: str) -> BindRequest:
    """The stored request (SealError, KeyError, TypeError or ValueError when it is not one)."""
    return decode(json.loads(sealer.open(sealed, CONTEXT)))
