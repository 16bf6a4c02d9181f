"""One tunnel of the agent config (``tunnels.<name>``, a one-liner's flags, or a body posted
to the local API): which keys each protocol takes, and the checked ``TunnelConfig``.

The value checks live in ``configcheck`` (addresses, names) and ``tunnelopts`` (the tunnel's
options, the edge middleware in the Bind's form). Refused, because the edge cannot honour
them on agent tunnels: the keys of ``TUNNEL_UNSUPPORTED``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from edgeway.agent import configcheck as check
from edgeway.agent import tunnelopts as opts
from edgeway.agent.configcheck import NAME, show
from edgeway.agent.context import Context

_COMMON = frozenset({"proto", "addr", "metadata", "allow_unauthenticated"})
TUNNEL_KEYS = {  # by proto; "" is a labeled tunnel
    "http": _COMMON | {"domain", "hostname", "subdomain", "inspect", "basic_auth", "host_header",
                       "schemes", "traffic_policy", "mutual_tls_cas", *opts.MIDDLEWARE},
    "tcp": _COMMON | {"remote_addr", "traffic_policy", *opts.TCP_MIDDLEWARE},
    "tls": _COMMON | {"domain", "hostname", "subdomain", "mutual_tls_cas", "crt", "key",
                      "terminate_at", *opts.TLS_MIDDLEWARE},
    "": frozenset({"addr", "labels", "metadata", "allow_unauthenticated"}),
}
TUNNEL_UNSUPPORTED = {
    "proxy_proto": "the PROXY protocol header is not supported by the edge",
}
TUNNEL_RENAMED = {
    "bind_tls": "no longer supported: use schemes ([https] for true, [http] for false, "
                "[http, https] for both)",
    "auth": "no longer supported: use basic_auth, a list of \"user:password\"",
    "policy": "renamed: use traffic_policy",
}
ALL_TUNNEL_KEYS = frozenset().union(*TUNNEL_KEYS.values())
_ADDR_SCHEMES = {"http": ("http", "https"), "tcp": ("tcp",), "tls": ("tcp",),
                 "": ("http", "https", "tcp")}


@dataclass(frozen=True)
class Addr:
    scheme: str  # "http", "https" or "tcp"
    host: str  # "127.0.0.1" unless the user wrote a host; IPv6 without brackets
    port: int

    def url(self) -> str:
        return f"{self.scheme}://{check.join_host_port(self.host, self.port)}"

    def host_header(self) -> str:
        """The Host a request to this address carries (no port when it is the default)."""
        if check.URL_PORTS.get(self.scheme) == self.port:
            return f"[{self.host}]" if ":" in self.host else self.host
        return check.join_host_port(self.host, self.port)


@dataclass(frozen=True)
class TunnelConfig:
    name: str
    proto: str  # "http", "tcp" or "tls"; "" for labeled tunnels
    addr: Addr
    domain: str = ""  # also from the older `hostname`
    subdomain: str = ""
    inspect: bool = True  # http only: False for the others
    labels: dict[str, str] = field(default_factory=dict)
    metadata: str = ""
    remote_addr: str = ""  # tcp
    basic_auth: tuple[tuple[str, str], ...] = ()
    host_header: str = ""  # "rewrite", "preserve" or a literal host: applied by the agent
    schemes: tuple[str, ...] = ("https",)  # http only: () for the others
    traffic_policy: str = ""  # http and tcp: the policy document as JSON (the edge runs it)
    middleware: dict[str, Any] = field(default_factory=dict)  # Opts member -> its object
    allow_unauthenticated: bool = False  # may publish the agent's own API with no login

    def rewritten_host(self) -> str:
        """The Host the agent sends to the local service, or "" to pass it unchanged."""
        if self.host_header in ("", "preserve"):
            return ""
        return self.addr.host_header() if self.host_header == "rewrite" else self.host_header

    def guarded(self) -> bool:
        """Whether visitors must log in or come from allowed addresses."""
        return bool(self.basic_auth) or bool(opts.GUARDS & set(self.middleware)) or \
            opts.policy_guards(self.traffic_policy)


def parse_tunnel(name: str, doc: dict[str, Any], origin: str) -> TunnelConfig:
    """One tunnel definition from elsewhere (the local API); errors name `origin`."""
    clean = {k: v for k, v in doc.items() if v is not None}
    return tunnel(Context({}, (origin,)), name, clean, ())


def _keys(ctx: Context, name: str, doc: dict[str, Any], base: tuple[str, ...]) -> str:
    """Check the keys of one definition; its protocol ("" for a labeled tunnel)."""
    if not NAME.fullmatch(name):
        raise ctx.error(base or ("name",), "tunnel names must be letters, digits, '_', '.' or "
                                           f"'-' (got {name!r})")
    for key in doc:
        if key in TUNNEL_UNSUPPORTED:
            raise ctx.error((*base, key), TUNNEL_UNSUPPORTED[key])
        if key in TUNNEL_RENAMED:
            raise ctx.error((*base, key), TUNNEL_RENAMED[key])
        if key not in ALL_TUNNEL_KEYS:
            raise ctx.error((*base, key), check.unknown_key(key, ALL_TUNNEL_KEYS))
    if "labels" in doc and "proto" in doc:
        raise ctx.error((*base, "proto"), "must be left out when labels is set (the labels "
                                          "select the edge, which sets the protocol)")
    if "labels" not in doc and "proto" not in doc:
        raise ctx.error((*base, "proto"), "required (http, tcp or tls) unless labels is set")
    proto = ctx.get(doc, (*base, "proto"), check.proto, "")
    kind = "http" if proto == "https" else proto
    for key in doc:
        if key not in TUNNEL_KEYS[kind]:
            what = f"{kind} tunnels" if kind else "labeled tunnels"
            raise ctx.error((*base, key), f"does not apply to {what} (they take: "
                                          f"{', '.join(sorted(TUNNEL_KEYS[kind]))})")
    _together(ctx, doc, base, proto)
    return kind


def _together(ctx: Context, doc: dict[str, Any], base: tuple[str, ...], proto: str) -> None:
    """Keys that exclude one another, and the one every tunnel needs."""
    for first, second in (("domain", "hostname"), ("domain", "subdomain"),
                          ("hostname", "subdomain")):
        if first in doc and second in doc:
            raise ctx.error((*base, second), f"cannot be combined with {first}")
    if proto == "https" and "schemes" in doc:
        raise ctx.error((*base, "schemes"), "proto https already means schemes [https]; use "
                                            "proto http to choose schemes")
    if "addr" not in doc:
        raise ctx.error((*base, "addr"), "required: a port, host:port or URL")


def _middleware(ctx: Context, doc: dict[str, Any], base: tuple[str, ...]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, (member, parse) in opts.MIDDLEWARE.items():
        value = ctx.get(doc, (*base, key), parse, None)
        if value is not None:
            out[member] = value
    return out


def _tls(ctx: Context, doc: dict[str, Any], base: tuple[str, ...], kind: str
         ) -> dict[str, Any]:
    """``mutual_tls_cas`` (http, tls) and a tls tunnel's termination at the edge (``crt``,
    ``key``, ``terminate_at: edge``) in the Bind's form; files relative to their config."""
    def pem(key: str, kind_of: str) -> opts.PemFile:
        return ctx.get(doc, (*base, key), lambda v: opts.pem_file(
            v, ctx.file((*base, key)), kind_of), opts.PemFile("", ""))

    out: dict[str, Any] = {}
    ctx.get(doc, (*base, "terminate_at"), opts.terminate_at, "edge")
    if "crt" in doc or "key" in doc or "terminate_at" in doc:
        for name in ("crt", "key"):
            if name not in doc:
                raise ctx.error((*base, name), "required with crt, key and terminate_at: TLS "
                                               "is terminated with a certificate and its key")
        crt, key = pem("crt", "CERTIFICATE"), pem("key", "PRIVATE KEY")
        ctx.get(doc, (*base, "key"), lambda _v: opts.pair(crt, key), None)
        out["TLSTermination"] = {"Cert": crt.b64(), "Key": key.b64()}
    if "mutual_tls_cas" in doc:
        cas = pem("mutual_tls_cas", "CERTIFICATE")
        ctx.get(doc, (*base, "mutual_tls_cas"), lambda _v: opts.authorities(cas), None)
        if kind == "tls" and "TLSTermination" not in out:
            raise ctx.error((*base, "mutual_tls_cas"), "on a tls tunnel needs crt and key: "
                            "client certificates are checked where TLS is terminated")
        out["MutualTLSAtEdge" if kind == "tls" else "MutualTLSCA"] = {
            "MutualTLSCA": cas.b64()}
    return out


def tunnel(ctx: Context, name: str, doc: object, base: tuple[str, ...]) -> TunnelConfig:
    if not isinstance(doc, dict):
        raise ctx.error(base, f"must be a mapping with proto, addr… (got {show(doc)})")
    kind = _keys(ctx, name, doc, base)
    scheme, host, port = ctx.get(
        doc, (*base, "addr"), lambda v: check.local_addr(v, _ADDR_SCHEMES[kind]), ("", "", 0))
    domain = ctx.get(doc, (*base, "hostname"), lambda v: check.domain(v, wildcard=True), "")
    return TunnelConfig(
        name=name, proto=kind, addr=Addr(scheme, host, port),
        domain=ctx.get(doc, (*base, "domain"), lambda v: check.domain(v, wildcard=True), domain),
        subdomain=ctx.get(doc, (*base, "subdomain"), lambda v: check.domain(v, wildcard=False),
                          ""),
        inspect=ctx.get(doc, (*base, "inspect"), check.boolean, kind == "http"),
        labels=ctx.get(doc, (*base, "labels"), opts.labels, {}),
        metadata=ctx.get(doc, (*base, "metadata"), check.metadata, ""),
        remote_addr=ctx.get(doc, (*base, "remote_addr"),
                            lambda v: check.join_host_port(*check.host_port(check.string(v))),
                            ""),
        basic_auth=ctx.get(doc, (*base, "basic_auth"), opts.basic_auth, ()),
        host_header=ctx.get(doc, (*base, "host_header"), opts.host_header, ""),
        schemes=ctx.get(doc, (*base, "schemes"), opts.schemes,
                        ("https",) if kind == "http" else ()),
        traffic_policy=ctx.get(doc, (*base, "traffic_policy"),
                               lambda v: opts.traffic_policy(v, kind), ""),
        middleware={**_middleware(ctx, doc, base), **_tls(ctx, doc, base, kind)},
        allow_unauthenticated=ctx.get(doc, (*base, "allow_unauthenticated"), check.boolean,
                                      False),
    )
