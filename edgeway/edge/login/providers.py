"""The eight OAuth identity providers of the ``oauth`` module, sans I/O: their real endpoints
(each overridable by ``--oauth-endpoint PROVIDER.NAME=URL``), the scopes a login needs, whether
they take PKCE, the names the agent SDKs use for them, and how each one's user document reads.

Endpoints by name: ``authorize`` (the browser is sent there), ``token`` (the code exchange),
``user`` (who the token belongs to); code_host_a also ``emails`` (its verified addresses),
``teams`` and ``organizations`` (for the module's team and organization rules).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from edgeway.edge.login.base import Identity

Parse = Callable[[Any], Identity]


def _text(doc: Any, *names: str) -> str:
    if not isinstance(doc, dict):
        return ""
    for name in names:
        value = doc.get(name)
        if isinstance(value, str | int) and not isinstance(value, bool) and str(value):
            return str(value)
    return ""


def _verified(doc: Any) -> str:
    """The e-mail of an OpenID-style user document, if the provider verified it."""
    flag = doc.get("email_verified", True) if isinstance(doc, dict) else True
    return _text(doc, "email") if flag not in (False, "false") else ""


def _code_host_a(doc: Any) -> Identity:
    login = _text(doc, "login")
    return Identity(_text(doc, "id"), _text(doc, "email"), _text(doc, "name") or login, login)


def _social_a(doc: Any) -> Identity:
    return Identity(_text(doc, "id"), _text(doc, "email"), _text(doc, "name"))


def _enterprise_a(doc: Any) -> Identity:
    """A Microsoft account, of any tenant (the ``common`` endpoints). Its e-mail, which the
    e-mail rules check, is the user principal name: its domain is one the tenant verified.
    Graph's ``mail`` is not: any tenant's administrator may set it to any address, so it
    would let another tenant's user pass as ``ceo@your.example``."""
    upn = _text(doc, "userPrincipalName")
    email = upn if "@" in upn and "#EXT#" not in upn.upper() else ""  # (a guest's: none)
    return Identity(_text(doc, "id"), email, _text(doc, "displayName"), upn)


def openid_identity(doc: Any) -> Identity:
    """The user of OpenID Connect claims (an ID token's, or a userinfo answer): the e-mail
    only if the provider did not say it is unverified."""
    email = _verified(doc)
    return Identity(_text(doc, "sub"), email, _text(doc, "name"),
                    _text(doc, "preferred_username") or email)


def _code_host_b(doc: Any) -> Identity:
    return Identity(_text(doc, "id"), _text(doc, "email"), _text(doc, "name"),
                    _text(doc, "username"))


def _streaming_a(doc: Any) -> Identity:
    data = doc.get("data") if isinstance(doc, dict) else None
    user = data[0] if isinstance(data, list) and data else {}
    return Identity(_text(user, "id"), _text(user, "email"), _text(user, "display_name"),
                    _text(user, "login"))


def _retail_a(doc: Any) -> Identity:
    return Identity(_text(doc, "user_id"), _text(doc, "email"), _text(doc, "name"))


@dataclass(frozen=True)
class Provider:
    name: str  # the module's member (code_host_a, ...)
    sdk: str  # what the agent SDKs call it
    endpoints: dict[str, str]
    scopes: tuple[str, ...]  # always asked for: who the user is, and their e-mail
    parse: Parse
    pkce: bool = True
    # extra scopes the team and organization rules need
    rule_scopes: tuple[str, ...] = ()
    user_headers: tuple[tuple[str, str], ...] = ()


PROVIDERS: dict[str, Provider] = {p.name: p for p in (
    Provider("code_host_a", "github", {
        "authorize": "https://github.com/login/oauth/authorize",
        "token": "https://github.com/login/oauth/access_token",
        "user": "https://api.github.com/user",
        "emails": "https://api.github.com/user/emails",
        "teams": "https://api.github.com/user/teams",
        "organizations": "https://api.github.com/user/orgs",
    }, ("read:user", "user:email"), _code_host_a, rule_scopes=("read:org",),
        user_headers=(("Accept", "application/vnd.github+json"),
                      ("X-GitHub-Api-Version", "2022-11-28"))),
    Provider("social_a", "facebook", {
        "authorize": "https://www.facebook.com/v19.0/dialog/oauth",
        "token": "https://graph.facebook.com/v19.0/oauth/access_token",
        "user": "https://graph.facebook.com/v19.0/me?fields=id,name,email",
    }, ("public_profile", "email"), _social_a),
    Provider("enterprise_a", "microsoft", {
        "authorize": "https://login.microsoftonline.com/common/oauth2/v2.0/authorize",
        "token": "https://login.microsoftonline.com/common/oauth2/v2.0/token",
        "user": "https://graph.microsoft.com/v1.0/me",
    }, ("openid", "profile", "email", "User.Read"), _enterprise_a),
    Provider("search_a", "google", {
        "authorize": "https://accounts.google.com/o/oauth2/v2/auth",
        "token": "https://oauth2.googleapis.com/token",
        "user": "https://openidconnect.googleapis.com/v1/userinfo",
    }, ("openid", "email", "profile"), openid_identity),
    Provider("professional_net", "linkedin", {
        "authorize": "https://www.linkedin.com/oauth/v2/authorization",
        "token": "https://www.linkedin.com/oauth/v2/accessToken",
        "user": "https://api.linkedin.com/v2/userinfo",
    }, ("openid", "profile", "email"), openid_identity, pkce=False),
    Provider("code_host_b", "gitlab", {
        "authorize": "https://gitlab.com/oauth/authorize",
        "token": "https://gitlab.com/oauth/token",
        "user": "https://gitlab.com/api/v4/user",
    }, ("read_user",), _code_host_b),
    Provider("streaming_a", "twitch", {
        "authorize": "https://id.twitch.tv/oauth2/authorize",
        "token": "https://id.twitch.tv/oauth2/token",
        "user": "https://api.twitch.tv/helix/users",
    }, ("user:read:email",), _streaming_a, pkce=False),
    Provider("retail_a", "amazon", {
        "authorize": "https://www.amazon.com/ap/oa",
        "token": "https://api.amazon.com/auth/o2/token",
        "user": "https://api.amazon.com/user/profile",
    }, ("profile",), _retail_a),
)}
BY_SDK_NAME = {p.sdk: p for p in PROVIDERS.values()} | PROVIDERS


def endpoint_names() -> list[str]:
    """``provider.endpoint`` for every endpoint that can be overridden."""
    return [f"{p.name}.{e}" for p in PROVIDERS.values() for e in p.endpoints]


def check_endpoint(spec: str) -> tuple[str, str, str]:
    """``PROVIDER.NAME=URL`` as (provider, endpoint name, URL); ValueError saying what is
    wrong."""
    name, sep, url = spec.partition("=")
    provider, _, endpoint = name.strip().partition(".")
    known = PROVIDERS.get(provider)
    if not sep or known is None or endpoint not in known.endpoints:
        raise ValueError(f"--oauth-endpoint {spec!r} must be PROVIDER.NAME=URL with one of "
                         + ", ".join(endpoint_names()))
    url = url.strip()
    if not url.startswith(("https://", "http://")):
        raise ValueError(f"--oauth-endpoint {spec!r}: {url!r} is not an http(s) URL")
    return provider, endpoint, url
