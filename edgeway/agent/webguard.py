"""Who may call the agent's local API and web inspector (``edgeway.agent.api``): the checks
every request passes before it is routed. They keep out web pages of other sites the agent's
user visits, which a browser lets send "simple" cross-site requests (a text/plain POST needs
no preflight) and which can point a name of theirs at 127.0.0.1 (DNS rebinding).

- Host (403): a loopback name (``127.0.0.1``, ``localhost``, ``[::1]``) or the configured
  ``web_addr`` host, each at the API's own port; the public host of a tunnel that points at
  this API; or a ``web_allow_hosts`` entry (names, ``.suffix`` names, addresses or CIDRs).
- Origin (403), when the request has one (a browser sends it on every cross-origin request
  and on same-origin writes): ``http://`` and one of the loopback names or the ``web_addr``
  host at the API's port, or the origin of the Host the request came by (the inspector
  reached through a tunnel or a ``web_allow_hosts`` name). ``null`` and anything else are
  refused, reads included.
- Content-Type (415): POST, PUT and PATCH, and any request with a body, must send
  ``application/json`` (what no cross-site form or simple request can send).

Host, Origin and Content-Type given twice: 400.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

from edgeway.agent.requestsapi import ApiError

LOOPBACK = ("localhost", "127.0.0.1", "::1")
DEFAULT_PORTS = {"http": 80, "https": 443}
WRITES = ("POST", "PUT", "PATCH")
SINGLE = ("host", "origin", "content-type")


def split_host(text: str) -> tuple[str, int | None] | None:
    """A Host's name (lowercase, IPv6 without brackets) and port (None when not given); None
    when it is not a host[:port]."""
    text = text.strip().lower()
    if text.startswith("["):
        name, sep, rest = text[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            return None
        port = rest[1:]
    else:
        name, _, port = text.partition(":")
        if ":" in port:
            return None
    if not name or (port and not (port.isascii() and port.isdigit() and int(port) < 65536)):
        return None
    return name, int(port) if port else None


class WebGuard:
    def __init__(self, web_host: str, port: int, allow_hosts: tuple[str, ...]) -> None:
        self.web_host, self.port = web_host.lower().strip("[]"), port
        self.allow_hosts = tuple(rule.lower() for rule in allow_hosts)

    def refusal(self, method: str, headers: list[tuple[str, str]],
                tunnel_hosts: Iterable[str]) -> ApiError | None:
        """Why this request is refused, or None."""
        named = {name: [v for n, v in headers if n == name] for name in SINGLE}
        for name, values in named.items():
            if len(values) > 1:
                return ApiError(400, 100, f"{name} given twice", f"send one {name} header")
        host = next(iter(named["host"]), "")
        if not self.host_allowed(host, tunnel_hosts):
            return ApiError(403, 101, "this Host is not allowed", f"Host '{host}' is neither "
                            f"this API's address (127.0.0.1:{self.port}, localhost:{self.port}"
                            f", [::1]:{self.port}) nor in web_allow_hosts")
        if named["origin"] and not self.origin_allowed(named["origin"][0], host):
            return ApiError(403, 105, "this Origin is not allowed", f"Origin "
                            f"'{named['origin'][0]}' is not this API's own (http://127.0.0.1:"
                            f"{self.port}): pages of other sites may not call it")
        kind = next(iter(named["content-type"]), "")
        body = any(n == "transfer-encoding" or (n == "content-length" and v.strip() != "0")
                   for n, v in headers)
        if (method in WRITES or body) and \
                kind.partition(";")[0].strip().lower() != "application/json":
            return ApiError(415, 106, "the body must be JSON", f"{method} needs Content-Type: "
                            f"application/json (got '{kind or 'none'}')")
        return None

    def _own(self, name: str, port: int | None) -> bool:
        return (name in LOOPBACK or name == self.web_host) and (port or 80) == self.port

    def host_allowed(self, host: str, tunnel_hosts: Iterable[str]) -> bool:
        parts = split_host(host)
        if parts is None:
            return False
        name = parts[0]
        if self._own(*parts) or name in tunnel_hosts:
            return True
        for rule in self.allow_hosts:
            if name == rule or (rule.startswith(".") and name.endswith(rule)):
                return True
            try:
                if ipaddress.ip_address(name) in ipaddress.ip_network(rule, strict=False):
                    return True
            except ValueError:
                continue
        return False

    def origin_allowed(self, origin: str, host: str) -> bool:
        scheme, sep, rest = origin.strip().lower().partition("://")
        parts = split_host(rest) if sep and scheme in DEFAULT_PORTS and "/" not in rest \
            else None
        if parts is None:
            return False
        name, port = parts[0], parts[1] or DEFAULT_PORTS[scheme]
        if self._own(name, port):
            return scheme == "http"  # (the API speaks plain HTTP)
        came = split_host(host)  # (the Host, already allowed)
        return came is not None and came[0] == name and \
            (came[1] or DEFAULT_PORTS[scheme]) == port
