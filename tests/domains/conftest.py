"""One platform per backend for the domain tests, with the built-in DNS on, a recursive
resolver standing for the internet's DNS (``resolver.py``) and ACME against a real Pebble
(``pebble.py``). The resolver, Pebble and the ports they are told about (the built-in DNS,
the public HTTP listener) are shared by both backends' servers, which run one after the
other."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import BACKENDS
from tests.domains import pebble, resolver
from tests.server import Server, free_port, fresh_pg_database, start

BASE = "edge.test"


@dataclass
class Network:
    dns_port: int
    http_port: int
    resolver: resolver.Resolver
    resolver_port: int
    pebble: pebble.Pebble


@dataclass
class Domains:
    server: Server
    dns_port: int
    resolver: resolver.Resolver
    resolver_port: int
    pebble: pebble.Pebble
    args: tuple[str, ...]
    ports: tuple[int, int, int, int]


@pytest.fixture(scope="session")
def network(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Network]:
    dns_port, resolver_port = resolver.udp_and_tcp_port(), resolver.udp_and_tcp_port()
    http_port = free_port()
    with resolver.running(("127.0.0.1", dns_port), resolver_port) as res, \
            pebble.running(Path(tmp_path_factory.mktemp("pebble")), http_port,
                           ("127.0.0.1", resolver_port)) as peb:
        yield Network(dns_port, http_port, res, resolver_port, peb)


@pytest.fixture(scope="package", params=BACKENDS)
def domains(request: pytest.FixtureRequest, network: Network,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Domains]:
    data = Path(tmp_path_factory.mktemp(f"domains-{request.param}"))
    network.resolver.cnames.clear()  # (the other backend's user records)
    ports = (free_port(), free_port(), network.http_port, free_port())
    args = ("--base-domain", BASE, "--dns-addr", f"127.0.0.1:{network.dns_port}",
            "--public-ip", "127.0.0.1", "--public-ip", "::1",
            "--dns-check-resolver", f"127.0.0.1:{network.resolver_port}",
            "--acme-directory", network.pebble.directory,
            "--acme-ca-bundle", str(network.pebble.ca_bundle), "--acme-renew-before", "10m")
    with ExitStack() as stack:
        url = stack.enter_context(fresh_pg_database()) if request.param == "postgres" else None
        srv = start(data, url, *args, ports=ports)
        holder = Domains(srv, network.dns_port, network.resolver, network.resolver_port,
                         network.pebble, args, ports)
        try:
            yield holder
        finally:
            code = holder.server.stop()
        assert code == 0, f"server did not shut down cleanly ({code}):\n{holder.server.log()}"
