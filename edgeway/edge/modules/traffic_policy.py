"""The traffic_policy module: rules of CEL ``expressions`` (all must hold; none: always) and
``actions``, run in order per phase. Compiled once per snapshot (the expressions, and each
action into a closure: ``policy_actions``); evaluated per request (or TCP connection) against
the variables ``conn``, ``req`` and (on responses) ``res``.

The enforced actions are ``policy_actions.ACTIONS``, per phase. A policy using any other
action (or an option of one that is not supported) is not run at all: its traffic is refused,
naming the action (``compile`` returns an ``Unenforced`` hook). String options take ``${expr}``
interpolations. ``secrets.get(vault, name)`` reads a vault secret (``secrets.py``).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import structlog

from edgeway.catalog.modules.policy import REQ, RES, SSE, TCP, parse
from edgeway.celpkg import cel
from edgeway.edge.h1 import header
from edgeway.edge.hooks import (
    CLOSE,
    UNKNOWN,
    Compiling,
    Connect,
    Diverted,
    Exchange,
    Hook,
    Inner,
    Local,
    Unenforced,
    Verdict,
    nobody,
)
from edgeway.edge.login import base as login
from edgeway.edge.modules import (
    body_replace,
    circuit_breaker,
    forward_internal,
    http_request,
    jwt_validation,
    policy_bodies,
    policy_logins,
    secrets,
    terminate_tls,
    webhook_verification,
)
from edgeway.edge.modules.policy_actions import compile_action
from edgeway.edge.modules.policy_env import (
    NO_VARIABLE,
    conn_vars,
    request_endpoint,
    request_env,
    response_env,
    unknown_variable,
)
from edgeway.edge.modules.policy_values import (
    Headers,
    Outcome,
    Scope,
    Unsupported,
)
from edgeway.edge.modules.rate_limits import RateLimits
from edgeway.edge.pages import Fixed

log = structlog.get_logger()
# The actions that run as hooks (``Policy.request`` awaits them): they read the request's body,
# fetch keys or call an internal endpoint; the others are ``policy_actions``' closures.
HOOKS: dict[str, dict[str, Callable[[dict[str, Any], Scope], Hook]]] = {
    RES: {"http-request": lambda cfg, _at: http_request.compile(cfg)},
    REQ: {"jwt-validation": lambda cfg, _at: jwt_validation.compile(cfg),
          "verify-webhook": lambda cfg, _at: webhook_verification.policy_action(cfg),
          "forward-internal": lambda cfg, _at: forward_internal.compile(cfg),
          "http-request": lambda cfg, _at: http_request.compile(cfg),
          "request-body-find-replace": lambda cfg, _at: body_replace.compile(cfg),
          "oauth": policy_logins.oauth_action,
          "openid-connect": policy_logins.openid_connect_action,
          "oidc": policy_logins.openid_connect_action,  # (its earlier name)
          "circuit-breaker": lambda cfg, at: _breaker(cfg, at)},
}
__all__ = ["Outcome", "Policy", "RateLimits", "compile", "request_env", "response_env"]


@dataclass(frozen=True)
class Rule:
    name: str
    expressions: tuple[Any, ...]  # cel.Program
    actions: tuple[Any, ...]  # the phase's action closures (policy_actions)


@dataclass(frozen=True)
class Policy(Hook):
    name = "traffic_policy"
    key: str  # identifies the policy's rate-limit windows
    phases: dict[str, tuple[Rule, ...]]
    rewrites: bool = False  # it may rewrite response bodies: its requests ask for identity
    endpoint: Mapping[str, Any] = field(default_factory=dict)  # endpoint.*, when fixed

    def has(self, phase: str) -> bool:
        return bool(self.phases.get(phase))

    @property
    def within(self) -> tuple[Hook, ...]:
        """The actions that are hooks (the logins among them: the router finds the route a
        login callback belongs to by its gate)."""
        return tuple(a for rules in self.phases.values() for rule in rules
                     for a in rule.actions if isinstance(a, Hook))

    # -- evaluation ------------------------------------------------------------------------

    def _matching(self, phase: str, env: dict[str, Any]) -> Iterator[Rule]:
        """The phase's rules whose expressions hold, each decided when its turn comes (after
        the actions of the rules before it: their set-vars count)."""
        for rule in self.phases.get(phase, ()):
            try:
                matched = all(expr.execute(env) is True for expr in rule.expressions)
            except Exception as exc:  # an expression that cannot be evaluated: no match
                log.info("policy_expression_failed", rule=rule.name,
                         error=str(exc).splitlines()[0])
                continue
            if matched:
                yield rule

    def _actions(self, phase: str, env: dict[str, Any]) -> Iterator[Any]:
        for rule in self._matching(phase, env):
            yield from rule.actions

    def on_request(self, env: dict[str, Any], headers: Headers, target: bytes,
                   limits: RateLimits, now: float) -> Outcome:
        """The request phase of a policy whose actions need nothing but the request's head
        (``request`` runs every policy: actions that read the body or fetch keys too)."""
        out = Outcome(list(headers), target)
        for action in self._actions(REQ, env):
            if isinstance(action, Hook):
                raise TypeError(f"{action.name} runs only on a request (Policy.request)")
            if action(env, out, limits, now):
                return out
        return out

    def on_response(self, env: dict[str, Any], headers: Headers) -> Headers:
        """The response phase of a policy whose actions do not wait (``awaits``: see
        ``response_awaiting``)."""
        out = list(headers)
        for rule in self._matching(RES, env):
            for action in rule.actions:
                if isinstance(action, Hook):
                    raise TypeError(f"{action.name} runs only in Policy.response_awaiting")
                out = action(env, out)
        return out

    def on_tcp_connect(self, ip: str, port: int, inner: Inner = nobody,
                       local: Local = UNKNOWN) -> Connect:
        """Whether the connection may go on, or the internal TCP endpoint a forward-internal
        sends it to (``inner`` finds its live tunnel; one nobody serves ends the phase when
        the action halts, and is passed over when it continues)."""
        env: dict[str, Any] = {"conn": conn_vars(ip, port, local, 0, 0), "vars": {},
                               "endpoint": self.endpoint}
        for rule in self._matching(TCP, env):
            for action in rule.actions:
                if isinstance(action, forward_internal.TcpForward):
                    target = inner(action.addr)
                    if target is not None or action.halt:
                        return Diverted(action.addr, target)
                elif not action(env):
                    return False
        return True

    # -- as a hook -------------------------------------------------------------------------

    def connect(self, ip: str, port: int, inner: Inner = nobody,
                local: Local = UNKNOWN) -> Connect:
        return self.on_tcp_connect(ip, port, inner, local)

    async def request(self, x: Exchange) -> Verdict:
        req = x.req
        host = header(req.headers, b"host").decode("latin-1")
        env = x.env = request_env(req.method, req.target, req.headers, host, x.scheme, x.ip,
                                  x.port, req.http10, x.local)
        env["endpoint"] = self.endpoint or request_endpoint(x.scheme, host, self.key)
        if x.scheme == "http" and self.has(TCP) \
                and self.on_tcp_connect(x.ip, x.port, local=x.local) is not True:
            return CLOSE  # (an HTTP endpoint's on_tcp_connect, once its Host named it)
        if not self.has(REQ):
            return None
        own = login.own_path(req.target)
        if own is not None:  # a login's callback or logout: its gate's, whatever the rules
            gate = next((a for a in self.within if isinstance(a, login.Gate)
                         and a.kind == own[0]), None)
            if gate is not None:
                return await gate.request(x)
        out, limits, now = Outcome(list(req.headers), req.target), x.services.limits, \
            time.monotonic()
        for action in self._actions(REQ, env):
            if isinstance(action, Hook):  # (an action that reads the body, or fetches keys)
                x.req = replace(x.req, headers=out.headers, target=out.target)
                verdict = await action.request(x)
                if verdict is not None or x.forward is not None:  # (forward-internal ends
                    return verdict                                 # the request phase)
                if isinstance(action, login.Gate):
                    policy_logins.identity(env, action.kind, x.req.headers)
                out = Outcome(list(x.req.headers), x.req.target)
            elif action(env, out, limits, now):
                if out.close:
                    return CLOSE
                return Fixed(out.status, tuple(out.answer_headers), out.body)
        x.req = replace(x.req, headers=out.headers, target=out.target)
        return None

    def upstream(self, x: Exchange, headers: Headers) -> Headers:
        """A policy that may rewrite response bodies asks its upstream for uncompressed ones
        (the client's own ``Accept-Encoding`` still decides the edge's compression)."""
        if not self.rewrites:
            return headers
        return [(k, v) for k, v in headers if k.lower() != b"accept-encoding"]

    def outcome(self, x: Exchange, failed: bool) -> None:
        """The fate of a request its circuit-breaker actions let through (recorded once,
        whichever policy of the request's plan hears it first)."""
        while x.counted:
            x.counted.pop().record(failed)

    @property
    def awaits(self) -> bool:
        """It calls out in on_http_response (http-request)."""
        return any(isinstance(a, Hook) for rule in self.phases.get(RES, ()) for a in rule.actions)

    def response(self, x: Exchange, status: int, headers: Headers) -> Headers:
        if x.env is None:
            return headers
        env = response_env(x.env, status, headers) if self.has(RES) or self.has(SSE) \
            else x.env
        if self.has(RES):
            headers = self.on_response(env, headers)
        return self._rewrites(x, env, status, headers)

    async def response_awaiting(self, x: Exchange, status: int,
                                headers: Headers) -> Headers | Fixed:
        """The response phase with its http-request calls (each rule's turn comes after the
        calls of the rules before it); a call that fails and halts answers instead."""
        if x.env is None or not self.has(RES):
            return self.response(x, status, headers)
        env = response_env(x.env, status, headers)
        out = list(headers)
        for rule in self._matching(RES, env):
            for action in rule.actions:
                if isinstance(action, http_request.Call):
                    if (answer := await action.call(x, env)) is not None:
                        return answer
                else:
                    out = action(env, out)
        return self._rewrites(x, env, status, out)

    def _rewrites(self, x: Exchange, env: dict[str, Any], status: int,
                  headers: Headers) -> Headers:
        sse = (lambda e: self._actions(SSE, e)) if self.has(SSE) else None
        return policy_bodies.body_filters(x, env, status, headers, sse)


def _breaker(cfg: dict[str, Any], at: Scope) -> Hook:
    """A circuit-breaker action: its counts kept across snapshots while its configuration
    and the policy's owner stay the same."""
    try:
        config, enforce = circuit_breaker.policy_config(cfg)
    except ValueError as exc:
        raise Unsupported(str(exc)) from None
    key = f"{at.key}/circuit-breaker/{json.dumps(cfg, sort_keys=True, default=str)}"
    breaker = at.breakers.get(key, config) if at.breakers is not None \
        else circuit_breaker.Breaker(config)
    return circuit_breaker.PolicyBreaker(breaker, enforce)


def compile(module: dict[str, Any], ctx: Compiling | str) -> Policy | Unenforced:
    """The policy (``ctx``: its key, or the compile context naming it); ``Unenforced``
    naming the first action this edge does not enforce (or a secret that does not exist),
    if any."""
    at = Scope(ctx) if isinstance(ctx, str) else Scope(ctx.key, ctx.rules, ctx.breakers,
                                                       ctx.terminates, ctx.endpoint,
                                                       ctx.variables)
    values = {} if isinstance(ctx, str) else ctx.secrets
    doc = parse("traffic_policy.value", str(module.get("value", "")))
    try:
        return _compile(doc, at, values)
    except secrets.Missing as exc:
        return Unenforced(f"traffic_policy ({exc})")


def _compile(doc: Any, at: Scope, values: secrets.Secrets) -> Policy | Unenforced:
    phases: dict[str, tuple[Rule, ...]] = {}
    rewrites = False
    for phase, rules in (doc or {}).items():
        compiled = []
        for i, rule in enumerate(rules or []):
            if (missing := unknown_variable(phase, rule)) is not None:
                return Unenforced(f"traffic_policy ({missing} in {phase}: {NO_VARIABLE[missing]})")
            actions = []
            for action in rule.get("actions") or []:
                kind = str(action.get("type"))
                try:
                    config = secrets.in_config(dict(action.get("config") or {}), values)
                    hook = HOOKS.get(phase, {}).get(kind)
                    actions.append(hook(config, at) if hook else
                                   compile_action(phase, kind, config, at))
                except Unsupported as exc:
                    return Unenforced(f"traffic_policy (action '{kind}' in {phase}: {exc})")
            if rule.get("expressions") and any(isinstance(a, terminate_tls.TerminateTls)
                                               for a in actions):
                return Unenforced("traffic_policy (action 'terminate-tls' in a rule with "
                                  "expressions: TLS is terminated, or not, before a byte of "
                                  "the connection is read; put it in a rule of its own)")
            rewrites = rewrites or phase == SSE or (phase == RES and any(
                a.get("type") == "response-body-find-replace" for a in rule.get("actions") or []))
            compiled.append(Rule(str(rule.get("name") or f"rule {i}"),
                                 tuple(cel.compile(secrets.in_expression(e, values))
                                       for e in rule.get("expressions") or []),
                                 tuple(actions)))
        phases[phase] = tuple(compiled)
    return Policy(at.key, phases, rewrites, at.variables)
