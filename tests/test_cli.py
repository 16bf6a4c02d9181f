"""The command line: api-keys create, restarts, bad options, signals."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from tests.conftest import BACKENDS
from tests.server import free_port, fresh_pg_database, start


def edgeway(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "edgeway", *args], capture_output=True,
                          text=True, timeout=60, env={**os.environ, **(env or {})})


@pytest.fixture(params=BACKENDS)
def store_args(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[list[str]]:
    with ExitStack() as stack:
        args = ["--data-dir", str(tmp_path / "data")]
        if request.param == "postgres":
            args += ["--database-url", stack.enter_context(fresh_pg_database())]
        yield args


def test_api_keys_create_prints_a_working_key(store_args: list[str], tmp_path: Path) -> None:
    made = edgeway("api-keys", "create", "--description", "for scripts", "--init", *store_args)
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip()
    assert len(token.split("_")[0]) == 27 and "\n" not in token
    url = store_args[3] if len(store_args) > 2 else None
    srv = start(Path(store_args[1]), url, token=token)
    try:
        with srv.client() as c:
            keys = c.get("/api_keys").json()["keys"]
            assert [k["description"] for k in keys] == ["for scripts"]
            assert keys[0]["owner_id"].startswith("usr_") and keys[0]["token"] is None
    finally:
        assert srv.stop() == 0
    assert "First start" not in srv.stdout_tail


def test_data_survives_a_restart_and_the_first_key_is_printed_once(tmp_path: Path) -> None:
    srv = start(tmp_path)
    with srv.client() as c:
        pid = c.post("/ip_policies", json={"description": "keep me"}).json()["id"]
    assert srv.stop() == 0
    again = start(tmp_path, None, token=srv.token)
    try:
        with again.client() as c:
            assert c.get(f"/ip_policies/{pid}").json()["description"] == "keep me"
    finally:
        assert again.stop() == 0
    assert "First start" not in again.stdout_tail


def test_sigint_is_a_clean_shutdown(tmp_path: Path) -> None:
    srv = start(tmp_path)
    srv.proc.send_signal(signal.SIGINT)
    assert srv.proc.wait(15) == 0
    assert srv.stop() == 0
    assert '"event":"stopped"' in srv.log()


def test_a_signal_while_starting_stops_the_server_cleanly_once_started(tmp_path: Path) -> None:
    """SIGTERM as soon as the first start prints its key (before any listener is up): the
    server finishes starting, then shuts down cleanly (exit 0), rather than dying by it."""
    ports = [free_port() for _ in range(5)]
    log = tmp_path / "server.log"
    cmd = [sys.executable, "-m", "edgeway", "serve", "--data-dir", str(tmp_path / "d"),
           "--acme-directory", "off",
           *(arg for flag, port in zip(("--api-addr", "--tunnel-addr", "--http-addr",
                                        "--https-addr", "--ssh-addr"), ports, strict=True)
             for arg in (flag, f"127.0.0.1:{port}"))]
    with log.open("w") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("First start"):
                proc.send_signal(signal.SIGTERM)
                break
        assert proc.wait(60) == 0, log.read_text()[-2000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
    events = [json.loads(line)["event"] for line in log.read_text().splitlines()
              if line.startswith("{")]
    assert "signal" in events and events[-1] == "stopped"


def test_log_format_and_level(tmp_path: Path) -> None:
    """logfmt lines instead of JSON; with --log-level warning the info lines are gone."""
    srv = start(tmp_path / "a", None, "--log-format", "logfmt")
    assert srv.stop() == 0
    lines = srv.log().splitlines()
    assert any(line.startswith("ts=") and "event=stopped" in line for line in lines)
    assert not any(line.startswith("{") for line in lines)
    quiet = start(tmp_path / "b", None, "--log-level", "warning")
    assert quiet.stop() == 0
    assert '"event":"stopped"' not in quiet.log()


@pytest.mark.parametrize(("args", "words"), [
    (["--api-addr", "nowhere"], "HOST:PORT"),
    (["--api-addr", "127.0.0.1:70000"], "HOST:PORT"),
    (["--database-url", "mysql://x/y"], "PostgreSQL URL"),
    (["--regions", ","], "at least one region"),
    (["--tunnel-cert", "/etc/hostname"], "--tunnel-cert and --tunnel-key go together"),
    (["--tunnel-cert", "/nope.pem", "--tunnel-key", "/nope.key"], "/nope.pem: no such file"),
    (["--http-addr", "nowhere"], "HOST:PORT"),
    (["--api-cors-origins", "https://ok.example.com,console.example.com"],
     "'console.example.com' is not an origin"),
    (["--api-cors-origins", "https://a.example.com/app"], "is not an origin"),
    (["--sns-cert-hosts", "sns.(unclosed"], "is not a regular expression"),
    (["--agent-client-cas", "agents"], "'agents' is not a certificate authority id"),
    (["--agent-client-cas", "ca_" + "A" * 27], "no certificate authority ca_AAA"),
    (["--oauth-endpoint", "code_host_a.nope=https://x.example"],
     "must be PROVIDER.NAME=URL with one of code_host_a.authorize"),
    (["--oauth-endpoint", "search_a.token=ftp://x.example"], "is not an http(s) URL"),
    (["--oauth-apps", "/nope.json"], "--oauth-apps /nope.json"),
    (["--login-host", "not a host"], "--login-host 'not a host'"),
    (["--events-retry", "0"], "--events-retry 0 must be 0.01 to 300 seconds"),
    (["--events-attempts", "0"], "--events-attempts 0 must be 1 to 1000"),
    (["--events-queue", "5"], "--events-queue 5 must be 10 to 10000000"),
    (["--events-datadog-url", "ftp://intake"], "must be an http:// or https:// URL"),
    (["--events-ca-file", "/nope.pem"], "--events-ca-file /nope.pem: no such file"),
    (["--drain-timeout", "nan"], "--drain-timeout nan must be 0 to 3600 seconds"),
    (["--tcp-name", "tcp.example.com:7000"], "--tcp-name 'tcp.example.com:7000' is not a "
                                             "host name or an IP address"),
    (["--tcp-name", "tcp_.example.com"], "is not a host name or an IP address"),
])
def test_bad_options_fail_clearly(tmp_path: Path, args: list[str], words: str) -> None:
    r = edgeway("serve", "--data-dir", str(tmp_path), *args)
    assert r.returncode == 2
    assert words in r.stderr and "Traceback" not in r.stderr


def test_tcp_tunnels_are_published_as_the_tcp_name() -> None:
    from edgeway.serve_cli import _tcp_name
    assert _tcp_name("", "10.0.0.5") == "10.0.0.5"
    assert _tcp_name(" TCP.Example.COM. ", "0.0.0.0") == "tcp.example.com"
    assert _tcp_name("[2001:db8::1]", "::") == "2001:db8::1"


@pytest.mark.parametrize(("option", "value", "kind", "out_of_range"), [
    ("--events-queue", "1e5", "int", "5 must be 10 to 10000000"),
    ("--events-attempts", "ten", "int", "0 must be 1 to 1000"),
    ("--events-retry", "1s", "float", "0 must be 0.01 to 300 seconds"),
    ("--ssh-keepalive", "15s", "float", "0 must be 1 to 3600 seconds"),
    ("--tcp-grace", "2m", "float", "-1 must be 0 to 86400 seconds"),
    ("--drain-timeout", "10s", "float", "-1 must be 0 to 3600 seconds"),
])
def test_a_bad_number_in_the_environment_is_an_error_of_serve_alone(
        tmp_path: Path, option: str, value: str, kind: str, out_of_range: str) -> None:
    env = {"EDGEWAY_" + option[2:].upper().replace("-", "_"): value}
    r = edgeway("serve", "--data-dir", str(tmp_path), env=env)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert f"argument {option}: invalid {kind} value: '{value}'" in r.stderr
    # the command line wins over the variable (this value is out of range: said so)
    given = out_of_range.split()[0]
    r = edgeway("serve", "--data-dir", str(tmp_path), f"{option}={given}", env=env)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert f"{option} {out_of_range}" in r.stderr, r.stderr
    # the other commands do not read it
    r = edgeway("--version", env=env)
    assert r.returncode == 0 and r.stdout.startswith("edgeway "), r.stderr
    r = edgeway("ca", "export", "--data-dir", str(tmp_path / "none"), env=env)
    assert r.returncode == 2 and "is not a data directory" in r.stderr, r.stderr


@pytest.mark.parametrize(("apps", "words"), [
    ({"myspace": {"client_id": "i", "client_secret": "s"}}, "'myspace' is not a provider"),
    ({"github": {"client_id": "i"}}, "'github' needs a client_id and a client_secret"),
    (["github"], "must hold a JSON object"),
])
def test_bad_managed_oauth_apps_fail_clearly(tmp_path: Path, apps: object, words: str) -> None:
    path = tmp_path / "apps.json"
    path.write_text(json.dumps(apps))
    r = edgeway("serve", "--data-dir", str(tmp_path), "--oauth-apps", str(path))
    assert r.returncode == 2
    assert words in r.stderr and "Traceback" not in r.stderr


def test_a_port_in_use_names_the_listener(tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as busy:
        port = busy.getsockname()[1]
        r = edgeway("serve", "--data-dir", str(tmp_path), "--api-addr",
                    f"127.0.0.1:{free_port()}", "--tunnel-addr", f"127.0.0.1:{free_port()}",
                    "--http-addr", f"127.0.0.1:{free_port()}", "--https-addr",
                    f"127.0.0.1:{port}")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert f"cannot listen for the public HTTPS/TLS listener on 127.0.0.1:{port}" in r.stderr


def test_an_unreachable_database_fails_clearly(tmp_path: Path) -> None:
    r = edgeway("serve", "--data-dir", str(tmp_path), "--database-url",
                "postgresql://postgres@127.0.0.1:1/none")
    assert r.returncode == 2
    assert "Traceback" not in r.stderr and "database" in r.stderr.lower()
