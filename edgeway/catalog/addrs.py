"""Reserved TCP addresses: a ``host:port`` of the agent TCP range (``--tcp-name``, or
``--tcp-host`` without one, and ``--tcp-ports``) held for the account. The platform picks the
port, one no other reservation holds and no live tunnel uses; the tunnel listener never hands
it out as a generated port, and a TCP bind asking for it (``Addr``, the agents'
``remote_addr``) takes it. Creates that run
at once (PostgreSQL runs them side by side) may pick the same port: the one whose insert the
unique key refuses picks again (``repick``)."""

from __future__ import annotations

import secrets
from typing import Any

from edgeway.catalog.domains import region
from edgeway.catalog.model import Context, Fetch, Field, Kind, standard
from edgeway.errors import Invalid

NONE_FREE = 509
PICKS = 10  # picks again when creates running at the same time chose the same port
DEFAULT_PORTS = (20000, 20999)  # --tcp-ports' default


def port_of(addr: str) -> int | None:
    """The port of a ``host:port`` (None when it has none)."""
    _host, sep, port = addr.rpartition(":")
    return int(port) if sep and port.isascii() and port.isdigit() else None


def _region(value: str, ctx: Context) -> str:
    return region(value, ctx) or ctx.settings.regions[0]


async def _pick(doc: dict[str, Any], ctx: Context, fetch: Fetch) -> dict[str, Any]:
    """A free port of the agent TCP range: not reserved, not used by a live tunnel."""
    low, high = ctx.settings.agent_ports or DEFAULT_PORTS
    host = ctx.settings.tcp_host
    taken = {port_of(str(d.get("addr", ""))) for _id, d in await fetch.all("reserved_addrs")}
    taken |= {port_of(str(d.get("public_url", "")).removeprefix("tcp://"))
              for _id, d in await fetch.all("tunnels") if d.get("proto") == "tcp"}
    free = [p for p in range(low, high + 1) if p not in taken]
    if not free:
        raise Invalid("", f"every port of the TCP range {low}-{high} is reserved or in use; "
                      "delete a reserved address first", NONE_FREE)
    port = secrets.choice(free)
    return {"addr": f"[{host}]:{port}" if ":" in host else f"{host}:{port}",
            "region": doc.get("region") or ctx.settings.regions[0]}


RESERVED_ADDRS = Kind(
    collection="reserved_addrs", prefix="ra", list_key="reserved_addrs", title="ReservedAddr",
    describe="TCP addresses reserved for your TCP tunnels: held across sessions and restarts.",
    unique=(("addr",),), unique_msg="the address '{addr}' is already reserved",
    unique_code=413,
    fields=(
        *standard(),
        Field("addr", str, "the reserved host:port, assigned by the platform", create="no",
              default=""),
        Field("region", str, "region of the address; default: the platform's first",
              default="", check=_region),
    ),
    resolve=_pick, repick=PICKS,
)

KINDS = (RESERVED_ADDRS,)
