"""SNS webhook verification: each message's signature (in its JSON body) checked against the
certificate at its SigningCertURL, fetched over HTTPS from an allowed host only. End to end:
a real HTTPS service on loopback serves the certificate (the server trusts it through
SSL_CERT_FILE and allows ``localhost`` with ``--sns-cert-hosts``)."""

from __future__ import annotations

import base64
import contextlib
import json
import ssl
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding, rsa
from cryptography.x509.oid import NameOID

from edgeway.edge.modules import sns
from tests import stub_http
from tests.edge import tls_upstream, upstream
from tests.edge.agents import EdgeClient
from tests.edge.test_edges import made, route
from tests.server import Server, start


def signing_pair() -> tuple[rsa.RSAPrivateKey, x509.Certificate]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "sns.amazonaws.com")])
    now = datetime.now(UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(days=1)).not_valid_after(now + timedelta(days=9))
            .sign(key, hashes.SHA256()))
    return key, cert


def message(key: rsa.RSAPrivateKey, cert_url: str, version: str = "2",
            kind: str = "Notification", **extra: str) -> dict[str, Any]:
    """A message as SNS sends it, signed the documented way."""
    msg = {"Type": kind, "MessageId": "22b80b92-fdea-4c2c-8f9d-bdfb0c7bf324",
           "TopicArn": "arn:aws:sns:us-west-2:123456789012:MyTopic", "Message": "hello",
           "Timestamp": "2026-11-25T04:00:00.000Z", "SignatureVersion": version,
           "SigningCertURL": cert_url, **extra}
    if kind != "Notification":
        msg.setdefault("Token", "2336412f37")
        msg.setdefault("SubscribeURL", "https://sns.us-west-2.amazonaws.com/?Action=Confirm")
    fields = sns._FIELDS[kind]
    text = "".join(f"{f}\n{msg[f]}\n" for f in fields if f in msg).encode()
    algo = hashes.SHA1() if version == "1" else hashes.SHA256()
    msg["Signature"] = base64.b64encode(key.sign(text, padding.PKCS1v15(), algo)).decode()
    return msg


def test_signatures_of_each_version_and_type() -> None:
    key, cert = signing_pair()
    url = "https://sns.us-west-2.amazonaws.com/SimpleNotificationService-1.pem"
    for version in ("1", "2"):
        assert sns.signed_by(message(key, url, version), cert)
        assert sns.signed_by(message(key, url, version, Subject="with a subject"), cert)
        assert sns.signed_by(message(key, url, version, "SubscriptionConfirmation"), cert)
        changed = {**message(key, url, version), "Message": "changed"}
        assert not sns.signed_by(changed, cert)
    other_key, _ = signing_pair()
    assert not sns.signed_by(message(other_key, url), cert)
    assert not sns.signed_by({**message(key, url), "SignatureVersion": "3"}, cert)
    assert not sns.signed_by({**message(key, url), "Type": "Other"}, cert)


def test_certificates_come_from_sns_hosts_over_https_only() -> None:
    v = sns.SnsVerifier()
    assert v.allowed("https://sns.us-east-1.amazonaws.com/SimpleNotificationService-a.pem")
    assert v.allowed("https://sns.cn-north-1.amazonaws.com.cn/x.pem")
    for url in ("http://sns.us-east-1.amazonaws.com/x.pem",
                "https://sns.us-east-1.amazonaws.com.evil.example/x.pem",
                "https://evil.example/sns.us-east-1.amazonaws.com/x.pem",
                "https://sns.us-east-1.amazonaws.com/x.txt"):
        assert not v.allowed(url), url


@contextlib.contextmanager
def serving(pem: bytes, directory: Path) -> Iterator[tuple[int, Path]]:
    """An HTTPS service on localhost answering every GET with ``pem``: (port, its cert)."""
    cert, keyfile = tls_upstream.self_signed("localhost", directory)

    class Handler(stub_http.StubHandler):
        def do_GET(self) -> None:
            self.send(200, {}, pem)

    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, keyfile)
    with stub_http.serving(Handler, tls=context) as httpd:
        yield httpd.server_address[1], cert


def test_sns_deliveries_through_the_edge(tmp_path: Path,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    key, cert = signing_pair()
    with serving(cert.public_bytes(serialization.Encoding.PEM), tmp_path) as (port, https_cert), \
            upstream.running("svc") as svc:
        monkeypatch.setenv("SSL_CERT_FILE", str(https_cert))  # (for the server it starts)
        srv: Server = start(tmp_path / "srv", None, "--sns-cert-hosts", "localhost")
        try:
            with srv.client() as api:
                made(api, "/reserved_domains", {"domain": "sns.example.com"})
                edge = made(api, "/edges/https", {"hostports": ["sns.example.com:443"]})
                backend = made(api, "/backends/static", {"address": f"127.0.0.1:{svc}"})
                route(api, edge["id"], "path_prefix", "/", backend["id"],
                      webhook_verification={"provider": "sns"})
            url = f"https://localhost:{port}/SimpleNotificationService-1.pem"
            with EdgeClient(srv) as web:
                def post(msg: dict[str, Any]) -> int:
                    return web.request("POST", "https://sns.example.com/in",
                                       content=json.dumps(msg).encode()).status_code
                assert post(message(key, url)) == 200
                assert post(message(key, url, "1", "SubscriptionConfirmation")) == 200
                assert post({**message(key, url), "Message": "forged"}) == 403
                other = "https://127.0.0.1:1/SimpleNotificationService-1.pem"  # not allowed
                assert post(message(key, other)) == 403
            assert "sns_certificate_unavailable" not in srv.log()
        finally:
            assert srv.stop() == 0
