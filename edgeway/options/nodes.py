"""``edgeway serve``'s cluster options: where other nodes reach this one (``--node-addr``),
its region and how long its lease lasts (``edgeway.nodes``). Without ``--node-addr`` a node
serves alone, as it always did."""

from __future__ import annotations

import argparse
import os

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
    option(serve, "--workers", "1", metavar="N",
           help="processes serving on the same ports (SO_REUSEPORT), each a node of one "
                "cluster on the --database-url PostgreSQL database, linked by Unix sockets "
                "in the data directory (with --node-addr HOST:PORT, worker i links at "
                "PORT+i); 'auto': one per core (default: %(default)s)")
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
    workers = _workers(str(args.workers))
    if workers > 1 and not args.database_url:
        raise ValueError(f"--workers {args.workers}: the workers are nodes of one cluster, "
                         "which shares a PostgreSQL database (--database-url); the embedded "
                         "SQLite database serves one process")
    if args.node_addr is None:
        return NodesConfig(None, args.node_lease, workers), region
    if not args.database_url:
        raise ValueError("--node-addr: nodes share a PostgreSQL database; set --database-url "
                         "(the embedded SQLite database serves one node)")
    if args.node_addr.startswith("unix:"):
        if not args.node_addr[5:].startswith("/"):
            raise ValueError(f"--node-addr {args.node_addr}: unix:PATH needs an absolute path")
        return NodesConfig(args.node_addr, args.node_lease, workers), region
    host, port = parse_addr(args.node_addr)
    if host in ("0.0.0.0", "::"):
        raise ValueError(f"--node-addr {args.node_addr}: other nodes dial this address, so it "
                         "must be one they can reach, not a wildcard")
    if port + workers - 1 > 65535:
        raise ValueError(f"--node-addr {args.node_addr}: worker {workers - 1} would link at "
                         f"port {port + workers - 1}, beyond 65535")
    return NodesConfig(f"{host}:{port}", args.node_lease, workers), region


def _workers(text: str) -> int:
    if text == "auto":
        return os.cpu_count() or 1
    if not (text.isascii() and text.isdigit() and 1 <= int(text) <= 64):
        raise ValueError(f"--workers {text!r} must be a number from 1 to 64, or auto")
    return int(text)
