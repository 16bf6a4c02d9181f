"""``edgeway serve``'s connection limits: the management API's request-head deadline and the
connection caps of every listener (``edgeway.caps``)."""

from __future__ import annotations

import argparse

from edgeway.caps import API_HEAD_TIMEOUT, PER_ADDRESS, CapsConfig, descriptor_limit
from edgeway.options import option


def add(serve: argparse.ArgumentParser) -> None:
    option(serve, "--api-head-timeout", f"{API_HEAD_TIMEOUT:g}", type=float, metavar="SECONDS",
           help="the management API closes a connection whose request head is not complete "
                "this long after it started (default: %(default)s)")
    option(serve, "--max-connections-per-address", str(PER_ADDRESS), type=int, metavar="N",
           help="connections one client address (IPv4, or IPv6 /64) may hold at once on each "
                "listener; more are refused; 0: no cap (default: %(default)s)")
    option(serve, "--fd-reserve", None, type=int, metavar="N",
           help="descriptors kept from clients: public listeners stop accepting at the "
                "descriptor limit minus twice this, the tunnel listener and the management "
                "API at the limit minus this (default: a tenth of the limit, at least 128, at "
                "most a quarter)")


def parse(args: argparse.Namespace, limit: int | None = None) -> tuple[CapsConfig, float]:
    """The caps and the API's head deadline, each checked."""
    if not 0 < args.api_head_timeout <= 3600:
        raise ValueError(f"--api-head-timeout {args.api_head_timeout:g} must be more than 0 "
                         "and at most 3600 seconds")
    if args.max_connections_per_address < 0:
        raise ValueError(f"--max-connections-per-address {args.max_connections_per_address} "
                         "must be 0 (no cap) or more")
    limit = limit or descriptor_limit()
    reserve = args.fd_reserve
    if reserve is not None and not 0 <= reserve <= (limit - 16) // 2:
        raise ValueError(f"--fd-reserve {reserve} must be 0 to {max((limit - 16) // 2, 0)}: "
                         f"the descriptor limit is {limit} and public listeners get the limit "
                         "minus twice the reserve")
    return CapsConfig(args.max_connections_per_address, reserve), args.api_head_timeout
