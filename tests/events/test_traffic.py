"""Traffic events from real traffic: HTTP requests through an HTTPS edge (edge, route and
backend ids, the traffic policy's log metadata) and through an agent's tunnel (the official
SDK), a TCP edge connection with its byte counts, the agent's session start and stop; a
source's fields and filter applied; a full queue drops events, counted on the destination and
in the log, while traffic goes on."""

from __future__ import annotations

import json
import os
import secrets
import socket
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.edge import upstream
from tests.edge.agents import EdgeClient, agent
from tests.events.capture import Capture
from tests.events.conftest import (
    delivery,
    made,
    subscribed,
    wait_for,
    wait_len,
)
from tests.events.test_changes import arrived, monitoring
from tests.server import Server, free_port
from tests.sshgw.client import SshUser

if not os.environ.get("CI"):
    pytest.importorskip("ngrok", reason="pip install --ignore-requires-python ngrok==1.7.0")

HTTP_FIELDS = ["conn.client_ip", "http.request.method", "http.request.url.path",
               "http.request.body_bytes", "http.response", "edge.id", "route.id", "backend.id",
               "tunnel.id", "traffic_policy.logs"]
POLICY = {"on_http_request": [{"expressions": ["req.url.path.startsWith('/hello')"],
                               "actions": [{"type": "log", "config": {
                                   "metadata": {"who": "${req.method}", "n": 7}}}]}]}


@pytest.fixture(scope="module")
def service() -> Iterator[int]:
    with upstream.running("svc") as port:
        yield port


def by_type(cap: Capture, tags: str, event_type: str) -> list[dict[str, Any]]:
    return [e["event"] for e in arrived(cap, tags) if e["event"]["event_type"] == event_type]


def test_http_and_tcp_edges(api: httpx.Client, esrv: Server, cap: Capture, service: int,
                            echo_port: int) -> None:
    tags, host = f"run:{secrets.token_hex(4)}", f"ev-{secrets.token_hex(4)}.example.com"
    port = free_port()
    made(api, "/reserved_domains", {"domain": host})
    edge = made(api, "/edges/https", {"hostports": [f"{host}:443"]})
    svc = made(api, "/backends/static", {"address": f"127.0.0.1:{service}"})
    route = made(api, f"/edges/https/{edge['id']}/routes", {
        "match_type": "path_prefix", "match": "/", "backend": {"backend_id": svc["id"]},
        "traffic_policy": {"value": json.dumps(POLICY)}})
    echo = made(api, "/backends/static", {"address": f"127.0.0.1:{echo_port}"})
    tcp = made(api, "/edges/tcp", {"hostports": [f"db.edgeway.localhost:{port}"],
                                   "backend": {"backend_id": echo["id"]}})
    sources: list[dict[str, Any]] = [
        {"type": "http_request_complete.v0", "fields": HTTP_FIELDS,
         "filter": 'http.request.url.path != "/skip"'},
        {"type": "tcp_connection_closed.v0"}]
    with subscribed(api, monitoring(tags), sources):
        wait_for("the subscription in the sink", lambda: _probe(esrv, host, cap, tags), 10)
        with EdgeClient(esrv) as web:
            assert web.get(f"https://{host}/skip").status_code == 200
            r = web.request("POST", f"https://{host}/hello/world", content=b"x" * 1000)
            assert r.status_code == 200 and r.text == "svc /hello/world"
        sock = tcp_connect(port)
        with sock:
            sock.sendall(b"ping" * 1000)
            got = b""
            while len(got) < 4000:
                got += sock.recv(65536)
        closed = wait_len("the TCP event", lambda: by_type(
            cap, tags, "tcp_connection_closed.v0"), 1)
    events = wait_for("the request's event", lambda: [e for e in by_type(
        cap, tags, "http_request_complete.v0") if e["object"]["http"]["request"]["url"]
        ["path"] != "/probe"] or None)
    assert [e["object"]["http"]["request"]["url"]["path"] for e in events] == [
        "/hello/world"]  # not /skip
    obj = events[0]["object"]
    assert obj == {
        "conn": {"client_ip": "127.0.0.1"},
        "http": {"request": {"method": "POST", "url": {"path": "/hello/world"},
                             "body_bytes": 1000},
                 "response": {"status_code": 200, "body_bytes": len(r.content)}},
        "edge": {"id": edge["id"]}, "route": {"id": route["id"]},
        "backend": {"id": svc["id"]}, "tunnel": {"id": None},
        "traffic_policy": {"logs": [{"policy": route["id"], "phase": "on_http_request",
                                     "metadata": {"who": "POST", "n": 7}}]}}
    conn = closed[0]["object"]["conn"]
    assert closed[0]["object"]["edge"] == {"id": tcp["id"]}
    assert conn["server_port"] == port and conn["client_ip"] == "127.0.0.1"
    assert conn["bytes_in"] == 4000 and conn["bytes_out"] == 4000
    assert conn["duration_ms"] >= 0 and conn["start_ts"].endswith("Z")


def test_every_member_when_no_field_is_chosen(api: httpx.Client, esrv: Server, cap: Capture,
                                              service: int) -> None:
    """The common case (one destination, every field, no filter) is encoded on a short path:
    the whole object, with what needs escaping in JSON (quotes, backslashes, latin-1 bytes)."""
    tags, host = f"run:{secrets.token_hex(4)}", f"ev-{secrets.token_hex(4)}.example.com"
    made(api, "/reserved_domains", {"domain": host})
    edge = made(api, "/edges/https", {"hostports": [f"{host}:443"]})
    svc = made(api, "/backends/static", {"address": f"127.0.0.1:{service}"})
    route = made(api, f"/edges/https/{edge['id']}/routes", {
        "match_type": "path_prefix", "match": "/", "backend": {"backend_id": svc["id"]}})
    agent_header = b'probe "q" \\ \xe9'
    with subscribed(api, monitoring(tags), [{"type": "http_request_complete.v0"}]):
        wait_for("the subscription in the sink", lambda: _probe(esrv, host, cap, tags), 10)
        with EdgeClient(esrv) as web:
            r = web.get(f"https://{host}/a%22b/c?x=1&y=%5C", headers={"User-Agent": agent_header})
            assert r.status_code == 200
        events = wait_for("the request's event", lambda: [e for e in by_type(
            cap, tags, "http_request_complete.v0") if e["object"]["http"]["request"]["url"]
            ["path"] != "/probe"] or None)
    obj = events[0]["object"]
    took, upstream = obj["http"].pop("duration_ms"), obj["http"].pop("upstream_ms")
    assert 0 <= upstream <= took < 10_000
    port = obj["conn"].pop("client_port")
    assert isinstance(port, int) and 0 < port < 65536
    assert obj == {
        "conn": {"client_ip": "127.0.0.1"},
        "http": {"request": {"method": "GET", "url": {
            "scheme": "https", "host": host, "path": "/a%22b/c", "query": "x=1&y=%5C"},
            "version": "HTTP/1.1", "user_agent": agent_header.decode("latin-1"),
            "body_bytes": 0},
            "response": {"status_code": 200, "body_bytes": len(r.content)}},
        "edge": {"id": edge["id"]}, "route": {"id": route["id"]},
        "backend": {"id": svc["id"]}, "tunnel": {"id": None}, "traffic_policy": {"logs": []}}
    assert events[0]["event_id"].startswith("ev_") and len(events[0]["event_id"]) == 30


def _probe(esrv: Server, host: str, cap: Capture, tags: str) -> bool:
    """A request whose event arrives once the sink routes the new subscription."""
    with EdgeClient(esrv) as web:
        web.get(f"https://{host}/probe")
    time.sleep(0.3)
    return bool(by_type(cap, tags, "http_request_complete.v0"))


def tcp_connect(port: int) -> socket.socket:
    deadline = time.monotonic() + 10
    while True:  # the TCP edge's listener comes up with the snapshot
        try:
            return socket.create_connection(("127.0.0.1", port), timeout=5)
        except ConnectionRefusedError:
            assert time.monotonic() < deadline
            time.sleep(0.05)


def test_agent_sessions_and_tunnel_requests(api: httpx.Client, esrv: Server, cap: Capture,
                                            service: int) -> None:
    tags = f"run:{secrets.token_hex(4)}"
    token = made(api, "/credentials", {})["token"]
    sources: list[dict[str, Any]] = [
        {"type": "agent_session_start.v0"}, {"type": "agent_session_stop.v0"},
               {"type": "http_request_complete.v0", "fields": ["tunnel.id", "http.response"]}]
    with subscribed(api, monitoring(tags), sources):
        sdk = agent(esrv, token, {"kind": "http", "forward": f"http://127.0.0.1:{service}"})
        try:
            with EdgeClient(esrv) as web:
                r = web.get(f"{sdk.urls[0]}/via-tunnel")
                assert r.status_code == 200
        finally:
            sdk.stop()
        started = wait_len("the session start", lambda: by_type(
            cap, tags, "agent_session_start.v0"), 1)
        stopped = wait_len("the session stop", lambda: by_type(
            cap, tags, "agent_session_stop.v0"), 1)
        http = wait_len("the request", lambda: by_type(
            cap, tags, "http_request_complete.v0"), 1)
    session = started[0]["object"]
    assert session["id"].startswith("ts_") and stopped[0]["object"]["id"] == session["id"]
    assert session["transport"] == "ngrok/v2" and session["credential"]["id"].startswith("cr_")
    assert started[0]["actor"] is None
    tunnel_id = sdk.listeners[0]["id"]
    assert http[0]["object"] == {"tunnel": {"id": tunnel_id}, "http": {"response": {
        "status_code": 200, "body_bytes": len(r.content)}}}


def test_a_full_queue_drops_and_counts_while_traffic_goes_on(
        api: httpx.Client, esrv: Server, cap: Capture, service: int) -> None:
    tags, host = f"run:{secrets.token_hex(4)}", f"ev-{secrets.token_hex(4)}.example.com"
    made(api, "/reserved_domains", {"domain": host})
    edge = made(api, "/edges/https", {"hostports": [f"{host}:443"]})
    svc = made(api, "/backends/static", {"address": f"127.0.0.1:{service}"})
    made(api, f"/edges/https/{edge['id']}/routes", {
        "match_type": "path_prefix", "match": "/", "backend": {"backend_id": svc["id"]}})
    with subscribed(api, monitoring(tags), [{"type": "http_request_complete.v0"}]) as dest:
        cap.down()
        try:
            with EdgeClient(esrv) as web:
                codes = [web.get(f"https://{host}/n{i}").status_code for i in range(150)]
            assert codes == [200] * 150
            state = wait_for("dropped events", lambda: d if (
                d := delivery(api, dest["id"]))["dropped"] > 0 else None, 15)
        finally:
            cap.up()
        assert '"event_traffic_dropped"' in esrv.log()
        # each event was dropped, delivered or (its attempts spent) made a dead letter
        state = wait_for("every event accounted for", lambda: d if sum(
            (d := delivery(api, dest["id"]))[k] for k in ("dropped", "delivered",
                                                          "dead_letters")) == 150 else None)
        assert state["delivered"] == len(arrived(cap, tags))
        # the queue holds 50 (--events-queue): what it kept in the meantime was delivered or,
        # while the target stayed down beyond the attempts, became dead letters
        assert state["dropped"] >= 150 - 3 * 50


def test_ssh_gateway_sessions_send_session_events(api: httpx.Client, esrv: Server,
                                                  cap: Capture, service: int,
                                                  tmp_path: Path) -> None:
    """A stock OpenSSH client's session through the gateway starts and stops like an agent's:
    its tunnel session (transport ssh, the SSH credential) in both events."""
    tags = f"run:{secrets.token_hex(4)}"
    user = SshUser(esrv, tmp_path / "ssh")
    key = user.credential(api)
    sources: list[dict[str, Any]] = [{"type": "agent_session_start.v0"},
                                     {"type": "agent_session_stop.v0"}]
    try:
        with subscribed(api, monitoring(tags), sources):
            run = user.start(f"0:127.0.0.1:{service}", command=["http"])
            run.urls()
            started = wait_len("the session start", lambda: by_type(
                cap, tags, "agent_session_start.v0"), 1)
            run.stop()
            stopped = wait_len("the session stop", lambda: by_type(
                cap, tags, "agent_session_stop.v0"), 1)
    finally:
        user.close()
    session = started[0]["object"]
    assert session["transport"] == "ssh" and session["credential"]["id"] == key["id"]
    assert stopped[0]["object"]["id"] == session["id"]
