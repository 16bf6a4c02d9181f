"""The agent's local API against hostile callers, over real sockets to a running agent: web
pages of other sites (a text/plain or foreign-Origin request is refused and changes nothing;
a Host that is not the API's own address, as DNS rebinding sends, is refused), and tunnels
that would publish the API itself with no login (refused by ``config check``, ``start``, the
one-liners and ``POST /api/tunnels`` unless guarded or ``allow_unauthenticated``)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.agent.test_agent import Agent, run_agent, write_config
from tests.agent.test_inspect import captures, counting_upstream
from tests.edge.agents import EdgeClient
from tests.server import Server, free_block, free_port, trust

OPTION = "allow_unauthenticated: true"


@pytest.fixture
def token(srv: Server) -> str:
    with srv.client() as api:
        value: str = api.post("/credentials", json={}).json()["token"]
    return value


def raw(port: int, request: str) -> tuple[int, dict[str, object]]:
    """Send ``request`` as written on a new connection; the status and the JSON body."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(request.encode("latin-1"))
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), json.loads(body) if body else {}


def call(a: Agent, method: str, path: str, **kw: Any) -> httpx.Response:
    return httpx.request(method, a.web + path, timeout=30, **kw, verify=trust())


def names(a: Agent) -> set[str]:
    return {t["name"] for t in a.api("GET", "/api/tunnels").json()["tunnels"]}


def test_cross_site_requests_and_rebinding_hosts_are_refused(srv: Server, token: str,
                                                             tmp_path: Path) -> None:
    web = free_port()
    with counting_upstream() as (svc, seen):
        cfg = write_config(tmp_path / "a.yml", srv, token, web,
                           f"tunnels:\n  web:\n    proto: http\n    addr: {svc}\n")
        a = run_agent("web", "--config", str(cfg), web_port=web)
        try:
            body = json.dumps({"name": "evil", "proto": "tcp", "addr": "22"})
            # a page's simple requests: text/plain, a form, no type at all
            for kind in ("text/plain", "application/x-www-form-urlencoded", ""):
                status, out = raw(web, f"POST /api/tunnels HTTP/1.1\r\nHost: 127.0.0.1:{web}"
                                       f"\r\nOrigin: http://evil.example\r\n"
                                       + (f"Content-Type: {kind}\r\n" if kind else "")
                                       + f"Content-Length: {len(body)}\r\nConnection: close"
                                         f"\r\n\r\n{body}")
                assert status == 403, out  # (the Origin is checked first)
                r = call(a, "POST", "/api/tunnels", content=body,
                          headers={"Content-Type": kind} if kind else {})
                assert r.status_code == 415, r.text
                assert r.json()["status_code"] == 415 and "application/json" in \
                    r.json()["details"]["err"]
            # JSON from a foreign origin (a preflighted fetch, or a non-browser lying): refused
            for origin in ("http://evil.example", "null", f"http://127.0.0.1:{web + 1}",
                           f"https://127.0.0.1:{web}"):
                r = call(a, "POST", "/api/tunnels", content=body, headers={
                    "Content-Type": "application/json", "Origin": origin})
                assert r.status_code == 403 and r.json()["error_code"] == 105, (origin, r.text)
                r = call(a, "GET", "/api/tunnels", headers={"Origin": origin})
                assert r.status_code == 403, r.text  # reads too
            assert call(a, "GET", "/inspect/http",
                         headers={"Origin": "http://evil.example"}).status_code == 403
            assert names(a) == {"web"}  # nothing was created
            # a captured request is not replayed for a cross-site page
            url = a.api("GET", "/api/tunnels/web").json()["public_url"]
            with EdgeClient(srv) as client:
                assert client.get(url + "/count/x").text == "GET /count/x #1 "
            captured = captures(a, count=1)[0]["id"]
            replay = json.dumps({"id": captured})
            r = call(a, "POST", "/api/requests/http", content=replay,
                      headers={"Content-Type": "text/plain"})
            assert r.status_code == 415, r.text
            r = call(a, "POST", "/api/requests/http", json={"id": captured},
                      headers={"Origin": "http://evil.example"})
            assert r.status_code == 403, r.text
            assert seen == {"/count/x": 1}
            # the API's own origin, in each of its spellings, works
            for i, origin in enumerate((f"http://127.0.0.1:{web}", f"http://localhost:{web}",
                                        f"http://[::1]:{web}")):
                r = call(a, "POST", "/api/tunnels", json={
                    "name": f"own{i}", "proto": "http", "addr": str(svc)},
                    headers={"Origin": origin})
                assert r.status_code == 201, (origin, r.text)
            assert names(a) == {"web", "own0", "own1", "own2"}
            r = call(a, "POST", "/api/requests/http", json={"id": captured},
                      headers={"Origin": f"http://127.0.0.1:{web}"})
            assert r.status_code == 204, r.text
            deadline = time.monotonic() + 30
            while seen.get("/count/x") != 2:
                assert time.monotonic() < deadline, seen
                time.sleep(0.05)
            # DNS rebinding: the attacker's name (or another port) as Host
            for host in (f"rebind.attacker.example:{web}", f"127.0.0.1:{web + 1}",
                         "localhost", f"127.0.0.1.attacker.example:{web}"):
                status, out = raw(web, f"GET /api/tunnels HTTP/1.1\r\nHost: {host}\r\n"
                                       "Connection: close\r\n\r\n")
                assert status == 403 and out["error_code"] == 101, (host, out)
            status, out = raw(web, f"GET /api/tunnels HTTP/1.1\r\nHost: 127.0.0.1:{web}\r\n"
                                   f"Host: evil.example:{web}\r\nConnection: close\r\n\r\n")
            assert status == 400, out
            for host in (f"127.0.0.1:{web}", f"localhost:{web}", f"[::1]:{web}"):
                status, out = raw(web, f"GET /api/tunnels HTTP/1.1\r\nHost: {host}\r\n"
                                       "Connection: close\r\n\r\n")
                assert status == 200 and "tunnels" in out, (host, out)
        finally:
            a.stop()


def check(cfg: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "edgeway", *args, "--config", str(cfg)],
                          capture_output=True, text=True, timeout=60)


def test_a_tunnel_to_the_agents_own_api_needs_a_login(srv: Server, token: str,
                                                      tmp_path: Path) -> None:
    web = free_port()
    bare = write_config(tmp_path / "bare.yml", srv, token, web,
                        f"tunnels:\n  api:\n    proto: http\n    addr: {web}\n")
    for args in (("agent", "config", "check"), ("agent", "start", "api"), ("start", "--none")):
        done = check(bare, *args)
        assert done.returncode == 2, (args, done.stderr)
        assert "tunnels.api: forwards to this agent's own API" in done.stderr and \
            OPTION in done.stderr, (args, done.stderr)
    for proto in ("tcp", "tls"):
        other = write_config(tmp_path / f"{proto}.yml", srv, token, web,
                             f"tunnels:\n  raw:\n    proto: {proto}\n    addr: localhost:{web}\n")
        done = check(other, "agent", "config", "check")
        assert done.returncode == 2 and OPTION in done.stderr, done.stderr
    done = subprocess.run([sys.executable, "-m", "edgeway", "http", str(web), "--web-addr",
                           f"127.0.0.1:{web}", "--authtoken", token], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 2 and "--allow-unauthenticated" in done.stderr, done.stderr
    guarded = write_config(tmp_path / "auth.yml", srv, token, web, (
        f"tunnels:\n  api:\n    proto: http\n    addr: {web}\n"
        "    basic_auth: ['site:a-long-password']\n"
        f"  open:\n    proto: http\n    addr: {web}\n    {OPTION}\n"))
    assert check(guarded, "agent", "config", "check").returncode == 0
    a = run_agent("--all", "--config", str(guarded), web_port=web)
    try:
        tunnels = {t["name"]: t for t in a.api("GET", "/api/tunnels").json()["tunnels"]}
        assert set(tunnels) == {"api", "open"} and all(
            t["public_url"] and not t["error"] for t in tunnels.values()), tunnels
        with EdgeClient(srv) as client:
            assert client.get(tunnels["api"]["public_url"] + "/api/status").status_code == 401
            r = client.get(tunnels["api"]["public_url"] + "/api/status",
                           auth=("site", "a-long-password"))
            assert r.status_code == 200 and r.json()["status"] == "online", r.text
            assert client.get(tunnels["open"]["public_url"] + "/api/status").status_code == 200
        # the local API refuses such a tunnel the same way
        r = a.api("POST", "/api/tunnels", json={"name": "more", "proto": "http",
                                                "addr": f"127.0.0.1:{web}"})
        assert r.status_code == 400 and OPTION in r.json()["details"]["err"], r.text
        r = a.api("POST", "/api/tunnels", json={"name": "more", "proto": "http",
                                                "addr": str(web), "ip_restriction": {
                                                    "allow_cidrs": ["127.0.0.0/8"]}})
        assert r.status_code == 201, r.text
    finally:
        a.stop()


def test_the_api_through_its_tunnel_takes_its_own_origin(srv: Server, token: str,
                                                         tmp_path: Path) -> None:
    """The inspector reached through a tunnel (the site-to-site flow) writes with its own
    origin, the tunnel's; another origin is refused there too."""
    web = free_port()
    cfg = write_config(tmp_path / "a.yml", srv, token, web, (
        f"tunnels:\n  api:\n    proto: http\n    addr: {web}\n"
        "    basic_auth: ['site:a-long-password']\n"))
    a = run_agent("api", "--config", str(cfg), web_port=web)
    try:
        public = a.api("GET", "/api/tunnels/api").json()["public_url"]
        with EdgeClient(srv) as client:
            for origin, status in ((public, 201), ("https://evil.example", 403)):
                r = client.request("POST", public + "/api/tunnels",
                                   auth=("site", "a-long-password"), headers={"Origin": origin},
                                   json={"name": f"t{status}", "proto": "tcp", "addr": "22"})
                assert r.status_code == status, (origin, r.text)
    finally:
        a.stop()


def test_which_tunnels_count_as_guarding_the_api(tmp_path: Path) -> None:
    """Loaded configs (no agent needed): a traffic policy guards only with a rule that runs for
    every request; the API's address in its spellings; other ports are not the API."""
    from edgeway.agent.config import ConfigError, load

    def loads(tunnel: str, web: str = "127.0.0.1:4040") -> str:
        path = tmp_path / "a.yml"
        path.write_text(f"version: 2\nweb_addr: {web}\ntunnels:\n  api:\n" + "".join(
            f"    {line}\n" for line in tunnel.splitlines()))
        try:
            load([str(path)])
        except ConfigError as exc:
            return str(exc)
        return ""

    policy = ("traffic_policy:\n  on_http_request:\n    - actions: [{type: %s, config: %s}]"
              "%s")
    basic = "{credentials: ['a:a-long-password']}"
    assert loads("proto: http\naddr: 4040\n" + policy % ("basic-auth", basic, "")) == ""
    assert loads("proto: http\naddr: 4040\n" + policy % (
        "restrict-ips", "{allow: [10.0.0.0/8]}", "")) == ""
    conditional = policy % ("basic-auth", basic,
                            "\n      expressions: [\"req.url.path == '/x'\"]")
    assert OPTION in loads("proto: http\naddr: 4040\n" + conditional)
    assert OPTION in loads("proto: http\naddr: 4040\n" + policy % (
        "add-headers", "{headers: {a: b}}", ""))
    for addr in ("4040", "localhost:4040", "127.0.0.1:4040", "0.0.0.0:4040", "[::1]:4040",
                 "http://localhost:4040"):
        assert "tunnels.api: forwards to this agent's own API" in loads(
            f"proto: http\naddr: '{addr}'"), addr
    assert "a labeled tunnel" in loads("labels: [edge=api]\naddr: 4040")
    assert loads("labels: [edge=api]\naddr: 4040\nallow_unauthenticated: true") == ""
    assert loads("proto: http\naddr: 4041") == ""
    assert loads("proto: http\naddr: 4040", web="127.0.0.1:5050") == ""
    assert loads("proto: http\naddr: 4040\nverify_webhook: {provider: github, secret: s}"
                 ).count(OPTION) == 1
    assert "allow_unauthenticated: must be true or false" in loads(
        "proto: http\naddr: 4040\nallow_unauthenticated: 'yes'")


def test_the_check_follows_the_api_when_its_port_was_taken(tmp_path: Path) -> None:
    """web_addr's port in use: the API listens on the next one, and a config tunnel to that
    one is refused as a tunnel to web_addr would be (exit 2, before any session)."""
    taken, moved = free_block(2)
    cfg = tmp_path / "a.yml"
    cfg.write_text(f"version: 2\nauthtoken: abcdefghijk\nserver_addr: 127.0.0.1:9\n"
                   f"web_addr: 127.0.0.1:{taken}\ntunnels:\n  api:\n    proto: http\n"
                   f"    addr: {moved}\n")
    with socket.create_server(("127.0.0.1", taken)):
        done = check(cfg, "start", "api", "--log", "stderr")
    assert done.returncode == 2, done.stderr
    assert f"tunnels.api: forwards to this agent's own API and web inspector (web_addr " \
           f"127.0.0.1:{moved})" in done.stderr and OPTION in done.stderr, done.stderr
