"""TLS options of the official SDK's binds, enforced on real TLS: an HTTPS endpoint's
``mutual_tlsca`` (a client certificate from that authority gets through; none, another
authority's, or a handshake that checked none is refused), and a TLS endpoint's
``termination(cert, key)``, where the edge terminates with the agent's certificate (and checks
client certificates with ``mutual_tlsca``) and the agent gets the plain bytes."""

from __future__ import annotations

import socket
import ssl
from pathlib import Path
from urllib.parse import urlsplit

from tests.edge.agents import agent, read_all
from tests.edge.test_mutual_tls import authority_files, client
from tests.edge.tls_upstream import self_signed
from tests.server import Server


def https_get(srv: Server, ctx: ssl.SSLContext, host: str, sni: str | None) -> bytes:
    ctx.load_verify_locations(srv.data_dir / "ca.pem")
    ctx.check_hostname = False
    with socket.create_connection(("127.0.0.1", srv.https_port), timeout=20) as raw, \
            ctx.wrap_socket(raw, server_hostname=sni) as s:
        s.sendall(f"GET /m HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        return read_all(s)


def refused(attempt: bytes | Exception) -> bool:
    return isinstance(attempt, ssl.SSLError | ConnectionError) or attempt == b""


def attempt(call: object, *args: object) -> bytes | Exception:
    try:
        return call(*args)  # type: ignore[operator, no-any-return]
    except (ssl.SSLError, ConnectionError) as exc:
        return exc


def test_an_https_endpoints_mutual_tls_ca_is_required(srv: Server, token: str, service: int,
                                                      tmp_path: Path) -> None:
    ca, cert, key = authority_files(tmp_path, "mine")
    _, other_cert, other_key = authority_files(tmp_path, "other")
    a = agent(srv, token, {"kind": "https", "mtls_ca": ca,
                           "forward": f"http://127.0.0.1:{service}"})
    try:
        host = urlsplit(a.urls[0]).hostname or ""
        assert host, a.listeners
        out = https_get(srv, client(cert, key), host, host)
        assert out.startswith(b"HTTP/1.1 200 ") and b"\r\nsvc /m\r\n" in out, out
        assert refused(attempt(https_get, srv, client(), host, host))  # no certificate
        assert refused(attempt(https_get, srv, client(other_cert, other_key), host, host))
        out = https_get(srv, client(), host, None)  # no server name: misdirected
        assert out.startswith(b"HTTP/1.1 421 ") and b"svc /m" not in out, out
    finally:
        a.stop()


def test_a_connection_made_before_mutual_tls_is_not_served_after(
        srv: Server, token: str, service: int, tmp_path: Path) -> None:
    """A kept-alive connection whose handshake checked no client certificate (the name was
    bound without mutual TLS then) is refused once the name requires one."""
    ca, _cert, _key = authority_files(tmp_path, "later")
    host = "mtls-later.edgeway.localhost"
    before = agent(srv, token, {"kind": "https", "domain": host,
                                "forward": f"http://127.0.0.1:{service}"})
    ctx = client()
    ctx.load_verify_locations(srv.data_dir / "ca.pem")
    kept = ctx.wrap_socket(socket.create_connection(("127.0.0.1", srv.https_port), timeout=20),
                           server_hostname=host)
    try:
        kept.sendall(f"GET /a HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
        first = b""
        while not first.endswith(b"\r\n0\r\n\r\n") and (chunk := kept.recv(65536)):
            first += chunk  # (the whole chunked answer: the next read is the next answer's)
        assert first.startswith(b"HTTP/1.1 200 ") and b"svc /a" in first, first
        before.stop()
        after = agent(srv, token, {"kind": "https", "domain": host, "mtls_ca": ca,
                                   "forward": f"http://127.0.0.1:{service}"})
        try:
            assert after.urls == [f"https://{host}:{srv.https_port}"], after.listeners
            kept.sendall(f"GET /b HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
                         .encode())
            out = read_all(kept)
            assert out.startswith(b"HTTP/1.1 421 ") and b"ERR_EDGEWAY_4012" in out, out
            assert b"svc /b" not in out
        finally:
            after.stop()
    finally:
        kept.close()


def test_mutual_tls_needs_https_and_a_readable_authority(srv: Server, token: str,
                                                         service: int) -> None:
    a = agent(srv, token,
              {"kind": "http", "mtls_ca": "not a certificate",
               "forward": f"http://127.0.0.1:{service}"},
              {"kind": "https", "mtls_ca": "-----BEGIN CERTIFICATE-----\nAAAA\n"
                                           "-----END CERTIFICATE-----\n",
               "forward": f"http://127.0.0.1:{service}"},
              {"kind": "tls", "mtls_ca": "x", "forward": f"tcp://127.0.0.1:{service}"})
    try:
        errors = [ln.get("error", "") for ln in a.listeners]
        assert "no PEM certificate this edge can read" in errors[0] \
            or "needs an https tunnel" in errors[0], errors
        assert "no PEM certificate this edge can read" in errors[1], errors
        assert "no PEM certificate" in errors[2] or "needs TLS terminated at the edge" \
            in errors[2], errors
    finally:
        a.stop()


def test_a_tls_endpoint_terminated_with_the_agents_certificate(
        srv: Server, token: str, echo_port: int, tmp_path: Path) -> None:
    cert_path, key_path = self_signed("*.edgeway.localhost", tmp_path)
    ca, cert, key = authority_files(tmp_path, "tls-clients")
    a = agent(srv, token,
              {"kind": "tls", "termination": [cert_path.read_text(), key_path.read_text()],
               "forward": f"tcp://127.0.0.1:{echo_port}"},
              {"kind": "tls", "termination": [cert_path.read_text(), key_path.read_text()],
               "mtls_ca": ca, "forward": f"tcp://127.0.0.1:{echo_port}"},
              {"kind": "tls", "termination": [cert_path.read_text(), "not a key"],
               "forward": f"tcp://127.0.0.1:{echo_port}"})
    try:
        plain_host, mtls_host = (urlsplit(u).hostname or "" for u in a.urls[:2])
        assert "do not load as a pair" in a.listeners[2].get("error", ""), a.listeners

        def echo(host: str, ctx: ssl.SSLContext) -> bytes:
            ctx.load_verify_locations(cert_path)  # (the agent's certificate, not the edge's)
            with socket.create_connection(("127.0.0.1", srv.https_port), timeout=20) as raw, \
                    ctx.wrap_socket(raw, server_hostname=host) as s:
                seen = s.getpeercert() or {}
                assert seen.get("subjectAltName") == (("DNS", "*.edgeway.localhost"),), seen
                s.sendall(b"plain to the agent")
                return s.recv(100)

        assert echo(plain_host, ssl.create_default_context()) == b"plain to the agent"
        assert echo(mtls_host, client(cert, key)) == b"plain to the agent"
        assert refused(attempt(echo, mtls_host, client()))
    finally:
        a.stop()
