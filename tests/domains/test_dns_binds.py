"""The built-in DNS answers a tunnel's generated name as soon as its bind returns, and stops
answering it as soon as the tunnel ends: binds are announced on the change bus, as the API's
writes are, instead of waiting for the zones' periodic reload."""

from __future__ import annotations

import asyncio
import time
from urllib.parse import urlsplit

from tests.domains.conftest import BASE, Domains
from tests.domains.dnsq import query, rcode, values
from tests.tunnel.raw import Agent

# seconds: the periodic reload comes every 5 s, so without the announcement no two checks in a
# row (bind, then unbind right after) could both be answered this soon; with it they take
# milliseconds, and this leaves room for a loaded machine (0.2 s failed under load)
SOON = 2.0


def answered_within(port: int, name: str, holds: str, seconds: float) -> float:
    """How long after now ``name`` answered as ``holds`` says (A records, or NXDOMAIN);
    fails past ``seconds``."""
    began = time.monotonic()
    while True:
        msg = query(port, name, "A")
        if (values(msg, "A") == ["127.0.0.1"]) if holds == "A" else rcode(msg) == holds:
            return time.monotonic() - began
        took = time.monotonic() - began
        assert took < seconds, f"{name}: {rcode(msg)} {values(msg, 'A')} after {took:.3f} s"
        time.sleep(0.01)


def test_a_bound_name_resolves_at_once_and_goes_with_its_tunnel(domains: Domains) -> None:
    with domains.server.client() as api:
        token = api.post("/credentials", json={}).json()["token"]

    async def main() -> None:
        agent = await Agent.connect(domains.server, token)
        try:
            for _ in range(3):
                made = await agent.bind_http()
                host = urlsplit(made["URL"]).hostname or ""
                assert host.endswith(f".{BASE}"), made
                answered_within(domains.dns_port, host, "A", SOON)
                assert await agent.rpc(2, {"Id": made["Id"]}) == {}
                answered_within(domains.dns_port, host, "NXDOMAIN", SOON)
        finally:
            await agent.conn.close()

    asyncio.run(main())
