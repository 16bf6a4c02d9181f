"""End-user authentication modules: OAuth, OIDC and SAML (session cookies at the edge)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import msgspec

from edgeway.catalog.model import Context, Where
from edgeway.catalog.modules import Module, On, Session, UInt32
from edgeway.catalog.modules.saml import SAML_MODULE
from edgeway.catalog.sealing import MASK
from edgeway.errors import Invalid


class OAuthApp(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    client_id: str | None = None
    client_secret: str | None = None
    scopes: list[str] = []
    email_addresses: list[str] = []
    email_domains: list[str] = []


class OAuthCodeHost(OAuthApp, kw_only=True, forbid_unknown_fields=True):
    teams: list[str] = []
    organizations: list[str] = []


class OAuthProvider(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    code_host_a: OAuthCodeHost | None = None
    social_a: OAuthApp | None = None
    enterprise_a: OAuthApp | None = None
    search_a: OAuthApp | None = None
    professional_net: OAuthApp | None = None
    code_host_b: OAuthApp | None = None
    streaming_a: OAuthApp | None = None
    retail_a: OAuthApp | None = None


class OAuth(Session):
    provider: OAuthProvider | None = None
    auth_check_interval: UInt32 = 0


class OIDC(Session):
    issuer: str = ""
    client_id: str = ""
    client_secret: str = ""
    scopes: list[str] = []


def _filled(shape: type[msgspec.Struct], value: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = msgspec.to_builtins(msgspec.convert(value, shape))
    return out


def _oauth_app(name: str, app: dict[str, Any], at: str, ctx: Context) -> None:
    has_id, has_secret = bool(app.get("client_id")), bool(app.get("client_secret"))
    if has_id != has_secret:
        member = "client_secret" if has_id else "client_id"
        raise Invalid(f"{at}{name}.{member}", "client_id and client_secret go together: give "
                      "both for your own OAuth application, or neither for the platform's",
                      383 if has_id else 384)
    if app.get("scopes") and not has_id:
        raise Invalid(f"{at}{name}.scopes", "may be set only with your own OAuth application "
                      "(client_id and client_secret)", 390)
    for i, team in enumerate(app.get("teams", [])):
        if team.count("/") != 1 and not team.isdigit():
            raise Invalid(f"{at}{name}.teams[{i}]", f"'{team}' must be '<org-slug>/<team-slug>' "
                          "or a numeric team id", 7033)
    if not has_id and name not in ctx.settings.oauth_apps:
        raise Invalid(f"{at}{name}.client_id", f"is required: this server has no managed OAuth "
                      f"application for {name} (an operator registers one with --oauth-apps); "
                      "give the client_id and client_secret of your own application", 7035)


def _oauth(value: dict[str, Any], ctx: Context, at: str) -> dict[str, Any]:
    provider = value.get("provider") or {}
    chosen = [k for k, v in provider.items() if v is not None]
    if len(chosen) != 1:
        raise Invalid(at + "provider", "exactly one identity provider must be set, one of "
                      + ", ".join(OAuthProvider.__struct_fields__) + f" (got {len(chosen)})",
                      7037 if not chosen else 7036)
    _oauth_app(chosen[0], provider[chosen[0]], at + "provider.", ctx)
    return _filled(OAuth, value)


def _url(member: str, value: str) -> str:
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise Invalid(member, f"'{value}' must be an absolute http(s) URL of the OpenID "
                      "provider", 7088)
    return value


def _oidc(value: dict[str, Any], _ctx: Context, at: str) -> dict[str, Any]:
    _url(at + "issuer", value.get("issuer", ""))
    for member in ("client_id", "client_secret"):
        if not value.get(member, "").strip():
            raise Invalid(at + member, "is required", 7089)
    return _filled(OIDC, value)


def _oauth_render(value: dict[str, Any], _where: Where) -> dict[str, Any]:
    provider = {k: None for k in OAuthProvider.__struct_fields__} | value.get("provider", {})
    return {**value, "provider": provider}


ROUTE: frozenset[On] = frozenset({"route"})
MODULES = (
    Module("oauth", OAuth, OAuth, ROUTE, "log end users in with an OAuth identity provider; "
           f"client_secret is stored sealed and shown as '{MASK}' (writing '{MASK}' back "
           "keeps the stored one)", _oauth, render=_oauth_render,
           secrets=(("provider", "*", "client_secret"),)),
    Module("oidc", OIDC, OIDC, ROUTE, "log end users in with an OpenID Connect provider; "
           f"client_secret is stored sealed and shown as '{MASK}' (writing '{MASK}' back "
           "keeps the stored one)", _oidc, secrets=(("client_secret",),)),
    SAML_MODULE,
)
