"""Time to 503 under a database blackhole: a server on PostgreSQL reached through a relay
(``tests.pgfaults.Link``) that goes silent (accepts, forwards nothing, resets nothing: a
network partition), with an SDK agent's tunnel bound before. Prints the API's time to answer
503 on the first call (its held connections no longer answer) and on later ones, the latency
of requests through the bound tunnel on new connections meanwhile, and the time until the API
answers 200 again once the relay forwards again.

Run from the repository root:  python -m bench.db_blackhole_bench [--calls 5] [--seconds 8]
Needs PostgreSQL as for the tests (EDGEWAY_TEST_DATABASE_URL). Exit status 1 if the API did
not answer 503, or a request through the tunnel failed, during the blackhole.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx

from tests.edge import upstream
from tests.edge.agents import EdgeClient, agent
from tests.pgfaults import Link
from tests.server import Server, fresh_pg_database, start


def _timed(call: Callable[[], httpx.Response]) -> tuple[int, float]:
    began = time.monotonic()
    status = call().status_code
    return status, time.monotonic() - began


def _tunnel(srv: Server, url: str, seconds: float) -> list[tuple[int, float]]:
    """Requests through the tunnel, each on a new connection, for ``seconds``."""
    out: list[tuple[int, float]] = []
    until = time.monotonic() + seconds
    while time.monotonic() < until:
        with EdgeClient(srv, timeout=60) as edge:
            out.append(_timed(lambda: edge.get(f"{url}/n{len(out)}")))
    return out


def _measure(srv: Server, link: Link, url: str, calls: int, seconds: float) -> int:
    with srv.client() as api:
        api.timeout = httpx.Timeout(120)
        made = api.post("/ip_policies", json={"description": "bench"}).json()["id"]
        link.blackhole()
        first = _timed(lambda: api.get(f"/ip_policies/{made}"))
        through = _tunnel(srv, url, seconds)
        later = [_timed(lambda: api.get(f"/ip_policies/{made}")) for _ in range(calls)]
        link.mend()
        began = time.monotonic()
        while api.get(f"/ip_policies/{made}").status_code != 200:
            time.sleep(0.05)
        recovered = time.monotonic() - began
    took = sorted(t for _, t in through)
    print(f"API first call under the blackhole: {first[0]} in {first[1]:.2f} s")
    print(f"API later calls ({calls}): statuses {sorted({s for s, _ in later})}, "
          f"median {statistics.median(t for _, t in later):.2f} s, "
          f"max {max(t for _, t in later):.2f} s")
    print(f"through the bound tunnel ({len(through)} new connections in {seconds:g} s): "
          f"statuses {sorted({s for s, _ in through})}, median {1000 * took[len(took) // 2]:.1f}"
          f" ms, max {1000 * took[-1]:.1f} ms")
    print(f"API answering 200 again {recovered:.2f} s after the database answered")
    ok = first[0] == 503 and all(s == 503 for s, _ in later) and all(
        s == 200 for s, _ in through)
    return 0 if ok else 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=5, help="API calls after the first")
    parser.add_argument("--seconds", type=float, default=8.0,
                        help="seconds of requests through the tunnel under the blackhole")
    args = parser.parse_args()
    link = Link()
    try:
        with tempfile.TemporaryDirectory() as tmp, fresh_pg_database() as url, \
                upstream.running("bench") as port:
            srv = start(Path(tmp) / "srv", link.url(url))
            try:
                with srv.client() as api:
                    token = api.post("/credentials", json={}).json()["token"]
                sdk = agent(srv, token, {"kind": "http", "forward": f"http://127.0.0.1:{port}"})
                try:
                    status = _measure(srv, link, sdk.urls[0], args.calls, args.seconds)
                finally:
                    sdk.stop()
            finally:
                link.mend()
                srv.stop()
    finally:
        link.close()
    sys.exit(status)


if __name__ == "__main__":
    main()
