"""``edgeway serve``'s options for domains: the built-in DNS server, DNS checks, and the ACME
directory of managed certificates."""

from __future__ import annotations

import argparse
import ipaddress
from pathlib import Path

from edgeway.config import (
    LETS_ENCRYPT,
    LETS_ENCRYPT_STAGING,
    DomainsConfig,
    parse_addr,
    split_list,
)
from edgeway.options import AppendOver, option, public


def add(serve: argparse.ArgumentParser) -> None:
    _dns_options(serve)
    _acme_options(serve)


def _dns_options(serve: argparse.ArgumentParser) -> None:
    option(serve, "--dns-addr", "off",
           help="built-in authoritative DNS server (UDP and TCP) for the base domain and "
                "agent ingress domains, or 'off' (default: %(default)s)")
    option(serve, "--public-ip", None, read=lambda text: [text], action=AppendOver,
           metavar="IP[,IP]",
           help="the platform's public IPv4/IPv6 addresses, which its names resolve to "
                "(repeatable; needed by --dns-addr)")
    option(serve, "--dns-check-resolver", "", metavar="HOST[:PORT][,...]",
           help="recursive resolver(s) for DNS checks, before certificates are requested "
                "and on /dns_check (default: the system's)")


def _acme_options(serve: argparse.ArgumentParser) -> None:
    option(serve, "--acme-directory", LETS_ENCRYPT, metavar="URL",
           help="ACME directory of managed certificates, or 'off' (default: Let's Encrypt, "
                f"%(default)s; staging: {LETS_ENCRYPT_STAGING})")
    option(serve, "--acme-email", "", help="contact e-mail of the ACME account (default: none)")
    option(serve, "--acme-ca-bundle", None, type=Path, metavar="FILE",
           help="PEM CA bundle trusted for the ACME directory's HTTPS (a test CA); default: "
                "the system's")
    option(serve, "--acme-renew-before", "30d", metavar="DURATION",
           help="renew managed certificates this long before they expire: NUMBER[s|m|h|d] "
                "(default: %(default)s)")


def _duration(option: str, text: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    number, unit = (text[:-1], text[-1]) if text[-1:] in units else (text, "s")
    try:
        value = float(number) * units[unit]
    except ValueError:
        value = -1.0
    if not 0 < value < 10 * 365 * 86400:
        raise ValueError(f"{option} {text!r} must be a positive duration such as 30d, 12h "
                         "or 600s")
    return value


def ips(given: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    out = []
    for text in given:
        for ip in split_list(text):
            try:
                out.append(str(ipaddress.ip_address(ip)))
            except ValueError:
                raise ValueError(f"--public-ip: {ip!r} is not an IPv4 or IPv6 address") \
                    from None
    return tuple(dict.fromkeys(out))


def resolvers(text: str) -> tuple[tuple[str, int], ...]:
    out = []
    for item in split_list(text):
        try:
            ipaddress.ip_address(item.strip("[]"))
            out.append((item.strip("[]"), 53))
            continue
        except ValueError:
            pass
        try:
            host, port = parse_addr(item)
            ipaddress.ip_address(host)
        except ValueError:
            raise ValueError(f"--dns-check-resolver: {item!r} must be an IP address with an "
                             "optional port") from None
        out.append((host, port))
    return tuple(out)


def parse(args: argparse.Namespace, ips: tuple[str, ...]) -> DomainsConfig:
    dns_addr = public(args.dns_addr)
    if dns_addr and not ips:
        raise ValueError("--dns-addr needs --public-ip: the addresses the platform's names "
                         "resolve to")
    directory = args.acme_directory.strip()
    if directory.lower() == "off":
        directory = ""
    elif not directory.startswith(("https://", "http://")):
        raise ValueError(f"--acme-directory {directory!r} must be an https:// URL or 'off'")
    bundle = Path(args.acme_ca_bundle) if args.acme_ca_bundle else None
    if bundle is not None and not bundle.is_file():
        raise ValueError(f"--acme-ca-bundle {bundle}: no such file")
    return DomainsConfig(dns_addr, directory, args.acme_email.strip(), bundle,
                         _duration("--acme-renew-before", args.acme_renew_before))
