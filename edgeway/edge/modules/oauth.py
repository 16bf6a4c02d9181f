"""The oauth module, sans I/O: its configuration (the one provider it names, the application
to log in with, who may get in, how often users are checked again) and its hook. The flow is
``edge/login/oauth.py``; the providers' endpoints ``edge/login/providers.py``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from edgeway.edge.hooks import Compiling, Unenforced
from edgeway.edge.login import base as login
from edgeway.edge.login.base import Common, Gate, Identity
from edgeway.edge.login.providers import PROVIDERS, Provider

CALLBACK = "/.edgeway/oauth/callback"


@dataclass(frozen=True)
class Config:
    common: Common
    provider: Provider
    client_id: str  # "": the platform's managed application for the provider
    client_secret: str
    scopes: tuple[str, ...]  # as configured (the flow adds what it needs)
    teams: tuple[str, ...]  # code_host_a: '<org>/<team>' (lower case) or numeric ids
    organizations: tuple[str, ...]  # code_host_a: organization logins (lower case)
    check_interval: int  # seconds between checks of a session's user at the provider

    @property
    def requested(self) -> tuple[str, ...]:
        """The scopes asked for: the configured ones, who the user is and their e-mail, and
        what the team and organization rules need."""
        rules = self.provider.rule_scopes if self.teams or self.organizations else ()
        return tuple(dict.fromkeys((*self.scopes, *self.provider.scopes, *rules)))

    def rules(self, who: Identity) -> list[tuple[str, bool]]:
        """The module's rules that are set, each with whether ``who`` passes it."""
        c, email = self.common, who.email.lower()
        out = []
        if c.allow_emails:
            out.append(("email_addresses", bool(email) and email in c.allow_emails))
        if c.allow_domains:
            out.append(("email_domains",
                        bool(email) and email.rpartition("@")[2] in c.allow_domains))
        if self.teams:
            out.append(("teams", any(f"team:{t}" in who.facts for t in self.teams)))
        if self.organizations:
            out.append(("organizations",
                        any(f"org:{o}" in who.facts for o in self.organizations)))
        return out


def chosen(module: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """The provider a module document names, with its member."""
    provider = module.get("provider") or {}
    found = [(k, v) for k, v in provider.items() if isinstance(v, dict)]
    return found[0] if len(found) == 1 and found[0][0] in PROVIDERS else None


def config(module: dict[str, Any], key: str = "") -> Config | None:
    found = chosen(module)
    if found is None:
        return None
    name, app = found
    client_id = str(app.get("client_id") or "")
    teams = tuple(sorted(str(t).strip().lower() for t in app.get("teams") or ()))
    orgs = tuple(sorted(str(o).strip().lower() for o in app.get("organizations") or ()))
    return Config(login.common("oauth", module, key, name, client_id, teams, orgs,
                               emails=app.get("email_addresses"),
                               domains=app.get("email_domains")),
                  PROVIDERS[name], client_id, str(app.get("client_secret") or ""),
                  tuple(str(s) for s in app.get("scopes") or ()), teams, orgs,
                  int(module.get("auth_check_interval") or 0))


@dataclass(frozen=True)
class Login(Gate):
    name = "oauth"
    config: Config

    @property
    def common(self) -> Common:
        return self.config.common


def compile(module: dict[str, Any], ctx: Compiling) -> Login | Unenforced:
    cfg = config(module, ctx.key)
    return Login(cfg) if cfg is not None else Unenforced("oauth (with one known provider)")
