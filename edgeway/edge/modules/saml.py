"""The saml module on traffic, sans I/O: its configuration (the IdP's metadata, the route's
own signing key and host, who may get in) and its hook. The flow (python3-saml, xmlsec
underneath) is ``edge/saml_login.py``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from edgeway.catalog.modules.saml import KEY_MEMBERS, NAMEID_FORMATS
from edgeway.edge import login
from edgeway.edge.hooks import Compiling, Unenforced
from edgeway.edge.login import PREFIX, Common, Gate


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
