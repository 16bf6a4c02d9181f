"""Test data for the generic CRUD suite: for each routed, writable kind a valid create body
(made against the live server, creating what it refers to) and a valid update."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from tests.certs import make_cert

Body = dict[str, Any]


def uniq(prefix: str = "") -> str:
    return f"{prefix}{uuid.uuid4().hex[:10]}"


def created(api: httpx.Client, path: str, body: Body) -> Body:
    r = api.post(path, json=body)
    assert r.status_code == 201, r.text
    out: Body = r.json()
    return out


def _rule(api: httpx.Client) -> Body:
    policy = created(api, "/ip_policies", {"description": "for a rule"})
    return {"ip_policy_id": policy["id"], "cidr": f"10.{uuid.uuid4().int % 250}.0.0/16",
            "action": "allow", "description": "office"}


def _restriction(api: httpx.Client) -> Body:
    """A dashboard restriction whose policy lets everybody in: enforcing it (the update
    sample) keeps the shared server's dashboard open to the tests after this one."""
    policy = created(api, "/ip_policies", {"description": "for a restriction"})
    for cidr in ("0.0.0.0/0", "::/0"):
        created(api, "/ip_policy_rules", {"ip_policy_id": policy["id"], "cidr": cidr,
                                          "action": "allow"})
    return {"type": "dashboard", "ip_policy_ids": [policy["id"]], "enforced": False}


def _destination(_api: httpx.Client) -> Body:
    return {"format": "json", "target": {"data_stream": {
        "auth": {"role": {"role_arn": "arn:aws:iam::123456789012:role/edgeway"}},
        "stream_arn": "arn:aws:kinesis:us-east-1:123456789012:stream/events"}}}


def _subscription(api: httpx.Client) -> Body:
    dest = created(api, "/event_destinations", _destination(api))
    return {"sources": [{"type": "ip_policy_created.v0"}], "destination_ids": [dest["id"]]}


def _secret(api: httpx.Client) -> Body:
    vault = created(api, "/vaults", {"name": uniq("vault-")})
    return {"name": uniq("secret-"), "value": "s3cret", "vault_id": vault["id"]}


@dataclass(frozen=True)
class Sample:
    create: Callable[[httpx.Client], Body]
    update: Body = field(default_factory=lambda: {"description": "changed", "metadata": "{}"})


BASE: dict[str, Sample] = {
    "api_keys": Sample(lambda _a: {"description": "ci"}),
    "bot_users": Sample(lambda _a: {"name": uniq("bot-")}, {"name": "renamed", "active": False}),
    "service_users": Sample(lambda _a: {"name": uniq("svc-")},
                            {"name": "renamed", "active": False}),
    "credentials": Sample(lambda _a: {"acl": ["bind:*.example.com"]}),
    "reserved_addrs": Sample(lambda _a: {"description": "database"}),
    "vaults": Sample(lambda _a: {"name": uniq("vault-")}),
    "vault_secrets": Sample(_secret, {"description": "rotated", "value": "n3w"}),
    "agent_ingresses": Sample(lambda _a: {"domain": f"connect.{uniq()}.example.com"}),
    "reserved_domains": Sample(lambda _a: {"domain": f"app.{uniq()}.example.com"}),
    "ip_policies": Sample(lambda _a: {"description": "office"}),
    "ip_policy_rules": Sample(_rule, {"description": "moved", "cidr": "192.168.0.0/24"}),
    "ip_restrictions": Sample(_restriction, {"enforced": True, "metadata": "m"}),
    "certificate_authorities": Sample(lambda _a: {"ca_pem": make_cert()}),
    "event_destinations": Sample(_destination),
    "event_subscriptions": Sample(_subscription),
    "abuse_reports": Sample(lambda _a: {"urls": [f"https://phish.{uniq()}.example.com/"]},
                            {"metadata": "{}"}),
}


def _all() -> dict[str, Sample]:
    from tests.api import samples_edges, samples_ssh
    return {**BASE, **samples_ssh.SAMPLES, **samples_edges.SAMPLES}


SAMPLES = _all()
