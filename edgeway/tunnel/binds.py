"""Bind requests: what an agent asks for, checked against its credential's ACL and against the
options this edge can enforce. Pure: the server does the allocation and the I/O.

Options the edge enforces on agent tunnels: IP restrictions; for HTTP also basic auth,
request/response header changes, Host header rewriting, compression and the circuit
breaker. Every other security or traffic option an
SDK can send (OAuth, OIDC, webhook verification, mutual TLS, traffic policy, PROXY protocol,
...) is refused with a clear error rather than accepted and silently ignored.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from edgeway.catalog import checks
from edgeway.errors import Invalid

PROTOS = ("http", "https", "tcp", "tls")
# Bind options (folded keys) the edge does not enforce: refused when set
UNSUPPORTED = {
    "http": ("oauth", "mutualtlsca", "policy"),
    "tcp": ("policy",),
    "tls": ("mutualtlsatagent", "mutualtlsatedge", "tlstermination", "trafficpolicy", "policy"),
}
NAMES = {"oauth": "OAuth", "oidc": "OIDC",
         "webhookverification": "webhook verification", "mutualtlsca": "mutual TLS",
         "websockettcpconverter": "the WebSocket-TCP converter",
         "useragentfilter": "user agent filters", "trafficpolicy": "traffic policy",
         "policy": "traffic policy", "basicauth": "basic auth", "auth": "basic auth",
         "mutualtlsatagent": "mutual TLS", "mutualtlsatedge": "mutual TLS",
         "tlstermination": "TLS termination at the edge"}


class BindRefused(Exception):
    pass


@dataclass(frozen=True)
class HeaderChanges:
    add: tuple[tuple[str, str], ...] = ()
    remove: tuple[str, ...] = ()


@dataclass(frozen=True)
class BindRequest:
    id: str
    proto: str  # http, https, tcp or tls; "" for a labeled tunnel
    addr: str  # tcp: requested host:port
    domain: str  # http(s)/tls: requested host name ("" = generate one)
    forwards_to: str
    metadata: str
    opts: dict[str, Any]  # as sent, echoed in the reply (the Rust SDK decodes it back)
    labels: dict[str, str] = field(default_factory=dict)
    pooled: bool = False
    allow: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()
    deny: tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...] = ()
    request_headers: HeaderChanges = HeaderChanges()
    response_headers: HeaderChanges = HeaderChanges()
    basic_auth: tuple[tuple[str, str], ...] = ()  # (user, password) pairs
    compression: bool = False
    # oidc, webhook_verification, traffic_policy, user_agent_filter, websocket_tcp_converter:
    # as an edge route's module documents (checked and compiled by the edge)
    modules: dict[str, Any] = field(default_factory=dict)


def _raw_opts(message: dict[str, Any]) -> dict[str, Any]:
    opts = next((v for k, v in message.items() if k.lower() == "opts"), None) or {}
    return opts if isinstance(opts, dict) else {}


def _cidrs(values: Any, what: str) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    out = []
    for v in values or []:
        try:
            out.append(ipaddress.ip_network(str(v), strict=False))
        except ValueError:
            raise BindRefused(f"IP restriction: '{v}' in {what} is not a CIDR") from None
    return tuple(out)


def _headers(value: Any) -> HeaderChanges:
    value = value or {}
    add: list[tuple[str, str]] = []
    for item in value.get("add") or []:
        name, sep, val = str(item).partition(":")
        if not sep or not name.strip():
            raise BindRefused(f"header '{item}' must be 'Name: value'")
        add.append((name.strip(), val.strip()))
    return HeaderChanges(tuple(add), tuple(str(n).lower() for n in value.get("remove") or []))


def _basic_auth(opts: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    pairs: list[tuple[str, str]] = []
    if opts.get("auth"):  # the older "user:password" option
        user, _, password = str(opts["auth"]).partition(":")
        pairs.append((user, password))
    for cred in (opts.get("basicauth") or {}).get("credentials") or []:
        if not cred.get("cleartextpassword") and cred.get("hashedpassword"):
            raise BindRefused("basic auth with hashed passwords is not supported; send the "
                              "cleartext password (it travels inside the agent's TLS session)")
        pairs.append((str(cred.get("username") or ""), str(cred.get("cleartextpassword") or "")))
    for user, password in pairs:
        if not user or ":" in user or len(password) < 8:
            raise BindRefused("basic auth needs a user name without ':' and a password of at "
                              "least 8 characters")
    return tuple(pairs)


def _host_rewrite(changes: HeaderChanges, forwards_to: str) -> HeaderChanges:
    """``HostHeaderRewrite``: the upstream gets the host of the address the agent forwards
    to (its ``ForwardsTo``) as its Host header. The classic agent sends no ``ForwardsTo``
    and rewrites the header itself: nothing to do here then."""
    if not forwards_to:
        return changes
    parts = urlsplit(forwards_to if "://" in forwards_to else f"http://{forwards_to}")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise BindRefused(f"host header rewriting needs the upstream's address; the agent "
                          f"forwards to '{forwards_to}', which is not an http(s) address")
    return HeaderChanges((("Host", parts.netloc.rpartition("@")[2]), *changes.add),
                         ("host", *changes.remove))


def domain_of(opts: dict[str, Any], base_domain: str) -> str:
    """The host name asked for (Domain, Hostname, or Subdomain of the base domain), or ""."""
    name = str(opts.get("domain") or opts.get("hostname") or "").strip().lower().rstrip(".")
    sub = str(opts.get("subdomain") or "").strip().lower()
    if not name and sub:
        name = f"{sub}.{base_domain}"
    if name:
        try:
            checks.domain_name("Domain", name, wildcard=True)
        except Invalid as exc:
            raise BindRefused(exc.msg) from None
    return name


def _squash(value: Any) -> Any:
    """Keys without case or underscores: the SDKs send PascalCase, middleware snake_case."""
    if isinstance(value, dict):
        return {str(k).replace("_", ""): _squash(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_squash(v) for v in value]
    return value


def parse(message: dict[str, Any], folded: dict[str, Any], base_domain: str) -> BindRequest:
    opts = _squash(folded.get("opts") or {})
    extra = folded.get("extra") or {}
    proto = str(folded.get("proto") or "")
    if proto not in PROTOS:
        raise BindRefused(f"unknown tunnel protocol '{proto}' (http, https, tcp or tls)")
    family = "http" if proto in ("http", "https") else proto
    for name in UNSUPPORTED[family]:
        if opts.get(name) not in (None, "", False, 0):  # an empty object is set
            raise BindRefused(f"{NAMES[name]} on {proto} tunnels is not enforced by this edge "
                              "yet; refusing rather than ignoring it")
    if int(opts.get("proxyproto") or 0):
        raise BindRefused("the PROXY protocol header is not supported by this edge yet")
    restriction = opts.get("iprestriction") or {}
    request_headers = _headers(opts.get("requestheaders"))
    if family == "http" and opts.get("hostheaderrewrite"):
        request_headers = _host_rewrite(request_headers, str(folded.get("forwardsto") or ""))
    return BindRequest(
        str(folded.get("id") or ""), proto, str(opts.get("addr") or ""),
        domain_of(opts, base_domain) if family != "tcp" else "",
        str(folded.get("forwardsto") or ""), str(extra.get("metadata") or ""),
        _raw_opts(message), pooled=bool(extra.get("poolingenabled")),
        allow=_cidrs(restriction.get("allowcidrs"), "allow_cidrs"),
        deny=_cidrs(restriction.get("denycidrs"), "deny_cidrs"),
        request_headers=request_headers,
        response_headers=_headers(opts.get("responseheaders")),
        basic_auth=_basic_auth(opts) if family == "http" else (),
        compression=family == "http" and opts.get("compression") is not None,
        modules=_modules(opts, family))


def _modules(opts: dict[str, Any], family: str) -> dict[str, Any]:
    """The bind options the edge enforces as modules, in the modules' document form."""
    out: dict[str, Any] = {}
    if isinstance(policy := opts.get("trafficpolicy"), str) and policy.strip():
        out["traffic_policy"] = {"value": policy}
    if family != "http":
        return out
    if isinstance(oidc := opts.get("oidc"), dict):
        out["oidc"] = {"issuer": str(oidc.get("issuerurl") or ""),
                       "client_id": str(oidc.get("clientid") or ""),
                       "client_secret": str(oidc.get("clientsecret") or ""),
                       "scopes": list(oidc.get("scopes") or []),
                       "allow_emails": list(oidc.get("allowemails") or []),
                       "allow_domains": list(oidc.get("allowdomains") or [])}
    if isinstance(breaker := opts.get("circuitbreaker"), dict):
        out["circuit_breaker"] = {"error_threshold_percentage": _ratio(breaker)}
    if isinstance(hook := opts.get("webhookverification"), dict):
        out["webhook_verification"] = {"provider": str(hook.get("provider") or ""),
                                       "secret": str(hook.get("secret") or "")}
    if isinstance(agents := opts.get("useragentfilter"), dict):
        out["user_agent_filter"] = {"allow": list(agents.get("allow") or []),
                                    "deny": list(agents.get("deny") or [])}
    if opts.get("websockettcpconverter") is not None:
        out["websocket_tcp_converter"] = {}
    return out


def _ratio(breaker: dict[str, Any]) -> float:
    """A circuit breaker's ``ErrorThreshold``: the share of 5xx answers that trips it."""
    value = breaker.get("errorthreshold")
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
        raise BindRefused(f"circuit breaker: the error threshold must be a ratio above 0 and "
                          f"at most 1 (got {value!r})")
    return float(value)


def parse_labeled(folded: dict[str, Any]) -> BindRequest:
    """A StartTunnelWithLabel request: labels select the edges' tunnel group backends."""
    labels = folded.get("labels") or {}
    if not isinstance(labels, dict) or not labels:
        raise BindRefused("a labeled tunnel needs at least one label")
    out: dict[str, str] = {}
    for k, v in labels.items():
        if not isinstance(v, str) or not str(k) or len(str(k)) > 255 or len(v) > 255:
            raise BindRefused(f"label '{k}' must be a name and a string value "
                              "of at most 255 characters")
        out[str(k)] = v
    return BindRequest(str(folded.get("id") or ""), "", "", "",
                       str(folded.get("forwardsto") or ""), str(folded.get("metadata") or ""),
                       {}, labels=out)


def requested_port(addr: str, host: str) -> int | None:
    """The port of a requested ``host:port`` address on this edge, or None for any port."""
    if not addr:
        return None
    want_host, sep, port = addr.rpartition(":")
    if not sep or not (port.isascii() and port.isdigit()):
        raise BindRefused(f"'{addr}' is not a host:port address")
    try:
        checks.host("Addr", want_host)
    except Invalid as exc:
        raise BindRefused(exc.msg) from None
    if want_host not in (host, "localhost", "127.0.0.1"):
        raise BindRefused(f"'{addr}' is not an address of this edge ({host})")
    return int(port)
