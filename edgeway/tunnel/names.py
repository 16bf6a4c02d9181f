"""The public host name of an HTTP(S) or TLS bind: generated under the platform's base domain,
or a name the account reserved (a reserved domain, or a wildcard one covering it), never one
an edge serves or another tunnel holds (unless both pool; one session's http and https
tunnels of a name are one claim). Each refusal says what to do."""

from __future__ import annotations

from edgeway.catalog import checks
from edgeway.catalog.checks import INTERNAL, internal
from edgeway.errors import Invalid
from edgeway.store import domains
from edgeway.store.repo import Repo
from edgeway.tunnel.binds import BindRefused, BindRequest
from edgeway.tunnel.registry import Tunnel

_FAMILY = {"http": "http", "https": "http"}  # one name may carry both


def check_internal(host: str, proto: str) -> None:
    """BindRefused when ``host``, an internal name, cannot be bound over ``proto``."""
    if host.startswith("*.") or host.rstrip(".") == INTERNAL[1:]:
        raise BindRefused(f"'{host}': an internal endpoint is one name ending in .internal "
                          "(api.internal), not a wildcard")
    if proto not in _FAMILY:
        raise BindRefused(f"'{host}': internal endpoints are HTTP, HTTPS or TCP here (a "
                          f"{proto} one would have nothing to forward to it)")


def internal_tcp(addr: str) -> str | None:
    """The address of a TCP bind of an internal endpoint (``db.internal:5432``, lower case),
    or None when ``addr`` names no internal host; BindRefused when it names one badly."""
    host, sep, port = addr.strip().rpartition(":")
    if not internal(host if sep else addr):
        return None
    if not sep or not (port.isascii() and port.isdigit() and 0 < int(port) < 65536):
        raise BindRefused(f"'{addr}': an internal TCP endpoint's address is a .internal name "
                          "and a port (db.internal:5432)")
    host = host.rstrip(".").lower()
    if host.startswith("*.") or host == INTERNAL[1:]:
        raise BindRefused(f"'{addr}': an internal endpoint is one name ending in .internal "
                          "(db.internal:5432), not a wildcard")
    try:
        checks.domain_name("Addr", host)
    except Invalid as exc:
        raise BindRefused(exc.msg) from None
    return f"{host}:{int(port)}"


def generated(host: str, base: str) -> bool:
    """A name directly under the platform's base domain: nothing to reserve."""
    return host.endswith(f".{base}") and host.count(".") == base.count(".") + 1


def covered(cover: dict[str, str], host: str) -> bool:
    """Whether reserved domains ``cover`` (see ``domains.covering``) let ``host`` be bound:
    a wildcard name only by itself (a wildcard covers one label, not another wildcard)."""
    return host in cover if host.startswith("*.") else bool(cover)


def url(proto: str, host: str, http_port: int, https_port: int) -> str:
    """The public URL of a tunnel on ``host`` (the listener's port unless the default; an
    internal endpoint's has none: no listener serves it)."""
    if internal(host):
        return f"{proto}://{host}"
    if proto == "http":
        return f"http://{host}" if http_port == 80 else f"http://{host}:{http_port}"
    return f"{proto}://{host}" if https_port == 443 else f"{proto}://{host}:{https_port}"


async def reserved_domain(repo: Repo, host: str, base: str) -> str:
    """The id of the reserved domain that lets ``host`` be bound ("" for a generated name);
    BindRefused when none does."""
    if host.startswith("*.") and generated(host, base):
        raise BindRefused(f"'{host}' would take every name of the platform's base domain: "
                          "bind a wildcard of a domain you reserved")
    if generated(host, base):
        return ""
    cover = await domains.covering(repo, host)
    if not cover:
        raise BindRefused(f"the domain '{host}' is not reserved: reserve it (POST "
                          "/reserved_domains), or a wildcard domain covering it, first")
    if not covered(cover, host):
        raise BindRefused(f"the wildcard domain '{host}' is not reserved: reserve it "
                          "(POST /reserved_domains) first; a wildcard covers one label")
    return cover.get(host) or next(iter(cover.values()))


def check_free(host: str, tunnel_id: str, req: BindRequest, holders: list[Tunnel],
               session_id: str = "") -> None:
    """BindRefused when the tunnels ``holders`` bound on ``host`` keep ``req`` (a bind of the
    agent session ``session_id``) from it. A session may bind a name over http and https
    (the classic agent's default binds both, one after the other)."""
    for other in holders:
        if other.id == tunnel_id:
            continue
        if _FAMILY.get(other.proto, other.proto) != _FAMILY.get(req.proto, req.proto):
            raise BindRefused(f"the domain '{host}' is bound by a {other.proto} tunnel")
        if session_id and other.session_id == session_id and other.proto != req.proto:
            continue
        if not (req.pooled and other.req.pooled):
            raise BindRefused(f"the domain '{host}' is already bound by another tunnel; "
                              "bind it with pooling enabled from every agent to share it")
