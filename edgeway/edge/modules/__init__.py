"""Edge modules as they run on traffic: each route's (and edge's, and agent bind's) modules
are compiled once into a ``Plan`` when the routing snapshot is built (or the tunnel bound);
the request path only applies it. One file per module; this file puts them in order.

Request phase, in order: ip_restriction, user_agent_filter, basic auth (agent binds),
circuit_breaker, then the refusal of modules this edge does not enforce yet; then, in
``edge/http.py``, the traffic policy's on_http_request, the oidc login and
webhook_verification (the body read whole and its signature checked); then the request
headers change, the backend is chosen and the request forwarded; on the
response the response headers change and compression applies. mutual_tls and
tls_termination act in the TLS handshake (``edge/listeners.py``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from edgeway.catalog.modules.policy import check_policy
from edgeway.edge.modules import (
    circuit_breaker,
    ip_restriction,
    mutual_tls,
    request_headers,
    response_headers,
    traffic_policy,
    user_agent_filter,
    webhook_verification,
)
from edgeway.edge.modules.basic_auth import allows as basic_auth_allows
from edgeway.edge.modules.circuit_breaker import Breaker
from edgeway.edge.modules.ip_restriction import IPRule
from edgeway.edge.modules.oidc import Config as Login
from edgeway.edge.modules.oidc import compile as compile_login
from edgeway.edge.modules.request_headers import HeaderChange
from edgeway.edge.modules.user_agent_filter import UserAgents
from edgeway.edge.pages import Fixed, page
from edgeway.errors import Invalid
from edgeway.tunnel.binds import BindRequest
from edgeway.tunnel.restrict import Network

# Modules whose protection the edge does not provide yet: traffic that would need them is
# answered with a 503 naming the module instead of being passed through unprotected.
UNENFORCED = ("oauth", "saml")


NO_CHANGE = HeaderChange()


def on(module: Any) -> bool:
    """A module that is set and not disabled."""
    return isinstance(module, dict) and module.get("enabled", True) is not False


@dataclass(frozen=True)
class Plan:
    ip: IPRule | None = None
    user_agents: UserAgents | None = None
    basic_auth: tuple[tuple[str, str], ...] = ()
    breaker: circuit_breaker.Config | None = None
    unenforced: str | None = None
    request_headers: HeaderChange = NO_CHANGE
    response_headers: HeaderChange = NO_CHANGE
    compression: bool = False
    backend_id: str = ""
    client_cas: tuple[str, ...] = ()  # mutual_tls: certificate authority ids
    webhook: webhook_verification.Verifier | None = None
    websocket_tcp: bool = False  # websocket_tcp_converter
    oidc: Login | None = None
    policy: traffic_policy.Policy | None = None
    min_tls_version: str | None = None  # tls_termination

    def refuse(self, ip: str, user_agent: str, authorization: str,
               breaker: Breaker | None) -> Fixed | None:
        """The answer of the first request-phase module that refuses, else None."""
        if self.ip is not None and not self.ip.allows(ip):
            return page(403, "Forbidden", "Your IP address may not access this site.", 4003)
        if self.user_agents is not None and not self.user_agents.allows(user_agent):
            return page(403, "Forbidden", "Your user agent may not access this site.", 4007)
        if self.basic_auth and not basic_auth_allows(authorization, self.basic_auth):
            return page(401, "Authentication required", "This site needs a user name and "
                        "password.", 4001, (("WWW-Authenticate", 'Basic realm="edgeway"'),))
        if breaker is not None and not breaker.allows():
            return page(503, "Circuit open", "Too many recent requests failed; this route is "
                        "paused for a moment.", 4011,
                        (("Retry-After", str(int(breaker.config.tripped_duration))),))
        if self.unenforced:
            return page(503, "Not available", f"This route requires the {self.unenforced} "
                        "module, which this edge does not enforce yet; traffic is refused "
                        "rather than let through unprotected.", 4008)
        return None


def compile_doc(doc: dict[str, Any], rules: dict[str, list[tuple[str, Network]]],
                key: str = "") -> Plan:
    """The plan of a route or an edge document (modules stored in request form); ``key``
    names it (the traffic policy's rate-limit windows are its own)."""
    def module(name: str) -> dict[str, Any] | None:
        value = doc.get(name)
        return value if on(value) else None

    ip, ua, cb = module("ip_restriction"), module("user_agent_filter"), module("circuit_breaker")
    req, res, backend = module("request_headers"), module("response_headers"), module("backend")
    wh = module("webhook_verification")
    webhook = webhook_verification.compile(wh) if wh else None
    tp = module("traffic_policy")
    policy = traffic_policy.compile(tp, key) if tp else None
    return Plan(
        ip=ip_restriction.compile(ip, rules) if ip else None,
        user_agents=user_agent_filter.compile(ua) if ua else None,
        breaker=circuit_breaker.compile(cb) if cb else None,
        unenforced=next((m for m in UNENFORCED if module(m)), None) or (
            f"webhook_verification (provider '{wh.get('provider')}')"
            if wh and webhook is None else None) or (policy.unsupported if policy else None),
        policy=policy,
        webhook=webhook,
        websocket_tcp=module("websocket_tcp_converter") is not None,
        oidc=compile_login(login) if (login := module("oidc")) else None,
        request_headers=request_headers.compile(req) if req else NO_CHANGE,
        response_headers=response_headers.compile(res) if res else NO_CHANGE,
        compression=module("compression") is not None,
        backend_id=str(backend.get("backend_id", "")) if backend else "",
        client_cas=mutual_tls.ca_ids(mtls) if (mtls := module("mutual_tls")) else (),
        min_tls_version=(module("tls_termination") or {}).get("min_version"))


def for_bind(req: BindRequest, key: str = "") -> Plan:
    """The plan of an agent's bind, from the options it sent (``key``: its tunnel id)."""
    def change(h: Any) -> HeaderChange:
        return HeaderChange(tuple((k.encode(), v.encode()) for k, v in h.add),
                            frozenset(n.encode() for n in h.remove))
    return replace(compile_doc(req.modules, {}, key),
                   ip=IPRule(req.allow, req.deny) if req.allow or req.deny else None,
                   basic_auth=req.basic_auth, request_headers=change(req.request_headers),
                   response_headers=change(req.response_headers), compression=req.compression)


def bind_refusal(req: BindRequest) -> str | None:
    """Why the edge cannot enforce what a bind asks for (it is then refused), or None."""
    mods = req.modules
    if "traffic_policy" in mods:
        text = mods["traffic_policy"]["value"]
        try:
            check_policy("traffic_policy", text, "tcp_edge" if req.proto == "tcp" else "route")
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
    plan = compile_doc(mods, {}, req.id)
    if plan.unenforced:
        return f"{plan.unenforced} is not enforced by this edge yet; refusing rather than " \
               "ignoring it"
    return None
