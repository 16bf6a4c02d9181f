"""Webhook verification: check the sender's signature before the request reaches upstream."""

from __future__ import annotations

from typing import Any

import msgspec

from edgeway.catalog.model import Context
from edgeway.catalog.modules import Module
from edgeway.errors import Invalid

_NAMES = """
aftership airship alchemy autodesk bitbucket bolt box brex buildkite calendly castle chargify
circleci clearbit clerk coinbase contentful docusign dropbox facebook_graph_api
facebook_messenger frameio github gitlab go1 graphcms heroku hostedhooks hubspot instagram
intercom launch_darkly mailchimp mailgun microsoft_teams modern_treasury mongodb mux orb orbit
pagerduty pinwheel plivo pusher sendgrid sentry shopify signal_sciences slack sns sonatype
square stripe svix terraform tiktok trendmicro_conformity twilio twitter typeform vmware webex
whatsapp worldline xero zendesk zoom
"""
PROVIDERS = frozenset(_NAMES.split())
NO_SECRET = frozenset({"sns"})


class WebhookVerification(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    enabled: bool = True
    provider: str = ""
    secret: str = ""


def _check(value: dict[str, Any], _ctx: Context, at: str) -> dict[str, Any]:
    provider = value.get("provider", "").strip().lower()
    secret = value.get("secret", "")
    if not provider:
        raise Invalid(at + "provider", "is required: the service that signs the requests", 7029)
    if provider not in PROVIDERS:
        raise Invalid(at + "provider", f"'{value['provider']}' is not a supported provider; "
                      "supported: " + ", ".join(sorted(PROVIDERS)), 7030)
    if provider in NO_SECRET and secret:
        raise Invalid(at + "secret", f"must be empty for '{provider}', whose messages are "
                      "verified with its signing certificate", 7026)
    if provider not in NO_SECRET and not secret:
        raise Invalid(at + "secret", f"is required for '{provider}'", 7027)
    return {"enabled": value.get("enabled", True), "provider": provider, "secret": secret}


MODULES = (
    Module("webhook_verification", WebhookVerification, WebhookVerification,
           frozenset({"route"}), "verify webhook signatures of a known provider", _check),
)
