"""The SSH gateway with the real OpenSSH client on loopback, on SQLite and PostgreSQL: HTTP,
TCP and TLS passthrough tunnels from ``ssh -R``, refused keys and binds, user certificates,
tunnel sessions in the API (and their stop operation), the end of a session, and a tunnel
group route reaching an SSH tunnel by its label."""

from __future__ import annotations

import random
import re
import socket
import subprocess
from pathlib import Path
from typing import Any

import h11
import httpx
import pytest

from tests.edge import tls_upstream
from tests.edge.agents import EdgeClient
from tests.edge.test_fast_path import (
    ANSWERED_BY,
    download,
    responses,
    responses_after,
    slow_download,
)
from tests.server import Server
from tests.sshgw.client import SshUser, made, poll, unique


def _public(srv: Server, url: str, path: str = "/", **kw: Any) -> httpx.Response:
    with EdgeClient(srv) as web:
        return web.get(url.rstrip("/") + path, **kw)


def _sessions(api: httpx.Client, credential: str) -> list[dict[str, object]]:
    rows = api.get("/tunnel_sessions").json()["tunnel_sessions"]
    return [s for s in rows if s["credential"]["id"] == credential]


def _tunnels(api: httpx.Client, session: str) -> list[dict[str, object]]:
    rows = api.get("/tunnels").json()["tunnels"]
    return [t for t in rows if t["tunnel_session"]["id"] == session]


def test_http_tunnel_through_the_edge_and_its_session(server: Server, user: SshUser,
                                                      service: int) -> None:
    with server.client() as api:
        cred = user.credential(api)
        ssh = user.start(f"0:localhost:{service}",
                         command=["http", "--basic-auth=alice:opensesame"])
        [url] = ssh.urls()
        assert re.fullmatch(rf"http://[0-9a-f]{{12}}\.edgeway\.localhost:{server.http_port}",
                            url)
        closed = user.start("0:localhost:1", command=["http"])  # nothing listens there
        r = _public(server, closed.urls()[0])
        assert (r.status_code, r.headers["edgeway-error-code"]) == (502, "ERR_EDGEWAY_4502")
        closed.stop()
        poll(lambda: len(_sessions(api, cred["id"])) == 1, "the other session to end")
        assert _public(server, url, "/x").status_code == 401  # the bind's basic auth
        r = _public(server, url, "/hello", auth=("alice", "opensesame"))
        assert (r.status_code, r.text) == (200, "svc /hello")
        ssh.wait_for(r"GET\s+/hello  200 OK")  # the request line on the user's terminal
        [session] = _sessions(api, cred["id"])
        assert (session["transport"], session["ip"]) == ("ssh", "127.0.0.1")
        assert str(session["agent_version"]).startswith("SSH-2.0-OpenSSH")
        [tunnel] = _tunnels(api, str(session["id"]))
        assert (tunnel["public_url"], tunnel["proto"]) == (url, "http")
        ssh.stop()  # the user leaves: the tunnel and the session go
        poll(lambda: not _sessions(api, cred["id"]), "the session to end")
        assert _tunnels(api, str(session["id"])) == []
        assert _public(server, url).status_code == 404


def test_no_command_binds_http_and_quiet_leaves_out_requests(server: Server, user: SshUser,
                                                             service: int) -> None:
    with server.client() as api:
        cred = user.credential(api)
        detached = user.start(f"0:localhost:{service}")  # ssh -N: no session, no terminal
        url = poll(lambda: [t["public_url"] for s in _sessions(api, cred["id"])
                            for t in _tunnels(api, str(s["id"]))], "the -N tunnel")[0]
        assert _public(server, url, "/n").text == "svc /n"
        quiet = user.start(f"0:localhost:{service}", command=["http", "--quiet"])
        [url] = quiet.urls()
        assert _public(server, url, "/q").text == "svc /q"
        poll(lambda: len(_sessions(api, cred["id"])) == 2, "both sessions")
        assert "/q" not in quiet.stdout()
        detached.stop()


def test_tcp_tunnel(server: Server, user: SshUser, echo_port: int) -> None:
    with server.client() as api:
        user.credential(api)
    ssh = user.start(f"0:localhost:{echo_port}", command=["tcp"])
    [url] = ssh.urls()
    host, port = re.fullmatch(r"tcp://([\d.]+):(\d+)", url).groups()  # type: ignore[union-attr]
    payload = bytes(range(256)) * 4096  # 1 MiB each way
    with socket.create_connection((host, int(port)), timeout=20) as conn:
        conn.sendall(payload)
        conn.shutdown(socket.SHUT_WR)
        got = bytearray()
        while chunk := conn.recv(1 << 16):
            got += chunk
    assert bytes(got) == payload
    ssh.wait_for(r"connection from 127\.0\.0\.1:\d+")


def test_tls_passthrough_name(server: Server, user: SshUser, tmp_path: Path) -> None:
    name = unique("sshtls") + ".example.com"
    with server.client() as api:
        made(api, "/reserved_domains", {"domain": name})
        user.credential(api, acl=[f"bind:{name}"])
    with tls_upstream.running(name, tmp_path) as (port, cert):
        ssh = user.start(f"0:localhost:{port}", command=["tls", f"--domain={name}"])
        assert ssh.urls() == [f"tls://{name}:{server.https_port}"]
        # verified against the service's own certificate: the edge passed TLS through
        assert tls_upstream.ask(server.https_port, name, cert, b"hi\n") == \
            f"{name} got hi\n".encode()


def test_unknown_key_is_refused(server: Server, user: SshUser, service: int) -> None:
    r = subprocess.run(user.args((f"0:localhost:{service}",), ["http"]),
                       capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    assert r.returncode == 255
    assert "Permission denied (publickey)" in r.stderr


def test_binds_outside_the_acl_and_bad_commands_are_refused_readably(
        server: Server, user: SshUser, service: int) -> None:
    with server.client() as api:
        user.credential(api, acl=["bind:*.allowed.example.com"])
    forward = f"0:localhost:{service}"
    ssh = user.start(forward, command=["http"])
    assert ssh.exited() == 1
    assert "the credential's ACL (bind:*.allowed.example.com) does not allow binding" \
        in ssh.stderr()
    detached = user.start(forward)  # under -N: the reason is the disconnect message
    assert detached.exited() == 255
    assert re.search(r"Received disconnect from .*does not allow binding", detached.stderr())
    bad = user.start(forward, command=["http", "--domian=x.example.com"])
    assert bad.exited() == 1
    assert "unknown option '--domian' for http (options: --domain, --basic-auth, --label, " \
           "--quiet)" in bad.stderr()
    tcp = user.start(forward, command=["tcp", "--domain=x.example.com"])
    assert tcp.exited() == 1 and "unknown option '--domain' for tcp" in tcp.stderr()


def test_user_certificates(server: Server, user: SshUser, service: int) -> None:
    with server.client() as api:
        ca = made(api, "/ssh_certificate_authorities", {})
        good = made(api, "/ssh_user_certificates", {
            "ssh_certificate_authority_id": ca["id"], "public_key": user.public,
            "principals": ["v2"]})
        expired = made(api, "/ssh_user_certificates", {
            "ssh_certificate_authority_id": ca["id"], "public_key": user.public,
            "principals": ["v2"], "valid_after": "2020-01-01T00:00:00Z",
            "valid_until": "2021-01-01T00:00:00Z"})
        other = made(api, "/ssh_user_certificates", {
            "ssh_certificate_authority_id": ca["id"], "public_key": user.public,
            "principals": ["someone-else"]})
        cert = user.dir / "id_ed25519-cert.pub"
        user.certificate = cert
        for refused in (expired, other):  # (the key alone is no credential)
            cert.write_text(refused["certificate"] + "\n")
            r = subprocess.run(user.args((f"0:localhost:{service}",), ["http"]),
                               capture_output=True, text=True, timeout=30,
                               stdin=subprocess.DEVNULL)
            assert r.returncode == 255 and "Permission denied (publickey)" in r.stderr
        cert.write_text(good["certificate"] + "\n")
        ssh = user.start(f"0:localhost:{service}", command=["http"])
        [url] = ssh.urls()
        assert _public(server, url, "/cert").text == "svc /cert"
        [session] = _sessions(api, ca["id"])  # the session's credential: the authority
        assert session["credential"]["uri"].endswith(  # type: ignore[index]
            f"/ssh_certificate_authorities/{ca['id']}")
        forced = made(api, "/ssh_user_certificates", {
            "ssh_certificate_authority_id": ca["id"], "public_key": user.public,
            "critical_options": {"force-command": "tcp --quiet"}})
        cert.write_text(forced["certificate"] + "\n")
        tcp = user.start(f"0:localhost:{service}", command=["http"])  # the certificate's wins
        assert tcp.urls()[0].startswith("tcp://127.0.0.1:")


def test_stop_from_the_api_ends_the_session(server: Server, user: SshUser,
                                            service: int) -> None:
    with server.client() as api:
        cred = user.credential(api)
        ssh = user.start(f"0:localhost:{service}", command=["http"])
        ssh.urls()
        [session] = _sessions(api, cred["id"])
        r = api.post(f"/tunnel_sessions/{session['id']}/restart")
        assert r.status_code == 400 and "cannot restart" in r.json()["msg"]
        assert api.post(f"/tunnel_sessions/{session['id']}/stop").status_code == 204
        assert ssh.exited() != 0
        assert "stopped through the API" in ssh.stderr()
        assert _sessions(api, cred["id"]) == []


def test_a_tunnel_group_route_reaches_an_ssh_tunnel_by_label(server: Server, user: SshUser,
                                                             service: int) -> None:
    name, label = unique("sshgrp") + ".example.com", unique("web")
    with server.client() as api:
        user.credential(api, acl=[f"bind:app={label}"])
        made(api, "/reserved_domains", {"domain": name})
        edge = made(api, "/edges/https", {"hostports": [f"{name}:443"]})
        group = made(api, "/backends/tunnel_group", {"labels": {"app": label}})
        made(api, f"/edges/https/{edge['id']}/routes", {
            "match_type": "path_prefix", "match": "/", "backend": {"backend_id": group["id"]}})
        ssh = user.start(f"0:localhost:{service}", command=["http", f"--label=app={label}"])
        ssh.wait_for(rf"Forwarding labeled tunnel app={label}")
        r = _public(server, f"https://{name}", "/grouped")
        assert (r.status_code, r.text) == (200, "svc /grouped")
        ssh.wait_for(r"GET\s+/grouped  200 OK")
        shown = api.get(f"/backends/tunnel_group/{group['id']}").json()
        assert len(shown["tunnels"]) == 1
        wrong = user.start(f"0:localhost:{service}", command=["http", "--label=app=other"])
        assert wrong.exited() == 1 and "does not allow the labels" in wrong.stderr()


def test_ciphers_cheap_per_packet_are_negotiated_and_chacha20_is_not_offered(
        server: Server, user: SshUser, service: int) -> None:
    """OpenSSH's default order (chacha20-poly1305 first) meets a gateway that does not offer
    it: AES-CTR with HMAC-SHA2-256-ETM; a client asking for another cipher or MAC the gateway
    offers gets it, and a body of many packets crosses each way intact (the gateway's own
    packet encryption, ``sshgw/ciphers.py``, against OpenSSH's); a client that only takes
    chacha20-poly1305 (its per-packet cost here is six times AES-GCM's) is refused in the key
    exchange, with OpenSSH's own message."""
    with server.client() as api:
        user.credential(api)
    body = random.Random(5).randbytes(300_000)  # ~10 packets of the client's 32 KiB
    for options, negotiated in (
            ((), "aes128-ctr MAC: hmac-sha2-256-etm@openssh.com"),
            (("-c", "aes128-gcm@openssh.com"), "aes128-gcm@openssh.com MAC: <implicit>"),
            (("-c", "aes256-gcm@openssh.com"), "aes256-gcm@openssh.com MAC: <implicit>"),
            (("-c", "aes256-ctr", "-m", "hmac-sha2-512-etm@openssh.com"),
             "aes256-ctr MAC: hmac-sha2-512-etm@openssh.com"),
            (("-c", "aes192-ctr", "-m", "hmac-sha2-256"), "aes192-ctr MAC: hmac-sha2-256"),
            (("-m", "hmac-sha2-512"), "aes128-ctr MAC: hmac-sha2-512"),
            # a client that exchanges keys again every 64 KiB (new packet encryption each
            # time, mid-body)
            (("-c", "aes128-gcm@openssh.com", "-o", "RekeyLimit=64K"),
             "aes128-gcm@openssh.com MAC: <implicit>")):
        ssh = user.start(f"0:localhost:{service}", command=["http"], options=("-v", *options))
        [url] = ssh.urls()
        r = _public(server, url, "/cipher")
        assert (r.status_code, r.text) == (200, "svc /cipher")
        with EdgeClient(server) as web:
            echoed = web.request("POST", url + "/echo", content=body)
        assert (echoed.status_code, echoed.content == body) == (200, True), negotiated
        for direction in ("server->client", "client->server"):
            assert f"kex: {direction} cipher: {negotiated} " in ssh.stderr()
        if "RekeyLimit=64K" in options:  # (the client's bytes after a rekey it starts wait
            # for its new keys: two or more went out before the body's last bytes)
            assert ssh.stderr().count("SSH2_MSG_NEWKEYS sent") >= 3, ssh.stderr()
        ssh.stop()
    refused = user.start("0:localhost:1", command=["http"],
                         options=("-c", "chacha20-poly1305@openssh.com"))
    assert refused.exited() == 255 and "no matching cipher found" in refused.stderr()


@pytest.mark.parametrize("by", ANSWERED_BY)
def test_keep_alive_requests_over_one_channel_arrive_whole_and_in_order(
        server: Server, user: SshUser, service: int, by: str) -> None:
    """Requests after the first on a connection go on the pooled channel and are answered
    from its callbacks: pipelined ones in order, and a download to a client that reads 4 kB
    at a time arrives whole (its SHA-256 matches) before the next answer, whichever side
    answers it."""
    with server.client() as api:
        user.credential(api)
    ssh = user.start(f"0:localhost:{service}", command=["http"])
    [url] = ssh.urls()
    host = url.split("://", 1)[1]
    assert _public(server, url, "/warm").text == "svc /warm"  # (a channel to keep)
    n = 8 << 20
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(60)
    sock.connect(("127.0.0.1", server.http_port))
    with sock:
        sock.sendall(b"".join(f"GET /{i} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode()
                              for i in range(3)))
        assert [body for _, _, body in responses(sock, 3)] == [b"svc /0", b"svc /1",
                                                               b"svc /2"]
        sock.sendall(download(host, n, by))
        conn = h11.Connection(h11.CLIENT)
        assert slow_download(conn, sock) == n
        assert responses_after(conn, sock) == b"svc /after"
    ssh.stop()
