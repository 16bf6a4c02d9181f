"""The host a request names, and whether its TLS connection was made for it. An HTTPS
connection made with a server name (SNI) carries only requests for that very name; one made
without carries only names its certificate covers. Anything else is domain fronting (a TLS
server name, or none, chosen to pass a filter or a client-certificate check, and a Host chosen
to reach another tunnel), answered 421 Misdirected Request (RFC 9110 §15.5.20). A name is
compared, not matched against the certificate: a wildcard certificate for every name under the
base domain must not let one tunnel's connection reach another's.
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


def directed(sni: str, names: tuple[str, ...], host: str) -> bool:
    """Whether a request for ``host`` belongs on a connection made with server name ``sni``
    ("" for none) and a certificate for ``names``. No host at all is left to the router
    (HTTP/1.0 may omit it)."""
    return not host or (host == sni if sni else covered(names, host))


def uncertified(host: str) -> Fixed:
    """The 421 page for a request to a host that requires a client certificate (mutual TLS)
    on a connection whose handshake did not check one."""
    return page(421, "Misdirected request", f"{host} requires a client certificate, checked "
                f"in the TLS handshake: connect with {host} as the TLS server name.", 4012)


def misdirected(host: str, sni: str, names: tuple[str, ...]) -> Fixed:
    """The 421 page for a request whose host is not the one its connection was made for."""
    made = f"for {sni}" if sni else \
        f"without a server name, with a certificate for {', '.join(names) or 'no name at all'}"
    return page(421, "Misdirected request", f"{host} is not the name this connection was made "
                f"for (it was made {made}): connect again with {host} as the TLS server "
                "name.", 4016)
