"""``edgeway serve``: its options (each also read from an ``EDGEWAY_*`` environment variable;
the command line wins) and the ``ServerConfig`` they make, every value checked here so that a
bad one stops the start with a message naming the option."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import ipaddress
import re
from pathlib import Path

from edgeway.config import (
    ServerConfig,
    cors_origins,
    default_data_dir,
    lowest_bindable_port,
    parse_addr,
    public_url_for,
    split_list,
)
from edgeway.options import (
    dashboard,
    domains,
    events,
    identity,
    limits,
    nodes,
    option,
    public,
    ssh,
    switch,
)
from edgeway.options import proxy_protocol as proxy_options
from edgeway.settings import Settings

DEFAULTS = Settings()
LOG_FORMATS = {"json": "json", "logfmt": "logfmt", "console": "term"}
LOG_LEVELS = ("debug", "info", "warning", "error")


def store_options(p: argparse.ArgumentParser, database: bool = True) -> None:
    option(p, "--data-dir", default_data_dir(), type=Path,
           help="where the SQLite database and the CA live (default: %(default)s)")
    if database:
        option(p, "--database-url", None,
               help="postgresql://user@host:port/db to use PostgreSQL instead of SQLite")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = sub.add_parser("serve", help="run the platform", description="Run the platform. "
                           "Each option also reads the environment variable named in brackets "
                           "(an empty one counts as unset); the command line wins.")
    store_options(serve)
    _api_options(serve)
    _tunnel_options(serve)
    _public_options(serve)
    ssh.add(serve)
    identity.add(serve)
    domains.add(serve)
    events.add(serve)
    limits.add(serve)
    nodes.add(serve)
    proxy_options.add(serve)
    dashboard.add(serve)
    option(serve, "--log-format", "json", choices=tuple(LOG_FORMATS),
           help="json: one JSON object per line; logfmt; console: for people "
                "(default: %(default)s)")
    option(serve, "--log-level", "info", choices=LOG_LEVELS,
           help="the least severe level logged (default: %(default)s)")


def _api_options(serve: argparse.ArgumentParser) -> None:
    option(serve, "--api-addr", "127.0.0.1:8080",
           help="management API listen address (default: %(default)s)")
    option(serve, "--api-cors-origins", "", metavar="ORIGIN[,ORIGIN]",
           help="web origins (scheme://host[:port], or *) whose pages may call the "
                "management API from a browser (default: none)")
    option(serve, "--public-url", None,
           help="base of every uri member (default: http://<api-addr>)")
    option(serve, "--base-domain", DEFAULTS.base_domain,
           help="the platform's own domain (default: %(default)s)")
    option(serve, "--regions", ",".join(DEFAULTS.regions),
           help="comma-separated region codes (default: %(default)s)")
    option(serve, "--name-servers", "",
           help="comma-separated NS targets for agent ingresses "
                "(default: ns1..ns4.<base-domain>)")


def _tunnel_options(serve: argparse.ArgumentParser) -> None:
    option(serve, "--tunnel-addr", "127.0.0.1:4443",
           help="TLS listener agents dial (default: %(default)s)")
    option(serve, "--tunnel-hostnames", "",
           help="extra names and addresses agents dial, for the tunnel certificate (always: "
                "localhost, 127.0.0.1, ::1, tunnel.<base>)")
    option(serve, "--tunnel-cert", None, type=Path,
           help="PEM certificate chain for the tunnel listener, instead of one from the "
                "platform CA (with --tunnel-key)")
    option(serve, "--tunnel-key", None, type=Path, help="PEM private key of --tunnel-cert")
    option(serve, "--agent-client-cas", "", metavar="CA_ID[,CA_ID]",
           help="require agents to present a client certificate issued by one of these "
                "certificate authorities (ids of /certificate_authorities)")
    option(serve, "--tcp-host", "127.0.0.1",
           help="address TCP tunnels and TCP edges listen on (and the tunnels are published "
                "as, without --tcp-name; default: %(default)s)")
    option(serve, "--tcp-name", "", metavar="NAME",
           help="host name (or address) TCP tunnels are published as: their URLs, reserved "
                "addresses and ACL address rules name it; give every node of a cluster the "
                "same one, resolving to the nodes, and a TCP tunnel keeps its URL whichever "
                "node its agent reaches (default: the --tcp-host)")
    option(serve, "--tcp-ports", "20000-20999",
           help="port range for TCP tunnels (default: %(default)s)")
    option(serve, "--tcp-grace", "120", type=float, metavar="SECONDS",
           help="how long a TCP tunnel whose agent dropped keeps its port for the agent's "
                "reconnect (default: %(default)s)")
    option(serve, "--drain-timeout", "10", type=float, metavar="SECONDS",
           help="on SIGTERM/SIGINT, how long the agents' sessions, all ended at once, get to "
                "close before they are cut (default: %(default)s)")


def _public_options(serve: argparse.ArgumentParser) -> None:
    option(serve, "--sns-cert-hosts", "", metavar="REGEX",
           help="host names (a regular expression) SNS signing certificates may be fetched "
                "from (default: sns.<region>.amazonaws.com[.cn])")
    option(serve, "--http-addr", "127.0.0.1:8880",
           help="public HTTP listener, or 'off' (default: %(default)s)")
    option(serve, "--https-addr", "127.0.0.1:8443",
           help="public HTTPS and TLS listener, or 'off' (default: %(default)s)")
    option(serve, "--reuse-port", False, read=switch, action="store_true",
           help="listen with SO_REUSEPORT, so a new server can start on the same ports "
                "before the old one stops (rolling restarts)")


def _regex(option: str, text: str) -> str:
    try:
        re.compile(text)
    except re.error as exc:
        raise ValueError(f"{option} {text!r} is not a regular expression: {exc}") from None
    return text


def _port_range(text: str) -> tuple[int, int]:
    low, sep, high = text.partition("-")
    if not (sep and low.isascii() and low.isdigit() and high.isascii() and high.isdigit()
            and 1 <= int(low) <= int(high) <= 65535):
        raise ValueError(f"--tcp-ports {text!r} must be LOW-HIGH within 1-65535")
    return int(low), int(high)


def _tunnel_cert(args: argparse.Namespace) -> tuple[Path, Path] | None:
    if (args.tunnel_cert is None) != (args.tunnel_key is None):
        raise ValueError("--tunnel-cert and --tunnel-key go together")
    for path in (args.tunnel_cert, args.tunnel_key):
        if path is not None and not Path(path).is_file():
            raise ValueError(f"{path}: no such file")
    return (Path(args.tunnel_cert), Path(args.tunnel_key)) if args.tunnel_cert else None


def _agent_cas(text: str) -> tuple[str, ...]:
    cas = split_list(text)
    for ca in cas:
        if not ca.startswith("ca_"):
            raise ValueError(f"--agent-client-cas: {ca!r} is not a certificate authority id "
                             "(ca_...)")
    return cas


def _settings(args: argparse.Namespace, host: str, port: int) -> Settings:
    regions = split_list(args.regions)
    if not regions:
        raise ValueError("--regions needs at least one region code")
    return Settings(public_url=(args.public_url or public_url_for(host, port)).rstrip("/"),
                    base_domain=args.base_domain.strip(".").lower(), regions=regions,
                    name_servers=split_list(args.name_servers))


LABEL = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")


def _tcp_name(text: str, tcp_host: str) -> str:
    """The name TCP tunnels are published as (``--tcp-name``; the ``--tcp-host`` without)."""
    name = text.strip().lower().rstrip(".")
    if not name:
        return tcp_host
    with contextlib.suppress(ValueError):
        return str(ipaddress.ip_address(name.strip("[]")))
    if len(name) > 253 or not all(LABEL.fullmatch(label) for label in name.split(".")):
        raise ValueError(f"--tcp-name {text!r} is not a host name or an IP address (letters, "
                         "digits and hyphens in dot-separated labels)")
    return name


def server_config(args: argparse.Namespace) -> ServerConfig:
    host, port = parse_addr(args.api_addr)
    settings = _settings(args, host, port)
    t_host, t_port = parse_addr(args.tunnel_addr)
    names = ("localhost", "127.0.0.1", "::1", f"tunnel.{settings.base_domain}", t_host,
             *split_list(args.tunnel_hostnames))
    names = tuple(n for n in dict.fromkeys(names) if n not in ("0.0.0.0", "::", ""))
    tcp_ports = _port_range(args.tcp_ports)
    tcp_name = _tcp_name(args.tcp_name, args.tcp_host)
    if not 0 <= args.tcp_grace <= 86400:
        raise ValueError(f"--tcp-grace {args.tcp_grace:g} must be 0 to 86400 seconds")
    if not 0 <= args.drain_timeout <= 3600:
        raise ValueError(f"--drain-timeout {args.drain_timeout:g} must be 0 to 3600 seconds")
    http_addr, https_addr = public(args.http_addr), public(args.https_addr)
    ssh_addr, ssh_host_ca, ssh_keepalive = ssh.parse(args)
    caps, api_head_timeout = limits.parse(args)
    cluster, region = nodes.parse(args, settings.regions)
    own = [(port, "management API"), (t_port, "tunnel listener")]
    own += [(addr[1], what) for what, addr in (("public HTTP listener", http_addr),
                                               ("public HTTPS listener", https_addr),
                                               ("SSH gateway", ssh_addr),
                                               ("node link", cluster.tcp)) if addr]
    ident = identity.parse(args, settings.base_domain)
    ips = domains.ips(args.public_ip or [])
    dom = domains.parse(args, ips)
    settings = dataclasses.replace(settings, own_ports=tuple(own), public_ips=ips,
                                   ssh_host_ca=ssh_host_ca,
                                   acme=bool(dom.acme_directory),
                                   dns_check_resolvers=domains.resolvers(args.dns_check_resolver),
                                   agent_client_cas=_agent_cas(args.agent_client_cas),
                                   agent_ports=tcp_ports, tcp_host=tcp_name,
                                   lowest_port=lowest_bindable_port(),
                                   https_port=https_addr[1] if https_addr else 443,
                                   oauth_apps=tuple(p for p, _, _ in ident.oauth_apps),
                                   node_region=region)
    return ServerConfig(args.data_dir, args.database_url, host, port, settings, t_host, t_port,
                        names, args.tcp_host, tcp_ports, tcp_name=tcp_name,
                        tcp_grace=args.tcp_grace,
                        drain_timeout=args.drain_timeout,
                        http_addr=http_addr, https_addr=https_addr, reuse_port=args.reuse_port,
                        cors_origins=cors_origins(split_list(args.api_cors_origins)),
                        sns_cert_hosts=_regex("--sns-cert-hosts", args.sns_cert_hosts),
                        tunnel_cert=_tunnel_cert(args), identity=ident,
                        domains=dom, ssh_addr=ssh_addr, ssh_host_ca=ssh_host_ca,
                        ssh_keepalive=ssh_keepalive,
                        events=events.parse(args), caps=caps,
                        api_head_timeout=api_head_timeout, nodes=cluster,
                        proxy=proxy_options.parse(args), dashboard=dashboard.parse(args))
