"""The Edgeway agent as a user runs it (``edgeway agent start`` in a subprocess) against a
real server: config tunnels, the local API, errors, the Host allow-list, reconnects after a
server restart, the official SDK next to it, and the spec's site-to-site flow end to end."""

from __future__ import annotations

import os
import re
import select
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import httpx
import pytest

from tests.edge import upstream
from tests.edge.agents import EdgeClient, agent
from tests.server import Server, free_port, start, trust

if not os.environ.get("CI"):
    pytest.importorskip("ngrok", reason="pip install --ignore-requires-python ngrok==1.7.0")


@dataclass
class Agent:
    proc: subprocess.Popen[str]
    web: str

    def api(self, method: str, path: str, host: str | None = None, **kw: Any
            ) -> httpx.Response:
        headers = {"Host": host} if host else {}
        return httpx.request(method, self.web + path, headers=headers, timeout=30,
                             verify=trust(), **kw)

    def stop(self) -> str:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        assert self.proc.stderr is not None
        out = self.proc.stderr.read()
        self.proc.stderr.close()
        return out


def _read_lines(stream: IO[str], out: list[str]) -> None:
    """Append each line of ``stream`` to ``out`` until it ends (a reader thread)."""
    for line in stream:
        out.append(line)


def write_config(path: Path, srv: Server, token: str, web_port: int, tunnels: str,
                 server_addr: str = "", heartbeat: str = "1s") -> Path:
    path.write_text(f"version: 2\nauthtoken: {token}\n"
                    f"server_addr: {server_addr or f'localhost:{srv.tunnel_port}'}\n"
                    f"root_cas: {srv.data_dir / 'ca.pem'}\nweb_addr: 127.0.0.1:{web_port}\n"
                    f"heartbeat_interval: {heartbeat}\nheartbeat_tolerance: 2s\n" + tunnels)
    return path


def run_agent(*args: str, web_port: int, online: bool = True, log: str | None = "stderr"
              ) -> Agent:
    flags = ["--log", log] if log else []
    proc = subprocess.Popen([sys.executable, "-m", "edgeway", "agent", "start", *flags,
                             *args], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            text=True)
    a = Agent(proc, f"http://127.0.0.1:{web_port}")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            status = a.api("GET", "/api/status").json()["status"]
            if status == "online" or not online:
                return a
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            raise AssertionError(f"the agent exited: {a.stop()}")
        time.sleep(0.1)
    raise AssertionError(f"the agent did not come online: {a.stop()}")


@pytest.fixture
def token(srv: Server) -> str:
    with srv.client() as api:
        value: str = api.post("/credentials", json={}).json()["token"]
    return value


def test_config_tunnels_and_the_local_api(srv: Server, token: str, tmp_path: Path) -> None:
    web = free_port()
    with upstream.running("svc") as svc:
        cfg = write_config(tmp_path / "a.yml", srv, token, web,
                           f"tunnels:\n  web:\n    proto: http\n    addr: {svc}\n"
                           f"  spare:\n    proto: tcp\n    addr: {svc}\n")
        a = run_agent("web", "--config", str(cfg), web_port=web)
        try:
            listed = a.api("GET", "/api/tunnels").json()
            assert [t["name"] for t in listed["tunnels"]] == ["web"]  # only the named one
            web_url = listed["tunnels"][0]["public_url"]
            assert listed["tunnels"][0]["config"]["addr"] == f"http://127.0.0.1:{svc}"
            with EdgeClient(srv) as client:
                assert client.get(web_url + "/via-config").text == "svc /via-config"
                r = a.api("POST", "/api/tunnels", json={"name": "db", "proto": "tcp",
                                                         "addr": str(svc)})
                assert r.status_code == 201 and r.json()["public_url"].startswith("tcp://")
                assert a.api("GET", "/api/tunnels/db").json()["name"] == "db"
                r = a.api("POST", "/api/tunnels", json={"name": "x", "proto": "ftp",
                                                         "addr": "1"})
                assert r.status_code == 400 and "proto" in r.json()["details"]["err"]
                r = a.api("POST", "/api/tunnels", json={
                    "name": "nope", "proto": "http", "addr": str(svc),
                    "domain": "not-reserved.example.com"})
                assert (r.status_code, r.json()["error_code"]) == (502, 103)
                assert "is not reserved" in r.json()["details"]["err"]
                for name, host_header, seen in (
                        ("hh", "rewrite", f"127.0.0.1:{svc}"),
                        ("hc", "api.internal:8443", "api.internal:8443")):
                    r = a.api("POST", "/api/tunnels", json={
                        "name": name, "proto": "http", "addr": f"127.0.0.1:{svc}",
                        "host_header": host_header})
                    assert r.status_code == 201, r.text
                    answer = client.get(r.json()["public_url"] + "/headers").json()
                    assert [v for k, v in answer["headers"] if k == "host"] == [seen], answer
                r = a.api("POST", "/api/tunnels", json={"name": "hb", "proto": "http",
                                                         "addr": str(svc),
                                                         "host_header": "bad host"})
                assert r.status_code == 400 and "host_header" in r.json()["details"]["err"]
                assert a.api("GET", "/api/tunnels/missing").status_code == 404
                assert a.api("DELETE", "/api/tunnels/db").status_code == 204
                assert a.api("GET", "/api/tunnels/db").status_code == 404
                r = a.api("GET", "/api/tunnels", host="evil.example.com")
                assert r.status_code == 403
                # the counter moves with traffic
                counted = a.api("GET", "/api/tunnels/web").json()["metrics"]["conns"]["count"]
                assert counted >= 1
        finally:
            a.stop()


def test_before_the_session_is_up_the_api_answers_503(tmp_path: Path, srv: Server,
                                                      token: str) -> None:
    web = free_port()
    cfg = write_config(tmp_path / "a.yml", srv, token, web, "",
                       server_addr=f"localhost:{free_port()}")  # nothing listens there
    a = run_agent("--none", "--config", str(cfg), web_port=web, online=False)
    try:
        r = a.api("POST", "/api/tunnels", json={"name": "t", "proto": "tcp", "addr": "22"})
        assert r.status_code == 503 and r.json()["status_code"] == 503
        assert a.api("GET", "/api/status").json()["status"] != "online"
    finally:
        a.stop()


def test_config_tunnels_come_back_after_a_server_restart(srv: Server, token: str,
                                                         tmp_path: Path) -> None:
    web = free_port()
    with upstream.running("svc") as svc:
        cfg = write_config(tmp_path / "a.yml", srv, token, web,
                           f"tunnels:\n  web:\n    proto: http\n    addr: {svc}\n")
        a = run_agent("--all", "--config", str(cfg), web_port=web)
        try:
            assert a.api("POST", "/api/tunnels", json={
                "name": "adhoc", "proto": "tcp", "addr": str(svc)}).status_code == 201
            url = a.api("GET", "/api/tunnels/web").json()["public_url"]
            ports = (int(srv.base_url.rsplit(":", 1)[1]), srv.tunnel_port, srv.http_port,
                     srv.https_port)
            assert srv.stop() == 0  # a plain restart: the agent redials with back-off
            second = start(srv.data_dir, None, "--reuse-port", token=srv.token, ports=ports)
            try:
                deadline = time.monotonic() + 30
                while time.monotonic() < deadline:  # until it noticed, redialed and re-bound
                    online = a.api("GET", "/api/status").json()["status"] == "online"
                    names = {t["name"] for t in a.api("GET", "/api/tunnels").json()["tunnels"]}
                    if online and names == {"web"}:
                        break
                    time.sleep(0.2)
                assert names == {"web"}  # started through the API: gone, as the spec says
                assert a.api("GET", "/api/tunnels/web").json()["public_url"] == url
                with EdgeClient(second) as client:
                    assert client.get(url + "/again").text == "svc /again"
            finally:
                assert second.stop() == 0
        finally:
            a.stop()


def test_our_agent_and_the_sdk_on_one_server(srv: Server, token: str, tmp_path: Path) -> None:
    web = free_port()
    with upstream.running("ours") as ours, upstream.running("sdk") as theirs:
        cfg = write_config(tmp_path / "a.yml", srv, token, web,
                           f"tunnels:\n  web:\n    proto: http\n    addr: {ours}\n")
        a = run_agent("web", "--config", str(cfg), web_port=web)
        b = agent(srv, token, {"kind": "https", "forward": f"http://127.0.0.1:{theirs}"})
        try:
            url = a.api("GET", "/api/tunnels/web").json()["public_url"]
            with EdgeClient(srv) as client:
                assert client.get(url + "/a").text == "ours /a"
                assert client.get(b.urls[0] + "/b").text == "sdk /b"
        finally:
            a.stop()
            b.stop()


def test_a_refused_authtoken_ends_the_agent_clearly(srv: Server, tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "a.yml", srv, "not-a-real-token", free_port(), "")
    r = subprocess.run([sys.executable, "-m", "edgeway", "agent", "start", "--none", "--log",
                        "stderr", "--config", str(cfg)], capture_output=True, text=True, timeout=30)
    assert r.returncode == 1
    assert "authtoken is not valid" in r.stderr and "Traceback" not in r.stderr


def test_config_check_prints_the_merged_config(srv: Server, tmp_path: Path) -> None:
    base = write_config(tmp_path / "a.yml", srv, "abcdefghijklmnop", 4040, "")
    extra = tmp_path / "b.yml"
    extra.write_text("tunnels:\n  ssh:\n    proto: tcp\n    addr: 22\n")
    r = subprocess.run([sys.executable, "-m", "edgeway", "agent", "config", "check",
                        "--config", f"{base},{extra}"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "ssh:" in r.stdout and "abcdefghijklmnop" not in r.stdout
    extra.write_text("version: 3\n")
    r = subprocess.run([sys.executable, "-m", "edgeway", "agent", "config", "check",
                        "--config", str(base), "--config", str(extra)],
                       capture_output=True, text=True)
    assert r.returncode == 2 and "b.yml" in r.stderr and "version" in r.stderr


def test_the_site_to_site_flow(srv: Server, tmp_path: Path) -> None:
    """The spec's flow: ingress, wildcard reservation, bot user and its credential with an
    ACL, an agent config naming a region domain, the agent API exposed through a tunnel
    behind basic auth, and tunnels started through that public API for two local
    services."""
    with srv.client() as api:
        ingress = api.post("/agent_ingresses", json={"domain": "connect.example.org"}).json()
        region = ingress["region_domains"][0]
        assert api.post("/reserved_domains",
                        json={"domain": "*.site1.example.org"}).status_code == 201
        bot = api.post("/bot_users", json={"name": "site1"}).json()
        token = api.post("/credentials", json={
            "owner_id": bot["id"], "acl": ["bind:*.site1.example.org"]}).json()["token"]
    web = free_port()
    with upstream.running("alpha") as alpha, upstream.running("beta") as beta:
        cfg = write_config(tmp_path / "site.yml", srv, token, web,
                           f"tunnels:\n  agent-api:\n    proto: http\n"
                           f"    domain: api.site1.example.org\n    addr: {web}\n"
                           "    basic_auth: ['ops:a-long-password']\n",
                           server_addr=f"{region}:{srv.tunnel_port}")
        a = run_agent("agent-api", "--config", str(cfg), "--resolve", f"{region}:127.0.0.1",
                      web_port=web)
        try:
            public_api = a.api("GET", "/api/tunnels/agent-api").json()["public_url"]
            login = ("ops", "a-long-password")
            with EdgeClient(srv) as client:
                r = client.request("POST", public_api + "/api/tunnels", json={
                    "name": "alpha", "proto": "http", "addr": str(alpha)})
                assert r.status_code == 401, r.text  # (the published API needs the login)
                for name, port in (("alpha", alpha), ("beta", beta)):
                    r = client.request("POST", public_api + "/api/tunnels", auth=login, json={
                        "name": name, "proto": "http", "addr": str(port),
                        "domain": f"{name}.site1.example.org"})
                    assert r.status_code == 201, r.text
                r = client.request("POST", public_api + "/api/tunnels", auth=login, json={
                    "name": "outside", "proto": "http", "addr": str(alpha),
                    "domain": "other.example.org"})
                assert r.status_code == 502
                assert "ACL (bind:*.site1.example.org) does not allow" in \
                    r.json()["details"]["err"]
                for name in ("alpha", "beta"):
                    url = f"https://{name}.site1.example.org:{srv.https_port}/hi"
                    assert client.get(url).text == f"{name} /hi"
        finally:
            a.stop()


def test_the_console_prints_screens_when_not_on_a_terminal(srv: Server, token: str,
                                                           tmp_path: Path) -> None:
    web = free_port()
    with upstream.running("svc") as svc:
        cfg = write_config(tmp_path / "a.yml", srv, token, web,
                           f"tunnels:\n  web:\n    proto: http\n    addr: {svc}\n")
        proc = subprocess.Popen([sys.executable, "-m", "edgeway", "agent", "start", "web",
                                 "--config", str(cfg)], stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True)
        a = Agent(proc, f"http://127.0.0.1:{web}")
        assert proc.stdout is not None
        out: list[str] = []  # what the console printed so far, read as it comes
        reader = threading.Thread(target=_read_lines, args=(proc.stdout, out), daemon=True)
        reader.start()

        def screens() -> list[str]:
            return "".join(out).split("\n\n")  # one screen per change (not a terminal)

        try:
            deadline = time.monotonic() + 60
            url = ""
            while time.monotonic() < deadline and not url:
                try:
                    url = a.api("GET", "/api/tunnels/web").json().get("public_url", "")
                except httpx.HTTPError:
                    time.sleep(0.1)
            with EdgeClient(srv) as client:
                assert client.get(url + "/x").status_code == 200
            while not any("GET     /x" in s and "200 OK" in s for s in screens()):
                assert time.monotonic() < deadline, screens()[-1]
                time.sleep(0.05)
        finally:
            proc.terminate()
            proc.wait(15)
        reader.join(15)
        proc.stdout.close()
        screen = screens()
        online = [s for s in screen if re.search(r"Session Status +online", s) and url in s]
        assert online, screen
        assert f"{url} -> http://127.0.0.1:{svc}" in online[-1]
        assert "\x1b" not in "".join(screen)  # plain text


def test_a_config_traffic_policy_runs_at_the_edge(srv: Server, token: str,
                                                  tmp_path: Path) -> None:
    web = free_port()
    with upstream.running("svc") as svc:
        cfg = write_config(tmp_path / "p.yml", srv, token, web, (
            f"tunnels:\n  web:\n    proto: http\n    addr: {svc}\n    traffic_policy:\n"
            "      on_http_request:\n        - expressions: [\"req.url.path == '/admin'\"]\n"
            "          actions: [{type: deny, config: {status_code: 404}}]\n"))
        a = run_agent("web", "--config", str(cfg), web_port=web)
        try:
            url = a.api("GET", "/api/tunnels/web").json()["public_url"]
            with EdgeClient(srv) as client:
                assert client.get(url + "/admin").status_code == 404
                assert client.get(url + "/open").text == "svc /open"
        finally:
            a.stop()


def test_connect_timeout_bounds_the_dial_and_the_log_follows_its_settings(
        tmp_path: Path) -> None:
    web = free_port()
    with socket.create_server(("127.0.0.1", 0)) as hole:  # accepts TCP, never speaks TLS
        cfg = tmp_path / "a.yml"
        cfg.write_text(f"version: 2\nauthtoken: abcdefgh\n"
                       f"server_addr: 127.0.0.1:{hole.getsockname()[1]}\nroot_cas: host\n"
                       f"web_addr: 127.0.0.1:{web}\nconnect_timeout: 1s\n"
                       "log_format: term\nlog_level: warn\n")
        proc = subprocess.Popen([sys.executable, "-m", "edgeway", "agent", "start", "--none",
                                 "--log", "stderr", "--config", str(cfg)], stderr=subprocess.PIPE,
                                stdout=subprocess.DEVNULL, text=True)
        try:
            line = wait_for_line(proc, "session_lost", 30)
        finally:
            Agent(proc, "").stop()
    assert "no TLS connection to 127.0.0.1" in line and "within 1s (connect_timeout)" in line
    assert "[warning" in line and not line.startswith("{")  # the term format, not JSON


def wait_for_line(proc: subprocess.Popen[str], word: str, timeout: float) -> str:
    assert proc.stderr is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stderr], [], [], deadline - time.monotonic())
        line = proc.stderr.readline() if ready else ""
        if word in line:
            return line
        if not line and proc.poll() is not None:
            break
    raise AssertionError(f"no line with {word!r} within {timeout}s")


def test_region_dials_the_region_domain_and_logs_go_to_the_file(tmp_path: Path,
                                                                 token_for: Any) -> None:
    region_host = "tunnel.eu.connect.example.com"
    srv = start(tmp_path / "srv", None, "--tunnel-hostnames", region_host)
    web, log = free_port(), tmp_path / "agent.log"
    try:
        with upstream.running("svc") as svc:
            cfg = write_config(tmp_path / "a.yml", srv, token_for(srv), web,
                               f"region: eu\nlog: {log}\nlog_format: logfmt\n"
                               f"tunnels:\n  web:\n    proto: http\n    addr: {svc}\n",
                               server_addr=f"connect.example.com:{srv.tunnel_port}")
            # only the region's name resolves: the agent dials tunnel.eu.<server_addr host>
            a = run_agent("web", "--config", str(cfg), "--resolve", f"{region_host}:127.0.0.1",
                          web_port=web, log=None)
            try:
                url = a.api("GET", "/api/tunnels/web").json()["public_url"]
                with EdgeClient(srv) as client:
                    assert client.get(url + "/r").text == "svc /r"
                deadline = time.monotonic() + 60
                while "event=tunnel_bound" not in (log.read_text() if log.exists() else ""):
                    assert time.monotonic() < deadline, "no tunnel_bound line in the log file"
                    time.sleep(0.1)
            finally:
                stderr = a.stop()
        assert "tunnel_bound" not in stderr  # the log went to the file only
        line = next(x for x in log.read_text().splitlines() if "event=tunnel_bound" in x)
        assert line.startswith("ts=") and "level=info" in line and f"url={url}" in line
    finally:
        assert srv.stop() == 0


@pytest.fixture
def token_for() -> Any:
    def make(srv: Server) -> str:
        with srv.client() as api:
            value: str = api.post("/credentials", json={}).json()["token"]
        return value
    return make
