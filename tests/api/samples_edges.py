"""Generic-suite test data for edges and backends (routes are nested; see test_edges.py)."""

from __future__ import annotations

import itertools
import random

import httpx

from tests.api.samples import Body, Sample, created, uniq
from tests.server import ours as ports_ours
from tests.server import worker_slice


def reserved(api: httpx.Client, wildcard: bool = False) -> str:
    name = f"{'*.' if wildcard else 'app.'}{uniq()}.example.com"
    domain: str = created(api, "/reserved_domains", {"domain": name})["domain"]
    return domain


def tunnel_group(api: httpx.Client) -> str:
    bid: str = created(api, "/backends/tunnel_group", {"labels": {"site": "a"}})["id"]
    return bid


def _https(api: httpx.Client) -> Body:
    return {"hostports": [f"{reserved(api)}:443"], "description": "web"}


# TCP edges listen on their ports: one each, outside the agents' TCP range (20000-20999), in
# this worker's slice of 10000-19999
_EDGE_PORTS = worker_slice(range(10000, 20000))
_TCP_PORTS = itertools.count(_EDGE_PORTS.start + random.randrange(len(_EDGE_PORTS) // 2))


def tcp_port() -> int:
    """The next edge port of this worker's slice in a chunk this process holds (another suite
    on the machine holds others: see tests.server)."""
    return next(port for port in _TCP_PORTS if ports_ours(port))


def _tcp(_api: httpx.Client) -> Body:
    return {"hostports": [f"tcp.{uniq()}.example.com:{tcp_port()}"]}


def _tls(api: httpx.Client) -> Body:
    return {"hostports": [f"{reserved(api)}:443"],
            "tls_termination": {"terminate_at": "upstream"}}


def _cloud(api: httpx.Client) -> Body:
    return {"type": "cloud", "url": f"https://{reserved(api)}",
            "traffic_policy": '{"on_http_request": [{"actions": [{"type": "custom-response", '
                              '"config": {"status_code": 200, "content": "hi"}}]}]}',
            "description": "a cloud endpoint"}


SAMPLES: dict[str, Sample] = {
    "endpoints": Sample(_cloud, {"description": "renamed", "metadata": "m"}),
    "backends/tunnel_group": Sample(lambda _a: {"labels": {"site": uniq()}},
                                    {"labels": {"site": "b"}, "description": "x"}),
    "backends/failover": Sample(lambda a: {"backends": [tunnel_group(a)]}),
    "backends/weighted": Sample(lambda a: {"backends": {tunnel_group(a): 10}}),
    "backends/static": Sample(lambda _a: {"address": "10.0.0.1:8080"},
                              {"address": "db.example.com:5432", "tls": {"enabled": True}}),
    "backends/http_response": Sample(lambda _a: {"body": "hi", "headers": {"X-A": "b"}},
                                     {"status_code": 503, "body": "down"}),
    "edges/https": Sample(_https),
    "edges/tcp": Sample(_tcp),
    "edges/tls": Sample(_tls),
}
