"""The traffic_policy module: rules of CEL ``expressions`` (all must hold; none: always) and
``actions``, run in order per phase. Compiled once per snapshot; evaluated per request (or TCP
connection) against the variables ``conn``, ``req`` and (on responses) ``res``.

Enforced actions: on_http_request ``deny``, ``custom-response``, ``redirect``, ``url-rewrite``,
``add-headers``, ``remove-headers``, ``restrict-ips``, ``rate-limit``, ``close-connection``,
``log``; on_http_response ``add-headers``, ``remove-headers``, ``log``; on_tcp_connect
``deny``, ``restrict-ips``, ``close-connection``, ``log``. A policy using any other action (or
an option of these that is not supported) is not run at all: its traffic is refused, naming
the action (``Policy.unsupported``). String options take ``${expr}`` interpolations.
"""

from __future__ import annotations

import ipaddress
import re
from collections import deque
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit

import cel
import structlog

from edgeway.catalog.modules.policy import REQ, RES, TCP, parse

log = structlog.get_logger()
Headers = list[tuple[bytes, bytes]]
ENFORCED = {
    REQ: frozenset({"deny", "custom-response", "redirect", "url-rewrite", "add-headers",
                    "remove-headers", "restrict-ips", "rate-limit", "close-connection", "log"}),
    RES: frozenset({"add-headers", "remove-headers", "log"}),
    TCP: frozenset({"deny", "restrict-ips", "close-connection", "log"}),
}
_INTERPOLATION = re.compile(r"\$\{(.*?)\}")
_GROUP = re.compile(r"\$\{?(\d+)\}?")
_RATE = re.compile(r"^(\d+)(ms|s|m|h)$")


@dataclass(frozen=True)
class Action:
    type: str
    config: dict[str, Any]


@dataclass(frozen=True)
class Rule:
    name: str
    expressions: tuple[Any, ...]  # cel.Program
    actions: tuple[Action, ...]


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


class RateLimits:
    """Sliding windows of request times per (policy, limit name, bucket key)."""

    def __init__(self, max_buckets: int = 100_000) -> None:
        self._hits: dict[tuple[str, str, str], deque[float]] = {}
        self.max_buckets = max_buckets

    def allow(self, key: tuple[str, str, str], capacity: int, window: float, now: float
              ) -> float:
        """0 when allowed (and counted); else the seconds until a slot frees."""
        hits = self._hits.get(key)
        if hits is None:
            if len(self._hits) >= self.max_buckets:
                self._hits.clear()  # bounded memory: forget every window at once
            hits = self._hits[key] = deque()
        while hits and hits[0] <= now - window:
            hits.popleft()
        if len(hits) >= capacity:
            return hits[0] + window - now
        hits.append(now)
        return 0.0


def _seconds(rate: str) -> float:
    m = _RATE.match(rate.strip())
    if not m:
        raise ValueError(rate)
    return int(m[1]) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[m[2]]


def _supported(phase: str, action: Action) -> bool:
    if action.type not in ENFORCED.get(phase, frozenset()):
        return False
    cfg = action.config
    if action.type == "restrict-ips" and cfg.get("ip_policies"):
        return False  # IP policies by id: use the ip_restriction module
    if action.type == "rate-limit":
        try:
            _seconds(str(cfg.get("rate", "")))
            return int(cfg.get("capacity", 0)) > 0
        except (TypeError, ValueError):
            return False
    return True


@dataclass(frozen=True)
class Policy:
    key: str  # identifies the policy's rate-limit windows
    phases: dict[str, tuple[Rule, ...]]
    unsupported: str | None = None

    def has(self, phase: str) -> bool:
        return bool(self.phases.get(phase))

    # -- evaluation ------------------------------------------------------------------------

    def _matching(self, phase: str, env: dict[str, Any]) -> list[Rule]:
        out = []
        for rule in self.phases.get(phase, ()):
            try:
                if all(expr.execute(env) is True for expr in rule.expressions):
                    out.append(rule)
            except Exception as exc:  # an expression that cannot be evaluated: no match
                log.info("policy_expression_failed", rule=rule.name,
                         error=str(exc).splitlines()[0])
        return out

    def on_request(self, env: dict[str, Any], headers: Headers, target: bytes,
                   limits: RateLimits, now: float) -> Outcome:
        out = Outcome(list(headers), target)
        for rule in self._matching(REQ, env):
            for action in rule.actions:
                if self._request_action(action, env, out, limits, now):
                    return out
        return out

    def _request_action(self, action: Action, env: dict[str, Any], out: Outcome,
                        limits: RateLimits, now: float) -> bool:
        """Apply one action; True if it ends the request phase."""
        cfg, kind = action.config, action.type
        if kind == "deny":
            out.status = int(cfg.get("status_code", 403))
            out.body = f"Denied by the traffic policy ({out.status}).\n".encode()
            return True
        if kind == "custom-response":
            out.status = int(cfg.get("status_code", 200))
            out.body = interpolate(str(cfg.get("content", "")), env).encode()
            out.answer_headers = [(str(k), interpolate(str(v), env))
                                  for k, v in (cfg.get("headers") or {}).items()]
            return True
        if kind == "close-connection":
            out.close = True
            return True
        if kind == "redirect":
            url = env["req"]["url"]["raw"]
            pattern = cfg.get("from")
            if pattern and not re.search(pattern, url):
                return False
            to = interpolate(str(cfg.get("to", "")), env)
            location = re.sub(pattern, _groups(to), url, count=1) if pattern else to
            out.status = int(cfg.get("status_code", 302))
            out.answer_headers = [("Location", location), *(
                (str(k), interpolate(str(v), env)) for k, v in (cfg.get("headers") or {}).items())]
            return True
        if kind == "url-rewrite":
            url = env["req"]["url"]["raw"]
            pattern = str(cfg.get("from", ""))
            if re.search(pattern, url):
                new = urlsplit(re.sub(pattern, _groups(interpolate(str(cfg.get("to", "")), env)),
                                      url, count=1))
                out.target = ((new.path or "/") + (f"?{new.query}" if new.query else "")).encode()
            return False
        if kind == "add-headers":
            out.headers += [(str(k).encode(), interpolate(str(v), env).encode())
                            for k, v in (cfg.get("headers") or {}).items()]
            return False
        if kind == "remove-headers":
            drop = {str(h).lower().encode() for h in cfg.get("headers") or []}
            out.headers = [(k, v) for k, v in out.headers if k.lower() not in drop]
            return False
        if kind == "restrict-ips":
            if not ip_allowed(env["conn"]["client_ip"], cfg):
                out.status, out.body = 403, b"Your IP address may not access this site.\n"
                return True
            return False
        if kind == "rate-limit":
            bucket = "|".join(str(_eval(k, env)) for k in cfg.get("bucket_key") or [])
            wait = limits.allow((self.key, str(cfg.get("name", "")), bucket),
                                int(cfg["capacity"]), _seconds(str(cfg["rate"])), now)
            if wait:
                out.status, out.body = 429, b"Too many requests.\n"
                out.answer_headers = [("Retry-After", str(max(1, int(wait + 0.999))))]
                return True
            return False
        if kind == "log":
            self._log(REQ, cfg, env)
        return False

    def _log(self, phase: str, cfg: dict[str, Any], env: dict[str, Any]) -> None:
        """The ``log`` action: one JSON line with the action's ``metadata`` (an object stays
        an object; ``${...}`` in its strings is interpolated)."""
        log.info("policy_log", policy=self.key, phase=phase,
                 metadata=_interpolated(cfg.get("metadata", {}), env))

    def on_response(self, env: dict[str, Any], headers: Headers) -> Headers:
        out = list(headers)
        for rule in self._matching(RES, env):
            for action in rule.actions:
                cfg = action.config
                if action.type == "add-headers":
                    out += [(str(k).encode(), interpolate(str(v), env).encode())
                            for k, v in (cfg.get("headers") or {}).items()]
                elif action.type == "remove-headers":
                    drop = {str(h).lower().encode() for h in cfg.get("headers") or []}
                    out = [(k, v) for k, v in out if k.lower() not in drop]
                elif action.type == "log":
                    self._log(RES, cfg, env)
        return out

    def on_tcp_connect(self, ip: str, port: int) -> bool:
        """Whether the connection may go on."""
        env = {"conn": {"client_ip": ip, "client_port": port}}
        for rule in self._matching(TCP, env):
            for action in rule.actions:
                if action.type == "log":
                    self._log(TCP, action.config, env)
                if action.type in ("deny", "close-connection"):
                    return False
                if action.type == "restrict-ips" and not ip_allowed(ip, action.config):
                    return False
        return True


def ip_allowed(ip: str, cfg: dict[str, Any]) -> bool:
    """In an allowed CIDR (when any are listed) and in no denied one."""
    try:
        addr = ipaddress.ip_address(ip)
        allow = [ipaddress.ip_network(c, strict=False) for c in cfg.get("allow") or []]
        deny = [ipaddress.ip_network(c, strict=False) for c in cfg.get("deny") or []]
    except ValueError:
        return False
    if any(addr in n for n in deny):
        return False
    return not allow or any(addr in n for n in allow)


def _groups(replacement: str) -> str:
    """RE2-style ``$1``/``${1}`` group references as Python's ``\\g<1>``."""
    return _GROUP.sub(lambda m: f"\\g<{m[1]}>", replacement.replace("\\", "\\\\"))


def _eval(expr: str, env: dict[str, Any]) -> Any:
    try:
        return cel.evaluate(expr, env)
    except Exception:
        return ""


def interpolate(text: str, env: dict[str, Any]) -> str:
    return _INTERPOLATION.sub(lambda m: str(_eval(m[1], env)), text) if "${" in text else text


def _interpolated(value: Any, env: dict[str, Any]) -> Any:
    if isinstance(value, str):
        return interpolate(value, env)
    if isinstance(value, dict):
        return {str(k): _interpolated(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [_interpolated(v, env) for v in value]
    return value


def _header_map(headers: Headers) -> dict[str, list[str]]:
    """``req.headers``/``res.headers``: lower-case names to their values."""
    names: dict[str, list[str]] = {}
    for k, v in headers:
        names.setdefault(k.decode("latin-1").lower(), []).append(v.decode("latin-1"))
    return names


def request_env(method: bytes, target: bytes, headers: Headers, host: str, scheme: str,
                ip: str, port: int, http10: bool) -> dict[str, Any]:
    """The CEL variables of a request."""
    raw = target.decode("latin-1")
    path, _, query = raw.partition("?")
    names = _header_map(headers)
    length = names.get("content-length", ["-1"])[0]
    hostname = host.rsplit(":", 1)[0] if not host.endswith("]") else host
    return {
        "conn": {"client_ip": ip, "client_port": port},
        "req": {"method": method.decode("latin-1"), "host": host, "headers": names,
                "version": "HTTP/1.0" if http10 else "HTTP/1.1",
                "content_length": int(length) if length.isdigit() else -1,
                "url": {"path": path, "raw_path": path, "query": query, "host": hostname,
                        "scheme": scheme, "authority": host,
                        "raw": f"{scheme}://{host}{raw}", "query_params": parse_qs(query)}},
    }


def response_env(env: dict[str, Any], status: int, headers: Headers) -> dict[str, Any]:
    return {**env, "res": {"status_code": status, "headers": _header_map(headers)}}


def compile(module: dict[str, Any], key: str) -> Policy:
    doc = parse("traffic_policy.value", str(module.get("value", "")))
    phases: dict[str, tuple[Rule, ...]] = {}
    unsupported: str | None = None
    for phase, rules in (doc or {}).items():
        compiled = []
        for i, rule in enumerate(rules or []):
            actions = tuple(Action(str(a.get("type")), dict(a.get("config") or {}))
                            for a in rule.get("actions") or [])
            for action in actions:
                if unsupported is None and not _supported(phase, action):
                    unsupported = f"traffic_policy (action '{action.type}' in {phase})"
            compiled.append(Rule(str(rule.get("name") or f"rule {i}"),
                                 tuple(cel.compile(e) for e in rule.get("expressions") or []),
                                 actions))
        phases[phase] = tuple(compiled)
    return Policy(key, phases, unsupported)

