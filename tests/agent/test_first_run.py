"""A first run, typed on a terminal (``Pty``) against a real server and real local services:
the config learns the server's CA once (``config add-root-cas``, after ``add-server-addr``
said the certificate was not trusted yet) and every command uses it; a one-liner whose only
tunnel is refused exits 1 saying why, ``start`` runs while one of its tunnels is up; the
console shows a labeled tunnel online and says "connecting" before the session is up; a
local service that is down gets the edge's kind of error page; no lock file outlives its
tunnel, or its agent."""

from __future__ import annotations

import fcntl
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.agent.terminal import Pty
from tests.agent.test_agent import write_config
from tests.edge import upstream
from tests.edge.agents import EdgeClient
from tests.edge.test_edges import made, route
from tests.server import Server, free_port


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "home").mkdir()
    return tmp_path / "home"


@pytest.fixture
def token(srv: Server) -> str:
    with srv.client() as api:
        value: str = api.post("/credentials", json={}).json()["token"]
    return value


@pytest.fixture
def svc() -> Iterator[int]:
    with upstream.running("svc") as port:
        yield port


def edgeway(home: Path, *argv: str) -> tuple[int, str]:
    """A command that ends by itself, on a terminal: its exit code and its screen."""
    return Pty.run(home, *argv)


def url_of(screen: str, target: str) -> str:
    return next(w for line in screen.splitlines() if f"-> {target}" in line
                for w in line.split() if w.startswith("https://"))


def locks(home: Path) -> list[Path]:
    return sorted((home / ".state" / "edgeway").glob("tunnel-*-*.lock"))


def test_the_servers_ca_is_added_once_and_used_by_every_command(
        srv: Server, home: Path, token: str, svc: int) -> None:
    code, screen = edgeway(home, "config", "add-server-addr", f"localhost:{free_port()}")
    assert code == 0 and "certificate could not be checked" in screen, screen
    assert edgeway(home, "config", "add-authtoken", token)[0] == 0
    code, screen = edgeway(home, "config", "add-server-addr", f"localhost:{srv.tunnel_port}")
    assert code == 0 and "not trusted yet" in screen, screen
    assert "`edgeway ca export > ca.pem`" in screen
    assert "`edgeway config add-root-cas ca.pem`" in screen
    with (home / "ca.pem").open("w") as out:  # on the server
        subprocess.run([sys.executable, "-m", "edgeway", "ca", "export", "--data-dir",
                        str(srv.data_dir)], stdout=out, check=True)
    code, screen = edgeway(home, "config", "add-root-cas", "ca.pem")
    assert code == 0 and "certificate is trusted" in screen, screen
    assert f"root_cas: {home / 'ca.pem'}" in (home / ".config/edgeway/agent.yml").read_text()
    code, screen = edgeway(home, "config", "add-root-cas", "agent.yml-does-not-exist")
    assert code == 2 and "no file" in screen, screen
    code, screen = edgeway(home, "config", "add-root-cas", "host", "--config", "other.yml")
    assert code == 0 and "root_cas: host" in (home / "other.yml").read_text(), screen
    stale = home / ".state" / "edgeway" / "tunnel-0123-4567.lock"  # its agent was killed
    stale.parent.mkdir(parents=True)
    stale.touch()
    held = stale.with_name("tunnel-89ab-cdef.lock")  # another agent's, still running
    with held.open("ab") as holder:
        fcntl.flock(holder, fcntl.LOCK_EX | fcntl.LOCK_NB)
        serve_once(srv, home, svc)
        assert not stale.exists() and locks(home) == [held]


def serve_once(srv: Server, home: Path, svc: int) -> None:
    """``edgeway http SVC`` with the config alone, one request through it, Ctrl+C."""
    term = Pty(home, "http", str(svc), "--web-addr", f"127.0.0.1:{free_port()}")
    try:  # no --root-cas: the config's
        screen = term.wait_for("online", "https://")
        assert len(locks(home)) == 2  # the held one and this agent's
        with EdgeClient(srv) as client:
            assert client.get(url_of(screen, f"http://127.0.0.1:{svc}") + "/hi").text == \
                "svc /hi"
        assert term.interrupt() == 0
        assert "Traceback" not in term.text
    finally:
        term.close()


def test_a_one_liner_whose_tunnel_is_refused_exits_saying_why(
        srv: Server, home: Path, token: str, svc: int) -> None:
    code, screen = edgeway(home, "http", str(svc), "--url", "nobody.example.net",
                           "--authtoken", token, "--server-addr",
                           f"localhost:{srv.tunnel_port}", "--root-cas",
                           str(srv.data_dir / "ca.pem"), "--web-addr", "false")
    assert code == 1, screen
    assert "nobody.example.net" in screen and "is not reserved" in screen, screen
    assert "refused" in screen and locks(home) == []


def test_start_runs_while_one_tunnel_is_up_and_exits_when_none_is(
        srv: Server, home: Path, token: str, svc: int) -> None:
    some = write_config(home / "some.yml", srv, token, free_port(), (
        f"tunnels:\n  site:\n    proto: http\n    addr: {svc}\n"
        f"  taken:\n    proto: http\n    addr: {svc}\n    domain: nobody.example.net\n"))
    term = Pty(home, "start", "--all", "--config", str(some))
    try:
        screen = term.wait_for("online", "refused:", "https://")
        assert "taken -> " in screen and "is not reserved" in screen
        with EdgeClient(srv) as client:
            assert client.get(url_of(screen, f"http://127.0.0.1:{svc}") + "/up").text == \
                "svc /up"
        assert term.proc.poll() is None
        assert term.interrupt() == 0 and "Traceback" not in term.text
    finally:
        term.close()
    none = write_config(home / "none.yml", srv, token, free_port(), (
        f"tunnels:\n  one:\n    proto: http\n    addr: {svc}\n    domain: one.example.net\n"
        f"  two:\n    proto: tls\n    addr: {svc}\n    domain: two.example.net\n"))
    code, screen = edgeway(home, "start", "--all", "--config", str(none))
    assert code == 1, screen
    assert "refused tunnel one" in screen and "refused tunnel two" in screen, screen


def test_the_console_shows_a_labeled_tunnel_online_while_it_serves(
        srv: Server, home: Path, token: str, svc: int) -> None:
    with srv.client() as api:
        made(api, "/reserved_domains", {"domain": "app.example.com"})
        edge = made(api, "/edges/https", {"hostports": ["app.example.com:443"]})
        group = made(api, "/backends/tunnel_group", {"labels": {"svc": "web"}})
        route(api, edge["id"], "path_prefix", "/", group["id"])
    term = Pty(home, "http", str(svc), "--label", "svc=web", "--authtoken", token,
               "--server-addr", f"localhost:{srv.tunnel_port}", "--root-cas",
               str(srv.data_dir / "ca.pem"), "--web-addr", "false")
    try:
        term.wait_for(f"[labels svc=web] -> http://127.0.0.1:{svc}  online")
        with EdgeClient(srv) as client:
            assert client.get(f"https://app.example.com:{srv.https_port}/l").text == "svc /l"
        assert "(binding)" not in term.text.rpartition("Session Status")[2]
        assert term.interrupt() == 0
    finally:
        term.close()


def test_the_first_screen_says_connecting(home: Path) -> None:
    port = free_port()  # nothing listens there yet
    term = Pty(home, "tcp", "22", "--authtoken", "x", "--server-addr", f"127.0.0.1:{port}",
               "--web-addr", "false")
    try:
        term.wait_for("Session Status", "connecting", "tcp-22 -> tcp://127.0.0.1:22  (connecting)")
        assert "no tunnels" not in term.text, term.text
        assert term.interrupt() == 0
    finally:
        term.close()


def test_a_local_service_that_is_down_gets_the_edges_kind_of_page(
        srv: Server, home: Path, token: str) -> None:
    down = free_port()  # nothing listens there
    term = Pty(home, "http", str(down), "--authtoken", token, "--server-addr",
               f"localhost:{srv.tunnel_port}", "--root-cas", str(srv.data_dir / "ca.pem"),
               "--web-addr", "false")
    try:
        screen = term.wait_for("online", "https://")
        with EdgeClient(srv) as client:
            r = client.get(url_of(screen, f"http://127.0.0.1:{down}") + "/x")
        assert r.status_code == 502, r.text
        assert r.headers["edgeway-error-code"] == "ERR_EDGEWAY_8012"
        assert r.headers["content-type"] == "text/html; charset=utf-8"
        assert "<h1>Bad gateway</h1>" in r.text and f"127.0.0.1:{down}" in r.text
        assert "ERR_EDGEWAY_8012" in r.text and "Connection refused" in r.text
        assert term.interrupt() == 0
    finally:
        term.close()


def test_a_paused_terminal_does_not_hold_up_the_tunnels(
        srv: Server, home: Path, token: str, svc: int) -> None:
    """Ctrl+S stops a terminal's output, so the agent's screen writes would wait: the tunnel
    serves on meanwhile (each request redraws the screen), and Ctrl+Q shows the newest
    screen."""
    term = Pty(home, "http", str(svc), "--authtoken", token, "--server-addr",
               f"localhost:{srv.tunnel_port}", "--root-cas", str(srv.data_dir / "ca.pem"),
               "--web-addr", "false")
    try:
        url = url_of(term.wait_for("online", "https://"), f"http://127.0.0.1:{svc}")
        term.type(b"\x13")  # Ctrl+S
        with EdgeClient(srv, timeout=5) as client:
            assert client.get(url + "/first").text == "svc /first"
            paused_at = len(term.raw)
            deadline = time.monotonic() + 4  # (redraws enough to fill the terminal's buffer)
            n = 0
            while time.monotonic() < deadline:
                n += 1
                assert client.get(f"{url}/paused-{n}").text == f"svc /paused-{n}"
        assert len(term.raw) - paused_at < 8192, "the terminal was not paused"
        term.type(b"\x11")  # Ctrl+Q
        term.wait_for(f"/paused-{n}")
        assert term.interrupt() == 0
        assert "Traceback" not in term.text
    finally:
        term.close()


def test_tls_terminated_at_the_edge_and_mutual_tls_from_the_one_liners(
        srv: Server, home: Path, token: str, svc: int) -> None:
    """``edgeway tls PORT --crt --key --mutual-tls-cas`` and ``edgeway http PORT
    --mutual-tls-cas``, typed with relative paths: the edge terminates with the agent's
    certificate and lets in only clients with a certificate from those authorities."""
    import contextlib
    import socket
    import ssl

    from tests.edge.test_bind_tls import https_get
    from tests.edge.test_mutual_tls import authority_files, client
    from tests.edge.tls_upstream import self_signed
    ca, cert, key = authority_files(home, "clients")
    (home / "ca.pem").write_text(ca)
    crt, crt_key = self_signed("*.edgeway.localhost", home)
    server = ["--authtoken", token, "--server-addr", f"localhost:{srv.tunnel_port}",
              "--root-cas", str(srv.data_dir / "ca.pem"), "--web-addr", "false"]
    with upstream.echo() as echo:
        term = Pty(home, "tls", str(echo), "--crt", crt.name, "--key", crt_key.name,
                   "--mutual-tls-cas", "ca.pem", *server)
        try:
            screen = term.wait_for("online", "tls://")
            host = next(w for w in screen.split() if w.startswith("tls://")) \
                .removeprefix("tls://").split(":")[0]

            def echoed(ctx: ssl.SSLContext) -> bytes:
                ctx.load_verify_locations(crt)
                with socket.create_connection(("127.0.0.1", srv.https_port), 20) as raw, \
                        ctx.wrap_socket(raw, server_hostname=host) as s:
                    s.sendall(b"to the local service")
                    return s.recv(100)

            assert echoed(client(cert, key)) == b"to the local service"
            # no certificate: refused in the handshake, or at the first read in TLS 1.3
            with contextlib.suppress(ssl.SSLError, ConnectionError):
                assert echoed(client()) == b"", "served without a client certificate"
            assert term.interrupt() == 0
        finally:
            term.close()
    term = Pty(home, "http", str(svc), "--mutual-tls-cas", "ca.pem", *server)
    try:
        url = url_of(term.wait_for("online", "https://"), f"http://127.0.0.1:{svc}")
        host = url.removeprefix("https://").split(":")[0]
        out = https_get(srv, client(cert, key), host, host)
        assert out.startswith(b"HTTP/1.1 200 ") and b"svc /m" in out, out
        assert term.interrupt() == 0
        assert "Traceback" not in term.text
    finally:
        term.close()
