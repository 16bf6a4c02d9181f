"""What a login costs a signed-in request: one ``edgeway serve`` (SQLite, or PostgreSQL with
``--database-url``), one SDK agent's labeled tunnel behind two HTTPS edges, one with an oauth
route (the local code_host_a provider of the tests) and one without; after one login, the same
keep-alive client sends sequential requests to each in alternating rounds and the bench prints
requests/s and the median latency of both, and their ratio (the signed-in request's extra work:
its cookie checked and its session read from the database).

Run from the repository root:  python -m bench.login_bench [--requests N] [--database-url U]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from tests.edge import upstream
from tests.edge.agents import agent
from tests.edge.identity import providers
from tests.edge.identity.browser import Browser
from tests.edge.identity.providers import User
from tests.edge.test_edges import made, route
from tests.server import Server, start


def _edges(srv: Server, backend: str, provider: providers.Provider) -> tuple[str, str]:
    site = f"https://bench-login.example.com:{srv.https_port}"
    provider.client("bench", "bench-secret", f"{site}/.edgeway/oauth/callback")
    with srv.client() as api:
        for host, module in (("bench-open.example.com", {}), ("bench-login.example.com", {
                "oauth": {"provider": {"code_host_a": {"client_id": "bench",
                                                       "client_secret": "bench-secret"}}}})):
            made(api, "/reserved_domains", {"domain": host})
            edge = made(api, "/edges/https", {"hostports": [f"{host}:443"]})
            route(api, edge["id"], "path_prefix", "/", backend, **module)
    return f"https://bench-open.example.com:{srv.https_port}", site


def _round(web: Browser, url: str, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        r = web.request("GET", url)
        out.append(time.perf_counter() - t)
        assert r.status_code == 200, r.status_code
    return out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--requests", type=int, default=2000)
    p.add_argument("--database-url", default=None)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp, upstream.running("bench") as port, \
            providers.running("code_host_a") as provider:
        provider.add(User("alice", 1, "Alice", "alice@acme.example"))
        extra = [x for e in provider.endpoints() for x in ("--oauth-endpoint", e)]
        srv = start(Path(tmp), args.database_url, *extra)
        try:
            with srv.client() as api:
                token = api.post("/credentials", json={}).json()["token"]
                group = made(api, "/backends/tunnel_group", {"labels": {"svc": "bench"}})
            a = agent(srv, token, {"kind": "labeled", "labels": {"svc": "bench"},
                                   "forward": f"http://127.0.0.1:{port}"})
            try:
                open_site, login_site = _edges(srv, group["id"], provider)
                with Browser(srv) as web:
                    page = web.go(f"{login_site}/")
                    assert web.submit(page, login="alice").status_code == 200
                    times: dict[str, list[float]] = {"open": [], "login": []}
                    _round(web, f"{open_site}/", 200)  # warm both paths up
                    _round(web, f"{login_site}/", 200)
                    for _ in range(10):
                        times["open"] += _round(web, f"{open_site}/", args.requests // 10)
                        times["login"] += _round(web, f"{login_site}/", args.requests // 10)
            finally:
                a.stop()
        finally:
            srv.stop()
    store = "PostgreSQL" if args.database_url else "SQLite"
    p50 = {k: statistics.median(v) * 1000 for k, v in times.items()}
    rate = {k: len(v) / sum(v) for k, v in times.items()}
    print(f"{store}, {args.requests} sequential keep-alive requests each")
    for k in times:
        print(f"  {k:5} {rate[k]:8.0f} req/s  p50 {p50[k]:.3f} ms")
    print(f"  signed-in / open: {rate['login'] / rate['open']:.2f}x the rate, "
          f"+{p50['login'] - p50['open']:.3f} ms at the median")


if __name__ == "__main__":
    main()
