"""Domain kinds: agent ingresses and reserved domains, with their certificate policies."""

from __future__ import annotations

import secrets
import string
from typing import Any

import msgspec

from edgeway.catalog import checks
from edgeway.catalog.model import Context, Field, Kind, Ref, standard
from edgeway.errors import Invalid

_SLUG = string.ascii_lowercase + string.digits


def _slug(n: int = 17) -> str:
    return "".join(secrets.choice(_SLUG) for _ in range(n))


class CertPolicy(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    authority: str | msgspec.UnsetType = msgspec.UNSET
    private_key_type: str | msgspec.UnsetType = msgspec.UNSET


class CertPolicyOut(msgspec.Struct, kw_only=True):
    authority: str
    private_key_type: str


class CertJob(msgspec.Struct, kw_only=True):
    error_code: str | None
    msg: str
    started_at: str
    retries_at: str | None


class CertStatus(msgspec.Struct, kw_only=True):
    renews_at: str | None
    provisioning_job: CertJob | None


class ResolvesTo(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    value: str


def cert_policy(default_key: str) -> Any:
    def check(value: dict[str, Any] | None, _ctx: Context) -> dict[str, str] | None:
        if value is None:
            return None
        authority = value.get("authority") or "letsencrypt"
        if authority != "letsencrypt":
            raise Invalid("certificate_management_policy.authority",
                          f"'{authority}' is not supported; the only authority is 'letsencrypt'",
                          435)
        key = value.get("private_key_type") or default_key
        if key not in ("rsa", "ecdsa"):
            raise Invalid("certificate_management_policy.private_key_type",
                          f"'{key}' must be 'rsa' or 'ecdsa'", 435)
        return {"authority": authority, "private_key_type": key}
    return check


def cert_status(policy: dict[str, Any] | None, ctx: Context) -> dict[str, Any] | None:
    if policy is None:
        return None
    return {"renews_at": None, "provisioning_job": {
        "error_code": None, "started_at": ctx.now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        "retries_at": None,
        "msg": "Waiting for DNS to point at the platform before requesting a certificate "
               f"from {policy['authority']}.",
    }}


def _policy_field(default_key: str, doc: str) -> Field:
    return Field("certificate_management_policy", CertPolicy | None, doc, update=True,
                 out_type=CertPolicyOut | None, check=cert_policy(default_key))


def _status_field() -> Field:
    return Field("certificate_management_status", CertStatus | None,
                 "progress of certificate management; null without a policy", create="no")


def _owned_by_platform(domain: str, ctx: Context) -> bool:
    base = ctx.settings.base_domain
    bare = domain.removeprefix("*.")
    return bare == base or bare.endswith("." + base)


def _ingress_domain(value: str, ctx: Context) -> str:
    name = checks.domain_name("domain", value)
    if _owned_by_platform(name, ctx):
        raise Invalid("domain", f"'{name}' belongs to the platform's base domain; an agent "
                      "ingress needs a domain you own", 448)
    return name


def _status_update(doc: dict[str, Any], ctx: Context,
                   old: dict[str, Any] | None) -> dict[str, Any]:
    """A new provisioning job whenever the policy is set or changed."""
    policy = doc.get("certificate_management_policy")
    if old is not None and old.get("certificate_management_policy") == policy:
        return {}
    return {"certificate_management_status": cert_status(policy, ctx)}


def _derive_ingress(doc: dict[str, Any], ctx: Context,
                    old: dict[str, Any] | None) -> dict[str, Any]:
    out = _status_update(doc, ctx, old)
    if old is None:
        domain = doc["domain"]
        out["ns_targets"] = list(ctx.settings.ns_targets)
        out["region_domains"] = [f"tunnel.{r}.{domain}" for r in ctx.settings.regions]
    return out


AGENT_INGRESSES = Kind(
    collection="agent_ingresses", prefix="agin", list_key="ingresses", title="AgentIngress",
    describe="Custom agent ingress addresses on a domain you own, delegated by NS records.",
    unique=(("domain",),), unique_msg="an agent ingress for '{domain}' already exists",
    unique_code=413,
    fields=(
        *standard(),
        Field("domain", str, "the domain you own and delegate to the platform",
              create="required", check=_ingress_domain),
        Field("ns_targets", list[str], "name servers to delegate the domain to (NS records)",
              create="no", default=list),
        Field("region_domains", list[str], "agent connect hosts, one per region",
              create="no", default=list),
        _policy_field("rsa", "automatic certificate management; null disables it"),
        _status_field(),
    ),
    derive=_derive_ingress,
)


def _reserved_domain(value: str, ctx: Context) -> str:
    name = checks.domain_name("domain", value, wildcard=True)
    if _owned_by_platform(name, ctx):
        if name.startswith("*."):
            raise Invalid("domain", f"'{name}': wildcard domains must be your own domains, "
                          f"not under the platform domain '{ctx.settings.base_domain}'", 448)
        if name == ctx.settings.base_domain:
            raise Invalid("domain", f"'{name}' is the platform's base domain itself", 448)
    return name


def region(value: str, ctx: Context) -> str:
    """A region code of the platform (``--regions``), or ""."""
    if value and value not in ctx.settings.regions:
        raise Invalid("region", f"'{value}' is not a region; regions: "
                      + ", ".join(ctx.settings.regions), 500)
    return value


def _resolves_to(value: list[dict[str, str]], ctx: Context) -> list[dict[str, str]]:
    for i, item in enumerate(value):
        if item["value"] not in ctx.settings.regions:
            raise Invalid(f"resolves_to[{i}].value", f"'{item['value']}' is not a region; "
                          "regions: " + ", ".join(ctx.settings.regions), 215)
    return value


def _check_reserved(doc: dict[str, Any], ctx: Context) -> None:
    if _owned_by_platform(doc["domain"], ctx) and doc.get("certificate_management_policy"):
        raise Invalid("certificate_management_policy", "must be null for a subdomain of the "
                      "platform's base domain, which is served with the platform certificate",
                      439)


def _derive_reserved(doc: dict[str, Any], ctx: Context,
                     old: dict[str, Any] | None) -> dict[str, Any]:
    if old is not None:
        return _status_update(doc, ctx, old)
    domain = doc["domain"]
    owned = _owned_by_platform(domain, ctx)
    policy = doc.get("certificate_management_policy")
    if "certificate_management_policy" not in doc and not owned:
        # Custom domains get Let's Encrypt (ECDSA) unless the request says otherwise.
        policy = {"authority": "letsencrypt", "private_key_type": "ecdsa"}
    base = ctx.settings.base_domain
    wild = domain.startswith("*.") and not owned
    return {
        "certificate_management_policy": policy,
        "certificate_management_status": cert_status(policy, ctx),
        "cname_target": None if owned else f"{_slug()}.cname.{base}",
        "acme_challenge_cname_target": f"{_slug()}.acme.{base}" if wild else None,
    }


RESERVED_DOMAINS = Kind(
    collection="reserved_domains", prefix="rd", list_key="reserved_domains",
    title="ReservedDomain",
    describe="Domains (plain or wildcard) reserved for your endpoints, with managed certificates.",
    unique=(("domain",),), unique_msg="the domain '{domain}' is already reserved",
    unique_code=413,
    fields=(
        *standard(),
        Field("domain", str, "the domain; may be a wildcard such as *.site.example.com",
              create="required", check=_reserved_domain),
        Field("region", str, "deprecated; kept for compatibility", default="", check=region),
        Field("cname_target", str | None, "target of the CNAME record for the domain",
              create="no"),
        Field("certificate", Ref | None, "uploaded certificate, if any", create="no"),
        _policy_field("ecdsa", "automatic certificate management; null disables it"),
        _status_field(),
        Field("acme_challenge_cname_target", str | None,
              "target of the _acme-challenge CNAME record (wildcard custom domains)",
              create="no"),
        Field("resolves_to", list[ResolvesTo], "regions the domain resolves to; empty = global",
              update=True, default=list, empty_is_unset=True, check=_resolves_to),
        Field("http_endpoint_configuration", None, "legacy, always null", create="no"),
        Field("https_endpoint_configuration", None, "legacy, always null", create="no"),
    ),
    check=_check_reserved, derive=_derive_reserved,
)

KINDS = (AGENT_INGRESSES, RESERVED_DOMAINS)
