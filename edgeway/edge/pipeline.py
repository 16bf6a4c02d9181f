"""The edge's modules in the order they run: ``PIPELINE`` is the one statement of it.

A route's (edge's, agent bind's) modules compile, when the routing snapshot is built (or the
tunnel bound), into a ``Plan``: the hooks of the modules that are set and enabled, in
``PIPELINE`` order, kept per phase (``edge/hooks.py``). Request phases run in that order;
the response phase in reverse, like a middleware stack: compression, first, sees the response
last, after every header change. So a request meets: its IP and user agent rules, basic auth,
the circuit breaker and modules this edge does not enforce (all before a backend is chosen),
then the traffic policy's on_http_request, the login (OAuth, SAML or OIDC: what follows runs
only for a signed-in user, or an OPTIONS request let through), the WebSocket-to-TCP takeover
and the webhook signature; its head gets the request header changes on the way upstream; the
response head gets the response header changes, the policy's on_http_response, then
compression.

Not hooks: ``backend`` (routing, ``edge/router.py``) and ``mutual_tls``/``tls_termination``
(the TLS handshake, ``edge/listeners.py``), kept as the plan's own members.

Adding a module: its catalog entry (``edgeway/catalog/modules``), one file here in
``edge/modules/<name>.py`` exporting ``compile(config, Compiling) -> Hook | None``, its place
in ``PIPELINE``, and its tests; ``tests/edge/test_pipeline.py`` fails until every catalog
module has one of the three.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from edgeway.catalog.modules.policy import check_policy
from edgeway.edge.h1 import Headers
from edgeway.edge.hooks import (
    UNKNOWN,
    Compiling,
    Connect,
    Hook,
    Inner,
    Local,
    Rules,
    Unenforced,
    nobody,
    overrides,
)
from edgeway.edge.login.providers import BY_SDK_NAME, PROVIDERS
from edgeway.edge.modules import (
    basic_auth,
    circuit_breaker,
    compression,
    ip_restriction,
    mutual_tls,
    oauth,
    oidc,
    request_headers,
    response_headers,
    saml,
    traffic_policy,
    user_agent_filter,
    webhook_verification,
    websocket_tcp_converter,
)
from edgeway.edge.modules.terminate_tls import TerminateTls
from edgeway.edge.pages import Fixed
from edgeway.errors import Invalid
from edgeway.tunnel.binds import BindRequest

Compiler = Callable[[dict[str, Any], Compiling], Hook | None]
H = TypeVar("H", bound=Hook)


PIPELINE: tuple[tuple[str, Compiler], ...] = (
    ("compression", compression.compile),
    ("ip_restriction", ip_restriction.compile),
    ("user_agent_filter", user_agent_filter.compile),
    ("basic_auth", basic_auth.compile),  # agent binds only
    ("circuit_breaker", circuit_breaker.compile),
    ("traffic_policy", traffic_policy.compile),
    ("oauth", oauth.compile),
    ("saml", saml.compile),
    ("oidc", oidc.compile),
    ("websocket_tcp_converter", websocket_tcp_converter.compile),
    ("webhook_verification", webhook_verification.compile),
    ("request_headers", request_headers.compile),
    ("response_headers", response_headers.compile),
)
NOT_HOOKS = ("backend", "mutual_tls", "tls_termination")


def on(module: Any) -> bool:
    """A module that is set and not disabled."""
    return isinstance(module, dict) and module.get("enabled", True) is not False


def _phase(hooks: tuple[Hook, ...], name: str) -> tuple[Hook, ...]:
    return tuple(h for h in hooks if overrides(h, name))


@dataclass(frozen=True)
class Plan:
    hooks: tuple[Hook, ...] = ()
    backend_id: str = ""
    client_cas: tuple[str, ...] = ()  # mutual_tls: certificate authority ids
    min_tls_version: str | None = None  # tls_termination
    connects: tuple[Hook, ...] = field(init=False)
    checks: tuple[Hook, ...] = field(init=False)
    requests: tuple[Hook, ...] = field(init=False)
    upstreams: tuple[Hook, ...] = field(init=False)
    responses: tuple[Hook, ...] = field(init=False)  # in reverse order
    outcomes: tuple[Hook, ...] = field(init=False)
    awaits: bool = field(init=False)  # a response hook waits on something

    def __post_init__(self) -> None:
        for name, phase in (("connects", "connect"), ("checks", "check"),
                            ("requests", "request"), ("upstreams", "upstream"),
                            ("outcomes", "outcome")):
            object.__setattr__(self, name, _phase(self.hooks, phase))
        object.__setattr__(self, "responses", _phase(self.hooks, "response")[::-1])
        object.__setattr__(self, "awaits", any(h.awaits for h in self.responses))

    def find(self, kind: type[H]) -> H | None:
        """The first hook of ``kind``, a traffic policy's actions that are hooks included."""
        return next((h for hook in self.hooks for h in (hook, *hook.within)
                     if isinstance(h, kind)), None)

    @property
    def unenforced(self) -> str | None:
        """What this plan needs that the edge does not enforce (its traffic is refused)."""
        hook = self.find(Unenforced)
        return hook.what if hook is not None else None

    def check(self, ip: str, headers: Headers) -> Fixed | None:
        """The answer of the first hook that refuses a request, else None."""
        for hook in self.checks:
            refusal = hook.check(ip, headers)
            if refusal is not None:
                return refusal
        return None

    def connect(self, ip: str, port: int, inner: Inner = nobody,
                local: Local = UNKNOWN) -> Connect:
        """Whether a TCP or TLS connection from ``ip``:``port`` (to ``local``) may go on, or
        where a traffic policy's forward-internal sends it (``inner`` finds internal TCP
        endpoints)."""
        for hook in self.connects:
            verdict = hook.connect(ip, port, inner, local)
            if verdict is not True:
                return verdict
        return True


def compile_doc(doc: dict[str, Any], ctx: Compiling | None = None) -> Plan:
    """The plan of a route or an edge document (modules stored in request form)."""
    ctx = ctx or Compiling()
    hooks = []
    for name, compile_module in PIPELINE:
        module = doc.get(name)
        if isinstance(module, dict) and on(module):
            hook = compile_module(module, ctx)
            if hook is not None:
                hooks.append(hook)
    backend = doc.get("backend") if on(doc.get("backend")) else None
    mtls = doc.get("mutual_tls") if on(doc.get("mutual_tls")) else None
    tls = doc.get("tls_termination") if on(doc.get("tls_termination")) else None
    return Plan(tuple(hooks), str(backend.get("backend_id", "")) if backend else "",
                mutual_tls.ca_ids(mtls) if mtls else (), tls.get("min_version") if tls else None)


def _oauth_doc(sent: dict[str, Any]) -> dict[str, Any]:
    """An SDK's OAuth option as the oauth module's document (the provider by the name the
    SDKs use, or the module's own)."""
    known = BY_SDK_NAME.get(sent["provider"].lower())
    app = {"client_id": sent["client_id"], "client_secret": sent["client_secret"],
           "scopes": sent["scopes"], "email_addresses": sent["allow_emails"],
           "email_domains": sent["allow_domains"]}
    return {"provider": {known.name: app} if known else {}}


def _bind_modules(req: BindRequest) -> dict[str, Any]:
    mods = dict(req.modules)
    if "oauth" in mods:
        mods["oauth"] = _oauth_doc(mods["oauth"])
    return mods


def bind_doc(req: BindRequest) -> dict[str, Any]:
    """An agent's bind options as module documents (CIDRs, credentials and header pairs in
    the forms the modules take from binds)."""
    doc = _bind_modules(req)
    if req.allow or req.deny:
        doc["ip_restriction"] = {"allow": [str(n) for n in req.allow],
                                 "deny": [str(n) for n in req.deny]}
    if req.basic_auth:
        doc["basic_auth"] = {"credentials": list(req.basic_auth)}
    for name, change in (("request_headers", req.request_headers),
                         ("response_headers", req.response_headers)):
        if change.add or change.remove:
            doc[name] = {"add": list(change.add), "remove": list(change.remove)}
    if req.compression:
        doc["compression"] = {}
    return doc


def _compiling(req: BindRequest, key: str, secrets: Mapping[tuple[str, str], str] | None,
               rules: Rules | None, variables: Mapping[str, Any] | None = None) -> Compiling:
    """How a bind's modules are compiled: TLS is terminated at the edge for TLS, TCP and
    HTTPS endpoints (terminate-tls), and an HTTP(S) one's on_tcp_connect is an HTTP
    endpoint's."""
    return Compiling(rules or {}, key, secrets=secrets or {},
                     terminates=req.proto in ("tls", "tcp", "https"),
                     endpoint=req.proto if req.proto in ("http", "https") else "",
                     variables=variables or {})


def for_bind(req: BindRequest, key: str = "",
             secrets: Mapping[tuple[str, str], str] | None = None,
             rules: Rules | None = None, variables: Mapping[str, Any] | None = None) -> Plan:
    """The plan of an agent's bind, from the options it sent (``key``: its tunnel id; the
    vault secrets its traffic policy may read and the IP policies' rules it may name; its
    endpoint's ``endpoint.*`` variables)."""
    return compile_doc(bind_doc(req), _compiling(req, key, secrets, rules, variables))


def _oauth_refusal(req: BindRequest, oauth_apps: tuple[str, ...]) -> str | None:
    sent = req.modules["oauth"]
    known = BY_SDK_NAME.get(sent["provider"].lower())
    if known is None:
        return f"OAuth provider '{sent['provider']}' is not one of " + ", ".join(
            sorted(p.sdk for p in PROVIDERS.values()))
    if req.proto != "https":
        return "OAuth logins need an https tunnel (the provider returns to an https URL)"
    if bool(sent["client_id"]) != bool(sent["client_secret"]):
        return "an OAuth client id and client secret go together"
    if not sent["client_id"] and known.name not in oauth_apps:
        return (f"this server has no managed OAuth application for {known.sdk}; pass the "
                "client id and secret of your own application")
    return None


def reads_snapshot(req: BindRequest) -> bool:
    """Whether a bind's traffic policy may read vault secrets or name IP policies (its plan
    then changes with the routing snapshot)."""
    text = str(req.modules.get("traffic_policy", {}).get("value", ""))
    return "secrets" in text or "ip_policies" in text


def bind_refusal(req: BindRequest, secrets: Mapping[tuple[str, str], str] | None = None,
                 oauth_apps: tuple[str, ...] = (), rules: Rules | None = None) -> str | None:
    """Why the edge cannot enforce what a bind asks for (it is then refused), or None;
    ``oauth_apps``: the providers this server has a managed OAuth application for;
    ``rules``: the IP policies' rules by policy id."""
    mods = req.modules
    if "traffic_policy" in mods:
        text = mods["traffic_policy"]["value"]
        try:
            check_policy("traffic_policy", text, "tcp_edge" if req.proto in ("tcp", "tls")
                         else "http_endpoint")
        except Invalid as exc:
            return f"the traffic policy is not valid: {exc}"
    if "user_agent_filter" in mods:
        try:
            user_agent_filter.compile(mods["user_agent_filter"])
        except re.error as exc:
            return f"a user agent filter is not a valid regular expression: {exc}"
    if "oidc" in mods:
        login = mods["oidc"]
        if not login["issuer"].startswith(("https://", "http://")) or not login["client_id"] \
                or not login["client_secret"]:
            return "OIDC needs an issuer URL, a client id and a client secret"
        if req.proto != "https":
            return "OIDC logins need an https tunnel (the provider returns to an https URL)"
    if "oauth" in mods and (why := _oauth_refusal(req, oauth_apps)) is not None:
        return why
    plan = compile_doc(_bind_modules(req), _compiling(req, req.id, secrets, rules))
    if req.termination is not None and plan.find(TerminateTls) is not None:
        return ("TLS termination is asked for twice: by the bind's certificate and key and by "
                "the traffic policy's terminate-tls; keep one")
    unenforced = plan.unenforced
    if unenforced:
        return f"{unenforced} is not enforced by this edge yet; refusing rather than " \
               "ignoring it"
    return None
