"""Traffic policy: a JSON or YAML document of phases, each a list of rules with CEL
``expressions`` and ``actions``. Parsed and compiled when configured; a bad policy says which
rule and why."""

from __future__ import annotations

import json
import re
from typing import Any

import msgspec
from ruamel.yaml import YAML
from ruamel.yaml.error import YAMLError

from edgeway.catalog.model import Context
from edgeway.catalog.modules import Module, On
from edgeway.celpkg import cel
from edgeway.errors import Invalid

REQ, RES, TCP = "on_http_request", "on_http_response", "on_tcp_connect"
SSE = "on_event_stream_message"  # each message of a server-sent event stream
ACTIONS: dict[str, frozenset[str]] = {
    "add-headers": frozenset({REQ, RES}), "ai-gateway": frozenset({REQ}),
    "basic-auth": frozenset({REQ}),
    "circuit-breaker": frozenset({REQ}), "close-connection": frozenset({TCP, REQ}),
    "compress-response": frozenset({REQ, RES}), "custom-response": frozenset({REQ, RES}),
    "deny": frozenset({REQ, TCP}), "forward-internal": frozenset({REQ, TCP}),
    "http-request": frozenset({REQ, RES}), "jwt-validation": frozenset({REQ}),
    "log": frozenset({REQ, RES, TCP}), "oauth": frozenset({REQ}), "oidc": frozenset({REQ}),
    "openid-connect": frozenset({REQ}),
    "owasp-crs-request": frozenset({REQ}), "owasp-crs-response": frozenset({RES}),
    "rate-limit": frozenset({REQ}), "redirect": frozenset({REQ}),
    "remove-headers": frozenset({REQ, RES}), "request-body-find-replace": frozenset({REQ}),
    "response-body-find-replace": frozenset({RES}), "restrict-ips": frozenset({REQ, TCP}),
    "set-vars": frozenset({REQ, RES, TCP}), "sse-find-replace": frozenset({SSE}),
    "terminate-tls": frozenset({TCP}), "url-rewrite": frozenset({REQ}),
    "verify-webhook": frozenset({REQ}),
}
_WAF = ("the OWASP Core Rule Set needs a web application firewall engine (Coraza or "
        "ModSecurity), which this edge does not embed: its traffic would go unchecked")
# Actions of ngrok's reference this edge does not run (in a phase, or at all), and why: a
# policy naming one is refused when it is written, never stored to be skipped.
NOT_SERVED: dict[tuple[str, str], str] = {
    ("owasp-crs-request", REQ): _WAF, ("owasp-crs-response", RES): _WAF,
    ("ai-gateway", REQ): "it routes requests to hosted AI model providers, a service of "
                         "ngrok's cloud rather than of an edge; forward to your own gateway "
                         "with forward-internal",
}
PHASES: dict[On, tuple[str, ...]] = {
    "route": (REQ, RES, SSE), "tcp_edge": (TCP,), "tls_edge": (TCP,),
    "https_edge": (REQ, RES, SSE), "http_endpoint": (TCP, REQ, RES, SSE),
}
_INTERPOLATION = re.compile(r"\$\{(.*?)\}")


class TrafficPolicy(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    enabled: bool = True
    value: str = ""


def parse(member: str, text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        return YAML(typ="safe", pure=True).load(text)
    except YAMLError as exc:
        raise Invalid(member, f"is neither JSON nor YAML: {exc}".replace("\n", " "),
                      215) from None


# The phases' names in the SDKs' ``policy()`` (ngrok's earlier policy format): an agent's bind
# may use them; each means the phase of today's name where the tunnel has it.
LEGACY = {"inbound": {"route": REQ, "http_endpoint": REQ, "tcp_edge": TCP, "tls_edge": TCP},
          "outbound": {"route": RES, "http_endpoint": RES}}


def modern(member: str, text: str, on: On) -> str:
    """``text`` with the legacy phase names ``inbound``/``outbound`` renamed to today's
    (JSON); unchanged when it has none. Invalid when a legacy name has no phase here, or
    when a phase is given under both of its names."""
    doc = parse(member, text)
    if not isinstance(doc, dict) or not set(doc) & set(LEGACY):
        return text
    out: dict[str, Any] = {}
    for phase, rules in doc.items():
        if phase in LEGACY:
            now = LEGACY[phase].get(on)
            if now is None:
                raise Invalid(f"{member}.{phase}", f"{phase} (an earlier name of a phase) has "
                              "no phase here; phases: " + ", ".join(PHASES[on]), 215)
            if now in doc:
                raise Invalid(f"{member}.{phase}", f"{phase} is an earlier name of {now}, "
                              "which is given too: give the rules under one of them", 215)
            phase = now
        out[phase] = rules
    return json.dumps(out)


def compile_cel(member: str, expr: Any) -> None:
    if not isinstance(expr, str):
        raise Invalid(member, "must be a string holding a CEL expression", 215)
    try:
        cel.compile(expr)
    except Exception as exc:
        raise Invalid(member, f"'{expr}' is not a valid CEL expression: "
                      f"{str(exc).splitlines()[0]}", 215) from None


def _interpolations(member: str, value: Any) -> None:
    if isinstance(value, str):
        for expr in _INTERPOLATION.findall(value):
            compile_cel(member, expr)
    elif isinstance(value, dict):
        for k, v in value.items():
            _interpolations(f"{member}.{k}", v)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            _interpolations(f"{member}[{i}]", v)


def _action(member: str, phase: str, action: Any) -> None:
    if not isinstance(action, dict) or set(action) - {"type", "config"}:
        raise Invalid(member, "an action is an object with 'type' and optional 'config'", 215)
    kind = action.get("type")
    if kind not in ACTIONS:
        raise Invalid(member + ".type", f"'{kind}' is not an action type; known: "
                      + ", ".join(sorted(ACTIONS)), 215)
    if phase not in ACTIONS[kind]:
        raise Invalid(member + ".type", f"'{kind}' cannot run in {phase}; it runs in "
                      + ", ".join(sorted(ACTIONS[kind])), 215)
    if (why := NOT_SERVED.get((kind, phase))) is not None:
        raise Invalid(member + ".type", f"'{kind}' in {phase} is not served by this edge: {why}",
                      215)
    config = action.get("config", {})
    if not isinstance(config, dict):
        raise Invalid(member + ".config", "must be an object", 215)
    _interpolations(member + ".config", config)


def _rule(member: str, phase: str, rule: Any) -> None:
    if not isinstance(rule, dict) or set(rule) - {"name", "expressions", "actions"}:
        raise Invalid(member, "a rule is an object with 'name', 'expressions' and 'actions'",
                      215)
    name = rule.get("name", "")
    if not isinstance(name, str):
        raise Invalid(member + ".name", "must be a string", 215)
    where = f"{member} ('{name}')" if name else member
    exprs = rule.get("expressions", [])
    if not isinstance(exprs, list):
        raise Invalid(where + ".expressions", "must be a list of CEL expressions", 215)
    for i, expr in enumerate(exprs):
        compile_cel(f"{where}.expressions[{i}]", expr)
    actions = rule.get("actions")
    if not isinstance(actions, list) or not actions:
        raise Invalid(where + ".actions", "must be a non-empty list of actions", 215)
    for i, action in enumerate(actions):
        _action(f"{where}.actions[{i}]", phase, action)


def check_policy(member: str, text: str, on: On) -> None:
    try:
        _check_policy(member, text, on)
    except RecursionError:  # (the JSON and YAML parsers and the checks recurse)
        raise Invalid(member, "its lists and objects are nested too deeply", 215) from None


def _check_policy(member: str, text: str, on: On) -> None:
    doc = parse(member, text)
    if not isinstance(doc, dict):
        raise Invalid(member, "must be an object whose keys are phases", 215)
    allowed = PHASES[on]
    for phase, rules in doc.items():
        if phase not in allowed:
            raise Invalid(f"{member}.{phase}", "is not a phase here; phases: "
                          + ", ".join(allowed), 215)
        if not isinstance(rules, list):
            raise Invalid(f"{member}.{phase}", "must be a list of rules", 215)
        for i, rule in enumerate(rules):
            _rule(f"{member}.{phase}[{i}]", phase, rule)


def _check(value: dict[str, Any], _ctx: Context, at: str, on: On) -> dict[str, Any]:
    text = value.get("value", "")
    if not text.strip():
        raise Invalid(at + "value", "is required: the policy document, JSON or YAML", 215)
    check_policy(at + "value", text, on)
    return {"enabled": value.get("enabled", True), "value": text}


MODULES = (
    Module("traffic_policy", TrafficPolicy, TrafficPolicy,
           frozenset({"route", "tcp_edge", "tls_edge"}),
           "rules of CEL expressions and actions applied to the traffic", check_on=_check),
)
