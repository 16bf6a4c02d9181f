"""``edgeway serve``'s options for event delivery: the targets' endpoints (for a deployment
of them elsewhere, or a test), the CA bundle trusted for them, retries and the queue."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from edgeway.config import EventsConfig
from edgeway.options import option


def add(serve: argparse.ArgumentParser) -> None:
    d = EventsConfig()
    for name, default, what in (
            ("datadog-url", "", "base URL of the Datadog logs intake (default: "
                                "https://http-intake.logs.<the destination's site>)"),
            ("azure-login-url", d.azure_login_url, "base URL Azure AD tokens are requested "
                                                   "from (default: %(default)s)"),
            ("azure-ingestion-url", "", "base URL replacing every destination's "
                                        "logs_ingestion_uri (default: none)"),
            ("aws-endpoint-url", "", "one endpoint for every AWS service (default: AWS's, "
                                     "or the AWS_ENDPOINT_URL variables)")):
        option(serve, f"--events-{name}", default, metavar="URL", help=what)
    option(serve, "--events-ca-file", None, type=Path,
           help="PEM CA certificates trusted for HTTPS event targets besides the system's")
    # (string defaults: argparse converts them as it does the command line's, so a bad
    # EDGEWAY_EVENTS_* value is reported by `serve` alone, naming its option)
    option(serve, "--events-retry", f"{d.retry:g}", type=float, metavar="SECONDS",
           help="back-off before the first retry of a failed delivery, doubled each time up "
                "to 300 (default: %(default)s)")
    option(serve, "--events-attempts", str(d.attempts), type=int,
           help="attempts before events become dead letters (default: %(default)s)")
    option(serve, "--events-queue", str(d.queue), type=int,
           help="traffic events waiting per node and per destination; more are dropped and "
                "counted (default: %(default)s)")


def _upper(name: str) -> str:
    return name.upper().replace("-", "_")


def _url(option: str, text: str) -> str:
    if text and not re.match(r"^https?://[^\s/]+(/\S*)?$", text):
        raise ValueError(f"{option} {text!r} must be an http:// or https:// URL")
    return text.rstrip("/")


def parse(args: argparse.Namespace) -> EventsConfig:
    if not 0.01 <= args.events_retry <= 300:
        raise ValueError(f"--events-retry {args.events_retry:g} must be 0.01 to 300 seconds")
    if not 1 <= args.events_attempts <= 1000:
        raise ValueError(f"--events-attempts {args.events_attempts} must be 1 to 1000")
    if not 10 <= args.events_queue <= 10_000_000:
        raise ValueError(f"--events-queue {args.events_queue} must be 10 to 10000000")
    ca = args.events_ca_file
    if ca is not None and not Path(ca).is_file():
        raise ValueError(f"--events-ca-file {ca}: no such file")
    return EventsConfig(
        datadog_url=_url("--events-datadog-url", args.events_datadog_url),
        azure_login_url=_url("--events-azure-login-url", args.events_azure_login_url),
        azure_ingestion_url=_url("--events-azure-ingestion-url", args.events_azure_ingestion_url),
        aws_endpoint_url=_url("--events-aws-endpoint-url", args.events_aws_endpoint_url),
        ca_file=Path(ca) if ca else None, retry=args.events_retry,
        attempts=args.events_attempts, queue=args.events_queue)
