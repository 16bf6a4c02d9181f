"""The node link's TLS: each node gets a certificate from the platform CA on start (shared by
the cluster, see ``nodes.ca``) for its node name, good for both ends of a link. A link is
mutual: the dialing node shows its certificate too, and each side accepts only certificates
of the platform CA made for node names (not the tunnel listener's or the edge's, which are
server-only, nor an agent's client certificate, which another CA issues)."""

from __future__ import annotations

import ssl
from pathlib import Path

from edgeway.pki import platform_ca
from edgeway.pki.seal import Sealer

SUFFIX = ".nodes.edgeway.invalid"  # node names: never a name anyone could resolve


def node_name(node_id: str) -> str:
    return node_id.lower().replace("_", "-") + SUFFIX


def _issue(data_dir: Path, sealer: Sealer, node_id: str) -> tuple[Path, Path]:
    ca_cert, ca_key = platform_ca.authority(data_dir, sealer)
    chain, key = platform_ca.leaf(ca_cert, ca_key, [node_name(node_id)], days=30, client=True)
    cert_path, key_path = data_dir / "node.pem", data_dir / "node.key"
    platform_ca.write_private(key_path, key)
    cert_path.write_bytes(chain)
    return cert_path, key_path


def is_node(cert: dict[str, object] | None) -> bool:
    """Whether a verified peer certificate (``getpeercert()``) is made for a node name."""
    names = (cert or {}).get("subjectAltName") or ()
    return any(kind == "DNS" and str(value).endswith(SUFFIX)
               for kind, value in names)  # type: ignore[attr-defined]


def contexts(data_dir: Path, sealer: Sealer, node_id: str) -> tuple[ssl.SSLContext,
                                                                  ssl.SSLContext]:
    """(server, client) contexts of this node's link ends."""
    cert, key = _issue(data_dir, sealer, node_id)
    ca = str(data_dir / "ca.pem")
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=ca)
    client = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=ca)
    for ctx in (server, client):
        ctx.minimum_version = ssl.TLSVersion.TLSv1_3
        ctx.load_cert_chain(cert, key)
    server.verify_mode = ssl.CERT_REQUIRED
    return server, client

