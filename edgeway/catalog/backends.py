"""Backends: where an edge route or edge sends its traffic.

``tunnel_group`` selects live tunnels by labels; ``failover`` tries backends in order;
``weighted`` spreads by weight; ``static`` forwards to a fixed address; ``http_response``
answers by itself. Failover and weighted backends refer to other backends; those references
restrict deletes and may not form a cycle.
"""

from __future__ import annotations

import re
from typing import Annotated, Any

import msgspec

from edgeway.catalog import checks
from edgeway.catalog.model import Context, Field, Kind, Link, Ref, standard
from edgeway.errors import Invalid

COLLECTIONS = ("backends/failover", "backends/http_response", "backends/static",
               "backends/tunnel_group", "backends/weighted")
BACKEND_LINK = Link(COLLECTIONS, "restrict", code=242, acyclic=True)
_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")
_LABEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_./-]{0,252}$")


def header_name(member: str, name: str) -> str:
    if not _TOKEN.match(name):
        raise Invalid(member, f"'{name}' is not a valid HTTP header name", 215)
    return name


def header_value(member: str, value: str) -> str:
    if any(c in value for c in "\r\n\0"):
        raise Invalid(member, "must not contain CR, LF or NUL", 215)
    return value


def _labels(value: dict[str, str], _ctx: Context) -> dict[str, str]:
    for k, v in value.items():
        if not _LABEL.match(k):
            raise Invalid(f"labels.{k}", "label names are letters, digits and _ . / - "
                          "(starting with a letter or digit), at most 253 characters", 215)
        if not v or len(v) > 253 or any(c in v for c in "\r\n\0"):
            raise Invalid(f"labels.{k}", "label values are 1 to 253 characters", 215)
    return value


def _not_empty(name: str) -> Any:
    def check(value: Any, _ctx: Context) -> Any:
        if not value:
            raise Invalid(name, "must name at least one backend", 215)
        return value
    return check


def _address(value: str, _ctx: Context) -> str:
    host, sep, port = value.rpartition(":")
    if not sep or not (port.isascii() and port.isdigit()) or not 1 <= int(port) <= 65535:
        raise Invalid("address", f"'{value}' must be host:port with a port from 1 to 65535",
                      215)
    checks.host("address", host)
    return value


def _headers(value: dict[str, str], _ctx: Context) -> dict[str, str]:
    for k, v in value.items():
        header_name(f"headers.{k}", k)
        header_value(f"headers.{k}", v)
    return value


class StaticTLS(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    enabled: bool = False


def _kind(collection: str, prefix: str, title: str, fields: tuple[Field, ...],
          describe: str) -> Kind:
    return Kind(collection=collection, prefix=prefix, list_key="backends", title=title,
                fields=(*standard(), *fields), describe=describe, not_found_code=None)


TUNNEL_GROUP = _kind(
    "backends/tunnel_group", "bkdtg", "TunnelGroupBackend", (
        Field("labels", dict[str, str], "tunnels with all these labels serve the backend",
              update=True, default=dict, empty_is_unset=True, check=_labels),
        Field("tunnels", list[Ref], "live tunnels whose labels match", create="no",
              default=list),
    ), "Live tunnels selected by their labels.")

FAILOVER = _kind(
    "backends/failover", "bkdfo", "FailoverBackend", (
        Field("backends", list[str], "backend ids, tried in order", create="required",
              update=True, empty_is_unset=True, link=BACKEND_LINK,
              check=_not_empty("backends")),
    ), "Backends tried in order until one is available.")

Weight = Annotated[int, msgspec.Meta(ge=0, le=10000)]

WEIGHTED = _kind(
    "backends/weighted", "bkdwd", "WeightedBackend", (
        Field("backends", dict[str, Weight], "backend id to weight (0 to 10000)",
              create="required", update=True, empty_is_unset=True, link=BACKEND_LINK,
              check=_not_empty("backends")),
    ), "Backends chosen at random in proportion to their weights.")

STATIC = _kind(
    "backends/static", "bkdsc", "StaticBackend", (
        Field("address", str, "host:port to forward to", create="required", update=True,
              empty_is_unset=True, check=_address),
        Field("tls", StaticTLS, "dial the address with TLS", update=True,
              default=lambda: {"enabled": False}),
    ), "A fixed upstream address.")

StatusCode = Annotated[int, msgspec.Meta(ge=100, le=599)]

HTTP_RESPONSE = _kind(
    "backends/http_response", "bkdhr", "HTTPResponseBackend", (
        Field("body", str, "response body", update=True, default=""),
        Field("headers", dict[str, str], "response headers", update=True, default=dict,
              check=_headers),
        Field("status_code", StatusCode, "response status", update=True, default=200),
    ), "A fixed HTTP response.")

KINDS = (FAILOVER, HTTP_RESPONSE, STATIC, TUNNEL_GROUP, WEIGHTED)
