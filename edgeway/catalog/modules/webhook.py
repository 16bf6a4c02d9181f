"""Webhook verification: check the sender's signature before the request reaches upstream."""

from __future__ import annotations

from typing import Any

import msgspec

from edgeway.catalog.model import Context
from edgeway.catalog.modules import Module
from edgeway.catalog.sealing import MASK
from edgeway.errors import Invalid

# The providers whose signatures the edge verifies (edgeway.edge.modules.webhook_verification
# has a scheme for each). Others the reference lists (airship, contentful, go1, graphcms,
# hostedhooks, orbit, pinwheel, plivo, signal_sciences, trendmicro_conformity, vmware) are
# refused: they have no documented scheme here.
_NAMES = """
aftership alchemy autodesk bitbucket bolt box brex buildkite calendly castle chargify circleci
clearbit clerk coinbase docusign dropbox facebook_graph_api facebook_messenger frameio github
gitlab heroku hubspot instagram intercom launch_darkly mailchimp mailgun microsoft_teams
modern_treasury mongodb mux orb pagerduty pusher sendgrid sentry shopify slack sns sonatype
square stripe svix terraform tiktok twilio twitter typeform webex whatsapp worldline xero zendesk
zoom
"""
PROVIDERS = frozenset(_NAMES.split())
NO_SECRET = frozenset({"sns"})  # signed with a certificate the sender serves


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
        raise Invalid(at + "provider", f"'{value['provider']}' is not a provider whose "
                      "signatures this edge verifies; supported: " +
                      ", ".join(sorted(PROVIDERS)), 7030)
    if provider in NO_SECRET and secret:
        raise Invalid(at + "secret", f"must be empty for '{provider}', whose messages are "
                      "verified with its signing certificate", 7026)
    if provider not in NO_SECRET and not secret:
        raise Invalid(at + "secret", f"is required for '{provider}'", 7027)
    return {"enabled": value.get("enabled", True), "provider": provider, "secret": secret}


MODULES = (
    Module("webhook_verification", WebhookVerification, WebhookVerification,
           frozenset({"route"}), "verify webhook signatures of a known provider; the secret "
           f"is stored sealed and shown as '{MASK}' (writing '{MASK}' back keeps the stored "
           "one)", _check, secrets=(("secret",),)),
)
