"""IP kinds: policies, their allow/deny rules, and IP restrictions that apply them."""

from __future__ import annotations

from typing import Any, Literal

from edgeway.catalog import checks
from edgeway.catalog.model import Context, Field, Kind, Link, standard
from edgeway.errors import Invalid

IP_POLICIES = Kind(
    collection="ip_policies", prefix="ipp", list_key="ip_policies", title="IPPolicy",
    not_found_code=1402,
    describe="Named sets of allow/deny CIDR rules, applied through IP restrictions and modules.",
    fields=standard(),
)


def _cidr(value: str, _ctx: Context) -> str:
    return checks.cidr("cidr", value)


IP_POLICY_RULES = Kind(
    collection="ip_policy_rules", prefix="ipr", list_key="ip_policy_rules",
    title="IPPolicyRule", not_found_code=1404,
    describe="One CIDR of an IP policy, allowed or denied.",
    unique=(("ip_policy_id", "cidr"),),
    unique_msg="IP policy '{ip_policy_id}' already has a rule for '{cidr}'", unique_code=1408,
    fields=(
        *standard(),
        Field("cidr", str, "an IPv4 or IPv6 network such as 10.0.0.0/8, network-aligned",
              create="required", update=True, check=_cidr),
        Field("ip_policy_id", str, "the IP policy the rule belongs to", create="required",
              response=False,
              link=Link(("ip_policies",), "cascade", render_as="ip_policy", code=1414)),
        Field("action", Literal["allow", "deny"], "allow or deny the addresses in cidr",
              create="required", code=1422),
    ),
)


def _policy_ids(value: list[str], _ctx: Context) -> list[str]:
    if not value:
        raise Invalid("ip_policy_ids", "must name at least one IP policy", 7025)
    if len(set(value)) != len(value):
        raise Invalid("ip_policy_ids", "names the same IP policy twice", 215)
    return value


def _restriction_check(doc: dict[str, Any], _ctx: Context) -> None:
    _policy_ids(doc["ip_policy_ids"], _ctx)


IP_RESTRICTIONS = Kind(
    collection="ip_restrictions", prefix="ipx", list_key="ip_restrictions",
    title="IPRestriction",
    describe="Restrict dashboard, API, agent or endpoint traffic to the allowed addresses.",
    fields=(
        *standard(),
        Field("enforced", bool, "true enforces; false only reports what would be refused",
              update=True, default=False),
        Field("type", Literal["dashboard", "api", "agent", "endpoints"],
              "which traffic is restricted; cannot be changed", create="required",
              immutable=True),
        Field("ip_policy_ids", list[str], "the IP policies to apply", create="required",
              update=True, empty_is_unset=True, response=False,
              link=Link(("ip_policies",), "keep", render_as="ip_policies", code=229)),
        Field("force", bool, "true: make the write even when an enforced api restriction "
              "would then refuse the caller's own address (locking it out of the API)",
              update=True, response=False, transient=True),
    ),
    check=_restriction_check,
)

KINDS = (IP_POLICIES, IP_POLICY_RULES, IP_RESTRICTIONS)
