"""``edgeway serve`` behind a load balancer: ``--proxy-protocol`` (the public listeners read
the PROXY protocol header of their trusted load balancers' connections: ``edgeway.proxied``),
the ``--trusted-proxies`` it needs and the header's deadline. Each of the three without the
others that make it mean something is refused, not ignored."""

from __future__ import annotations

import argparse

from edgeway.config import split_list
from edgeway.options import option, switch
from edgeway.proxied import TIMEOUT, Trust, network


def add(serve: argparse.ArgumentParser) -> None:
    option(serve, "--proxy-protocol", False, read=switch, action="store_true",
           help="the public listeners (HTTP, HTTPS/TLS, TCP edges, TCP tunnels) take the "
                "client's address from the PROXY protocol header (v1 or v2) that connections "
                "from --trusted-proxies must begin with; connections from other addresses are "
                "served as direct clients, and a header from them is not believed")
    option(serve, "--trusted-proxies", "", metavar="CIDR[,CIDR]",
           help="the load balancers (addresses or networks) whose PROXY headers are "
                "believed; required with --proxy-protocol")
    option(serve, "--proxy-protocol-timeout", None, type=float, metavar="SECONDS",
           help="a connection from a trusted proxy is closed when its PROXY header is not "
                f"complete this long after it was accepted (default: {TIMEOUT:g})")


def parse(args: argparse.Namespace) -> Trust | None:
    """The trusted load balancers, or None when the listeners read no header."""
    texts = split_list(args.trusted_proxies)
    timeout = args.proxy_protocol_timeout
    if not args.proxy_protocol:
        if texts:
            raise ValueError("--trusted-proxies is only used with --proxy-protocol: turn it "
                             "on, or leave --trusted-proxies out")
        if timeout is not None:
            raise ValueError("--proxy-protocol-timeout is only used with --proxy-protocol")
        return None
    if not texts:
        raise ValueError("--proxy-protocol needs --trusted-proxies: the addresses or networks "
                         "of the load balancers whose PROXY headers are to be believed")
    networks = []
    for text in texts:
        try:
            networks.append(network(text))
        except ValueError as exc:
            raise ValueError(f"--trusted-proxies: {exc}") from None
    if timeout is None:
        timeout = TIMEOUT
    if not 0 < timeout <= 300:
        raise ValueError(f"--proxy-protocol-timeout {timeout:g} must be more than 0 and at "
                         "most 300 seconds")
    return Trust(tuple(dict.fromkeys(networks)), timeout)
