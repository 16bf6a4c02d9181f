"""TLS terminated at the edge for what is otherwise passed through or carried as bytes: an
agent's TLS endpoint (the SDKs' ``termination(cert, key)``, or its traffic policy's
``terminate-tls``), and with ``terminate-tls`` TLS cloud endpoints and TCP endpoints (agents'
TCP tunnels, TCP cloud endpoints, TCP edges: their clients speak TLS to the edge and the
upstream gets the plain bytes). The certificate is the policy's, or else the name's own: for
a TLS endpoint its host name's (the one its HTTPS would get), for a TCP one the TCP address's
host name (``--tcp-name``) or address. An HTTPS endpoint's ``terminate-tls`` sets the TLS
versions, certificate and client certificates of its handshakes, and its ``on_tcp_connect``
may close a connection before the handshake (``https_endpoint``)."""

from __future__ import annotations

import ssl
from urllib.parse import urlsplit

from edgeway.catalog.modules.policy import TCP
from edgeway.edge.hooks import UNKNOWN, Hook, Local
from edgeway.edge.modules.terminate_tls import TerminateTls
from edgeway.edge.modules.traffic_policy import Policy
from edgeway.edge.router import EdgeRouter
from edgeway.edge.snapshot import Cloud, Edge, Snapshot
from edgeway.pki.platform_ca import EdgeCerts
from edgeway.tunnel.registry import Tunnel


class Terminator:
    def __init__(self, router: EdgeRouter, certs: EdgeCerts, base_domain: str) -> None:
        self.router, self.certs, self.base_domain = router, certs, base_domain

    def context(self, term: TerminateTls, host: str, client_cas: str = "") -> ssl.SSLContext:
        """The context of a traffic policy's terminate-tls for ``host``: its certificate, or
        the name's own; client certificates from its authorities required (else from
        ``client_cas``: an HTTPS agent endpoint's own mutual TLS)."""
        cas = term.client_cas or client_cas
        if term.certificate:
            return self.certs.agents(term.certificate, term.key, cas, term.min_version,
                                     term.max_version)
        name = self.router.certificate_name(host, self.base_domain) or host
        return self.certs.context(name, False, cas, term.min_version,
                                  max_version=term.max_version)

    def https_endpoint(self, snap: Snapshot, name: str, peer: tuple[str, int],
                       local: Local) -> tuple[bool, TerminateTls | None]:
        """A TLS connection to an HTTPS agent or cloud endpoint: whether the on_tcp_connect
        of its traffic policy (every one of pooled tunnels') admits it, and its
        terminate-tls, if any (the TLS versions, certificate and client certificates the
        handshake takes)."""
        cloud = snap.cloud.get(name)
        plans = [c.plan for c in cloud.pool or (cloud,)] if cloud is not None else \
            [self.router.bind_plan(t) for t in self.router.registry.for_host(name)
             if t.proto == "https"]
        admitted = all(admits(plan.hooks, *peer, local) for plan in plans)
        term = next((t for plan in plans if (t := plan.find(TerminateTls)) is not None), None)
        return admitted, term

    def tunnel(self, tunnel: Tunnel) -> ssl.SSLContext | None:
        """The context an agent's TLS or TCP endpoint's connections are terminated with here:
        its traffic policy's terminate-tls, or (TLS) the agent's certificate and key; None:
        its bytes go on as they are."""
        term = self.router.bind_plan(tunnel).find(TerminateTls)
        if term is not None:
            return self.context(term, tunnel.host or urlsplit(tunnel.url).hostname or "")
        termination = tunnel.req.termination
        return self.certs.agents(*termination, tunnel.req.client_cas) \
            if termination is not None else None

    def listener(self, what: Edge | Cloud | None) -> ssl.SSLContext | None:
        """The context of a TCP edge's or TCP cloud endpoint's connections (its traffic
        policy's terminate-tls), None when they are not terminated."""
        term = what.plan.find(TerminateTls) if what is not None else None
        if what is None or term is None:
            return None
        host = what.hostport if isinstance(what, Cloud) else \
            str((what.doc.get("hostports") or [""])[0])
        return self.context(term, host.rpartition(":")[0].strip("[]") or host)


def admits(hooks: tuple[Hook, ...], ip: str, port: int, local: Local = UNKNOWN) -> bool:
    """Whether the on_tcp_connect of an HTTP(S) endpoint's traffic policy (among its plan's
    ``hooks``) admits a connection (its other modules, IP restrictions among them, answer
    each request)."""
    return all(hook.on_tcp_connect(ip, port, local=local) is True for hook in hooks
               if isinstance(hook, Policy) and hook.has(TCP))
