"""``edgeway serve``'s dashboard options: on or off, how long an unused browser session
lives, how many failed sign-ins one address may make in a minute."""

from __future__ import annotations

import argparse

from edgeway.config import DashboardConfig
from edgeway.options import option, switch

DEFAULTS = DashboardConfig()


def add(serve: argparse.ArgumentParser) -> None:
    option(serve, "--no-dashboard", False, read=switch, action="store_true",
           help="do not serve the web dashboard under /dashboard on the management API's "
                "listener")
    option(serve, "--dashboard-session-ttl", f"{DEFAULTS.session_ttl:g}", type=float,
           metavar="SECONDS",
           help="a dashboard session unused this long ends; the browser signs in again "
                "(default: %(default)s, 12 hours)")
    option(serve, "--dashboard-signin-rate", str(DEFAULTS.signin_per_minute), type=int,
           metavar="N",
           help="failed dashboard sign-ins one client address (IPv4, or IPv6 /64) may make "
                "in a minute; then its sign-ins are refused until the minute has passed "
                "(default: %(default)s)")


def parse(args: argparse.Namespace) -> DashboardConfig | None:
    """The dashboard's configuration, or None when it is off."""
    if not 1 <= args.dashboard_session_ttl <= 30 * 86400:
        raise ValueError(f"--dashboard-session-ttl {args.dashboard_session_ttl:g} must be 1 "
                         "to 2592000 seconds (30 days)")
    if not 1 <= args.dashboard_signin_rate <= 10_000:
        raise ValueError(f"--dashboard-signin-rate {args.dashboard_signin_rate} must be 1 to "
                         "10000")
    if args.no_dashboard:
        return None
    return DashboardConfig(args.dashboard_session_ttl, args.dashboard_signin_rate)
