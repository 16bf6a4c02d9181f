"""The mutual_tls module (HTTPS edges, and TLS edges that terminate at the edge): the TLS
handshake asks the client for a certificate and completes only with one that chains to one of
the module's certificate authorities; and tls_termination's ``min_version``. Both shape the
edge's TLS server context for the edge's names (``TlsOptions``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TlsOptions:
    client_cas: str = ""  # PEM bundle; "" = no client certificate asked for
    min_version: str = "1.2"


def ca_ids(module: dict[str, Any]) -> tuple[str, ...]:
    return tuple(str(i) for i in module.get("certificate_authority_ids") or [])


def options(ids: tuple[str, ...], min_version: str | None,
            cas: dict[str, str]) -> TlsOptions | None:
    """The TLS options of an edge; None if a certificate authority it names is gone (its
    connections are then refused, never served without the check)."""
    pems = [cas.get(i) for i in ids]
    if any(p is None for p in pems):
        return None
    return TlsOptions("".join(p if p.endswith("\n") else p + "\n" for p in pems if p),
                      min_version or "1.2")
