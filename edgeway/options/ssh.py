"""``edgeway serve``'s SSH gateway options."""

from __future__ import annotations

import argparse

from edgeway.options import option, public


def add(serve: argparse.ArgumentParser) -> None:
    option(serve, "--ssh-addr", "127.0.0.1:2222",
           help="the SSH gateway (ssh -R with an SSH credential's key), or 'off' "
                "(default: %(default)s)")
    option(serve, "--ssh-host-ca", "", metavar="SSHCA_ID",
           help="an SSH certificate authority (/ssh_certificate_authorities) that signs the "
                "gateway's host key, for clients trusting @cert-authority (default: none, "
                "the bare key)")
    option(serve, "--ssh-keepalive", "15", type=float,  # (argparse converts the default too)
           metavar="SECONDS",
           help="seconds between keep-alives to SSH clients; three unanswered end the "
                "session (default: %(default)s)")


def parse(args: argparse.Namespace) -> tuple[tuple[str, int] | None, str, float]:
    """The SSH gateway's address (None: off), host certificate authority and keep-alive."""
    ca = args.ssh_host_ca.strip()
    if ca and not ca.startswith("sshca_"):
        raise ValueError(f"--ssh-host-ca: {ca!r} is not an SSH certificate authority id "
                         "(sshca_...)")
    if not 1 <= args.ssh_keepalive <= 3600:
        raise ValueError(f"--ssh-keepalive {args.ssh_keepalive:g} must be 1 to 3600 seconds")
    return public(args.ssh_addr), ca, args.ssh_keepalive
