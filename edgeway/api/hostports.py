"""Hostports of edges: claimed platform-wide; for TLS and HTTPS edges covered by a reserved
domain (exact, or a wildcard one label up), and for a TCP edge on a port of the agent TCP range
a reserved address no tunnel is bound to; the edge then refers to that domain or address."""

from __future__ import annotations

from typing import Any

from edgeway import catalog
from edgeway.catalog.checks import internal
from edgeway.catalog.model import Kind
from edgeway.errors import Conflict, Invalid
from edgeway.settings import Settings
from edgeway.store.domains import covering
from edgeway.store.repo import Claimed, Repo

TCP_PORT = "tcp-port"  # the claim of a port by a TCP edge
POOLED = "pooled"  # a pooled cloud endpoint's claims: pooled:<claim>:<its id>


async def _reserved(repo: Repo, member: str, values: list[str],
                    settings: Settings) -> list[tuple[str, str]]:
    """The reserved addresses a TCP edge's hostports of the agent TCP range name, each bound
    by no tunnel now."""
    low, high = settings.agent_ports or (1, 0)
    out: list[tuple[str, str]] = []
    for i, hp in enumerate(values):
        host, _, port = hp.rpartition(":")
        if not low <= int(port) <= high:
            continue
        addrs = [hp, f"[{host}]:{port}"] if ":" in host else [hp]
        found = await repo.docs_where(catalog.BY_COLLECTION["reserved_addrs"], "addr", addrs)
        if not found:
            raise Invalid(f"{member}[{i}]", f"'{hp}' is not a reserved address: reserve one "
                          "(POST /reserved_addrs) and list its addr", 7105)
        urls = {f"tcp://{a}" for a in addrs}
        for tunnel_id, tunnel in await repo.all_docs(catalog.BY_COLLECTION["tunnels"]):
            if tunnel.get("public_url") in urls:
                raise Conflict(f"The address '{hp}' is bound by the tunnel '{tunnel_id}' "
                               "now; stop that tunnel first.", 7122)
        out.append((member, found[0][0]))
    return out


async def _tcp_cloud(repo: Repo, kind: Kind, id_: str, doc: dict[str, Any]
                     ) -> list[tuple[str, str]]:
    """A TCP cloud endpoint's URL: a reserved address bound by no tunnel now, claimed as a
    TCP edge claims it (an address is served by a TCP edge, a cloud endpoint or a tunnel, one
    of them); the endpoint then refers to the address (which cannot be deleted under it)."""
    hostport, port = str(doc.get("hostport", "")), str(doc.get("port", ""))
    found = await repo.docs_where(catalog.BY_COLLECTION["reserved_addrs"], "addr", [hostport])
    if not found:
        raise Invalid("url", f"'{hostport}' is not a reserved address: reserve one (POST "
                      "/reserved_addrs) and use its addr", 7105)
    for tunnel_id, tunnel in await repo.all_docs(catalog.BY_COLLECTION["tunnels"]):
        if tunnel.get("public_url") == f"tcp://{hostport}":
            raise Conflict(f"The address '{hostport}' is bound by the tunnel '{tunnel_id}' "
                           "now; stop that tunnel first.", 7122)
    await _claim(repo, kind, id_, [f"hostport:{hostport}", f"{TCP_PORT}:{port}"],
                 bool(doc.get("pooling_enabled")), f"The address '{hostport}'")
    return [("tcp_addr_id", found[0][0])]


async def _claim(repo: Repo, kind: Kind, id_: str, names: list[str], pooled: bool,
                 shown: str) -> None:
    """Claim ``names`` for the cloud endpoint ``id_``: alone, or (``pooled``) beside the
    other pooled cloud endpoints of the same names (each holds ``pooled:<name>:<id>``; an
    edge, a tunnel or an endpoint alone holds ``<name>`` itself). The names are locked
    first: two writers cannot both find them free."""
    for name in sorted(names):
        await repo.lock(name)
    for name in names:
        if pooled and (holder := await repo.holder(name)) not in (None, id_):
            raise Conflict(f"{shown} is already served by '{holder}', which does not pool "
                           "it.", 7122)
        if not pooled and (member := await repo.claimed(f"{POOLED}:{name}:", id_)):
            raise Conflict(f"{shown} is served by pooled cloud endpoints ('{member}' among "
                           "them): create this one with pooling_enabled true to join them.",
                           7122)
    try:
        await repo.claim(kind, id_, [f"{POOLED}:{n}:{id_}" for n in names] if pooled
                         else names)
    except Claimed as c:
        raise Conflict(f"{shown} is already served by '{c.holder}'.", 7122) from None


async def _cloud(repo: Repo, kind: Kind, id_: str, doc: dict[str, Any]) -> None:
    """A cloud endpoint's URL: on a reserved domain (or under a reserved wildcard one; an
    internal one, ``.internal``, needs none), held
    by no agent's tunnel now, and claimed as the hostport an HTTPS edge would claim (a name
    is served by an edge, a cloud endpoint or tunnels, one of them)."""
    host, hostport = str(doc.get("host", "")), str(doc.get("hostport", ""))
    if not internal(host) and not await covering(repo, host):  # (internal: no domain)
        raise Invalid("url", f"'{host}' is not a reserved domain, nor covered by a reserved "
                      "wildcard domain; reserve it first", 7121)
    for tunnel_id, tunnel in await repo.all_docs(catalog.BY_COLLECTION["tunnels"]):
        if str(tunnel.get("public_url", "")).partition("://")[2].split(":")[0] == host:
            raise Conflict(f"The name '{host}' is bound by the tunnel '{tunnel_id}' now; stop "
                           "that tunnel first.", 7122)
    await _claim(repo, kind, id_, [f"hostport:{hostport}"], bool(doc.get("pooling_enabled")),
                 f"The URL's name '{host}'")


async def bind(repo: Repo, kind: Kind, id_: str, doc: dict[str, Any],
               settings: Settings) -> list[tuple[str, str]]:
    """Claim the hostports of ``doc`` (a cloud endpoint: its URL's); return its links to the
    domains and reserved addresses they name."""
    out: list[tuple[str, str]] = []
    if kind.collection == "endpoints":
        if doc.get("type") != "cloud":
            return out
        if doc.get("scheme") == "tcp":
            out = await _tcp_cloud(repo, kind, id_, doc)
        else:
            await _cloud(repo, kind, id_, doc)
        addr = out[0][1] if out else None
        if doc.get("tcp_addr_id") != addr:  # (shown as tcp_addr)
            doc["tcp_addr_id"] = addr
            await repo.replace(kind, id_, doc)
        return out
    for f in kind.fields:
        if f.claim is None:
            continue
        values: list[str] = doc.get(f.name) or []
        if kind.collection == "edges/tcp":
            out += await _reserved(repo, f.name, values, settings)
        elif f.link is not None:
            for i, hp in enumerate(values):
                host = hp.rsplit(":", 1)[0]
                cover = await covering(repo, host)
                if not cover:
                    raise Invalid(f"{f.name}[{i}]", f"'{host}' is not a reserved domain, nor "
                                  "covered by a reserved wildcard domain; reserve it first",
                                  7121)
                out.append((f.name, cover.get(host) or next(iter(cover.values()))))
        claims = [f"{f.claim}:{v}" for v in values]
        if kind.collection == "edges/tcp":  # it listens on the port, whatever the host
            claims += sorted({f"{TCP_PORT}:{v.rsplit(':', 1)[1]}" for v in values})
        for claim in sorted(claims):
            await repo.lock(claim)
        for claim in claims:
            if member := await repo.claimed(f"{POOLED}:{claim}:"):
                raise Conflict(f"The {claim.partition(':')[0]} '{claim.partition(':')[2]}' "
                               f"is served by pooled cloud endpoints ('{member}' among "
                               "them).", 7122)
        try:
            await repo.claim(kind, id_, claims)
        except Claimed as c:
            what, _, value = c.claim.partition(":")
            if what == TCP_PORT:
                holder = "cloud endpoint" if c.holder.startswith("ep_") else "TCP edge"
                raise Conflict(f"The port {value} is already served by the {holder} "
                               f"'{c.holder}'.", 7122) from None
            raise Conflict(f"The {f.claim} '{value}' is already used by '{c.holder}'.",
                           7122) from None
    return out
