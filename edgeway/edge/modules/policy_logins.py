"""The traffic policy's ``oauth`` and ``openid-connect`` actions, as the login modules of the
same names: each compiles to that module's gate (``edge/login``), keyed by what the policy
belongs to (a route, a tunnel, a cloud endpoint), so sessions, the callback, logout and the
provider's rechecks are the modules' own. A request without a session is sent to log in (the
action ends the phase with that redirect); a signed-in one goes on with the user's identity
in ``Edgeway-Auth-User-*`` headers and in ``actions.ngrok.oauth.identity`` (or
``actions.ngrok.openid_connect.identity``: ``id``, ``email``, ``name``) for later rules, which
decide who gets in (``deny`` when ``!(actions.ngrok.oauth.identity.email.endsWith(...))``).

``oauth``: ``provider`` (google, github, gitlab, microsoft, facebook, linkedin, twitch,
amazon), ``client_id`` and ``client_secret`` (both, or neither for the server's managed
application), ``scopes``. ``openid-connect``: ``issuer_url``, ``client_id``, ``client_secret``,
``scopes``. Both: ``auth_id`` (names the cookies), ``max_session_duration`` and
``idle_session_timeout`` (durations: ``24h``, ``30m``, ``90s``), ``allow_cors_preflight``;
``oauth`` also ``userinfo_refresh_interval``. Any other option is refused by name.
"""

from __future__ import annotations

import re
from typing import Any

from edgeway.edge.h1 import Headers
from edgeway.edge.hooks import Compiling, Unenforced
from edgeway.edge.login.base import IDENTITY, Gate
from edgeway.edge.login.providers import BY_SDK_NAME, PROVIDERS
from edgeway.edge.modules import oauth, oidc
from edgeway.edge.modules.policy_values import Scope, Unsupported, result

_COMMON = frozenset({"client_id", "client_secret", "scopes", "auth_id", "max_session_duration",
                     "idle_session_timeout", "allow_cors_preflight"})
OAUTH_OPTIONS = _COMMON | {"provider", "userinfo_refresh_interval"}
OIDC_OPTIONS = _COMMON | {"issuer_url"}
_DURATION = re.compile(r"^(\d+)(s|m|h)$")
RESULT = {"oauth": "oauth", "oidc": "openid_connect"}  # a gate's kind -> its result variable


def _duration(cfg: dict[str, Any], name: str) -> int:
    value = cfg.get(name)
    if value is None:
        return 0
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    m = _DURATION.match(str(value))
    if not m:
        raise Unsupported(f"{name} {value!r}: a duration such as 24h, 30m or 90s")
    return int(m[1]) * {"s": 1, "m": 60, "h": 3600}[m[2]]


def _session(cfg: dict[str, Any], known: frozenset[str]) -> dict[str, Any]:
    """The members every login module takes, from the action's options."""
    unknown = sorted(set(cfg) - known)
    if unknown:
        raise Unsupported(f"option {unknown[0]!r}; options: " + ", ".join(sorted(known)))
    auth_id = str(cfg.get("auth_id") or "")
    if auth_id and not re.fullmatch(r"[A-Za-z0-9_-]{1,32}", auth_id):
        raise Unsupported(f"auth_id {auth_id!r}: letters, digits, _ and -, at most 32")
    preflight = cfg.get("allow_cors_preflight", False)
    if not isinstance(preflight, bool):
        raise Unsupported(f"allow_cors_preflight {preflight!r} (true or false)")
    scopes = cfg.get("scopes") or []
    if not isinstance(scopes, list) or not all(isinstance(s, str) for s in scopes):
        raise Unsupported("scopes: a list of strings")
    return {"cookie_prefix": f"{auth_id}." if auth_id else None,
            "maximum_duration": _duration(cfg, "max_session_duration") or None,
            "inactivity_timeout": _duration(cfg, "idle_session_timeout"),
            "options_passthrough": preflight}


def _pair(cfg: dict[str, Any]) -> tuple[str, str]:
    client_id, secret = str(cfg.get("client_id") or ""), str(cfg.get("client_secret") or "")
    if bool(client_id) != bool(secret):
        raise Unsupported("client_id and client_secret go together")
    return client_id, secret


def oauth_action(cfg: dict[str, Any], at: Scope) -> Gate:
    module = _session(cfg, OAUTH_OPTIONS)
    name = str(cfg.get("provider") or "").lower()
    known = BY_SDK_NAME.get(name)
    if known is None:
        raise Unsupported(f"provider {name!r}; providers: "
                          + ", ".join(sorted(p.sdk for p in PROVIDERS.values())))
    client_id, secret = _pair(cfg)
    module["provider"] = {known.name: {"client_id": client_id, "client_secret": secret,
                                       "scopes": cfg.get("scopes") or []}}
    module["auth_check_interval"] = _duration(cfg, "userinfo_refresh_interval")
    hook = oauth.compile(module, Compiling(key=at.key))
    if isinstance(hook, Unenforced):
        raise Unsupported(hook.what)
    return hook


def openid_connect_action(cfg: dict[str, Any], at: Scope) -> Gate:
    module = _session(cfg, OIDC_OPTIONS)
    issuer = str(cfg.get("issuer_url") or "")
    if not issuer.startswith(("https://", "http://")):
        raise Unsupported(f"issuer_url {issuer!r}: the provider's https:// URL")
    client_id, secret = _pair(cfg)
    if not client_id:
        raise Unsupported("client_id and client_secret are required")
    module.update({"issuer": issuer, "client_id": client_id, "client_secret": secret,
                   "scopes": cfg.get("scopes") or None})
    return oidc.compile(module, Compiling(key=at.key))


def identity(env: dict[str, Any], kind: str, headers: Headers) -> None:
    """A login action's result: who signed in (from the identity headers its gate set)."""
    got = {k.lower(): v.decode("utf-8", "replace") for k, v in headers
           if k.lower() in IDENTITY}
    result(env, RESULT[kind], {"identity": {
        name: got.get(b"edgeway-auth-user-" + part, "")
        for name, part in (("id", b"id"), ("email", b"email"), ("name", b"name"))}})
