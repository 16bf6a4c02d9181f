"""Application users and sessions: the end users who logged in at the edge (through an oauth,
oidc or saml module, on a route or an agent's tunnel) and their browsers' sessions. The edge
writes them; the API lists, shows and deletes them. Deleting a session logs that browser out
on its next request; deleting a user ends all their sessions (they cascade)."""

from __future__ import annotations

from typing import Any

import msgspec

from edgeway.catalog.model import Field, Kind, Link, Ref

READ_AND_DELETE = frozenset({"get", "list", "delete"})


class IdentityProvider(msgspec.Struct, kw_only=True):
    name: str
    url: str


class UserAgent(msgspec.Struct, kw_only=True):
    raw: str
    browser_name: str
    browser_version: str
    device_type: str
    os_name: str
    os_version: str


class Location(msgspec.Struct, kw_only=True):
    country_code: str
    latitude: float
    longitude: float
    lat_long_radius_km: int


class BrowserSession(msgspec.Struct, kw_only=True):
    user_agent: UserAgent
    ip_address: str
    location: Location


def _out(name: str, typ: Any, doc: str, default: Any = None) -> Field:
    return Field(name, typ, doc, create="no", default=default)


def _hidden(name: str, doc: str, default: Any = "") -> Field:
    return Field(name, str, doc, create="no", default=default, response=False)


APP_USERS = Kind(
    collection="app/users", prefix="appusr", list_key="application_users",
    title="ApplicationUser", ops=READ_AND_DELETE,
    describe="End users who logged in through an OAuth, OIDC or SAML module; deleting one "
             "ends all their sessions.",
    unique=(("user_key",),), unique_msg="that user is already known",
    fields=(
        _out("identity_provider", IdentityProvider | None,
             "the provider they logged in with: module name (oidc, saml or an OAuth "
             "provider) and its URL"),
        _out("provider_user_id", str, "their id at the identity provider", ""),
        _out("username", str, "their user name at the provider, if it has one", ""),
        _out("email", str, "their e-mail address, as the provider states it", ""),
        _out("name", str, "their name, as the provider states it", ""),
        _out("last_active", str, "their last request through the edge, RFC 3339 (updated at "
                                 "most once a minute)", ""),
        _out("last_login", str, "their last login, RFC 3339", ""),
        _hidden("user_key", "digest of the provider and its user id (the unique key)"),
    ),
)

APP_SESSIONS = Kind(
    collection="app/sessions", prefix="appsess", list_key="application_sessions",
    title="ApplicationSession", ops=READ_AND_DELETE,
    describe="Browser sessions of application users; deleting one logs that browser out on "
             "its next request.",
    fields=(
        _out("public_url", str, "the site the session is for (https://host[:port])", ""),
        _out("browser_session", BrowserSession | None,
             "the browser: its user agent as sent and as understood, its address, and its "
             "location (not known: this server has no geolocation database)"),
        Field("application_user_id", str, "the user the session belongs to", create="no",
              response=False, default="",
              link=Link(("app/users",), "cascade", render_as="application_user")),
        _out("last_active", str, "the session's last request, RFC 3339 (updated at most once "
                                 "a minute)", ""),
        _out("expires_at", str, "when the session ends at the latest, RFC 3339", ""),
        _out("endpoint", Ref | None, "the agent endpoint the session is for"),
        _out("edge", Ref | None, "the edge the session is for"),
        _out("route", Ref | None, "the edge route the session is for"),
        _hidden("realm", "what the session is valid for (module, route or tunnel, provider)"),
        _hidden("token_sealed", "the provider's access token, sealed (OAuth re-checks)"),
        _hidden("refresh_sealed", "the provider's refresh token, sealed, if it gave one"),
        Field("seen", float, "the session's last request (epoch s, to the millisecond: the "
                             "inactivity timeout counts from it)", create="no", default=0.0,
              response=False),
        Field("inactivity", int, "seconds without a request that end the session (0: none)",
              create="no", default=0, response=False),
        Field("checked_at", int, "when the user was last checked at the provider (epoch s)",
              create="no", default=0, response=False),
        Field("details", dict[str, str], "what the provider said that later requests need "
                                         "(SAML NameID and session index)", create="no",
              default=dict, response=False),
    ),
)

KINDS = (APP_USERS, APP_SESSIONS)
