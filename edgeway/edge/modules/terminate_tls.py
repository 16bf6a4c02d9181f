"""The traffic policy's ``terminate-tls`` action (``on_tcp_connect`` of a TLS endpoint): the
edge completes the TLS handshake itself and the agent gets the plaintext, as the SDKs'
``termination(cert, key)`` asks. ``server_certificate`` and ``server_private_key`` (PEM, both
or neither: neither serves the name's own certificate, the one its HTTPS would get),
``min_version`` and ``max_version`` (``1.2`` or ``1.3``), ``mutual_tls_certificate_authorities``
(PEM certificates: the handshake then requires a client certificate issued by one of them;
``mutual_tls_verification_strategy`` ``require-and-verify``, the only one).

On a TCP endpoint (an agent's TCP tunnel, a TCP cloud endpoint, a TCP edge) its clients
speak TLS to the edge and the upstream gets the plain bytes; without a certificate the TCP
address's host name gets one from the platform CA (``edge/terminating.py``).

Refused where it cannot be honoured: on HTTPS endpoints and routes (HTTPS is terminated by
the edge already) and TLS edges (their tls_termination module), in a rule with expressions
(the handshake comes before anything a rule could test), with interpolated certificates,
certificate authority ids, or another verification strategy.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from typing import Any

from edgeway.edge.hooks import Hook
from edgeway.edge.modules.policy_values import Env, Scope, Unsupported
from edgeway.tunnel.binds import loads

VERSIONS = ("1.2", "1.3")


@dataclass(frozen=True)
class TerminateTls(Hook):
    """Found in a TLS tunnel's plan by the listener (``Plan.find``), which terminates with
    it; as an on_tcp_connect action it lets the connection go on."""
    name = "terminate-tls"
    certificate: str  # PEM chain, or "": the name's own certificate
    key: str
    min_version: str
    max_version: str
    client_cas: str  # PEM, "" for none

    def __call__(self, _env: Env) -> bool:
        return True


def _pem(cfg: dict[str, Any], name: str) -> str:
    value = cfg.get(name)
    if value is None:
        return ""
    if not isinstance(value, str) or "${" in value:
        raise Unsupported(f"{name}: the PEM text itself (no interpolation: the certificate "
                          "is loaded once, not per connection)")
    return value


def compile(cfg: dict[str, Any], at: Scope) -> TerminateTls:
    """The action; ``Unsupported`` naming what it cannot honour."""
    if not at.terminates:
        raise Unsupported("on TLS, TCP and HTTPS endpoints only (agents' and cloud "
                          "endpoints, TCP edges): an http:// endpoint speaks no TLS, and a "
                          "TLS edge terminates with its tls_termination module")
    low, high = str(cfg.get("min_version", "1.2")), str(cfg.get("max_version", "1.3"))
    if low not in VERSIONS or high not in VERSIONS or low > high:
        raise Unsupported(f"min_version {low!r} and max_version {high!r} (1.2 or 1.3, the "
                          "minimum not above the maximum)")
    cert, key = _pem(cfg, "server_certificate"), _pem(cfg, "server_private_key")
    if bool(cert) != bool(key):
        raise Unsupported("server_certificate and server_private_key go together")
    if cert and not loads(cert, key):
        raise Unsupported("server_certificate and server_private_key do not load as a pair "
                          "(a PEM certificate chain and its unencrypted private key)")
    cas = cfg.get("mutual_tls_certificate_authorities") or []
    if not isinstance(cas, list) or not all(isinstance(c, str) and "BEGIN CERTIFICATE" in c
                                            for c in cas):
        raise Unsupported("mutual_tls_certificate_authorities: PEM certificates (certificate "
                          "authority ids are not resolved here)")
    client_cas = "".join(c if c.endswith("\n") else c + "\n" for c in cas)
    if client_cas:
        try:
            ssl.create_default_context().load_verify_locations(cadata=client_cas)
        except (ssl.SSLError, ValueError) as exc:
            raise Unsupported(f"mutual_tls_certificate_authorities: {exc}") from None
    strategy = cfg.get("mutual_tls_verification_strategy", "require-and-verify")
    if strategy != "require-and-verify":
        raise Unsupported(f"mutual_tls_verification_strategy {strategy!r} (require-and-verify)")
    return TerminateTls(cert, key, low, high, client_cas)
