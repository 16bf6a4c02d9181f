"""mutual_tls and tls_termination's min_version on an HTTPS edge, over real TLS: a client
certificate from the configured authority gets through; none, or one from another authority,
fails the handshake; a TLS server name that skips the check is refused (421); removing the
module takes effect on the next connection; min_version is the handshake floor, 1.0 to 1.3."""

from __future__ import annotations

import socket
import ssl
import warnings
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from tests.edge.agents import ca_context, read_all
from tests.edge.test_edges import made, route
from tests.edge.tls_upstream import write_pair
from tests.server import Server

HOST = "mtls.example.com"


def authority(tmp: Path, name: str) -> tuple[str, ssl.SSLContext]:
    """A client CA (its PEM) and a client context holding a certificate it issued."""
    pem, cert, key = authority_files(tmp, name)
    return pem, client(cert, key)


def authority_files(tmp: Path, name: str) -> tuple[str, Path, Path]:
    """A client CA (its PEM), and the files of a client certificate it issued and its key."""
    now = datetime.now(UTC)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{name} CA")])
    ca = (x509.CertificateBuilder().subject_name(ca_name).issuer_name(ca_name)
          .public_key(ca_key.public_key()).serial_number(x509.random_serial_number())
          .not_valid_before(now - timedelta(days=1)).not_valid_after(now + timedelta(days=30))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .sign(ca_key, hashes.SHA256()))
    leaf = (x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{name} client")]))
            .issuer_name(ca_name).public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(days=1)).not_valid_after(now + timedelta(days=30))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    return (ca.public_bytes(serialization.Encoding.PEM).decode(),
            *write_pair(tmp, name, leaf, key))


def client(cert: Path | None = None, key: Path | None = None) -> ssl.SSLContext:
    ctx = ssl.create_default_context()
    if cert is not None:
        ctx.load_cert_chain(cert, key)
    return ctx


def get(srv: Server, ctx: ssl.SSLContext, sni: str = HOST, host: str = HOST) -> bytes:
    """GET / with Host ``host`` over TLS with server name ``sni``: the raw answer."""
    ctx.load_verify_locations(srv.data_dir / "ca.pem")
    ctx.check_hostname = False  # the server name may be one the certificate is not for
    with socket.create_connection(("127.0.0.1", srv.https_port), timeout=20) as raw, \
            ctx.wrap_socket(raw, server_hostname=sni) as s:
        s.sendall(f"GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode())
        return read_all(s)


def refused(srv: Server, ctx: ssl.SSLContext) -> bool:
    """The handshake (or, in TLS 1.3, the first read after it) failed: no HTTP came back."""
    try:
        return not get(srv, ctx)
    except (ssl.SSLError, ConnectionError):
        return True


def test_client_certificates_are_required_and_checked(srv: Server, tmp_path: Path) -> None:
    trusted_pem, trusted = authority(tmp_path, "trusted")
    _, stranger = authority(tmp_path, "stranger")
    with srv.client() as api:
        made(api, "/reserved_domains", {"domain": HOST})
        edge = made(api, "/edges/https", {"hostports": [f"{HOST}:443"]})
        answer = made(api, "/backends/http_response", {"body": "behind mtls"})
        route(api, edge["id"], "path_prefix", "/", answer["id"])
        assert get(srv, client()).endswith(b"behind mtls")  # no module yet: open
        early = client()  # a connection made before the module, kept alive
        early.load_verify_locations(srv.data_dir / "ca.pem")
        kept = early.wrap_socket(socket.create_connection(("127.0.0.1", srv.https_port),
                                                          timeout=20), server_hostname=HOST)
        ca = made(api, "/certificate_authorities", {"ca_pem": trusted_pem})
        r = api.put(f"/edges/https/{edge['id']}/mutual_tls",
                    json={"certificate_authority_ids": [ca["id"]]})
        assert r.status_code == 200, r.text
    with kept:  # its handshake checked no certificate: misdirected, not served
        kept.sendall(f"GET / HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n\r\n"
                     .encode())
        out = read_all(kept)
    assert out.startswith(b"HTTP/1.1 421 ") and b"ERR_EDGEWAY_4012" in out, out
    assert get(srv, trusted).startswith(b"HTTP/1.1 200 ")
    assert refused(srv, client())  # no certificate
    assert refused(srv, stranger)  # another authority's
    # another server name, then the edge's Host: misdirected, not served
    out = get(srv, client(), sni="elsewhere.example.org")
    assert out.startswith(b"HTTP/1.1 421 ") and b"ERR_EDGEWAY_4016" in out
    assert b"behind mtls" not in out
    # a server name whose certificate covers the edge's Host too (one wildcard) but whose
    # handshake asked for no client certificate: misdirected all the same
    wild = "a.mtls-wild.example.com"
    with srv.client() as api:
        made(api, "/reserved_domains", {"domain": "*.mtls-wild.example.com"})
        guarded = made(api, "/edges/https", {"hostports": [f"{wild}:443"]})
        route(api, guarded["id"], "path_prefix", "/", answer["id"])
        r = api.put(f"/edges/https/{guarded['id']}/mutual_tls",
                    json={"certificate_authority_ids": [ca["id"]]})
        assert r.status_code == 200, r.text
    out = get(srv, client(), sni="b.mtls-wild.example.com", host=wild)
    assert out.startswith(b"HTTP/1.1 421 ") and b"ERR_EDGEWAY_4016" in out, out
    assert b"behind mtls" not in out
    with srv.client() as api:
        assert api.delete(f"/certificate_authorities/{ca['id']}").status_code == 400  # in use
        assert api.delete(f"/edges/https/{edge['id']}/mutual_tls").status_code == 204
    assert get(srv, client()).endswith(b"behind mtls")


OLD = {"1.0": "TLSv1", "1.1": "TLSv1_1", "1.2": "TLSv1_2"}
SHOWN = {"1.0": "TLSv1", "1.1": "TLSv1.1", "1.2": "TLSv1.2"}


def capped(srv: Server, top: str) -> ssl.SSLContext:
    """A client that speaks TLS 1.0 up to ``top`` only (an old client)."""
    ctx = client()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        ctx.minimum_version = ssl.TLSVersion[OLD["1.0"]]
        ctx.maximum_version = ssl.TLSVersion[OLD[top]]
    ctx.set_ciphers("DEFAULT:@SECLEVEL=0")
    ctx.load_verify_locations(srv.data_dir / "ca.pem")
    return ctx


@pytest.mark.parametrize("version", ["1.0", "1.1", "1.2", "1.3"])
def test_min_version_is_the_handshake_floor(srv: Server, version: str) -> None:
    host = f"tls{version.replace('.', '')}.example.com"
    with srv.client() as api:
        made(api, "/reserved_domains", {"domain": host})
        edge = made(api, "/edges/https", {"hostports": [f"{host}:443"]})
        answer = made(api, "/backends/http_response", {"body": "ok"})
        route(api, edge["id"], "path_prefix", "/", answer["id"])
        r = api.put(f"/edges/https/{edge['id']}/tls_termination", json={"min_version": version})
        assert r.status_code == 200, r.text
    for top in OLD:
        with socket.create_connection(("127.0.0.1", srv.https_port), timeout=20) as raw:
            if top < version:
                with pytest.raises(ssl.SSLError):
                    capped(srv, top).wrap_socket(raw, server_hostname=host)
                continue
            with capped(srv, top).wrap_socket(raw, server_hostname=host) as s:
                assert s.version() == SHOWN[top]
                s.sendall(f"GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"
                          .encode())
                assert read_all(s).endswith(b"ok")
    with socket.create_connection(("127.0.0.1", srv.https_port), timeout=20) as raw, \
            ca_context(srv).wrap_socket(raw, server_hostname=host) as s:
        assert s.version() == "TLSv1.3"


def echo_over_tls(srv: Server, ctx: ssl.SSLContext, host: str) -> bytes:
    ctx.load_verify_locations(srv.data_dir / "ca.pem")
    with socket.create_connection(("127.0.0.1", srv.https_port), timeout=20) as raw, \
            ctx.wrap_socket(raw, server_hostname=host) as s:
        s.sendall(b"ping")
        return s.recv(64)


def test_tls_edges_check_client_certificates_only_when_terminating(
        srv: Server, tmp_path: Path, echo_port: int) -> None:
    trusted_pem, trusted = authority(tmp_path, "tls-trusted")
    with srv.client() as api:
        ca = made(api, "/certificate_authorities", {"ca_pem": trusted_pem})
        mtls = {"certificate_authority_ids": [ca["id"]]}
        echo = made(api, "/backends/static", {"address": f"127.0.0.1:{echo_port}"})
        made(api, "/reserved_domains", {"domain": "term.example.com"})
        edge = made(api, "/edges/tls", {"hostports": ["term.example.com:443"],
                                        "backend": {"backend_id": echo["id"]},
                                        "tls_termination": {"terminate_at": "edge"},
                                        "mutual_tls": mtls})
        # a pass-through edge never sees the handshake: mutual TLS there is refused, not inert
        for refused in (api.post("/edges/tls", json={"mutual_tls": mtls}),
                        api.post("/edges/tls", json={"mutual_tls": mtls, "tls_termination": {
                            "terminate_at": "upstream"}}),
                        api.delete(f"/edges/tls/{edge['id']}/tls_termination"),
                        api.put(f"/edges/tls/{edge['id']}/tls_termination",
                                json={"terminate_at": "upstream"})):
            assert refused.status_code == 400, refused.text
            assert "mutual_tls" in refused.json()["msg"] and "terminat" in refused.json()["msg"]
        assert api.get(f"/edges/tls/{edge['id']}").json()["tls_termination"]["terminate_at"] \
            == "edge"
    assert echo_over_tls(srv, trusted, "term.example.com") == b"ping"
    with pytest.raises((ssl.SSLError, ConnectionError)):
        if not echo_over_tls(srv, client(), "term.example.com"):  # refused after the handshake
            raise ConnectionResetError("closed")
