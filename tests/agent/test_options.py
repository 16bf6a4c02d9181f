"""Every edge option of a config tunnel, enforced on traffic through a real server (on SQLite
and PostgreSQL): IP restrictions, header changes, the Host header (set by the agent),
compression, webhook verification, user agent filters, the WebSocket-TCP converter, OIDC,
schemes, metadata and circuit breakers; an OAuth login this server has no application for is
refused at bind, and the agent shows the server's reason."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import time
from pathlib import Path
from typing import Any

import websockets

from tests.agent.test_agent import run_agent, write_config
from tests.edge import upstream
from tests.edge.agents import EdgeClient, ca_context
from tests.server import Server, free_port

TUNNELS = """\
tunnels:
  deny:
    proto: http
    addr: {svc}
    ip_restriction: {{allow_cidrs: [0.0.0.0/0], deny_cidrs: [127.0.0.0/8]}}
  allow: {{proto: http, addr: {svc}, ip_restriction: {{allow_cidrs: [127.0.0.1/32]}}}}
  hdrs:
    proto: http
    addr: {svc}
    host_header: service.internal
    metadata: team-a
    request_header: {{add: ["X-Added: yes"], remove: [X-Drop]}}
    response_header: {{add: ["X-Resp: 1"], remove: [X-Upstream]}}
  gzip: {{proto: http, addr: {svc}, compression: true}}
  hook: {{proto: http, addr: {svc}, verify_webhook: {{provider: github, secret: s3cret}}}}
  ua: {{proto: http, addr: {svc}, user_agent_filter: {{deny: ["^curl/"]}}}}
  plain: {{proto: http, addr: {svc}, schemes: [http]}}
  ws: {{proto: http, addr: {echo}, websocket_tcp_converter: true}}
  login:
    proto: http
    addr: {svc}
    oidc: {{issuer_url: "http://127.0.0.1:{closed}", client_id: c, client_secret: s}}
  breaker: {{proto: http, addr: {closed}, circuit_breaker: 0.5}}
  oauth: {{proto: http, addr: {svc}, oauth: {{provider: google}}}}
"""


def wait_bound(a: Any, names: set[str]) -> dict[str, dict[str, Any]]:
    deadline = time.monotonic() + 60
    while True:
        tunnels = {t["name"]: t for t in a.api("GET", "/api/tunnels").json()["tunnels"]}
        if set(tunnels) == names and all(t["public_url"] or t["error"]
                                         for t in tunnels.values()):
            return tunnels
        assert time.monotonic() < deadline, tunnels
        time.sleep(0.05)


def test_every_option_is_enforced(server: Server, tmp_path: Path) -> None:
    with server.client() as api:
        token = api.post("/credentials", json={}).json()["token"]
    web = free_port()
    with upstream.running("svc") as svc, upstream.echo() as echo:
        cfg = write_config(tmp_path / "a.yml", server, token, web,
                           TUNNELS.format(svc=svc, echo=echo, closed=free_port()))
        a = run_agent("--all", "--config", str(cfg), web_port=web)
        try:
            t = wait_bound(a, {"deny", "allow", "hdrs", "gzip", "hook", "ua", "plain", "ws",
                               "login", "breaker", "oauth"})
            url = {name: one["public_url"] for name, one in t.items()}
            check_traffic(server, url)
            check_websocket(server, url["ws"])
            check_breaker(server, url["breaker"])
            assert not t["oauth"]["public_url"]
            assert "no managed OAuth application for google" in t["oauth"]["error"], t["oauth"]
            with server.client() as api:
                tunnels = api.get("/tunnels").json()["tunnels"]
            assert any(x["metadata"] == "team-a" for x in tunnels)
        finally:
            a.stop()


def check_traffic(server: Server, url: dict[str, str]) -> None:
    with EdgeClient(server) as client:
        assert client.get(url["deny"] + "/x").status_code == 403
        assert client.get(url["allow"] + "/x").text == "svc /x"
        r = client.get(url["hdrs"] + "/headers", headers={"X-Drop": "1"})
        seen = dict(r.json()["headers"])
        assert seen["host"] == "service.internal" and seen["x-added"] == "yes"
        assert "x-drop" not in seen
        assert r.headers["x-resp"] == "1" and "x-upstream" not in r.headers
        r = client.get(url["gzip"] + "/big-text", headers={"Accept-Encoding": "gzip"})
        assert r.headers.get("content-encoding") == "gzip" and r.text == "svc /big-text"
        body = b'{"zen": "ok"}'
        sig = "sha256=" + hmac.new(b"s3cret", body, hashlib.sha256).hexdigest()
        assert client.request("POST", url["hook"] + "/h", content=body).status_code == 403
        r = client.request("POST", url["hook"] + "/h", content=body,
                           headers={"X-Hub-Signature-256": sig})
        assert r.status_code == 200
        assert client.get(url["ua"] + "/u", headers={"User-Agent": "curl/8.0"}
                          ).status_code == 403
        assert client.get(url["ua"] + "/u", headers={"User-Agent": "Mozilla/5.0"}
                          ).status_code == 200
        assert url["plain"].startswith("http://")
        assert client.get(url["plain"] + "/p").text == "svc /p"
        r = client.get(url["login"] + "/secret")  # a login is required: the provider is down
        assert r.status_code in (302, 502) and "svc" not in r.text


def check_breaker(server: Server, url: str) -> None:
    """The local service is down: the agent's failures trip the breaker (at least half of
    20 requests failed), then the edge answers 503 itself."""
    with EdgeClient(server) as client:
        statuses = [client.get(url + f"/{i}").status_code for i in range(25)]
        assert statuses[0] == 502 and statuses[-1] == 503, statuses
        r = client.get(url + "/again")
        assert r.status_code == 503 and r.headers["edgeway-error-code"] == "ERR_EDGEWAY_4011"


def check_websocket(server: Server, url: str) -> None:
    host = url.split("//", 1)[1].split(":", 1)[0]

    async def talk() -> bytes:
        async with websockets.connect(f"wss://{host}/raw", host="127.0.0.1",
                                      port=server.https_port, ssl=ca_context(server),
                                      server_hostname=host) as ws:
            await ws.send(b"ping")
            got = await ws.recv()
            return got if isinstance(got, bytes) else got.encode()

    assert asyncio.run(talk()) == b"ping"  # through the local TCP echo service
