"""One certificate order, from the DNS check to the chain: the records the CA will need are
checked through the DNS check's resolver first (a missing or wrong CNAME is a ``DNS_ERROR``
naming it, and costs the CA nothing), then the order is placed, each challenge's answer is
stored (every node serves it: http-01 on the public HTTP listener, dns-01 in the built-in
DNS), the resolver is given a moment to see them (the TXT value; the name's address), and
the CA is asked to validate."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

import structlog

from edgeway.acme.client import Acme, AcmeFailure, Challenge, call, private_key
from edgeway.dns import check
from edgeway.settings import Settings
from edgeway.store.acme import AcmeStore

log = structlog.get_logger()
PROPAGATION = 30.0  # seconds a dns-01 answer may take to show in the resolver
FINISH = 120.0  # seconds the CA has to validate and issue


@dataclass(frozen=True)
class Order:
    owner: str  # the reserved domain or agent ingress
    names: list[str]
    key_type: str
    records: list[check.Record]  # what the CA will need of the user's DNS
    dns_name: Callable[[str], str | None]  # where a name's dns-01 TXT is served (None: http-01)


async def preflight(order: Order, settings: Settings) -> None:
    try:
        await check.run(order.records, settings.dns_check_resolvers, settings.public_ips)
    except check.ResolverFailed as exc:
        raise AcmeFailure("INTERNAL_ERROR", f"the DNS check could not resolve: {exc}") \
            from None
    bad = [r.msg for r in order.records if r.status != "ok"]
    if bad:
        raise AcmeFailure("DNS_ERROR", "; ".join(bad))


async def _visible(settings: Settings, challenge: Challenge) -> None:
    """Wait (a while) until the resolver sees what the CA will look for: the TXT value of a
    dns-01 challenge; for http-01, the name resolving to one of the public addresses (a new
    ``cname_target`` reaches the other nodes' DNS within their reload period)."""
    if challenge.kind == "http-01" and not settings.public_ips:
        return
    name = challenge.name if challenge.kind == "http-01" else \
        "_acme-challenge." + challenge.name.removeprefix("*.")
    deadline = asyncio.get_running_loop().time() + PROPAGATION
    res = check.resolver_for(settings.dns_check_resolvers)
    while asyncio.get_running_loop().time() < deadline:
        try:
            if challenge.kind == "http-01":
                seen = bool(set(await check.addresses(res, name)) & set(settings.public_ips))
            else:
                seen = challenge.value in await check.txt(res, name)
        except check.ResolverFailed:
            seen = False
        if seen:
            return
        await asyncio.sleep(0.5)
    log.warning("acme_dns_not_visible", name=name, challenge=challenge.kind)


async def run(order: Order, connect: Callable[[], Awaitable[Acme]], store: AcmeStore,
              settings: Settings, announce: Callable[[], None]) -> tuple[str, bytes]:
    """The full chain and its private key (PEM); the CA is only reached (``connect``) once
    the DNS check passed."""
    await preflight(order, settings)
    acme = await connect()
    key_pem = await call(private_key, order.key_type)
    placed = await call(acme.order, order.names, key_pem)
    challenges = acme.challenges(placed, order.dns_name)
    try:
        for c in challenges:
            await store.put_challenge(order.owner, c.key, c.value)
        announce()  # (this node's DNS reloads at once)
        for c in challenges:
            await _visible(settings, c)
        for c in challenges:
            await call(acme.answer, c)
        deadline = datetime.now() + timedelta(seconds=FINISH)  # (acme compares naive times)
        chain = await call(acme.finish, placed, deadline)
    finally:
        await store.drop_challenges(order.owner)
        announce()
    return chain, key_pem
