"""The kinds the dashboard lists, in the groups of its navigation, each with its label and
the slug of its page (``/dashboard/<slug>``: the kind's table name). Every kind the API
lists at a top-level URL is here (a test holds it to that)."""

from __future__ import annotations

from dataclasses import dataclass

from edgeway import catalog
from edgeway.catalog.model import Kind


@dataclass(frozen=True)
class Entry:
    kind: Kind
    label: str

    @property
    def slug(self) -> str:
        return self.kind.table


_GROUPS: tuple[tuple[str, tuple[tuple[str, str], ...]], ...] = (
    ("Live", (("tunnel_sessions", "Agent sessions"), ("tunnels", "Tunnels"),
              ("endpoints", "Endpoints"))),
    ("Access", (("api_keys", "API keys"), ("bot_users", "Bot users"),
                ("service_users", "Service users"), ("credentials", "Authtokens"),
                ("ssh_credentials", "SSH credentials"))),
    ("Domains", (("reserved_domains", "Domains"), ("agent_ingresses", "Agent ingresses"),
                 ("reserved_addrs", "TCP addresses"), ("tls_certificates", "TLS certificates"),
                 ("certificate_authorities", "Certificate authorities"))),
    ("Edges", (("edges/https", "HTTPS edges"), ("edges/tls", "TLS edges"),
               ("edges/tcp", "TCP edges"), ("backends/tunnel_group", "Tunnel group backends"),
               ("backends/weighted", "Weighted backends"),
               ("backends/failover", "Failover backends"),
               ("backends/http_response", "HTTP response backends"),
               ("backends/static", "Static address backends"))),
    ("IP", (("ip_policies", "IP policies"), ("ip_policy_rules", "IP policy rules"),
            ("ip_restrictions", "IP restrictions"))),
    ("SSH", (("ssh_certificate_authorities", "SSH certificate authorities"),
             ("ssh_host_certificates", "SSH host certificates"),
             ("ssh_user_certificates", "SSH user certificates"))),
    ("Events", (("event_destinations", "Event destinations"),
                ("event_subscriptions", "Event subscriptions"))),
    ("Secrets", (("vaults", "Vaults"), ("vault_secrets", "Secrets"))),
    ("End users", (("app/users", "Application users"),
                   ("app/sessions", "Application sessions"))),
    ("Abuse", (("abuse_reports", "Abuse reports"),)),
)

GROUPS: tuple[tuple[str, tuple[Entry, ...]], ...] = tuple(
    (group, tuple(Entry(catalog.BY_COLLECTION[c], label) for c, label in entries))
    for group, entries in _GROUPS)
BY_SLUG: dict[str, Entry] = {e.slug: e for _, entries in GROUPS for e in entries}
