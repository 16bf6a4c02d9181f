"""Event types, declared once: which writes of which kinds are change events, which events the
edge and the tunnel listener emit, and the members (``fields``) a traffic event carries.

Two families:

* **resource events** carry a resource as the API renders it (``object``): the change events
  of the kinds in ``CHANGES`` (``<source>_created.v0``, ``_updated``, ``_deleted``) and the
  agent session events, which are the writes of tunnel sessions (``SESSIONS``). A source of
  one may have a ``filter`` over ``obj`` (the resource) and ``actor``; not ``fields``.
* **traffic events** (``TRAFFIC``) carry what happened on a connection: ``fields`` selects
  the members sent (all when empty), ``filter`` is a CEL expression over the object's
  top-level members (``http.response.status_code >= 500``).
"""

from __future__ import annotations

# collection -> change event source; its writes emit <source>_created/_updated/_deleted.v0
CHANGES: dict[str, str] = {
    "api_keys": "api_key",
    "certificate_authorities": "certificate_authority",
    "reserved_domains": "domain",
    "event_destinations": "event_destination",
    "event_subscriptions": "event_subscription",
    "ip_policies": "ip_policy",
    "ip_policy_rules": "ip_policy_rule",
    "ip_restrictions": "ip_restriction",
    "ssh_certificate_authorities": "ssh_certificate_authority",
    "ssh_host_certificates": "ssh_host_certificate",
    "ssh_credentials": "ssh_public_key",
    "ssh_user_certificates": "ssh_user_certificate",
    "tls_certificates": "tls_certificate",
    "credentials": "tunnel_credential",
    "reserved_addrs": "tcp_address",
    "vaults": "vault",
    "vault_secrets": "secret",
    "abuse_reports": "abuse_report",
}
VERBS = ("created", "updated", "deleted")
CHANGE_SOURCES = tuple(sorted(set(CHANGES.values())))

# tunnel sessions: recorded when an agent authenticates, deleted when its session ends
SESSIONS = {"created": "agent_session_start.v0", "deleted": "agent_session_stop.v0"}

HTTP = "http_request_complete.v0"
TCP = "tcp_connection_closed.v0"
_CONN = ("conn.client_ip", "conn.client_port")
TRAFFIC: dict[str, tuple[str, ...]] = {
    HTTP: (*_CONN, "http.request.method", "http.request.url.scheme", "http.request.url.host",
           "http.request.url.path", "http.request.url.query", "http.request.version",
           "http.request.user_agent", "http.request.body_bytes",
           "http.response.status_code", "http.response.body_bytes",
           "http.duration_ms", "http.upstream_ms",
           "edge.id", "route.id", "backend.id", "tunnel.id", "traffic_policy.logs"),
    TCP: (*_CONN, "conn.server_port", "conn.bytes_in", "conn.bytes_out", "conn.start_ts",
          "conn.duration_ms", "edge.id", "tunnel.id"),
}
# a test event, sent by ``POST /event_destinations/{id}/verify``; not a source type
TEST = "test_event.v0"

EVENT_TYPES: tuple[str, ...] = (
    *(f"{src}_{verb}.v0" for src in CHANGE_SOURCES for verb in VERBS),
    *TRAFFIC, *SESSIONS.values(),
)


def change_type(collection: str, verb: str) -> str | None:
    """The event type of a write (``verb``: created, updated or deleted) to ``collection``."""
    if collection == "tunnel_sessions":
        return SESSIONS.get(verb)
    source = CHANGES.get(collection)
    return f"{source}_{verb}.v0" if source else None


def is_traffic(event_type: str) -> bool:
    return event_type in TRAFFIC
