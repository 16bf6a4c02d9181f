"""Command-line and environment configuration of the server."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

from edgeway import early
from edgeway.caps import API_HEAD_TIMEOUT, CapsConfig
from edgeway.proxied import Trust
from edgeway.settings import Settings


def default_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "edgeway"


def parse_addr(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not (port.isascii() and port.isdigit()) or not 0 < int(port) < 65536:
        raise ValueError(f"address {text!r} must be HOST:PORT with a port from 1 to 65535")
    return host.strip("[]") or "127.0.0.1", int(port)


def listen_socket(what: str, host: str, port: int, reuse_port: bool = False,
                  backlog: int = 1024) -> socket.socket:
    """A listening socket, or an OSError that says which listener and address failed. One
    ``edgeway serve`` bound before its imports (``early``) is adopted."""
    if not reuse_port and (sock := early.take(host, port)) is not None:
        return sock
    early.drop(port)
    try:
        return socket.create_server((host, port), reuse_port=reuse_port, backlog=backlog,
                                    family=socket.AF_INET6 if ":" in host else socket.AF_INET)
    except OSError as exc:
        raise OSError(exc.errno, f"cannot listen for the {what} on {host}:{port}: "
                      f"{exc.strerror or exc}") from None


def lowest_bindable_port() -> int:
    """The lowest port this process may listen on: 1 for root or with CAP_NET_BIND_SERVICE,
    else the system's first unprivileged port (1024 unless lowered)."""
    if os.geteuid() == 0:
        return 1
    try:
        status = Path("/proc/self/status").read_text()
        caps = next(line.split()[1] for line in status.splitlines()
                    if line.startswith("CapEff:"))
        if int(caps, 16) & (1 << 10):  # CAP_NET_BIND_SERVICE
            return 1
        return int(Path("/proc/sys/net/ipv4/ip_unprivileged_port_start").read_text())
    except (OSError, StopIteration, ValueError):
        return 1024


def split_list(text: str) -> tuple[str, ...]:
    return tuple(p.strip() for p in text.split(",") if p.strip())


LETS_ENCRYPT = "https://acme-v02.api.letsencrypt.org/directory"
LETS_ENCRYPT_STAGING = "https://acme-staging-v02.api.letsencrypt.org/directory"


@dataclass(frozen=True)
class DomainsConfig:
    """The built-in DNS server and the ACME client (the public addresses and the DNS
    checks' resolver are ``Settings``)."""

    dns_addr: tuple[str, int] | None = None  # off by default
    acme_directory: str = LETS_ENCRYPT  # "" (off): no managed certificates
    acme_email: str = ""
    acme_ca_bundle: Path | None = None
    acme_renew_before: float = 30 * 86400.0  # seconds before expiry


@dataclass(frozen=True)
class IdentityOptions:
    """End-user logins at the edge: OAuth provider endpoints replaced (provider, endpoint
    name, URL), the platform's managed OAuth applications (provider, client id, secret) and
    the host their callback is on ("": ``login.<base domain>``)."""
    oauth_endpoints: tuple[tuple[str, str, str], ...] = ()
    oauth_apps: tuple[tuple[str, str, str], ...] = ()
    login_host: str = ""


@dataclass(frozen=True)
class EventsConfig:
    """Event delivery (``edgeway.events``): where targets are reached (each "" for the
    vendor's own endpoint) and how hard delivery tries."""
    datadog_url: str = ""  # base of the Datadog logs intake (https://http-intake.logs.<site>)
    azure_login_url: str = "https://login.microsoftonline.com"  # Azure AD tokens
    azure_ingestion_url: str = ""  # replaces the base of every logs_ingestion_uri
    aws_endpoint_url: str = ""  # every AWS service (boto3 also reads AWS_ENDPOINT_URL*)
    ca_file: Path | None = None  # more CA certificates trusted for HTTPS targets
    retry: float = 1.0  # seconds before the first retry; doubled each time, up to 300
    attempts: int = 10  # attempts of a batch before its events become dead letters
    queue: int = 10_000  # traffic events waiting per node; more are dropped (counted)
    timeout: float = 10.0  # seconds for a call to a target


LEASE = 15.0  # seconds a node counts as alive after its last heartbeat


@dataclass(frozen=True)
class NodesConfig:
    """A cluster of nodes sharing one PostgreSQL database (``edgeway.nodes``)."""
    # the node link's listener: HOST:PORT (mutual TLS) or unix:PATH (the workers of one
    # machine: no TLS, the socket file is its owner's only); None: not in a cluster
    addr: str | None = None
    lease: float = LEASE
    workers: int = 1  # processes of this machine, each a node (``edgeway.workers``)

    @property
    def tcp(self) -> tuple[str, int] | None:
        """The link's TCP address, when it has one."""
        return parse_addr(self.addr) if self.addr and not self.addr.startswith("unix:") \
            else None


@dataclass(frozen=True)
class DashboardConfig:
    """The web dashboard (``edgeway.dashboard``)."""
    session_ttl: float = 12 * 3600.0  # seconds an unused browser session lives
    signin_per_minute: int = 10  # failed sign-ins per client address


@dataclass(frozen=True)
class ServerConfig:
    data_dir: Path
    database_url: str | None
    api_host: str
    api_port: int
    settings: Settings
    tunnel_host: str = "127.0.0.1"
    tunnel_port: int = 4443
    tunnel_names: tuple[str, ...] = ("localhost", "127.0.0.1", "::1")
    tcp_host: str = "127.0.0.1"  # the address TCP tunnels listen on
    tcp_ports: tuple[int, int] = (20000, 20999)
    tcp_name: str = ""  # the name they are published as ("": the tcp_host)
    tcp_grace: float = 120.0
    drain_timeout: float = 10.0  # seconds the agents' sessions get to end when stopping
    http_addr: tuple[str, int] | None = ("127.0.0.1", 8880)
    https_addr: tuple[str, int] | None = ("127.0.0.1", 8443)
    reuse_port: bool = False
    tunnel_cert: tuple[Path, Path] | None = None  # a certificate and key of the operator's
    cors_origins: tuple[str, ...] = ()  # browser origins allowed to call the management API
    sns_cert_hosts: str = ""  # hosts SNS signing certificates are fetched from ("": AWS's)
    ssh_addr: tuple[str, int] | None = ("127.0.0.1", 2222)  # the SSH gateway, or None: off
    ssh_host_ca: str = ""  # an SSH certificate authority signing the gateway's host key
    ssh_keepalive: float = 15.0  # seconds between keep-alives to SSH clients
    identity: IdentityOptions = IdentityOptions()
    domains: DomainsConfig = DomainsConfig()
    events: EventsConfig = EventsConfig()
    caps: CapsConfig = field(default_factory=CapsConfig)  # (edgeway.caps)
    api_head_timeout: float = API_HEAD_TIMEOUT  # seconds for a request head on the management API
    nodes: NodesConfig = NodesConfig()
    proxy: Trust | None = None  # --proxy-protocol's trusted load balancers (edgeway.proxied)
    dashboard: DashboardConfig | None = DashboardConfig()  # None: off (--no-dashboard)


def cors_origins(given: tuple[str, ...]) -> tuple[str, ...]:
    """Origins as browsers send them (``scheme://host[:port]``, lower case), or ``*``."""
    out = []
    for text in given:
        if text == "*":
            out.append(text)
            continue
        parts = urlsplit(text)
        try:
            parts.port  # noqa: B018 (validates the port)
        except ValueError:
            parts = urlsplit("")
        if parts.scheme not in ("http", "https") or not parts.hostname or \
                parts.path not in ("", "/") or parts.query or parts.fragment or \
                parts.username is not None:
            raise ValueError(f"--api-cors-origins: {text!r} is not an origin such as "
                             "https://console.example.com or http://localhost:3000 (or *)")
        out.append(f"{parts.scheme}://{parts.netloc.lower()}")
    return tuple(dict.fromkeys(out))


def public_url_for(host: str, port: int) -> str:
    shown = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    if ":" in shown:
        shown = f"[{shown}]"
    return f"http://{shown}:{port}"
