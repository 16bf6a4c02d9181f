"""HTTP and HTTPS tunnels bound by the official SDK, reached through the public listeners:
forwarding fidelity (headers, keep-alive, pipelining, chunked, big bodies, SSE, WebSocket),
502 on agent loss, 404s, redirects, basic auth, and 200 concurrent requests."""

from __future__ import annotations

import asyncio
import hashlib
import time
from urllib.parse import urlsplit

import pytest
import websockets

from tests.edge import upstream
from tests.edge.agents import (
    EdgeClient,
    agent,
    ca_context,
    parse_responses,
    raw_connection,
    read_all,
)
from tests.edge.upstream import pseudo_random
from tests.server import Server


def test_https_and_http_tunnels_forward_with_forwarded_headers(
        srv: Server, service: int, token: str) -> None:
    a = agent(srv, token, {"kind": "https", "forward": f"http://127.0.0.1:{service}"},
              {"kind": "http", "forward": f"http://127.0.0.1:{service}"})
    try:
        https_url, http_url = a.urls
        assert https_url.startswith("https://") and https_url.endswith(
            f".edgeway.localhost:{srv.https_port}")
        assert http_url.startswith("http://") and http_url.endswith(f":{srv.http_port}")
        with EdgeClient(srv) as web:
            for url, proto in ((https_url, "https"), (http_url, "http")):
                r = web.get(url + "/headers?q=1", headers={"X-Forwarded-For": "203.0.113.9"})
                assert r.status_code == 200, r.text
                seen = dict(r.json()["headers"])
                assert seen["x-forwarded-for"] == "203.0.113.9, 127.0.0.1"
                assert seen["x-forwarded-proto"] == proto
                assert seen["x-forwarded-host"] == urlsplit(url).netloc
                assert r.headers["x-upstream"] == "yes"
            # an https-only tunnel asked over plain HTTP is redirected
            plain = f"http://{urlsplit(https_url).hostname}:{srv.http_port}/x?y=1"
            r = web.get(plain)
            assert r.status_code == 308
            assert r.headers["location"] == https_url + "/x?y=1"
        with srv.client() as api:
            tunnels = {t["public_url"]: t for t in api.get("/tunnels").json()["tunnels"]}
            assert {https_url, http_url} <= set(tunnels)
            endpoints = {e["url"]: e for e in api.get("/endpoints").json()["endpoints"]}
            ep = endpoints[https_url]
            assert (ep["proto"], ep["type"], ep["host"], ep["port"]) == (
                "https", "ephemeral", urlsplit(https_url).hostname, srv.https_port)
            assert ep["tunnel"]["id"] == tunnels[https_url]["id"]
            assert tunnels[https_url]["endpoint"]["id"] == ep["id"]
    finally:
        a.stop()
    with srv.client() as api:
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(
                e["url"] == https_url for e in api.get("/endpoints").json()["endpoints"]):
            time.sleep(0.1)
        assert all(e["url"] != https_url for e in api.get("/endpoints").json()["endpoints"])
    with EdgeClient(srv) as web:
        r = web.get(https_url + "/")
        assert r.status_code == 404 and r.headers["edgeway-error-code"] == "ERR_EDGEWAY_4004"


def test_keep_alive_pipelining_and_chunked_bodies(srv: Server, service: int,
                                                   token: str) -> None:
    a = agent(srv, token, {"kind": "https", "forward": f"http://127.0.0.1:{service}"})
    try:
        (url,) = a.urls
        host = urlsplit(url).netloc
        with raw_connection(srv, url) as s:
            s.sendall((f"GET /one HTTP/1.1\r\nHost: {host}\r\n\r\n"
                       f"POST /echo HTTP/1.1\r\nHost: {host}\r\nTransfer-Encoding: chunked\r\n"
                       f"\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n"
                       f"GET /three HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
                       ).encode())
            data = read_all(s)
        # three answers, in order, on one connection
        assert data.count(b"HTTP/1.1 200 OK") == 3, data
        assert parse_responses(data, 3) == [(200, b"svc /one"), (200, b"hello world"),
                                            (200, b"svc /three")]
        assert b"transfer-encoding: chunked" in data.lower()
    finally:
        a.stop()


def test_large_bodies_stream_both_ways(srv: Server, service: int, token: str) -> None:
    a = agent(srv, token, {"kind": "https", "forward": f"http://127.0.0.1:{service}"})
    try:
        (url,) = a.urls
        with EdgeClient(srv, timeout=120) as web:
            size = 48 << 20
            r = web.get(f"{url}/bytes/{size}")
            assert r.status_code == 200 and len(r.content) == size
            assert hashlib.sha256(r.content).hexdigest() == r.headers["x-sha256"]
            upload = pseudo_random(20 << 20)

            def chunks() -> object:
                for i in range(0, len(upload), 1 << 20):
                    yield upload[i:i + (1 << 20)]
            # (a client that only reads once it has sent everything cannot get an echo of
            # this size back through any proxy: the service consumes it and answers its hash)
            r = web.request("POST", f"{url}/headers", content=chunks())
            assert r.status_code == 200
            assert (r.json()["body"], r.json()["sha256"]) == (
                len(upload), hashlib.sha256(upload).hexdigest())
            assert ["transfer-encoding", "chunked"] in r.json()["headers"]
    finally:
        a.stop()


def test_server_sent_events_arrive_as_written(srv: Server, service: int, token: str) -> None:
    a = agent(srv, token, {"kind": "https", "forward": f"http://127.0.0.1:{service}"})
    try:
        (url,) = a.urls
        with EdgeClient(srv) as web:
            parts = urlsplit(url)
            # each event arrives when written: the service writes the next only once the
            # one before came through (one held back makes it write "data: late")
            with upstream.gated() as (query, saw), web.http.stream(
                    "GET", f"https://127.0.0.1:{srv.https_port}/sse?{query}",
                    headers={"Host": parts.netloc},
                    extensions={"sni_hostname": parts.hostname}) as r:
                assert r.headers["content-type"] == "text/event-stream"
                got = upstream.events(r.iter_lines(), saw)
        assert got == ["data: 0", "data: 1", "data: 2"]
    finally:
        a.stop()


def test_websocket_upgrade(srv: Server, service: int, token: str) -> None:
    a = agent(srv, token, {"kind": "https", "forward": f"http://127.0.0.1:{service}"})
    try:
        (url,) = a.urls
        parts = urlsplit(url)

        async def talk() -> tuple[list[str], float]:
            async with websockets.connect(
                    f"wss://{parts.netloc}/ws", host="127.0.0.1", port=srv.https_port,
                    ssl=ca_context(srv), server_hostname=parts.hostname,
                    close_timeout=30) as ws:
                got = []
                for text in ("ping", "x" * 200_000):
                    await ws.send(text)
                    got.append(str(await ws.recv()))
                t0 = time.monotonic()
            return got, time.monotonic() - t0

        got, closing = asyncio.run(talk())
        assert got == ["svc:ping", "svc:" + "x" * 200_000]
        # After the closing handshake the client waits for the server to end the connection
        # (TLS has no half-close: the edge ends it when the agent's side ends), not for its
        # own close timeout.
        assert closing < 15, closing
    finally:
        a.stop()


def test_agent_loss_gives_502_to_the_pending_request_only(
        srv: Server, service: int, token: str) -> None:
    doomed = agent(srv, token, {"kind": "https", "forward": f"http://127.0.0.1:{service}"})
    other = agent(srv, token, {"kind": "https", "forward": f"http://127.0.0.1:{service}"})
    try:
        (url,) = doomed.urls
        (other_url,) = other.urls
        with raw_connection(srv, url) as s:
            s.sendall(f"GET /hang HTTP/1.1\r\nHost: {urlsplit(url).netloc}\r\n\r\n".encode())
            time.sleep(0.5)
            doomed.kill()
            data = read_all(s)
        assert data.startswith(b"HTTP/1.1 502 Bad Gateway"), data
        assert b"ERR_EDGEWAY_4502" in data
        with EdgeClient(srv) as web:
            assert web.get(other_url + "/still").text == "svc /still"
    finally:
        other.stop()


def test_two_hundred_concurrent_requests(srv: Server, service: int, token: str) -> None:
    a = agent(srv, token, {"kind": "https", "forward": f"http://127.0.0.1:{service}"})
    try:
        (url,) = a.urls
        parts = urlsplit(url)

        async def one(i: int) -> str:
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", srv.https_port, ssl=ca_context(srv),
                server_hostname=parts.hostname)
            writer.write(f"GET /n{i} HTTP/1.1\r\nHost: {parts.netloc}\r\n"
                         "Connection: close\r\n\r\n".encode())
            data = await reader.read()
            writer.close()
            ((status, body),) = parse_responses(data)
            assert status == 200
            return body.decode()

        async def all_of_them() -> list[str]:
            return await asyncio.gather(*(one(i) for i in range(200)))
        assert asyncio.run(all_of_them()) == [f"svc /n{i}" for i in range(200)]
    finally:
        a.stop()


def test_compression_on_the_bind(srv: Server, service: int, token: str) -> None:
    a = agent(srv, token, {"kind": "https", "forward": f"http://127.0.0.1:{service}",
                           "compression": True})
    try:
        (url,) = a.urls
        with EdgeClient(srv) as web:
            r = web.get(url + "/headers", headers={"Accept-Encoding": "gzip"})
            assert r.headers["content-encoding"] == "gzip" and r.json()["path"] == "/headers"
            size = 1 << 20  # random bytes are not text: left alone
            r = web.get(f"{url}/bytes/{size}", headers={"Accept-Encoding": "gzip"})
            assert "content-encoding" not in r.headers and len(r.content) == size
    finally:
        a.stop()


def test_basic_auth_on_the_bind(srv: Server, service: int, token: str) -> None:
    a = agent(srv, token, {"kind": "https", "forward": f"http://127.0.0.1:{service}",
                           "basic_auth": ["alice", "correct horse"]})
    try:
        (url,) = a.urls
        with EdgeClient(srv) as web:
            r = web.get(url + "/secret")
            assert r.status_code == 401 and "basic" in r.headers["www-authenticate"].lower()
            assert web.get(url + "/secret", auth=("alice", "wrong password")).status_code == 401
            r = web.get(url + "/secret", auth=("alice", "correct horse"))
            assert r.status_code == 200 and r.text == "svc /secret"
    finally:
        a.stop()


def test_unknown_names_and_bad_requests_get_clear_answers(srv: Server) -> None:
    with EdgeClient(srv) as web:
        r = web.get("https://nothing.edgeway.localhost/")
        assert r.status_code == 404 and "No tunnel is bound to nothing.edgeway.localhost" \
            in r.text
        r = web.get(f"http://127.0.0.1:{srv.http_port}/")
        assert r.status_code == 404
    with raw_connection(srv, "http://x.example") as s:
        s.sendall(b"GARBAGE\r\n\r\n")
        assert read_all(s).startswith(b"HTTP/1.1 400 ")


@pytest.mark.parametrize("labels", [{"edge": "x"}])
def test_labeled_tunnels_are_listed_with_their_groups(srv: Server, service: int, token: str,
                                                      labels: dict[str, str]) -> None:
    with srv.client() as api:
        group = api.post("/backends/tunnel_group", json={"labels": labels}).json()
        a = agent(srv, token, {"kind": "labeled", "labels": labels,
                               "forward": f"http://127.0.0.1:{service}"})
        try:
            (listener,) = a.listeners
            assert listener["id"].startswith("tn_"), listener
            shown = api.get(f"/backends/tunnel_group/{group['id']}").json()
            assert [t["id"] for t in shown["tunnels"]] == [listener["id"]]
            tn = api.get(f"/tunnels/{listener['id']}").json()
            assert tn["labels"] == labels
            assert [b["id"] for b in tn["backends"]] == [group["id"]]
        finally:
            a.stop()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and api.get(
                f"/backends/tunnel_group/{group['id']}").json()["tunnels"]:
            time.sleep(0.1)
        assert api.get(f"/backends/tunnel_group/{group['id']}").json()["tunnels"] == []
        api.delete(f"/backends/tunnel_group/{group['id']}")
