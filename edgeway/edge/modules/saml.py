"""The saml module on traffic, sans I/O: its configuration (the IdP's metadata, the route's
own signing key and host, who may get in), its hook, and the attribute names an assertion's
e-mail, name, user name and groups are read from. The flow (python3-saml, xmlsec
underneath) is ``edge/login/saml.py``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from edgeway.catalog.modules.saml import KEY_MEMBERS, NAMEID_FORMATS
from edgeway.edge.hooks import Compiling, Unenforced
from edgeway.edge.login import base as login
from edgeway.edge.login.base import PREFIX, Common, Gate

MACE = "urn:mace:dir:attribute-def:"
EMAIL = ("email", "mail", "emailaddress", "urn:oid:0.9.2342.19200300.100.1.3",
         "http://schemas.xmlsoap.org/ws/2005/05/identity/claims/emailaddress")
NAME = ("displayname", "name", "cn", "urn:oid:2.16.840.1.113730.3.1.241", "urn:oid:2.5.4.3",
        "http://schemas.xmlsoap.org/ws/2005/05/identity/claims/name")
USERNAME = ("uid", "username", "urn:oid:0.9.2342.19200300.100.1.1")
GROUPS = ("groups", "group", "memberof", "ismemberof", "urn:oid:1.3.6.1.4.1.5923.1.5.1.1",
          "http://schemas.xmlsoap.org/claims/group",
          "http://schemas.microsoft.com/ws/2008/06/identity/claims/groups")


def values(attributes: dict[str, list[str]], names: tuple[str, ...]) -> list[str]:
    """The values of the attributes of these names (in any case; the SAML 2.0 "basic" names
    also with the ``urn:mace:dir:attribute-def:`` prefix some IdPs put on them)."""
    return [str(v) for k, vs in attributes.items()
            if k.lower().removeprefix(MACE) in names for v in vs]


@dataclass(frozen=True)
class Config:
    common: Common
    idp_metadata: str
    force_authn: bool
    allow_idp_initiated: bool
    groups: tuple[str, ...]  # authorized_groups
    nameid_format: str
    key_sealed: str  # the route's signing key (sealed) and its certificate
    cert_pem: str
    host: str  # the route's own host ("" while its edge has no hostport)

    @property
    def base(self) -> str:
        """The path of the service provider (its metadata; ``/acs`` and ``/slo`` below)."""
        return f"{PREFIX}saml/{self.common.key}"


def config(module: dict[str, Any], key: str, host: str) -> Config:
    groups = tuple(sorted(str(g) for g in module.get("authorized_groups") or ()))
    nameid = str(module.get("nameid_format") or NAMEID_FORMATS[0])
    metadata = str(module.get("idp_metadata", ""))
    return Config(login.common("saml", module, key, metadata, groups, nameid, host),
                  metadata, bool(module.get("force_authn")),
                  bool(module.get("allow_idp_initiated")), groups, nameid,
                  str(module.get(KEY_MEMBERS[0], "")), str(module.get(KEY_MEMBERS[1], "")), host)


@dataclass(frozen=True)
class Login(Gate):
    name = "saml"
    config: Config

    @property
    def common(self) -> Common:
        return self.config.common


def compile(module: dict[str, Any], ctx: Compiling) -> Login | Unenforced:
    """SAML logins on routes (whose key material the API generated); anything else (an agent
    bind, a route without a host) cannot be served."""
    cfg = config(module, ctx.key, ctx.host)
    if not (cfg.key_sealed and cfg.cert_pem and cfg.host and cfg.idp_metadata):
        return Unenforced("saml (on a route of an edge with a hostport)")
    return Login(cfg)
