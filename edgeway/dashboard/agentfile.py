"""The agent config file the site-to-site page hands out, and the CA file beside it
(sans-I/O: text in, text out).

The file is the spec's agent configuration: the authtoken, one region domain of the agent
ingress as ``server_addr`` (a custom ingress has no global load balancing), ``root_cas`` when
the certificate agents will see does not chain to the system's CAs, and the agent-API tunnel
(``agent-api.<site>``, to the agent's local API on 4040) behind basic auth with a password
made for it (the agent refuses to publish its own API without a login).
"""

from __future__ import annotations

import io
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from ruamel.yaml import YAML

API_TUNNEL = "agent-api"
API_PORT = 4040
FILE = "edgeway.yml"
CA_FILE = "ca.pem"


@dataclass(frozen=True)
class AgentDial:
    """How agents reach this platform: the platform CA (PEM), the tunnel listener's port, and
    whether managed certificates come from a CA in the system's trust stores (Let's
    Encrypt's production directory, with no test CA bundle)."""
    ca_pem: str = ""
    port: int = 4443
    public_trust: bool = False


@dataclass(frozen=True)
class AgentFile:
    token: str
    server_addr: str
    root_cas: bool  # (ca.pem beside the file)
    api_domain: str  # the agent-API tunnel's domain ("": none in the file)
    password: str  # the agent-API tunnel's basic auth password
    ingress: str  # (for the comment)

    def text(self, now: datetime | None = None) -> str:
        when = (now or datetime.now(UTC)).strftime("%Y-%m-%d %H:%M UTC")
        doc: dict[str, object] = {"version": 2, "authtoken": self.token,
                                  "server_addr": self.server_addr}
        if self.root_cas:
            doc["root_cas"] = CA_FILE
        doc["web_addr"] = f"127.0.0.1:{API_PORT}"
        if self.api_domain:
            doc["tunnels"] = {API_TUNNEL: {
                "proto": "http", "addr": API_PORT, "domain": self.api_domain,
                "basic_auth": [f"agent:{self.password}"], "inspect": False}}
        head = (f"# Edgeway agent for {self.ingress}, written by the dashboard on {when}.\n"
                f"# It holds an authtoken: keep it private (chmod 600 {FILE}).\n")
        if self.root_cas:
            head += f"# root_cas: keep {CA_FILE} from the same page beside this file.\n"
        if self.api_domain:
            head += (f"# Start the agent API's tunnel: {start_command()}\n"
                     f"# It answers at https://{self.api_domain} as user 'agent' with the "
                     "password below.\n")
        yaml = YAML(typ="safe")
        yaml.default_flow_style = False
        yaml.representer.sort_base_mapping_type_on_output = False
        out = io.StringIO()
        yaml.dump(doc, out)
        return head + out.getvalue()


def start_command() -> str:
    return f"edgeway start {API_TUNNEL} --config {FILE}"


def password() -> str:
    return secrets.token_urlsafe(18)


def api_domain(wildcard: str) -> str:
    """The agent-API tunnel's domain under a reserved wildcard (``*.site.example.com``)."""
    return f"{API_TUNNEL}.{wildcard[2:]}" if wildcard.startswith("*.") else ""


def server_addr(region_domains: list[str], region: str, port: int) -> str:
    """The region domain of ``region`` (else the first), with the tunnel listener's port."""
    chosen = next((d for d in region_domains if d.startswith(f"tunnel.{region}.")),
                  region_domains[0] if region_domains else "")
    return f"{chosen}:{port}" if chosen else ""


def _certs(pem: str) -> list[x509.Certificate]:
    try:
        return x509.load_pem_x509_certificates(pem.encode())
    except ValueError:
        return []


def issuers(chains: list[str]) -> list[x509.Certificate]:
    """The top certificate of each chain (the CA that issued the rest), leaves left out."""
    out = []
    for chain in chains:
        certs = _certs(chain)
        if len(certs) > 1:
            out.append(certs[-1])
    return out


def ca_bundle(platform_ca: str, chains: list[str]) -> str:
    """The CA file for ``root_cas``: the platform CA (it signs a region domain's certificate
    until one is issued) and the CA at the top of each issued chain (an agent trusts the
    file's certificates as given, intermediates included), each once."""
    seen: set[bytes] = set()
    parts = []
    for cert in [*_certs(platform_ca), *issuers(chains)]:
        der = cert.fingerprint(hashes.SHA256())
        if der in seen:
            continue
        seen.add(der)
        subject = cert.subject.rfc4514_string()
        parts.append(f"# {subject}\n" + cert.public_bytes(serialization.Encoding.PEM).decode())
    return "".join(parts)

