"""The host a request names, and whether the certificate its TLS connection was handshaken
with covers it. An HTTPS connection carries only requests for names its certificate covers:
anything else is domain fronting (a TLS server name, or none, chosen to pass a filter, and a
Host chosen to reach another tunnel), answered 421 Misdirected Request (RFC 9110 §15.5.20).
"""

from __future__ import annotations

from edgeway.edge.h1 import Headers, header
from edgeway.edge.pages import Fixed, page


def request_host(headers: Headers) -> str:
    """The Host header as routed: lower case, without its port or a trailing dot."""
    host = header(headers, b"host").decode("latin-1").lower()
    host = host.rsplit(":", 1)[0] if not host.endswith("]") else host
    return host.rstrip(".")


def covered(names: tuple[str, ...], host: str) -> bool:
    """Whether a certificate for ``names`` (lower case) covers ``host``: the name itself, or
    a wildcard ``*.parent`` exactly one label up (RFC 6125 §6.4.3); an IP literal, bracketed
    or not, as itself. No host at all is left to the router (HTTP/1.0 may omit it)."""
    if not host:
        return True
    bare = host.removeprefix("[").removesuffix("]")
    parent = host.split(".", 1)[1] if "." in host else ""
    return bare in names or (bool(parent) and f"*.{parent}" in names)


def misdirected(host: str, names: tuple[str, ...]) -> Fixed:
    """The 421 page for a request whose host the connection's certificate does not cover."""
    shown = ", ".join(names) or "no name at all"
    return page(421, "Misdirected request", f"{host} is not covered by the certificate this "
                f"connection was made with ({shown}): connect again with {host} as the TLS "
                "server name.", 4016)
