"""TLS options of the official SDK's binds, enforced on real TLS: an HTTPS endpoint's
``mutual_tlsca`` (a client certificate from that authority gets through; none, another
authority's, or a handshake that checked none is refused), and a TLS endpoint's
``termination(cert, key)``, where the edge terminates with the agent's certificate (and checks
client certificates with ``mutual_tlsca``) and the agent gets the plain bytes."""

from __future__ import annotations

import json
import socket
import ssl
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

from tests.edge.agents import agent, read_all
from tests.edge.test_mutual_tls import authority_files, client
from tests.edge.test_policy_ip_policies import until
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


def tls_policy(*actions: Mapping[str, object], expressions: tuple[str, ...] = ()) -> str:
    rule: dict[str, object] = {"actions": list(actions)}
    if expressions:
        rule["expressions"] = list(expressions)
    return json.dumps({"on_tcp_connect": [rule]})


def test_a_tls_endpoints_traffic_policy_terminates_tls_and_restricts(
        srv: Server, token: str, echo_port: int, tmp_path: Path) -> None:
    """terminate-tls on an SDK's TLS endpoint: with the name's own certificate (the edge's,
    as its HTTPS would serve), with the policy's certificate, with a TLS version range and
    with client certificates required; restrict-ips on the same phase closes others'
    connections; what cannot be honoured is refused at the bind, naming why."""
    cert_path, key_path = self_signed("*.edgeway.localhost", tmp_path)
    ca, cert, key = authority_files(tmp_path, "policy-clients")
    forward = f"tcp://127.0.0.1:{echo_port}"
    own = {"type": "terminate-tls", "config": {"server_certificate": cert_path.read_text(),
                                               "server_private_key": key_path.read_text()}}
    a = agent(srv, token,
              {"kind": "tls", "forward": forward, "policy": tls_policy(
                  {"type": "terminate-tls", "config": {"min_version": "1.3"}})},
              {"kind": "tls", "forward": forward, "policy": tls_policy(own)},
              {"kind": "tls", "forward": forward, "policy": tls_policy(
                  {"type": "terminate-tls", "config": {
                      "max_version": "1.2", "mutual_tls_certificate_authorities": [ca]}})},
              {"kind": "tls", "forward": forward, "policy": tls_policy(
                  {"type": "restrict-ips", "config": {"deny": ["127.0.0.0/8"]}})},
              {"kind": "tls", "forward": forward, "policy": tls_policy(
                  {"type": "terminate-tls", "config": {}}, expressions=("true",))},
              {"kind": "tls", "forward": forward, "policy": tls_policy(own),
               "termination": [cert_path.read_text(), key_path.read_text()]},
              {"kind": "tcp", "forward": forward, "policy": tls_policy(own)})
    try:
        errors = [ln.get("error", "") for ln in a.listeners]
        assert not any(errors[:4]), errors
        assert "rule with expressions" in errors[4], errors
        assert "asked for twice" in errors[5], errors
        assert not errors[6], errors  # (a TCP endpoint terminates TLS too)
        names = [urlsplit(u).hostname or "" for u in a.urls[:4]]

        def echo(host: str, ctx: ssl.SSLContext, trust: Path) -> tuple[bytes, str, str]:
            ctx.load_verify_locations(trust)
            with socket.create_connection(("127.0.0.1", srv.https_port), timeout=20) as raw, \
                    ctx.wrap_socket(raw, server_hostname=host) as s:
                s.sendall(b"plain to the agent")
                return s.recv(100), s.version() or "", \
                    str((s.getpeercert() or {}).get("subjectAltName"))

        edge_ca = srv.data_dir / "ca.pem"
        # the name's own certificate (it verifies against the platform CA alone), TLS 1.3 only
        got, version, _ = echo(names[0], ssl.create_default_context(), edge_ca)
        assert (got, version) == (b"plain to the agent", "TLSv1.3")
        assert refused(attempt(echo, names[0], ssl.create_default_context(), cert_path))
        old = ssl.create_default_context()
        old.maximum_version = ssl.TLSVersion.TLSv1_2
        assert refused(attempt(echo, names[0], old, edge_ca))
        # the policy's certificate (the self-signed one verifies, the platform's would not)
        got, _, names_seen = echo(names[1], ssl.create_default_context(), cert_path)
        assert got == b"plain to the agent" and "*.edgeway.localhost" in names_seen
        assert refused(attempt(echo, names[1], ssl.create_default_context(), edge_ca))
        # TLS 1.2 at most, and a client certificate from the policy's authority
        got, version, _ = echo(names[2], client(cert, key), edge_ca)
        assert (got, version) == (b"plain to the agent", "TLSv1.2")
        assert refused(attempt(echo, names[2], client(), edge_ca))
        # restrict-ips: closed before anything reaches the agent (passed through otherwise)
        assert refused(attempt(echo, names[3], ssl.create_default_context(), edge_ca))
        # a TCP endpoint: its clients speak TLS to the edge, the agent gets the plain bytes
        tcp_port = int(a.urls[6].rsplit(":", 1)[1])
        own_ctx = ssl.create_default_context(cafile=str(cert_path))
        with socket.create_connection(("127.0.0.1", tcp_port), timeout=20) as raw, \
                own_ctx.wrap_socket(raw, server_hostname="tcp.edgeway.localhost") as s:
            s.sendall(b"plain over tcp")
            assert s.recv(100) == b"plain over tcp"
    finally:
        a.stop()


def test_an_https_endpoints_on_tcp_connect_restricts_and_sets_its_tls(
        srv: Server, token: str, service: int, tmp_path: Path) -> None:
    """on_tcp_connect on HTTPS endpoints (an agent's and a cloud endpoint's): restrict-ips
    closes other addresses' connections before the handshake; terminate-tls sets the TLS
    versions and requires client certificates from its authorities; over plain HTTP the
    phase runs once the Host names the endpoint (a refused request gets its connection
    closed, no answer); forward-internal is refused there, and terminate-tls on an http://
    endpoint."""
    ca, cert, key = authority_files(tmp_path, "https-policy")
    forward = f"http://127.0.0.1:{service}"
    mtls = json.dumps({"on_tcp_connect": [{"actions": [{"type": "terminate-tls", "config": {
        "min_version": "1.3", "mutual_tls_certificate_authorities": [ca]}}]}]})
    only_other = json.dumps({"on_tcp_connect": [{"actions": [
        {"type": "restrict-ips", "config": {"allow": ["192.0.2.0/24"]}}]}],
        "on_http_request": [{"actions": [{"type": "custom-response",
                                          "config": {"content": "in"}}]}]})
    a = agent(srv, token,
              {"kind": "https", "forward": forward, "policy": mtls},
              {"kind": "https", "forward": forward, "policy": only_other},
              {"kind": "http", "forward": forward, "policy": only_other},
              {"kind": "https", "forward": forward, "policy": json.dumps({"on_tcp_connect": [
                  {"actions": [{"type": "forward-internal",
                                "config": {"url": "tcp://db.internal:5432"}}]}]})},
              {"kind": "http", "forward": forward, "policy": json.dumps({"on_tcp_connect": [
                  {"actions": [{"type": "terminate-tls", "config": {}}]}]})})
    try:
        errors = [ln.get("error", "") for ln in a.listeners]
        assert not any(errors[:3]), errors
        assert "forward its requests with forward-internal" in errors[3], errors
        assert "http:// endpoint speaks no TLS" in errors[4], errors
        names = [urlsplit(u).hostname or "" for u in a.urls[:3]]
        # client certificates from the policy's authority, TLS 1.3 only
        assert b" 200 " in https_get(srv, client(cert, key), names[0], names[0])
        assert refused(attempt(https_get, srv, client(), names[0], names[0]))
        old = client(cert, key)
        old.maximum_version = ssl.TLSVersion.TLSv1_2
        assert refused(attempt(https_get, srv, old, names[0], names[0]))
        # restrict-ips: closed before the handshake (HTTPS), before an answer (HTTP)
        assert refused(attempt(https_get, srv, client(), names[1], names[1]))
        with socket.create_connection(("127.0.0.1", srv.http_port), timeout=20) as s:
            s.sendall(f"GET / HTTP/1.1\r\nHost: {names[2]}\r\n\r\n".encode())
            assert read_all(s) == b""
    finally:
        a.stop()
    with srv.client() as api:  # a cloud endpoint's on_tcp_connect
        api.post("/reserved_domains", json={"domain": "tcp-phase.example.com"})
        r = api.post("/endpoints", json={"type": "cloud", "url": "https://tcp-phase.example.com",
                                         "traffic_policy": only_other})
        assert r.status_code == 201, r.text
        ok = json.dumps({"on_tcp_connect": [{"actions": [
            {"type": "restrict-ips", "config": {"allow": ["127.0.0.0/8"]}}]}],
            "on_http_request": [{"actions": [{"type": "custom-response",
                                              "config": {"content": "in"}}]}]})
        try:
            assert refused(attempt(https_get, srv, client(), "tcp-phase.example.com",
                                   "tcp-phase.example.com"))
            assert api.patch(f"/endpoints/{r.json()['id']}",
                             json={"traffic_policy": ok}).status_code == 200
            until(lambda: not refused(attempt(https_get, srv, client(), "tcp-phase.example.com",
                                              "tcp-phase.example.com")),
                  "the new on_tcp_connect admits us")
            got = https_get(srv, client(), "tcp-phase.example.com", "tcp-phase.example.com")
            assert got.endswith(b"in"), got
        finally:
            api.delete(f"/endpoints/{r.json()['id']}")
