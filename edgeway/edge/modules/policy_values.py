"""What the traffic policy's actions share: their types (``Scope``, ``Outcome``, the closure
shapes per phase), ``${...}`` interpolation and CEL evaluation, the parsing of options several
actions take (status codes, patterns, rates, header lists, networks), the result variables
(``actions.ngrok.*``) and the actions that only write to a request's environment (``log``,
``set-vars``, ``compress-response``). A configuration this edge cannot honour raises
``Unsupported``.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog

from edgeway.celpkg import cel
from edgeway.edge.modules.circuit_breaker import Breakers
from edgeway.edge.modules.rate_limits import RateLimits
from edgeway.ippolicy import Network, split

log = structlog.get_logger()
Headers = list[tuple[bytes, bytes]]
Env = dict[str, Any]
LOGS = "_logs"  # an HTTP request's env: what its log actions wrote (for its traffic event)
COMPRESS = "_compress"  # an HTTP request's env: a compress-response action ran
REWRITE = "_rewrite"  # an HTTP request's env: a response-body-find-replace action ran
_INTERPOLATION = re.compile(r"\$\{(.*?)\}")
_GROUP = re.compile(r"\$\{?(\d+)\}?")
_RATE = re.compile(r"^(\d+)(ms|s|m|h)$")


class Unsupported(Exception):
    """An action (or an option of one) this edge does not enforce."""


@dataclass(frozen=True)
class Scope:
    """What a policy's actions are compiled with besides their configuration: the key of
    what the policy belongs to (a route, edge or tunnel id: its rate-limit windows are its
    own), every IP policy's rules by the policy's id (restrict-ips' ``ip_policies``), where
    circuit breakers keep their counts across snapshots (None: new ones) and whether the
    policy is a TLS endpoint's."""
    key: str
    rules: Mapping[str, Sequence[tuple[str, Network]]] = field(default_factory=dict)
    breakers: Breakers | None = None
    terminates: bool = False  # a TLS endpoint's policy: terminate-tls is honoured
    endpoint: str = ""  # an HTTP(S) endpoint's scheme: its on_tcp_connect is an HTTP one's
    # the ``endpoint.*`` variables of what the policy belongs to, when they are fixed (an
    # agent's or a cloud endpoint, a TCP or TLS edge; an HTTPS edge's come from the request)
    variables: Mapping[str, Any] = field(default_factory=dict)


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

def evaluate(expr: str, env: Env) -> Any:
    try:
        return cel.evaluate(expr, env)
    except Exception:
        return ""


def _shown(value: Any) -> str:
    """A CEL value in a string, as CEL writes it (``true``, not Python's ``True``)."""
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def interpolate(text: str, env: Env, escape: Callable[[str], str] = str) -> str:
    """``text`` with each ``${expr}`` replaced by its value (passed through ``escape``: a
    value put into a regular expression is literal text there, never a pattern)."""
    return _INTERPOLATION.sub(lambda m: escape(_shown(evaluate(m[1], env))), text) \
        if "${" in text else text


def interpolated(value: Any, env: Env) -> Any:
    if isinstance(value, str):
        return interpolate(value, env)
    if isinstance(value, dict):
        return {str(k): interpolated(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolated(v, env) for v in value]
    return value


def groups(replacement: str) -> str:
    """RE2-style ``$1``/``${1}`` group references as Python's ``\\g<1>``."""
    return _GROUP.sub(lambda m: f"\\g<{m[1]}>", replacement.replace("\\", "\\\\"))


def seconds(rate: str) -> float:
    m = _RATE.match(rate.strip())
    if not m:
        raise Unsupported(f"rate {rate!r}")
    return int(m[1]) * {"ms": 0.001, "s": 1, "m": 60, "h": 3600}[m[2]]


def pattern_of(text: Any) -> re.Pattern[str]:
    try:
        return re.compile(str(text))
    except re.error as exc:
        raise Unsupported(f"pattern {text!r}: {exc}") from None


def status_code(cfg: dict[str, Any], default: int) -> int:
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


def header_values(cfg: dict[str, Any]) -> tuple[tuple[bytes, str], ...]:
    return tuple((str(k).encode(), str(v)) for k, v in (cfg.get("headers") or {}).items())


def header_names(cfg: dict[str, Any]) -> frozenset[bytes]:
    return frozenset(str(h).lower().encode() for h in cfg.get("headers") or [])


def logger(phase: str, cfg: dict[str, Any], key: str) -> Callable[[Env], None]:
    """The ``log`` action: one line with the action's ``metadata`` (an object stays an
    object; ``${...}`` in its strings is interpolated)."""
    metadata = cfg.get("metadata", {})

    def write(env: Env) -> None:
        shown = interpolated(metadata, env)
        log.info("policy_log", policy=key, phase=phase, metadata=shown)
        if (logs := env.get(LOGS)) is not None:
            logs.append({"policy": key, "phase": phase, "metadata": shown})
    return write


def setter(cfg: dict[str, Any]) -> Callable[[Env], None]:
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
            found[name] = interpolated(value, env)
    return run


def compressor(cfg: dict[str, Any]) -> Callable[[Env], None]:
    """compress-response: the response is gzipped when the client accepts it and it is worth
    it (as the compression module decides); ``algorithms``, when given, must include gzip,
    the one this edge writes."""
    algorithms = [str(a).lower() for a in cfg.get("algorithms") or ["gzip"]]
    if "gzip" not in algorithms:
        raise Unsupported(f"compress-response algorithms {algorithms} (this edge writes gzip)")
    return lambda env: env.__setitem__(COMPRESS, True)
