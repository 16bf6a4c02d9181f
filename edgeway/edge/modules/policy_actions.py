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

from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from edgeway.catalog.modules.policy import REQ, RES, SSE, TCP
from edgeway.edge.modules import (
    basic_auth,
    body_replace,
    forward_internal,
    sse_replace,
    terminate_tls,
)
from edgeway.edge.modules.policy_values import (
    Env,
    Headers,
    Outcome,
    RequestAction,
    ResponseAction,
    Scope,
    TcpAction,
    Unsupported,
    compressor,
    evaluate,
    groups,
    header_names,
    header_values,
    interpolate,
    log,
    logger,
    networks,
    pattern_of,
    seconds,
    setter,
    status_code,
)
from edgeway.edge.modules.rate_limits import RateLimits
from edgeway.ippolicy import permits

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
    status = status_code(cfg, 403)
    body = f"Denied by the traffic policy ({status}).\n".encode()

    def run(_env: Env, out: Outcome, _limits: RateLimits, _now: float) -> bool:
        out.status, out.body = status, body
        return True
    return run


def _custom_response(cfg: dict[str, Any], _at: Scope) -> RequestAction:
    status, content, headers = status_code(cfg, 200), str(cfg.get("content", "")), \
        header_values(cfg)

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
    pattern = pattern_of(cfg["from"]) if cfg.get("from") else None
    status, to, headers = status_code(cfg, 302), str(cfg.get("to", "")), header_values(cfg)

    def run(env: Env, out: Outcome, _limits: RateLimits, _now: float) -> bool:
        url = env["req"]["url"]["raw"]
        if pattern is not None and not pattern.search(url):
            return False
        target = interpolate(to, env)
        location = pattern.sub(groups(target), url, count=1) if pattern else target
        out.status = status
        out.answer_headers = [("Location", location),
                              *((k.decode(), interpolate(v, env)) for k, v in headers)]
        return True
    return run


def _url_rewrite(cfg: dict[str, Any], _at: Scope) -> RequestAction:
    pattern, to = pattern_of(cfg.get("from", "")), str(cfg.get("to", ""))

    def run(env: Env, out: Outcome, _limits: RateLimits, _now: float) -> bool:
        url = env["req"]["url"]["raw"]
        if pattern.search(url):
            new = urlsplit(pattern.sub(groups(interpolate(to, env)), url, count=1))
            out.target = ((new.path or "/") + (f"?{new.query}" if new.query else "")).encode()
        return False
    return run


def _add_headers(cfg: dict[str, Any], _at: Scope) -> RequestAction:
    headers = header_values(cfg)

    def run(env: Env, out: Outcome, _limits: RateLimits, _now: float) -> bool:
        out.headers += [(k, interpolate(v, env).encode()) for k, v in headers]
        return False
    return run


def _remove_headers(cfg: dict[str, Any], _at: Scope) -> RequestAction:
    drop = header_names(cfg)

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
        bucket = "|".join(str(evaluate(k, env)) for k in keys)
        wait = limits.allow((at.key, name, bucket), capacity, window, now)
        if not wait:
            return False
        out.status, out.body = 429, b"Too many requests.\n"
        out.answer_headers = [("Retry-After", str(max(1, int(wait + 0.999))))]
        return True
    return run


def _request_log(cfg: dict[str, Any], at: Scope) -> RequestAction:
    write = logger(REQ, cfg, at.key)

    def run(env: Env, _out: Outcome, _limits: RateLimits, _now: float) -> bool:
        write(env)
        return False
    return run


# -- on_http_response -----------------------------------------------------------------------

def _response_add(cfg: dict[str, Any], _at: Scope) -> ResponseAction:
    headers = header_values(cfg)
    return lambda env, out: out + [(k, interpolate(v, env).encode()) for k, v in headers]


def _response_remove(cfg: dict[str, Any], _at: Scope) -> ResponseAction:
    drop = header_names(cfg)
    return lambda _env, out: [(k, v) for k, v in out if k.lower() not in drop]


def _response_log(cfg: dict[str, Any], at: Scope) -> ResponseAction:
    write = logger(RES, cfg, at.key)

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
    write = logger(TCP, cfg, at.key)

    def run(env: Env) -> bool:
        write(env)
        return True
    return run


ACTIONS: dict[str, dict[str, Callable[[dict[str, Any], Scope], Any]]] = {
    REQ: {"deny": _deny, "custom-response": _custom_response, "redirect": _redirect,
          "url-rewrite": _url_rewrite, "add-headers": _add_headers,
          "remove-headers": _remove_headers, "restrict-ips": _restrict_ips,
          "rate-limit": _rate_limit, "close-connection": _close, "log": _request_log,
          "basic-auth": _basic_auth, "set-vars": _on_request(setter),
          "compress-response": _on_request(compressor)},
    RES: {"add-headers": _response_add, "remove-headers": _response_remove,
          "log": _response_log, "set-vars": _on_response(setter),
          "compress-response": _on_response(compressor),
          "response-body-find-replace": body_replace.response_action},
    TCP: {"deny": _tcp_refuse, "restrict-ips": _tcp_restrict, "close-connection": _tcp_refuse,
          "log": _tcp_log, "set-vars": _on_tcp(setter), "terminate-tls": terminate_tls.compile,
          "forward-internal": forward_internal.compile_tcp},
    SSE: {"sse-find-replace": sse_replace.compile},
}


def compile_action(phase: str, kind: str, cfg: dict[str, Any], at: Scope) -> Any:
    """The closure of one action; ``Unsupported`` when this edge does not enforce it."""
    make = ACTIONS.get(phase, {}).get(kind)
    if make is None:
        raise Unsupported(kind)
    return make(cfg, at)
