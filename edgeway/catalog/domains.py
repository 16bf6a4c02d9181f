"""Domain kinds: agent ingresses and reserved domains, with their certificate policies."""

from __future__ import annotations

import secrets
import string
from datetime import datetime
from typing import Any

import msgspec

from edgeway.catalog import checks
from edgeway.catalog.model import Context, Fetch, Field, Kind, Link, standard
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
               f"from {policy['authority']}." if ctx.settings.acme else
               "Certificate management is off on this platform (edgeway serve "
               "--acme-directory off): no certificate is requested.",
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


CHALLENGE = "_acme-challenge."
MAX_WILDCARD = 253 - len(CHALLENGE)  # (the name after '*.': its challenge record's must fit)


def _reserved_domain(value: str, ctx: Context) -> str:
    name = checks.domain_name("domain", value, wildcard=True)
    if _owned_by_platform(name, ctx):
        if name.startswith("*."):
            raise Invalid("domain", f"'{name}': wildcard domains must be your own domains, "
                          f"not under the platform domain '{ctx.settings.base_domain}'", 448)
        if name == ctx.settings.base_domain:
            raise Invalid("domain", f"'{name}' is the platform's base domain itself", 448)
    elif name.startswith("*.") and len(name) - 2 > MAX_WILDCARD:
        raise Invalid("domain", f"'{name}' is too long for a wildcard domain: the name after "
                      f"'*.' may have at most {MAX_WILDCARD} characters (it has {len(name) - 2})"
                      f", so that its certificate's {CHALLENGE}<name> record fits in a domain "
                      "name's 253", 448)
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


def covers(names: list[str], domain: str) -> bool:
    """Whether a certificate for ``names`` serves ``domain`` (a wildcard one only when it
    has that wildcard itself)."""
    names = [n.lower() for n in names]
    if domain in names:
        return True
    parent = domain.split(".", 1)[1] if "." in domain else ""
    return not domain.startswith("*.") and bool(parent) and f"*.{parent}" in names


async def _verify_reserved(doc: dict[str, Any], ctx: Context, fetch: Fetch,
                           old: dict[str, Any] | None) -> None:
    """An uploaded certificate must cover the domain and be valid; it and a certificate
    management policy exclude each other; a managed certificate is not detached by hand."""
    cert_id = doc.get("certificate_id")
    before = (old or {}).get("certificate_id")
    if old is not None and before and cert_id != before:
        stored = await fetch("tls_certificates", before)
        if stored is not None and stored.get("issued_at") and \
                doc.get("certificate_management_policy"):
            raise Invalid("certificate_id", "the certificate is managed by the certificate "
                          "management policy; delete the policy first", 436)
    policy_new = doc.get("certificate_management_policy") and (
        old is None or not old.get("certificate_management_policy"))
    if cert_id and (cert_id != before or policy_new):
        cert = await fetch("tls_certificates", cert_id)
        if cert is None:  # (a stored reference is not checked again: it may dangle)
            raise Invalid("certificate_id", f"the certificate '{cert_id}' does not exist any "
                          "more; set certificate_id to null or to another certificate", 215)
        if cert.get("issued_at") is None and doc.get("certificate_management_policy"):
            raise Invalid("certificate_id", "an uploaded certificate and a certificate "
                          "management policy exclude each other: set "
                          "certificate_management_policy to null (or detach the certificate "
                          "first)", 434)
        if cert_id != before:
            _serves(cert_id, cert, doc["domain"], ctx)


def _serves(cert_id: str, cert: dict[str, Any], domain: str, ctx: Context) -> None:
    """An uploaded certificate given to ``domain`` must cover it and not have expired."""
    names = list(cert["subject_alternative_names"]["dns_names"])
    if not covers(names, domain):
        raise Invalid("certificate_id", f"the certificate '{cert_id}' is for "
                      f"{', '.join(names) or 'no DNS name'}, which does not cover "
                      f"'{domain}'", 215)
    if datetime.fromisoformat(cert["not_after"]) <= ctx.now:
        raise Invalid("certificate_id", f"the certificate '{cert_id}' expired on "
                      f"{cert['not_after']}", 215)


def _derive_reserved(doc: dict[str, Any], ctx: Context,
                     old: dict[str, Any] | None) -> dict[str, Any]:
    if old is not None:
        return _status_update(doc, ctx, old)
    domain = doc["domain"]
    owned = _owned_by_platform(domain, ctx)
    policy = doc.get("certificate_management_policy")
    if "certificate_management_policy" not in doc and not owned \
            and not doc.get("certificate_id"):
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
        Field("certificate_id", str | None, "the certificate (a tls_certificates id) served "
              "for the domain: uploaded, or issued by the certificate management policy",
              update=True, response=False,
              link=Link(("tls_certificates",), "restrict", render_as="certificate", code=215)),
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
    check=_check_reserved, derive=_derive_reserved, verify=_verify_reserved,
)

KINDS = (AGENT_INGRESSES, RESERVED_DOMAINS)
