"""``edgeway serve``'s cluster options: where other nodes reach this one (``--node-addr``),
its region and how long its lease lasts (``edgeway.nodes``). Without ``--node-addr`` a node
serves alone, as it always did."""

from __future__ import annotations

import argparse

from edgeway.config import LEASE, NodesConfig, parse_addr
from edgeway.options import option


def add(serve: argparse.ArgumentParser) -> None:
    option(serve, "--node-addr", None, metavar="HOST:PORT",
           help="join the cluster of the nodes sharing --database-url (PostgreSQL): other "
                "nodes reach this one here, over mutual TLS, to carry public connections to "
                "the tunnels whose agents are connected to it (default: off, one node)")
    option(serve, "--region", None, metavar="CODE",
           help="this node's region, one of --regions: its agents' sessions and tunnels are "
                "there (default: the first of --regions)")
    option(serve, "--node-lease", f"{LEASE:g}", type=float, metavar="SECONDS",
           help="a node that has not renewed its lease for this long is gone: the others "
                "remove its sessions and tunnels, and its agents re-bind elsewhere "
                "(default: %(default)s)")


def parse(args: argparse.Namespace, regions: tuple[str, ...]) -> tuple[NodesConfig, str]:
    """The cluster's configuration and this node's region ("": the first of ``regions``)."""
    region = (args.region or "").strip()
    if region and region not in regions:
        raise ValueError(f"--region {region!r} is not one of --regions ({', '.join(regions)})")
    if not 3 <= args.node_lease <= 3600:
        raise ValueError(f"--node-lease {args.node_lease:g} must be 3 to 3600 seconds")
    if args.node_addr is None:
        return NodesConfig(None, args.node_lease), region
    if not args.database_url:
        raise ValueError("--node-addr: nodes share a PostgreSQL database; set --database-url "
                         "(the embedded SQLite database serves one node)")
    host, port = parse_addr(args.node_addr)
    if host in ("0.0.0.0", "::"):
        raise ValueError(f"--node-addr {args.node_addr}: other nodes dial this address, so it "
                         "must be one they can reach, not a wildcard")
    return NodesConfig((host, port), args.node_lease), region
