"""``edgeway serve``: its options (each also read from an ``EDGEWAY_*`` environment variable;
the command line wins) and the ``ServerConfig`` they make, every value checked here so that a
bad one stops the start with a message naming the option."""

from __future__ import annotations

import argparse
import dataclasses
import ipaddress
import json
import os
import re
from pathlib import Path

from edgeway.catalog import checks
from edgeway.catalog.model import Settings
from edgeway.config import (
    LETS_ENCRYPT,
    LETS_ENCRYPT_STAGING,
    DomainsConfig,
    IdentityOptions,
    ServerConfig,
    cors_origins,
    default_data_dir,
    lowest_bindable_port,
    parse_addr,
    public_url_for,
    split_list,
)
from edgeway.edge.oauth_providers import BY_SDK_NAME, PROVIDERS, check_endpoint
from edgeway.errors import Invalid

DEFAULTS = Settings()
LOG_FORMATS = {"json": "json", "logfmt": "logfmt", "console": "term"}
LOG_LEVELS = ("debug", "info", "warning", "error")


def env(name: str, default: str | None = None) -> str | None:
    return os.environ.get(f"EDGEWAY_{name}", default)


def store_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data-dir", type=Path, default=Path(env("DATA_DIR") or default_data_dir()),
                   help="where the SQLite database lives (default: %(default)s)")
    p.add_argument("--database-url", default=env("DATABASE_URL"),
                   help="postgresql://user@host:port/db to use PostgreSQL instead of SQLite")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    serve = sub.add_parser("serve", help="run the platform")
    store_options(serve)
    _api_options(serve)
    _tunnel_options(serve)
    _public_options(serve)
    _ssh_options(serve)
    _identity_options(serve)
    _dns_options(serve)
    _acme_options(serve)
    serve.add_argument("--log-format", choices=tuple(LOG_FORMATS),
                       default=env("LOG_FORMAT", "json"),
                       help="json: one JSON object per line; logfmt; console: for people "
                            "(default: %(default)s)")
    serve.add_argument("--log-level", choices=LOG_LEVELS, default=env("LOG_LEVEL", "info"),
                       help="the least severe level logged (default: %(default)s)")


def _api_options(serve: argparse.ArgumentParser) -> None:
    serve.add_argument("--api-addr", default=env("API_ADDR", "127.0.0.1:8080"),
                       help="management API listen address (default: %(default)s)")
    serve.add_argument("--api-cors-origins", default=env("API_CORS_ORIGINS", ""),
                       metavar="ORIGIN[,ORIGIN]",
                       help="web origins (scheme://host[:port], or *) whose pages may call the "
                            "management API from a browser (default: none)")
    serve.add_argument("--public-url", default=env("PUBLIC_URL"),
                       help="base of every uri member (default: http://<api-addr>)")
    serve.add_argument("--base-domain", default=env("BASE_DOMAIN", DEFAULTS.base_domain),
                       help="the platform's own domain (default: %(default)s)")
    serve.add_argument("--regions", default=env("REGIONS", ",".join(DEFAULTS.regions)),
                       help="comma-separated region codes (default: %(default)s)")
    serve.add_argument("--name-servers", default=env("NAME_SERVERS", ""),
                       help="comma-separated NS targets for agent ingresses "
                            "(default: ns1..ns4.<base-domain>)")


def _tunnel_options(serve: argparse.ArgumentParser) -> None:
    serve.add_argument("--tunnel-addr", default=env("TUNNEL_ADDR", "127.0.0.1:4443"),
                       help="TLS listener agents dial (default: %(default)s)")
    serve.add_argument("--tunnel-hostnames", default=env("TUNNEL_HOSTNAMES", ""),
                       help="extra names and addresses agents dial, for the tunnel "
                            "certificate (always: localhost, 127.0.0.1, ::1, tunnel.<base>)")
    serve.add_argument("--tunnel-cert", type=Path, default=env("TUNNEL_CERT"),
                       help="PEM certificate chain for the tunnel listener, instead of one "
                            "from the platform CA (with --tunnel-key)")
    serve.add_argument("--tunnel-key", type=Path, default=env("TUNNEL_KEY"),
                       help="PEM private key of --tunnel-cert")
    serve.add_argument("--agent-client-cas", default=env("AGENT_CLIENT_CAS", ""),
                       metavar="CA_ID[,CA_ID]",
                       help="require agents to present a client certificate issued by one of "
                            "these certificate authorities (ids of /certificate_authorities)")
    serve.add_argument("--tcp-host", default=env("TCP_HOST", "127.0.0.1"),
                       help="address TCP tunnels listen on and are published as "
                            "(default: %(default)s)")
    serve.add_argument("--tcp-ports", default=env("TCP_PORTS", "20000-20999"),
                       help="port range for TCP tunnels (default: %(default)s)")
    serve.add_argument("--tcp-grace", type=float, default=float(env("TCP_GRACE") or 120),
                       metavar="SECONDS",
                       help="how long a TCP tunnel whose agent dropped keeps its port for the "
                            "agent's reconnect (default: %(default)g)")


def _public_options(serve: argparse.ArgumentParser) -> None:
    serve.add_argument("--sns-cert-hosts", default=env("SNS_CERT_HOSTS", ""), metavar="REGEX",
                       help="host names (a regular expression) SNS signing certificates may be "
                            "fetched from (default: sns.<region>.amazonaws.com[.cn])")
    serve.add_argument("--http-addr", default=env("HTTP_ADDR", "127.0.0.1:8880"),
                       help="public HTTP listener, or 'off' (default: %(default)s)")
    serve.add_argument("--https-addr", default=env("HTTPS_ADDR", "127.0.0.1:8443"),
                       help="public HTTPS and TLS listener, or 'off' (default: %(default)s)")
    serve.add_argument("--reuse-port", action="store_true",
                       default=env("REUSE_PORT", "") not in ("", "0", "false"),
                       help="listen with SO_REUSEPORT, so a new server can start on the same "
                            "ports before the old one stops (rolling restarts)")


def _ssh_options(serve: argparse.ArgumentParser) -> None:
    serve.add_argument("--ssh-addr", default=env("SSH_ADDR", "127.0.0.1:2222"),
                       help="the SSH gateway (ssh -R with an SSH credential's key), or 'off' "
                            "(default: %(default)s)")
    serve.add_argument("--ssh-host-ca", default=env("SSH_HOST_CA", ""), metavar="SSHCA_ID",
                       help="an SSH certificate authority (/ssh_certificate_authorities) that "
                            "signs the gateway's host key, for clients trusting "
                            "@cert-authority (default: none, the bare key)")
    serve.add_argument("--ssh-keepalive", type=float,
                       default=float(env("SSH_KEEPALIVE") or 15), metavar="SECONDS",
                       help="seconds between keep-alives to SSH clients; three unanswered "
                            "end the session (default: %(default)g)")


def _ssh(args: argparse.Namespace) -> tuple[tuple[str, int] | None, str, float]:
    """The SSH gateway's address (None: off), host certificate authority and keep-alive."""
    ca = args.ssh_host_ca.strip()
    if ca and not ca.startswith("sshca_"):
        raise ValueError(f"--ssh-host-ca: {ca!r} is not an SSH certificate authority id "
                         "(sshca_...)")
    if not 1 <= args.ssh_keepalive <= 3600:
        raise ValueError(f"--ssh-keepalive {args.ssh_keepalive:g} must be 1 to 3600 seconds")
    return _public(args.ssh_addr), ca, args.ssh_keepalive
def _identity_options(serve: argparse.ArgumentParser) -> None:
    serve.add_argument("--oauth-endpoint", action="append", metavar="PROVIDER.NAME=URL",
                       default=list(split_list(env("OAUTH_ENDPOINTS") or "")),
                       help="replace an OAuth provider's endpoint, e.g. "
                            "code_host_a.token=https://github.example.com/login/oauth/"
                            "access_token (repeatable; names in the README)")
    serve.add_argument("--oauth-apps", type=Path, default=env("OAUTH_APPS"), metavar="FILE",
                       help="JSON file of the platform's managed OAuth applications: "
                            '{"<provider>": {"client_id": ..., "client_secret": ...}}')
    serve.add_argument("--login-host", default=env("LOGIN_HOST", ""),
                       help="host of the managed OAuth applications' callback "
                            "(default: login.<base-domain>)")


def _oauth_apps(path: Path | None) -> tuple[tuple[str, str, str], ...]:
    """The managed OAuth applications of ``--oauth-apps``: (provider, client id, secret)."""
    if path is None:
        return ()
    try:
        apps = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"--oauth-apps {path}: {exc}") from None
    if not isinstance(apps, dict):
        raise ValueError(f"--oauth-apps {path}: must hold a JSON object of providers")
    out = []
    for name, app in apps.items():
        provider = BY_SDK_NAME.get(str(name))
        if provider is None:
            raise ValueError(f"--oauth-apps {path}: '{name}' is not a provider (one of "
                             f"{', '.join(PROVIDERS)})")
        if not isinstance(app, dict) or not all(
                isinstance(app.get(k), str) and app[k] for k in ("client_id", "client_secret")):
            raise ValueError(f"--oauth-apps {path}: '{name}' needs a client_id and a "
                             "client_secret (strings)")
        out.append((provider.name, app["client_id"], app["client_secret"]))
    return tuple(out)


def _identity(args: argparse.Namespace, base_domain: str) -> IdentityOptions:
    host = args.login_host.strip().lower().rstrip(".") or f"login.{base_domain}"
    try:
        checks.domain_name("--login-host", host)
    except Invalid as exc:
        raise ValueError(f"--login-host {host!r}: {exc.msg}") from None
    return IdentityOptions(tuple(check_endpoint(e) for e in args.oauth_endpoint),
                           _oauth_apps(args.oauth_apps), host)
def _dns_options(serve: argparse.ArgumentParser) -> None:
    serve.add_argument("--dns-addr", default=env("DNS_ADDR", "off"),
                       help="built-in authoritative DNS server (UDP and TCP) for the base "
                            "domain and agent ingress domains, or 'off' (default: %(default)s)")
    serve.add_argument("--public-ip", action="append", metavar="IP[,IP]",
                       help="the platform's public IPv4/IPv6 addresses, which its names "
                            "resolve to (repeatable; needed by --dns-addr)")
    serve.add_argument("--dns-check-resolver", default=env("DNS_CHECK_RESOLVER", ""),
                       metavar="HOST[:PORT][,...]",
                       help="recursive resolver(s) for DNS checks, before certificates are "
                            "requested and on /dns_check (default: the system's)")


def _acme_options(serve: argparse.ArgumentParser) -> None:
    serve.add_argument("--acme-directory", default=env("ACME_DIRECTORY", LETS_ENCRYPT),
                       metavar="URL",
                       help="ACME directory of managed certificates, or 'off' (default: Let's "
                            f"Encrypt, %(default)s; staging: {LETS_ENCRYPT_STAGING})")
    serve.add_argument("--acme-email", default=env("ACME_EMAIL", ""),
                       help="contact e-mail of the ACME account (default: none)")
    serve.add_argument("--acme-ca-bundle", type=Path, default=env("ACME_CA_BUNDLE"),
                       metavar="FILE", help="PEM CA bundle trusted for the ACME directory's "
                                            "HTTPS (a test CA); default: the system's")
    serve.add_argument("--acme-renew-before", default=env("ACME_RENEW_BEFORE", "30d"),
                       metavar="DURATION",
                       help="renew managed certificates this long before they expire: "
                            "NUMBER[s|m|h|d] (default: %(default)s)")


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


def _ips(given: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    out = []
    for text in given:
        for ip in split_list(text):
            try:
                out.append(str(ipaddress.ip_address(ip)))
            except ValueError:
                raise ValueError(f"--public-ip: {ip!r} is not an IPv4 or IPv6 address") \
                    from None
    return tuple(dict.fromkeys(out))


def _resolvers(text: str) -> tuple[tuple[str, int], ...]:
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


def _domains(args: argparse.Namespace, ips: tuple[str, ...]) -> DomainsConfig:
    dns_addr = _public(args.dns_addr)
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


def _regex(option: str, text: str) -> str:
    try:
        re.compile(text)
    except re.error as exc:
        raise ValueError(f"{option} {text!r} is not a regular expression: {exc}") from None
    return text


def _public(addr: str) -> tuple[str, int] | None:
    return None if addr.strip().lower() == "off" else parse_addr(addr)


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


def server_config(args: argparse.Namespace) -> ServerConfig:
    host, port = parse_addr(args.api_addr)
    settings = _settings(args, host, port)
    t_host, t_port = parse_addr(args.tunnel_addr)
    names = ("localhost", "127.0.0.1", "::1", f"tunnel.{settings.base_domain}", t_host,
             *split_list(args.tunnel_hostnames))
    names = tuple(n for n in dict.fromkeys(names) if n not in ("0.0.0.0", "::", ""))
    tcp_ports = _port_range(args.tcp_ports)
    if not 0 <= args.tcp_grace <= 86400:
        raise ValueError(f"--tcp-grace {args.tcp_grace:g} must be 0 to 86400 seconds")
    http_addr, https_addr = _public(args.http_addr), _public(args.https_addr)
    ssh_addr, ssh_host_ca, ssh_keepalive = _ssh(args)
    own = [(port, "management API"), (t_port, "tunnel listener")]
    own += [(addr[1], what) for what, addr in (("public HTTP listener", http_addr),
                                               ("public HTTPS listener", https_addr),
                                               ("SSH gateway", ssh_addr)) if addr]
    identity = _identity(args, settings.base_domain)
    ips = _ips(args.public_ip or [env("PUBLIC_IP") or ""])
    domains = _domains(args, ips)
    settings = dataclasses.replace(settings, own_ports=tuple(own), public_ips=ips,
                                   ssh_host_ca=ssh_host_ca,
                                   acme=bool(domains.acme_directory),
                                   dns_check_resolvers=_resolvers(args.dns_check_resolver),
                                   agent_client_cas=_agent_cas(args.agent_client_cas),
                                   agent_ports=tcp_ports, tcp_host=args.tcp_host,
                                   lowest_port=lowest_bindable_port(),
                                   https_port=https_addr[1] if https_addr else 443,
                                   oauth_apps=tuple(p for p, _, _ in identity.oauth_apps))
    return ServerConfig(args.data_dir, args.database_url, host, port, settings, t_host, t_port,
                        names, args.tcp_host, tcp_ports, tcp_grace=args.tcp_grace,
                        http_addr=http_addr, https_addr=https_addr, reuse_port=args.reuse_port,
                        cors_origins=cors_origins(split_list(args.api_cors_origins)),
                        sns_cert_hosts=_regex("--sns-cert-hosts", args.sns_cert_hosts),
                        tunnel_cert=_tunnel_cert(args), identity=identity,
                        domains=domains, ssh_addr=ssh_addr, ssh_host_ca=ssh_host_ca,
                        ssh_keepalive=ssh_keepalive)
