"""Value checks for a tunnel's options (``tunnels.<name>.<option>``), each parsing one YAML value
or raising ``Invalid`` with the rule. The edge middleware options come back in the form the
Bind message carries them (``Opts``: snake_case members, as the ngrok SDKs send them), so what
``config check`` accepted is exactly what the server is asked for; the server may still refuse
a bind (an OAuth provider it does not know, a policy action it does not run), and the agent
shows that refusal with its reason.

Secrets (passwords, client secrets, webhook secrets) are never echoed in a message.
"""

from __future__ import annotations

import base64
import ipaddress
import json
import math
import os
import re
import ssl
from dataclasses import dataclass
from typing import Any

from edgeway.agent.configcheck import NAME, Invalid, boolean, host_port, show, string, string_list
from edgeway.ippolicy import DENY_ONLY

_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")  # an HTTP header name
_PROVIDER = re.compile(r"[a-z][a-z0-9_]{0,63}")


def _mapping(value: object, keys: frozenset[str]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise Invalid(f"must be a mapping with {', '.join(sorted(keys))} (got {show(value)})")
    for key in value:
        if key not in keys:
            raise Invalid(f"{key}: unknown key; allowed keys: {', '.join(sorted(keys))}")
    return {k: v for k, v in value.items() if v is not None}


def _within(key: str, check: Any, value: object) -> Any:
    try:
        return check(value)
    except Invalid as exc:
        raise Invalid(f"{key}: {exc}") from None


def _list(doc: dict[str, Any], key: str) -> list[str]:
    return list(_within(key, string_list, doc[key])) if key in doc else []


def labels(value: object) -> dict[str, str]:
    found: dict[str, str] = {}
    for i, item in enumerate(string_list(value), 1):
        name, sep, label = item.partition("=")
        if not sep or not NAME.fullmatch(name) or not label or name in found:
            raise Invalid(f"entry {i} must be a distinct name=value (got {item!r})")
        found[name] = label
    if not found:
        raise Invalid("must list at least one name=value")
    return found


def basic_auth(value: object) -> tuple[tuple[str, str], ...]:
    """"user:password" strings; messages name the user, never the password."""
    pairs = []
    for i, item in enumerate(string_list(value), 1):
        user, sep, password = item.partition(":")
        if not sep or not user:
            raise Invalid(f"entry {i} must be user:password")
        if len(password) < 8:
            raise Invalid(f"entry {i} (user {user!r}): the password must be at least 8 "
                          "characters")
        pairs.append((user, password))
    return tuple(pairs)


def host_header(value: object) -> str:
    """``rewrite`` (the local address), ``preserve``, or the Host to send (host[:port])."""
    text = string(value).strip()
    if text not in ("rewrite", "preserve"):
        host_port(text, 80)
    return text


def schemes(value: object) -> tuple[str, ...]:
    items = string_list(value)
    if not items or not set(items) <= {"http", "https"} or len(set(items)) < len(items):
        raise Invalid(f"must list http and/or https, each once (got {items!r})")
    return tuple(items)


def traffic_policy(value: object, kind: str) -> str:
    """A traffic policy: a mapping of phases (or its JSON/YAML text), checked as the API
    checks one (phases of this kind of tunnel, rules, CEL, actions); sent as JSON."""
    from edgeway.catalog.modules.policy import check_policy, parse
    from edgeway.errors import Invalid as Refused

    doc = value
    try:
        if isinstance(value, str):
            doc = parse("traffic_policy", value)
        text = json.dumps(doc)
        check_policy("traffic_policy", text, "tcp_edge" if kind == "tcp"
                     else "http_endpoint")
    except Refused as exc:
        where = exc.member.removeprefix("traffic_policy").lstrip(".")
        rule = str(exc).split("': ", 1)[-1]
        raise Invalid(f"{where}: {rule}" if where else rule) from None
    except (TypeError, ValueError) as exc:
        raise Invalid(f"must be a mapping of phases to rules ({exc})") from None
    return text


def policy_guards(text: str) -> bool:
    """Whether a (checked) traffic policy logs every visitor in or restricts every visitor's
    address: a rule without expressions (it runs for every request or connection) running one
    of GUARD_ACTIONS in its first phase."""
    doc = json.loads(text) if text else {}
    first = [doc[p] for p in ("on_http_request", "on_tcp_connect") if p in doc]
    return any(not rule.get("expressions") and any(
        isinstance(action, dict) and action.get("type") in GUARD_ACTIONS
        for action in rule.get("actions") or ())
        for rules in first for rule in rules or () if isinstance(rule, dict))


def _cidrs(values: list[str]) -> list[str]:
    for i, text in enumerate(values, 1):
        try:
            ipaddress.ip_network(text.strip(), strict=False)
        except ValueError:
            raise Invalid(f"entry {i} must be a CIDR such as 10.0.0.0/8 (got {text!r})") from None
    return [text.strip() for text in values]


def ip_restriction(value: object) -> dict[str, Any]:
    doc = _mapping(value, frozenset({"allow_cidrs", "deny_cidrs"}))
    out = {key: _within(key, _cidrs, _list(doc, key)) for key in ("allow_cidrs", "deny_cidrs")}
    if not out["allow_cidrs"] and not out["deny_cidrs"]:
        raise Invalid("must list allow_cidrs or deny_cidrs")
    if not out["allow_cidrs"]:
        raise Invalid(DENY_ONLY)
    return out


def _login(doc: dict[str, Any]) -> dict[str, Any]:
    """The members OAuth and OIDC share: who may log in, and the scopes asked for."""
    emails, domains = _list(doc, "allow_emails"), _list(doc, "allow_domains")
    for i, email in enumerate(emails, 1):
        if "@" not in email.strip("@"):
            raise Invalid(f"allow_emails: entry {i} must be an email address (got {email!r})")
    return {"allow_emails": emails, "allow_domains": [d.lstrip("@") for d in domains],
            "scopes": _list(doc, "scopes")}


_LOGIN_KEYS = frozenset({"allow_emails", "allow_domains", "scopes", "client_id",
                         "client_secret"})


def oauth(value: object) -> dict[str, Any]:
    doc = _mapping(value, _LOGIN_KEYS | {"provider"})
    provider = _within("provider", string, doc.get("provider", ""))
    if not _PROVIDER.fullmatch(provider):
        raise Invalid(f"provider: must be an identity provider name such as google or github "
                      f"(got {provider!r})")
    client_id = _within("client_id", string, doc.get("client_id", "x"))
    secret = doc.get("client_secret")
    if ("client_id" in doc) != (secret is not None):
        raise Invalid("client_id and client_secret go together: both for your own OAuth "
                      "application, or neither")
    if secret is not None and (not isinstance(secret, str) or not secret):
        raise Invalid("client_secret: must be a non-empty string")
    return {"provider": provider, "client_id": client_id if "client_id" in doc else "",
            "client_secret": secret or "", "sealed_client_secret": [], **_login(doc)}


def oidc(value: object) -> dict[str, Any]:
    doc = _mapping(value, _LOGIN_KEYS | {"issuer_url"})
    issuer = _within("issuer_url", string, doc.get("issuer_url", ""))
    if not re.fullmatch(r"https?://[^/\s]+(/\S*)?", issuer):
        raise Invalid(f"issuer_url: must be the provider's http(s) URL (got {issuer!r})")
    client_id = _within("client_id", string, doc.get("client_id", ""))
    secret = doc.get("client_secret")
    if not isinstance(secret, str) or not secret:
        raise Invalid("client_secret: required, a non-empty string")
    return {"issuer_url": issuer, "client_id": client_id, "client_secret": secret,
            "sealed_client_secret": [], **_login(doc)}


def verify_webhook(value: object) -> dict[str, Any]:
    from edgeway.catalog.modules.webhook import NO_SECRET, PROVIDERS

    doc = _mapping(value, frozenset({"provider", "secret"}))
    provider = _within("provider", string, doc.get("provider", "")).strip().lower()
    if provider not in PROVIDERS:
        raise Invalid(f"provider: {provider!r} is not a provider the edge verifies; one of "
                      + ", ".join(sorted(PROVIDERS)))
    secret = doc.get("secret", "")
    if not isinstance(secret, str) or (not secret and provider not in NO_SECRET):
        raise Invalid(f"secret: required for {provider}, a non-empty string")
    return {"provider": provider, "secret": secret, "sealed_secret": []}


def circuit_breaker(value: object) -> dict[str, Any]:
    """The share of 5xx answers (0 < x <= 1) that trips the breaker."""
    if isinstance(value, bool) or not isinstance(value, int | float) or \
            not math.isfinite(value) or not 0 < value <= 1:
        raise Invalid(f"must be the error threshold, a number above 0 and at most 1 "
                      f"(got {show(value)})")
    return {"error_threshold": float(value)}


def flag(value: object) -> dict[str, Any] | None:
    """An option that is on or off (compression, websocket_tcp_converter): {} when on."""
    return {} if boolean(value) else None


def _header_line(text: str) -> str:
    name, sep, val = text.partition(":")
    if not sep or not _TOKEN.fullmatch(name.strip()) or "\r" in val or "\n" in val:
        raise Invalid(f"must be 'Name: value' with a valid header name (got {text!r})")
    return f"{name.strip()}:{val.strip()}"


def headers(value: object) -> dict[str, Any]:
    doc = _mapping(value, frozenset({"add", "remove"}))
    add = [_within("add", _header_line, line) for line in _list(doc, "add")]
    remove = _list(doc, "remove")
    for name in remove:
        if not _TOKEN.fullmatch(name.strip()):
            raise Invalid(f"remove: {name!r} is not a header name")
    if not add and not remove:
        raise Invalid("must list headers to add or remove")
    return {"add": add, "remove": [n.strip() for n in remove], "add_parsed": {}}


def user_agent_filter(value: object) -> dict[str, Any]:
    doc = _mapping(value, frozenset({"allow", "deny"}))
    out = {"allow": _list(doc, "allow"), "deny": _list(doc, "deny")}
    for key, patterns in out.items():
        for pattern in patterns:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise Invalid(f"{key}: {pattern!r} is not a regular expression ({exc})") \
                    from None
    if not out["allow"] and not out["deny"]:
        raise Invalid("must list allow or deny patterns")
    return out


@dataclass(frozen=True)
class PemFile:
    path: str
    text: str

    def b64(self) -> str:
        """As the Bind carries it (JSON bytes: base64)."""
        return base64.b64encode(self.text.encode()).decode()


def pem_file(value: object, origin: str, kind: str) -> PemFile:
    """A PEM file (its path relative to the config file ``origin``) holding a block of
    ``kind`` (CERTIFICATE, PRIVATE KEY)."""
    path = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(origin)),
                                        os.path.expanduser(string(value))))
    try:
        with open(path, encoding="ascii") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise Invalid(f"cannot read {path}: {getattr(exc, 'strerror', None) or exc}") from None
    if f"{kind}-----" not in text:
        raise Invalid(f"{path} holds no PEM {kind.lower()}")
    return PemFile(path, text)


def pair(crt: PemFile, key: PemFile) -> None:
    """The certificate and key load together, as the edge will load them."""
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(crt.path, key.path)
    except (ssl.SSLError, OSError):
        raise Invalid("crt and key do not load as a pair (a PEM certificate chain and its "
                      "unencrypted private key)") from None


def authorities(cas: PemFile) -> None:
    try:
        ssl.create_default_context(cadata=cas.text)
    except (ssl.SSLError, ValueError):
        raise Invalid(f"{cas.path} holds no CA certificate this agent can read") from None


def terminate_at(value: object) -> str:
    text = string(value)
    if text == "agent":
        raise Invalid("agent: terminating TLS in the agent is not supported by the Edgeway "
                      "agent; use edge (the server terminates with crt and key)")
    if text != "edge":
        raise Invalid(f"must be edge (got {show(value)})")
    return text


# config key -> (the Bind's Opts member, its check), and which protocols take it
MIDDLEWARE: dict[str, tuple[str, Any]] = {
    "ip_restriction": ("IPRestriction", ip_restriction),
    "oauth": ("OAuth", oauth), "oidc": ("OIDC", oidc),
    "verify_webhook": ("WebhookVerification", verify_webhook),
    "circuit_breaker": ("CircuitBreaker", circuit_breaker),
    "compression": ("Compression", flag),
    "request_header": ("RequestHeaders", headers),
    "response_header": ("ResponseHeaders", headers),
    "websocket_tcp_converter": ("WebsocketTCPConverter", flag),
    "user_agent_filter": ("UserAgentFilter", user_agent_filter),
}
TCP_MIDDLEWARE = frozenset({"ip_restriction"})
TLS_MIDDLEWARE = frozenset({"ip_restriction"})
# The options that log a visitor in or keep others out (a tunnel to the agent's own API needs
# one), and the traffic policy actions that do
GUARDS = frozenset({"BasicAuth", "OAuth", "OIDC", "IPRestriction"})
GUARD_ACTIONS = frozenset({"basic-auth", "oauth", "oidc", "openid-connect", "jwt-validation",
                           "restrict-ips"})
SECRETS = {"basic_auth": None, "oauth": "client_secret", "oidc": "client_secret",
           "verify_webhook": "secret"}
