"""The traffic policy's actions, compiled once: each phase has a table (``ACTIONS``) from an
action's type to a function that takes its ``config`` (and the policy's ``Scope``) and returns the
closure the request path runs, with status codes, rates, networks and patterns already
parsed. A configuration this edge cannot honour raises ``Unsupported``; the policy is then
refused whole (never run with an action left out).

Request actions return True when they end the request phase (an answer of the edge's own, or
closing the connection); response actions return the response's headers; TCP actions return
False to close the connection.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import structlog

from edgeway.catalog.modules.policy import REQ, RES, TCP
from edgeway.celpkg import cel
from edgeway.edge.modules import basic_auth
from edgeway.edge.modules.circuit_breaker import Breakers
from edgeway.edge.modules.rate_limits import RateLimits
from edgeway.ippolicy import Network, permits, split

log = structlog.get_logger()
Headers = list[tuple[bytes, bytes]]
Env = dict[str, Any]
LOGS = "_logs"  # an HTTP request's env: what its log actions wrote (for its traffic event)
COMPRESS = "_compress"  # an HTTP request's env: a compress-response action ran
_INTERPOLATION = re.compile(r"\$\{(.*?)\}")
_GROUP = re.compile(r"\$\{?(\d+)\}?")
_RATE = re.compile(r"^(\d+)(ms|s|m|h)$")


class Unsupported(Exception):
    """An action (or an option of one) this edge does not enforce."""


@dataclass(frozen=True)
class Scope:
    """What a policy's actions are compiled with besides their configuration: the key of
    what the policy belongs to (a route, edge or tunnel id: its rate-limit windows are its
    own), every IP policy's rules by the policy's id (restrict-ips' ``ip_policies``) and
    where circuit breakers keep their counts across snapshots (None: new ones)."""
    key: str
    rules: Mapping[str, Sequence[tuple[str, Network]]] = field(default_factory=dict)
    breakers: Breakers | None = None


@dataclass
class Outcome:
    """What on_http_request decided: an answer of its own (``status`` set), closing the
    connection, or the request to forward (headers and target possibly changed)."""
    headers: Headers
    target: bytes
    status: int = 0
    answer_headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""
    close: bool = False


RequestAction = Callable[[Env, Outcome, RateLimits, float], bool]
ResponseAction = Callable[[Env, Headers], Headers]
TcpAction = Callable[[Env], bool]


# -- the pieces actions share ---------------------------------------------------------------

def _eval(expr: str, env: Env) -> Any:
    try:
        return cel.evaluate(expr, env)
    except Exception:
        return ""


def _shown(value: Any) -> str:
    """A CEL value in a string, as CEL writes it (``true``, not Python's ``True``)."""
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def interpolate(text: str, env: Env) -> str:
    return _INTERPOLATION.sub(lambda m: _shown(_eval(m[1], env)), text) if "${" in text \
        else text


def _interpolated(value: Any, env: Env) -> Any:
    if isinstance(value, str):
        return interpolate(value, env)
    if isinstance(value, dict):
        return {str(k): _interpolated(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [_interpolated(v, env) for v in value]
    return value


def _groups(replacement: str) -> str:
    """RE2-style ``$1``/``${1}`` group references as Python's ``\\g<1>``."""
    return _GROUP.sub(lambda m: f"\\g<{m[1]}>", replacement.replace("\\", "\\\\"))


def seconds(rate: str) -> float:
    m = _RATE.match(rate.strip())
    if not m:
        raise Unsupported(f"rate {rate!r}")
    return int(m[1]) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[m[2]]


def _pattern(text: Any) -> re.Pattern[str]:
    try:
        return re.compile(str(text))
    except re.error as exc:
        raise Unsupported(f"pattern {text!r}: {exc}") from None


def _status(cfg: dict[str, Any], default: int) -> int:
    try:
        return int(cfg.get("status_code", default))
    except (TypeError, ValueError):
        raise Unsupported(f"status_code {cfg.get('status_code')!r}") from None


Networks = tuple[Network, ...]


def networks(cfg: dict[str, Any], at: Scope) -> tuple[Networks, Networks]:
    """restrict-ips' allowed and denied networks: its ``allow`` and ``deny`` CIDRs joined with
    the rules of the IP policies its ``ip_policies`` name (by id), decided like every IP
    policy (``edgeway.ippolicy``): an address must be in an allowed network and in no denied
    one."""
    ids = cfg.get("ip_policies") or []
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
        raise Unsupported("ip_policies: a list of IP policy ids")
    if missing := [i for i in ids if i not in at.rules]:
        raise Unsupported(f"IP policy {missing[0]} does not exist")
    try:
        given = [*(("allow", ipaddress.ip_network(c, strict=False))
                   for c in cfg.get("allow") or []),
                 *(("deny", ipaddress.ip_network(c, strict=False))
                   for c in cfg.get("deny") or [])]
    except (TypeError, ValueError) as exc:
        raise Unsupported(str(exc)) from None
    return split([*given, *(rule for i in ids for rule in at.rules[i])])


def result(env: Env, action: str, values: dict[str, Any]) -> None:
    """An action's result variables, ``actions.ngrok.<action>.*`` for the later rules (the
    last run of an action is what they see)."""
    env.setdefault("actions", {}).setdefault("ngrok", {})[action] = values


def _header_values(cfg: dict[str, Any]) -> tuple[tuple[bytes, str], ...]:
    return tuple((str(k).encode(), str(v)) for k, v in (cfg.get("headers") or {}).items())


def _header_names(cfg: dict[str, Any]) -> frozenset[bytes]:
    return frozenset(str(h).lower().encode() for h in cfg.get("headers") or [])


def _logger(phase: str, cfg: dict[str, Any], key: str) -> Callable[[Env], None]:
    """The ``log`` action: one line with the action's ``metadata`` (an object stays an
    object; ``${...}`` in its strings is interpolated)."""
    metadata = cfg.get("metadata", {})

    def write(env: Env) -> None:
        shown = _interpolated(metadata, env)
        log.info("policy_log", policy=key, phase=phase, metadata=shown)
        if (logs := env.get(LOGS)) is not None:
            logs.append({"policy": key, "phase": phase, "metadata": shown})
    return write


def _setter(cfg: dict[str, Any]) -> Callable[[Env], None]:
    """set-vars: ``vars``, a list of one-key objects (``- user: ${req.headers['x-user'][0]}``),
    set in order as ``vars.<name>`` for the later rules and phases of the same request or
    connection (strings are interpolated; other values kept as they are)."""
    pairs: list[tuple[str, Any]] = []
    for item in cfg.get("vars") or []:
        if not isinstance(item, dict) or len(item) != 1:
            raise Unsupported("set-vars vars: each a one-key object, name: value")
        (name, value), = item.items()
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", str(name)):
            raise Unsupported(f"set-vars name {name!r} (letters, digits and _)")
        pairs.append((str(name), value))
    if not pairs:
        raise Unsupported("set-vars without vars")

    def run(env: Env) -> None:
        found = env.setdefault("vars", {})
        for name, value in pairs:
            found[name] = _interpolated(value, env)
    return run


def _compressor(cfg: dict[str, Any]) -> Callable[[Env], None]:
    """compress-response: the response is gzipped when the client accepts it and it is worth
    it (as the compression module decides); ``algorithms``, when given, must include gzip,
    the one this edge writes."""
    algorithms = [str(a).lower() for a in cfg.get("algorithms") or ["gzip"]]
    if "gzip" not in algorithms:
        raise Unsupported(f"compress-response algorithms {algorithms} (this edge writes gzip)")
    return lambda env: env.__setitem__(COMPRESS, True)


# An action that only writes to the environment (set-vars, compress-response), in each phase
# the shape of that phase's actions: the request goes on, the response is unchanged, the
# connection is admitted.
Effect = Callable[[dict[str, Any]], Callable[[Env], None]]


def _on_request(make: Effect) -> Callable[[dict[str, Any], Scope], RequestAction]:
    def build(cfg: dict[str, Any], _at: Scope) -> RequestAction:
        effect = make(cfg)

        def run(env: Env, _out: Outcome, _limits: RateLimits, _now: float) -> bool:
            effect(env)
            return False
        return run
    return build


def _on_response(make: Effect) -> Callable[[dict[str, Any], Scope], ResponseAction]:
    def build(cfg: dict[str, Any], _at: Scope) -> ResponseAction:
        effect = make(cfg)

        def run(env: Env, out: Headers) -> Headers:
            effect(env)
            return out
        return run
    return build


def _on_tcp(make: Effect) -> Callable[[dict[str, Any], Scope], TcpAction]:
    def build(cfg: dict[str, Any], _at: Scope) -> TcpAction:
        effect = make(cfg)

        def run(env: Env) -> bool:
            effect(env)
            return True
        return run
    return build


# -- on_http_request ------------------------------------------------------------------------

def _deny(cfg: dict[str, Any], _at: Scope) -> RequestAction:
    status = _status(cfg, 403)
    body = f"Denied by the traffic policy ({status}).\n".encode()

    def run(_env: Env, out: Outcome, _limits: RateLimits, _now: float) -> bool:
        out.status, out.body = status, body
        return True
    return run


def _custom_response(cfg: dict[str, Any], _at: Scope) -> RequestAction:
    status, content, headers = _status(cfg, 200), str(cfg.get("content", "")), \
        _header_values(cfg)

    def run(env: Env, out: Outcome, _limits: RateLimits, _now: float) -> bool:
        out.status, out.body = status, interpolate(content, env).encode()
        out.answer_headers = [(k.decode(), interpolate(v, env)) for k, v in headers]
        return True
    return run


def _close(_cfg: dict[str, Any], _at: Scope) -> RequestAction:
    def run(_env: Env, out: Outcome, _limits: RateLimits, _now: float) -> bool:
        out.close = True
        return True
    return run


def _redirect(cfg: dict[str, Any], _at: Scope) -> RequestAction:
    pattern = _pattern(cfg["from"]) if cfg.get("from") else None
    status, to, headers = _status(cfg, 302), str(cfg.get("to", "")), _header_values(cfg)

    def run(env: Env, out: Outcome, _limits: RateLimits, _now: float) -> bool:
        url = env["req"]["url"]["raw"]
        if pattern is not None and not pattern.search(url):
            return False
        target = interpolate(to, env)
        location = pattern.sub(_groups(target), url, count=1) if pattern else target
        out.status = status
        out.answer_headers = [("Location", location),
                              *((k.decode(), interpolate(v, env)) for k, v in headers)]
        return True
    return run


def _url_rewrite(cfg: dict[str, Any], _at: Scope) -> RequestAction:
    pattern, to = _pattern(cfg.get("from", "")), str(cfg.get("to", ""))

    def run(env: Env, out: Outcome, _limits: RateLimits, _now: float) -> bool:
        url = env["req"]["url"]["raw"]
        if pattern.search(url):
            new = urlsplit(pattern.sub(_groups(interpolate(to, env)), url, count=1))
            out.target = ((new.path or "/") + (f"?{new.query}" if new.query else "")).encode()
        return False
    return run


def _add_headers(cfg: dict[str, Any], _at: Scope) -> RequestAction:
    headers = _header_values(cfg)

    def run(env: Env, out: Outcome, _limits: RateLimits, _now: float) -> bool:
        out.headers += [(k, interpolate(v, env).encode()) for k, v in headers]
        return False
    return run


def _remove_headers(cfg: dict[str, Any], _at: Scope) -> RequestAction:
    drop = _header_names(cfg)

    def run(_env: Env, out: Outcome, _limits: RateLimits, _now: float) -> bool:
        out.headers = [(k, v) for k, v in out.headers if k.lower() not in drop]
        return False
    return run


def _basic_auth(cfg: dict[str, Any], _at: Scope) -> RequestAction:
    """basic-auth: ``credentials`` (``user:password``, the password 8 to 128 characters),
    ``realm``, ``enforce`` (false: a request without them is only logged, and goes on)."""
    pairs: list[tuple[str, str]] = []
    for item in cfg.get("credentials") or []:
        user, sep, password = str(item).partition(":")
        if not sep or not user or not 8 <= len(password) <= 128:
            raise Unsupported("basic-auth credentials: each 'user:password', the password 8 "
                              "to 128 characters")
        pairs.append((user, password))
    if not pairs:
        raise Unsupported("basic-auth without credentials")
    realm, enforce = str(cfg.get("realm") or "edgeway"), cfg.get("enforce", True)
    if not isinstance(enforce, bool) or '"' in realm:
        raise Unsupported(f"basic-auth enforce {enforce!r} or realm {realm!r}")
    known = tuple(pairs)

    def run(_env: Env, out: Outcome, _limits: RateLimits, _now: float) -> bool:
        given = next((v for k, v in out.headers if k.lower() == b"authorization"), b"")
        if basic_auth.allows(given.decode("latin-1"), known):
            return False
        if not enforce:
            log.info("basic_auth_not_enforced")
            return False
        out.status, out.body = 401, b"This site needs a user name and password.\n"
        out.answer_headers = [("WWW-Authenticate", f'Basic realm="{realm}"')]
        return True
    return run


def admits(cfg: dict[str, Any], at: Scope) -> Callable[[Env], bool]:
    """restrict-ips as a test of a request's or connection's client address: true when it
    may go on (permitted, or ``enforce: false``: the refusal is only logged)."""
    allow, deny = networks(cfg, at)
    enforce = cfg.get("enforce", True)
    if not isinstance(enforce, bool):
        raise Unsupported(f"enforce {enforce!r} (true or false)")

    def test(env: Env) -> bool:
        ip = env["conn"]["client_ip"]
        if permits(ip, allow, deny):
            return True
        if not enforce:
            log.info("restrict_ips_not_enforced", client_ip=ip)
        return not enforce
    return test


def _restrict_ips(cfg: dict[str, Any], at: Scope) -> RequestAction:
    admitted = admits(cfg, at)

    def run(env: Env, out: Outcome, _limits: RateLimits, _now: float) -> bool:
        if admitted(env):
            return False
        out.status, out.body = 403, b"Your IP address may not access this site.\n"
        return True
    return run


def _rate_limit(cfg: dict[str, Any], at: Scope) -> RequestAction:
    window = seconds(str(cfg.get("rate", "")))
    try:
        capacity = int(cfg.get("capacity", 0))
    except (TypeError, ValueError):
        capacity = 0
    if capacity <= 0:
        raise Unsupported(f"capacity {cfg.get('capacity')!r}")
    name, keys = str(cfg.get("name", "")), [str(k) for k in cfg.get("bucket_key") or []]

    def run(env: Env, out: Outcome, limits: RateLimits, now: float) -> bool:
        bucket = "|".join(str(_eval(k, env)) for k in keys)
        wait = limits.allow((at.key, name, bucket), capacity, window, now)
        if not wait:
            return False
        out.status, out.body = 429, b"Too many requests.\n"
        out.answer_headers = [("Retry-After", str(max(1, int(wait + 0.999))))]
        return True
    return run


def _request_log(cfg: dict[str, Any], at: Scope) -> RequestAction:
    write = _logger(REQ, cfg, at.key)

    def run(env: Env, _out: Outcome, _limits: RateLimits, _now: float) -> bool:
        write(env)
        return False
    return run


# -- on_http_response -----------------------------------------------------------------------

def _response_add(cfg: dict[str, Any], _at: Scope) -> ResponseAction:
    headers = _header_values(cfg)
    return lambda env, out: out + [(k, interpolate(v, env).encode()) for k, v in headers]


def _response_remove(cfg: dict[str, Any], _at: Scope) -> ResponseAction:
    drop = _header_names(cfg)
    return lambda _env, out: [(k, v) for k, v in out if k.lower() not in drop]


def _response_log(cfg: dict[str, Any], at: Scope) -> ResponseAction:
    write = _logger(RES, cfg, at.key)

    def run(env: Env, out: Headers) -> Headers:
        write(env)
        return out
    return run


# -- on_tcp_connect -------------------------------------------------------------------------

def _tcp_refuse(_cfg: dict[str, Any], _at: Scope) -> TcpAction:
    return lambda _env: False


def _tcp_restrict(cfg: dict[str, Any], at: Scope) -> TcpAction:
    return admits(cfg, at)


def _tcp_log(cfg: dict[str, Any], at: Scope) -> TcpAction:
    write = _logger(TCP, cfg, at.key)

    def run(env: Env) -> bool:
        write(env)
        return True
    return run


ACTIONS: dict[str, dict[str, Callable[[dict[str, Any], Scope], Any]]] = {
    REQ: {"deny": _deny, "custom-response": _custom_response, "redirect": _redirect,
          "url-rewrite": _url_rewrite, "add-headers": _add_headers,
          "remove-headers": _remove_headers, "restrict-ips": _restrict_ips,
          "rate-limit": _rate_limit, "close-connection": _close, "log": _request_log,
          "basic-auth": _basic_auth, "set-vars": _on_request(_setter),
          "compress-response": _on_request(_compressor)},
    RES: {"add-headers": _response_add, "remove-headers": _response_remove,
          "log": _response_log, "set-vars": _on_response(_setter),
          "compress-response": _on_response(_compressor)},
    TCP: {"deny": _tcp_refuse, "restrict-ips": _tcp_restrict, "close-connection": _tcp_refuse,
          "log": _tcp_log, "set-vars": _on_tcp(_setter)},
}


def compile_action(phase: str, kind: str, cfg: dict[str, Any], at: Scope) -> Any:
    """The closure of one action; ``Unsupported`` when this edge does not enforce it."""
    make = ACTIONS.get(phase, {}).get(kind)
    if make is None:
        raise Unsupported(kind)
    return make(cfg, at)
