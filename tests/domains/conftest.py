"""One platform per backend for the domain tests: the built-in DNS on, a recursive resolver
standing for the internet's DNS (``resolver.py``), and ACME against a real Pebble."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import BACKENDS
from tests.domains import resolver
from tests.server import Server, free_port, fresh_pg_database, start

BASE = "edge.test"


@dataclass
class Domains:
    server: Server
    dns_port: int
    resolver: resolver.Resolver
    resolver_port: int
    args: tuple[str, ...]


@pytest.fixture(scope="package", params=BACKENDS)
def domains(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
            ) -> Iterator[Domains]:
    data = Path(tmp_path_factory.mktemp(f"domains-{request.param}"))
    dns_port, resolver_port = resolver.udp_and_tcp_port(), resolver.udp_and_tcp_port()
    ports = (free_port(), free_port(), free_port(), free_port())
    args = ("--base-domain", BASE, "--dns-addr", f"127.0.0.1:{dns_port}",
            "--public-ip", "127.0.0.1", "--public-ip", "::1",
            "--dns-check-resolver", f"127.0.0.1:{resolver_port}", "--acme-directory", "off")
    with ExitStack() as stack:
        res = stack.enter_context(resolver.running(("127.0.0.1", dns_port), resolver_port))
        url = stack.enter_context(fresh_pg_database()) if request.param == "postgres" else None
        srv = start(data, url, *args, ports=ports)
        try:
            yield Domains(srv, dns_port, res, resolver_port, args)
        finally:
            code = srv.stop()
        assert code == 0, f"server did not shut down cleanly ({code}):\n{srv.log()}"
