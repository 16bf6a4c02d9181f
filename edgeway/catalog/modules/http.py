"""HTTP route modules without references: headers, compression, WebSocket-to-TCP conversion,
user agent filter and circuit breaker."""

from __future__ import annotations

import re
from typing import Annotated, Any

import msgspec

from edgeway.catalog.backends import header_name, header_value
from edgeway.catalog.model import Context
from edgeway.catalog.modules import Module, On, UInt32
from edgeway.errors import Invalid

ROUTE: frozenset[On] = frozenset({"route"})


class _Strict(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    enabled: bool = True


class Headers(_Strict):
    add: dict[str, str] = {}
    remove: list[str] = []


class Enabled(_Strict):
    pass


class UserAgentFilter(_Strict):
    allow: list[str] = []
    deny: list[str] = []


class CircuitBreaker(_Strict):
    tripped_duration: UInt32 = 10
    rolling_window: UInt32 = 10
    num_buckets: Annotated[int, msgspec.Meta(ge=1, le=128)] = 10
    volume_threshold: UInt32 = 20
    error_threshold_percentage: Annotated[float, msgspec.Meta(ge=0.0, le=1.0)] = 0.5


def _filled(shape: type[msgspec.Struct], value: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = msgspec.to_builtins(msgspec.convert(value, shape))
    return out


def _headers(value: dict[str, Any], _ctx: Context, at: str) -> dict[str, Any]:
    for k, v in value.get("add", {}).items():
        header_name(f"{at}add.{k}", k)
        header_value(f"{at}add.{k}", v)
    for i, k in enumerate(value.get("remove", [])):
        header_name(f"{at}remove[{i}]", k)
    return _filled(Headers, value)


def _user_agents(value: dict[str, Any], _ctx: Context, at: str) -> dict[str, Any]:
    for member in ("allow", "deny"):
        for i, pattern in enumerate(value.get(member, [])):
            if len(pattern) > 1024:
                raise Invalid(f"{at}{member}[{i}]", "patterns are at most 1024 characters")
            try:
                re.compile(pattern)
            except re.error as exc:
                raise Invalid(f"{at}{member}[{i}]", f"'{pattern}' is not a regular "
                              f"expression: {exc}") from None
    return _filled(UserAgentFilter, value)


def _plain(shape: type[msgspec.Struct]) -> Any:
    def check(value: dict[str, Any], _ctx: Context, _at: str) -> dict[str, Any]:
        return _filled(shape, value)
    return check


MODULES = (
    Module("request_headers", Headers, Headers, ROUTE,
           "headers added to and removed from the request sent upstream", _headers),
    Module("response_headers", Headers, Headers, ROUTE,
           "headers added to and removed from the response to the client", _headers),
    Module("compression", Enabled, Enabled, ROUTE, "compress responses (gzip, deflate, br)",
           _plain(Enabled)),
    Module("websocket_tcp_converter", Enabled, Enabled, ROUTE,
           "carry WebSocket messages to a TCP upstream", _plain(Enabled)),
    Module("user_agent_filter", UserAgentFilter, UserAgentFilter, ROUTE,
           "allow or deny clients by User-Agent regular expressions", _user_agents),
    Module("circuit_breaker", CircuitBreaker, CircuitBreaker, ROUTE,
           "reject requests while the upstream's error rate is over the threshold",
           _plain(CircuitBreaker)),
)
