"""Bind requests: what an agent asks for, checked against its credential's ACL and against the
options this edge can enforce. Pure: the server does the allocation and the I/O.

Options the edge enforces on agent tunnels: IP restrictions; for HTTP also basic auth,
request/response header changes, Host header rewriting, compression, the circuit breaker and
mutual TLS (HTTPS: the client certificates the handshake requires, ``client_cas``); for TLS,
termination at the edge with the agent's own certificate (``termination``) and mutual TLS
with it; the modules it checks and compiles itself (``modules``: OAuth, OIDC, webhook
verification, traffic policy, ...). Every other security or traffic option an SDK can send
(mutual TLS at the agent, PROXY protocol, ...) is refused with a clear error rather than
accepted and silently ignored.
"""

from __future__ import annotations

import base64
import binascii
import ipaddress
import ssl
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from edgeway.catalog import checks
from edgeway.catalog.modules.policy import modern
from edgeway.errors import Invalid
from edgeway.ippolicy import DENY_ONLY, Network

PROTOS = ("http", "https", "tcp", "tls")
# Bind options (folded keys) the edge does not enforce: refused when set
UNSUPPORTED = {
    "http": ("policy",),
    "tcp": ("policy",),
    "tls": ("mutualtlsatagent", "policy"),
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
    allow: tuple[Network, ...] = ()
    deny: tuple[Network, ...] = ()
    request_headers: HeaderChanges = HeaderChanges()
    response_headers: HeaderChanges = HeaderChanges()
    basic_auth: tuple[tuple[str, str], ...] = ()  # (user, password) pairs
    compression: bool = False
    # oidc, webhook_verification, traffic_policy, user_agent_filter, websocket_tcp_converter:
    # as an edge route's module documents (checked and compiled by the edge); oauth as the
    # SDK sends it (the provider by the SDK's name; the edge maps it to its module)
    modules: dict[str, Any] = field(default_factory=dict)
    client_cas: str = ""  # PEM: mutual TLS, the client certificates the edge requires
    termination: tuple[str, str] | None = None  # TLS: (certificate chain, key) PEM


def _raw_opts(message: dict[str, Any]) -> dict[str, Any]:
    opts = next((v for k, v in message.items() if k.lower() == "opts"), None) or {}
    return opts if isinstance(opts, dict) else {}


def _cidrs(values: Any, what: str) -> tuple[Network, ...]:
    out = []
    for v in values or []:
        try:
            out.append(ipaddress.ip_network(str(v), strict=False))
        except ValueError:
            raise BindRefused(f"IP restriction: '{v}' in {what} is not a CIDR") from None
    return tuple(out)


def _restriction(restriction: dict[str, Any]) -> tuple[tuple[Network, ...], ...]:
    """An ``IPRestriction``'s allow and deny CIDRs; deny CIDRs alone would let no address
    through: refused, as ngrok refuses them (ERR_NGROK_393)."""
    allow = _cidrs(_list(restriction.get("allowcidrs"), "Opts.IPRestriction.AllowCIDRs"),
                   "allow_cidrs")
    deny = _cidrs(_list(restriction.get("denycidrs"), "Opts.IPRestriction.DenyCIDRs"),
                  "deny_cidrs")
    if deny and not allow:
        raise BindRefused(f"IP restriction: {DENY_ONLY}")
    return allow, deny


def _object(value: Any, what: str) -> dict[str, Any]:
    """A member that must be a JSON object (absent or null: an empty one)."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BindRefused(f"{what} must be a JSON object, not {type(value).__name__}")
    return value


def _list(value: Any, what: str) -> list[Any]:
    """A member that must be a JSON array (absent or null: an empty one)."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise BindRefused(f"{what} must be a JSON array, not {type(value).__name__}")
    return value


def _headers(value: Any, what: str) -> HeaderChanges:
    value = _object(value, what)
    add: list[tuple[str, str]] = []
    for item in _list(value.get("add"), f"{what}.Add"):
        name, sep, val = str(item).partition(":")
        if not sep or not name.strip():
            raise BindRefused(f"header '{item}' must be 'Name: value'")
        add.append((name.strip(), val.strip()))
    return HeaderChanges(tuple(add), tuple(str(n).lower() for n in _list(
        value.get("remove"), f"{what}.Remove")))


def _basic_auth(opts: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    pairs: list[tuple[str, str]] = []
    if opts.get("auth"):  # the older "user:password" option
        user, _, password = str(opts["auth"]).partition(":")
        pairs.append((user, password))
    for cred in _list(_object(opts.get("basicauth"), "Opts.BasicAuth").get("credentials"),
                      "Opts.BasicAuth.Credentials"):
        cred = _object(cred, "each of Opts.BasicAuth.Credentials")
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


def _refuse_unsupported(opts: dict[str, Any], proto: str, family: str) -> None:
    """BindRefused for an option this edge does not enforce (refused, never ignored)."""
    for name in UNSUPPORTED[family]:
        if opts.get(name) not in (None, "", False, 0):  # an empty object is set
            raise BindRefused(f"{NAMES[name]} on {proto} tunnels is not enforced by this edge "
                              "yet; refusing rather than ignoring it")
    proxy_proto = opts.get("proxyproto") or 0
    if not isinstance(proxy_proto, int) or isinstance(proxy_proto, bool):
        raise BindRefused(f"Opts.ProxyProto must be a number, not {proxy_proto!r}")
    if proxy_proto:
        raise BindRefused("the PROXY protocol header is not supported by this edge yet")


def _pem(value: Any, what: str) -> str:
    """A PEM the SDKs send base64-encoded (JSON bytes)."""
    if not isinstance(value, str) or not value:
        raise BindRefused(f"{what} must be base64 of a PEM, not {type(value).__name__}")
    try:
        return base64.b64decode(value, validate=True).decode("ascii")
    except (binascii.Error, UnicodeDecodeError):
        raise BindRefused(f"{what} is not base64 of a PEM") from None


def _client_cas(opts: dict[str, Any], key: str, what: str) -> str:
    """The CA certificates of a mutual TLS option (``{"MutualTLSCA": base64}``), checked."""
    option = _object(opts.get(key), what)
    if not option:
        return ""
    pem = _pem(option.get("mutualtlsca"), f"{what}.MutualTLSCA")
    try:
        ssl.create_default_context(cadata=pem)
    except (ssl.SSLError, ValueError):
        raise BindRefused(f"mutual TLS: {what}.MutualTLSCA holds no PEM certificate this edge "
                          "can read") from None
    return pem


def _termination(opts: dict[str, Any]) -> tuple[str, str] | None:
    """A TLS tunnel's ``TLSTermination``: the agent's certificate and key, checked to load
    and belong together (the edge terminates with them)."""
    option = _object(opts.get("tlstermination"), "Opts.TLSTermination")
    if not option:
        return None
    if option.get("sealedkey") and not option.get("key"):
        raise BindRefused("TLS termination with a sealed key is not supported; send the key "
                          "itself (it travels inside the agent's TLS session)")
    cert = _pem(option.get("cert"), "Opts.TLSTermination.Cert")
    key = _pem(option.get("key"), "Opts.TLSTermination.Key")
    if not loads(cert, key):
        raise BindRefused("TLS termination: the certificate and key do not load as a pair "
                          "(PEM certificate chain, and its unencrypted private key)")
    return cert, key


def loads(cert: str, key: str) -> bool:
    """Whether ``cert`` (a PEM chain) and ``key`` load together into a TLS server context."""
    with tempfile.TemporaryDirectory() as tmp:
        cert_path, key_path = Path(tmp) / "cert.pem", Path(tmp) / "key.pem"
        cert_path.write_text(cert)
        key_path.touch(0o600)
        key_path.write_text(key)
        try:
            ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(cert_path, key_path)
        except (ssl.SSLError, ValueError, OSError):
            return False
    return True


def parse(message: dict[str, Any], folded: dict[str, Any], base_domain: str) -> BindRequest:
    """What the Bind ``message`` (``folded``: its keys lower-cased) asks for; BindRefused
    names what is wrong with it, a member of the wrong JSON type included."""
    opts = _squash(_object(folded.get("opts"), "Opts"))
    extra = _object(folded.get("extra"), "Extra")
    proto = str(folded.get("proto") or "")
    if proto not in PROTOS:
        raise BindRefused(f"unknown tunnel protocol '{proto}' (http, https, tcp or tls)")
    family = "http" if proto in ("http", "https") else proto
    _refuse_unsupported(opts, proto, family)
    allow, deny = _restriction(_object(opts.get("iprestriction"), "Opts.IPRestriction"))
    request_headers = _headers(opts.get("requestheaders"), "Opts.RequestHeaders")
    client_cas = _client_cas(opts, "mutualtlsca" if family == "http" else "mutualtlsatedge",
                             "Opts.MutualTLSCA" if family == "http" else "Opts.MutualTLSAtEdge")
    termination = _termination(opts) if family == "tls" else None
    if client_cas and proto == "http":
        raise BindRefused("mutual TLS needs an https tunnel: a plain http one has no TLS "
                          "handshake to check a client certificate in")
    if client_cas and proto == "tls" and termination is None:
        raise BindRefused("mutual TLS at the edge needs TLS terminated at the edge "
                          "(termination with your certificate and key): a passed-through "
                          "handshake is your service's to check")
    if family == "http" and opts.get("hostheaderrewrite"):
        request_headers = _host_rewrite(request_headers, str(folded.get("forwardsto") or ""))
    return BindRequest(
        str(folded.get("id") or ""), proto, str(opts.get("addr") or ""),
        domain_of(opts, base_domain) if family != "tcp" else "",
        str(folded.get("forwardsto") or ""), str(extra.get("metadata") or ""),
        _raw_opts(message), pooled=bool(extra.get("poolingenabled")),
        allow=allow, deny=deny,
        request_headers=request_headers,
        response_headers=_headers(opts.get("responseheaders"), "Opts.ResponseHeaders"),
        basic_auth=_basic_auth(opts) if family == "http" else (),
        compression=family == "http" and opts.get("compression") is not None,
        client_cas=client_cas, termination=termination,
        modules=_modules(opts, family))


def _oauth(opts: dict[str, Any]) -> dict[str, Any]:
    """The OAuth option, as sent (the provider by the SDK's name), if there is one."""
    oauth = opts.get("oauth")
    if not isinstance(oauth, dict):
        return {}
    if oauth.get("sealedclientsecret") and not oauth.get("clientsecret"):
        raise BindRefused("OAuth with a sealed client secret is not supported; send the "
                          "client secret itself (it travels inside the agent's TLS session)")
    return {"oauth": {"provider": str(oauth.get("provider") or ""),
                      "client_id": str(oauth.get("clientid") or ""),
                      "client_secret": str(oauth.get("clientsecret") or ""),
                      **_allowed(oauth, "OAuth")}}


def _allowed(option: dict[str, Any], name: str) -> dict[str, list[Any]]:
    """An OAuth or OIDC option's scopes and allowed e-mails and domains."""
    return {"scopes": _list(option.get("scopes"), f"Opts.{name}.Scopes"),
            "allow_emails": _list(option.get("allowemails"), f"Opts.{name}.AllowEmails"),
            "allow_domains": _list(option.get("allowdomains"), f"Opts.{name}.AllowDomains")}


def _modules(opts: dict[str, Any], family: str) -> dict[str, Any]:
    """The bind options the edge enforces as modules, in the modules' document form (a
    traffic policy with the phases' earlier names, as the SDKs' ``policy()`` sends it, in
    today's)."""
    out: dict[str, Any] = {}
    if isinstance(policy := opts.get("trafficpolicy"), str) and policy.strip():
        try:
            value = modern("traffic_policy", policy, "http_endpoint" if family == "http"
                           else "tcp_edge")
        except Invalid as exc:
            raise BindRefused(f"the traffic policy is not valid: {exc}") from None
        out["traffic_policy"] = {"value": value}
    if family != "http":
        return out
    out.update(_oauth(opts))
    if isinstance(oidc := opts.get("oidc"), dict):
        out["oidc"] = {"issuer": str(oidc.get("issuerurl") or ""),
                       "client_id": str(oidc.get("clientid") or ""),
                       "client_secret": str(oidc.get("clientsecret") or ""),
                       **_allowed(oidc, "OIDC")}
    if isinstance(breaker := opts.get("circuitbreaker"), dict):
        out["circuit_breaker"] = {"error_threshold_percentage": _ratio(breaker)}
    if isinstance(hook := opts.get("webhookverification"), dict):
        out["webhook_verification"] = {"provider": str(hook.get("provider") or ""),
                                       "secret": str(hook.get("secret") or "")}
    if isinstance(agents := opts.get("useragentfilter"), dict):
        out["user_agent_filter"] = {
            "allow": _list(agents.get("allow"), "Opts.UserAgentFilter.Allow"),
            "deny": _list(agents.get("deny"), "Opts.UserAgentFilter.Deny")}
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
