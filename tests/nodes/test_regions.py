"""Regions are real: two nodes of one cluster in two regions, each with a public address, and
the built-in DNS of the first. ``tunnel.<region>.<base>`` answers that region's node only,
``tunnel.<base>`` both; a reserved domain's ``cname_target`` answers the node of the region
its tunnel was bound in; when the eu node stops, ``tunnel.eu.<base>`` fails over to the us
node. An agent's session and tunnels carry their node's region."""

from __future__ import annotations

import base64
import secrets
from pathlib import Path

import pytest

from tests.conftest import BACKENDS
from tests.domains import dnsq
from tests.domains.resolver import udp_and_tcp_port
from tests.edge import upstream
from tests.edge.agents import agent
from tests.server import free_port, fresh_pg_database, start

pytestmark = pytest.mark.skipif("postgres" not in BACKENDS,
                                reason="nodes share a PostgreSQL database")
BASE = "regions.test"
US, EU = "192.0.2.10", "192.0.2.20"


def test_region_names_answer_their_nodes_and_fail_over(tmp_path: Path) -> None:
    key = base64.b64encode(secrets.token_bytes(32)).decode()
    dns_port = udp_and_tcp_port()
    common = ("--base-domain", BASE, "--regions", "us,eu")
    env = {"EDGEWAY_SECRET_KEY": key}
    with fresh_pg_database() as url:
        us = start(tmp_path / "us", url, *common, "--region", "us", "--public-ip", US,
                   "--node-addr", f"127.0.0.1:{free_port()}", "--dns-addr",
                   f"127.0.0.1:{dns_port}", env=env)
        eu = start(tmp_path / "eu", url, *common, "--region", "eu", "--public-ip", EU,
                   "--node-addr", f"127.0.0.1:{free_port()}", token=us.token, env=env)
        try:
            def answer(name: str, want: list[str]) -> list[str]:
                msg = dnsq.until(dns_port, name, "A", lambda m: dnsq.values(m, "A") == want)
                return dnsq.values(msg, "A")

            assert answer(f"tunnel.eu.{BASE}", [EU]) == [EU]
            assert answer(f"tunnel.us.{BASE}", [US]) == [US]
            assert answer(f"tunnel.{BASE}", sorted([US, EU])) == sorted([US, EU])
            with us.client() as api:
                domain = api.post("/reserved_domains", json={"domain": "app.example.net"}).json()
                token = api.post("/credentials", json={}).json()["token"]
            with upstream.running("svc") as port:
                bound = agent(eu, token, {"kind": "https", "domain": "app.example.net",
                                          "forward": f"http://127.0.0.1:{port}"})
                try:
                    assert answer(domain["cname_target"], [EU]) == [EU]
                    with us.client() as api:
                        (session,) = api.get("/tunnel_sessions").json()["tunnel_sessions"]
                        (tunnel,) = api.get("/tunnels").json()["tunnels"]
                    assert session["region"] == tunnel["region"] == "eu"
                finally:
                    bound.stop()
            assert eu.stop() == 0  # (a clean stop: it leaves at once, no lease to wait)
            assert answer(f"tunnel.eu.{BASE}", [US]) == [US]
            assert answer(f"tunnel.{BASE}", [US]) == [US]
        finally:
            for srv in (eu, us):
                if srv.proc.stdout is not None and not srv.proc.stdout.closed:
                    srv.stop()
