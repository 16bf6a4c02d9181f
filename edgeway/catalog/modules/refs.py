"""Modules that refer to other resources: backend, ip_restriction, mutual_tls."""

from __future__ import annotations

from typing import Any

import msgspec

from edgeway.catalog.backends import BACKEND_LINK
from edgeway.catalog.model import Context, Link, Ref, Where, ref
from edgeway.catalog.modules import Module
from edgeway.errors import Invalid


class _Strict(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    enabled: bool = True


class BackendMutate(_Strict):
    backend_id: str | msgspec.UnsetType = msgspec.UNSET


class EndpointBackend(msgspec.Struct, kw_only=True):
    enabled: bool
    backend: Ref


class IPPolicyMutate(_Strict):
    ip_policy_ids: list[str] = []


class EndpointIPPolicy(msgspec.Struct, kw_only=True):
    enabled: bool
    ip_policies: list[Ref]


class MutualTLSMutate(_Strict):
    certificate_authority_ids: list[str] = []


class EndpointMutualTLS(msgspec.Struct, kw_only=True):
    enabled: bool
    certificate_authorities: list[Ref]


def _ids(member: str, minimum: int, what: str) -> Any:
    def check(value: dict[str, Any], _ctx: Context, at: str) -> dict[str, Any]:
        got = value.get(member)
        if not got or (isinstance(got, list) and len(got) < minimum):
            rule = f"must name at least one {what}" if member.endswith("s") else "is required"
            raise Invalid(at + member, rule, 7025 if what == "IP policy" else 215)
        if isinstance(got, list) and len(set(got)) != len(got):
            raise Invalid(at + member, f"names the same {what} twice", 215)
        return {"enabled": value.get("enabled", True), member: got}
    return check


def _refs(member: str) -> Any:
    def refs(value: dict[str, Any], at: str) -> list[tuple[str, str]]:
        got = value.get(member)
        if isinstance(got, list):
            return [(f"{at}{member}[{i}]", v) for i, v in enumerate(got)]
        return [(at + member, got)] if got else []
    return refs


def _render(member: str, out: str) -> Any:
    def render(value: dict[str, Any], where: Where) -> dict[str, Any]:
        got = value[member]
        shown = [ref(where.public_url, v) for v in got] if isinstance(got, list) \
            else ref(where.public_url, got)
        return {"enabled": value.get("enabled", True), out: shown}
    return render


MODULES = (
    Module("backend", BackendMutate, EndpointBackend,
           frozenset({"route", "tcp_edge", "tls_edge"}),
           "the backend that serves the traffic", _ids("backend_id", 1, "backend"),
           BACKEND_LINK, _refs("backend_id"), _render("backend_id", "backend")),
    Module("ip_restriction", IPPolicyMutate, EndpointIPPolicy,
           frozenset({"route", "tcp_edge", "tls_edge"}),
           "IP policies that decide which client addresses may connect",
           _ids("ip_policy_ids", 1, "IP policy"),
           Link(("ip_policies",), "keep", code=7007), _refs("ip_policy_ids"),
           _render("ip_policy_ids", "ip_policies")),
    Module("mutual_tls", MutualTLSMutate, EndpointMutualTLS,
           frozenset({"https_edge", "tls_edge"}),
           "client certificates must chain to one of these certificate authorities",
           _ids("certificate_authority_ids", 1, "certificate authority"),
           Link(("certificate_authorities",), "restrict", code=7072),
           _refs("certificate_authority_ids"),
           _render("certificate_authority_ids", "certificate_authorities")),
)
