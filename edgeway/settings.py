"""The platform settings the catalog's derived members depend on (``edgeway serve`` fills
them from its options). A leaf module: the command line reads its defaults without loading
the catalog."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Settings:
    """Platform settings the derived members depend on."""

    public_url: str = "http://127.0.0.1:8080"
    base_domain: str = "edgeway.localhost"
    regions: tuple[str, ...] = ("us", "us-cal-1", "eu", "au", "ap", "jp", "sa", "in")
    name_servers: tuple[str, ...] = ()
    # What a TCP edge's hostport may not use: this server's own listening ports (with what
    # listens there), the range of agent TCP tunnels, and ports below the lowest one the
    # server may bind (privileged ports, without the capability).
    own_ports: tuple[tuple[int, str], ...] = ()
    agent_ports: tuple[int, int] | None = None
    tcp_host: str = "127.0.0.1"  # where agent TCP tunnels (and reserved addresses) listen
    lowest_port: int = 1
    # certificate authorities (ids) whose client certificates agents must present
    agent_client_cas: tuple[str, ...] = ()
    # the SSH certificate authority (id) signing the SSH gateway's host certificate
    ssh_host_ca: str = ""
    https_port: int = 443  # the public HTTPS listener's (in the URLs of the edge's own paths)
    oauth_apps: tuple[str, ...] = ()  # OAuth providers with a managed application here
    # the platform's public addresses (what its names resolve to) and the recursive resolvers
    # of DNS checks (none: the system's)
    public_ips: tuple[str, ...] = ()
    dns_check_resolvers: tuple[tuple[str, int], ...] = ()
    acme: bool = True  # certificate management policies are acted on (--acme-directory)
    node_region: str = ""  # this node's region (--region; "": the first of ``regions``)

    @property
    def region(self) -> str:
        """The region of this node: its agent sessions, tunnels and endpoints are there."""
        return self.node_region or self.regions[0]

    @property
    def ns_targets(self) -> tuple[str, ...]:
        if self.name_servers:
            return self.name_servers
        return tuple(f"ns{i}.{self.base_domain}" for i in range(1, 5))
