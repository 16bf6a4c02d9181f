"""A local HTTPS service standing in for Datadog's logs intake and for Azure's token and Logs
Ingestion endpoints, as their documentation describes them, recording what arrives.

* ``POST /api/v2/logs`` (Datadog): ``DD-API-KEY`` must be ``DD_KEY`` (else 403), the body a
  gzipped JSON array of entries; answers 202 ``{}``.
* ``POST /<tenant>/oauth2/v2.0/token`` (Azure AD): a client-credentials form with
  ``AZ_CLIENT``/``AZ_SECRET`` and the Monitor scope (else 401); answers a bearer token.
* ``POST /dataCollectionRules/<dcr>/streams/<stream>?api-version=2023-01-01``: the bearer
  token issued, a gzipped JSON array; answers 204.

``down()`` closes the listening port (connections are refused) and ``up()`` opens it again;
``fail`` makes every answer that status instead.
"""

from __future__ import annotations

import contextlib
import gzip
import ipaddress
import json
import secrets
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.server import free_port

DD_KEY = "dd-api-key-1"
AZ_TENANT, AZ_CLIENT, AZ_SECRET = "tenant-1", "client-1", "az-secret-1"
SCOPE = "https://monitor.azure.com/.default"


@dataclass
class Captured:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes  # as sent
    status: int  # as answered

    def json(self) -> Any:
        raw = gzip.decompress(self.body) if self.headers.get("content-encoding") == "gzip" \
            else self.body
        return json.loads(raw)


@dataclass
class Capture:
    port: int
    ca_file: Path
    context: ssl.SSLContext
    requests: list[Captured] = field(default_factory=list)
    tokens: set[str] = field(default_factory=set)
    fail: int = 0  # answer every request with this status (0: answer normally)
    delay: float = 0.0  # seconds before each answer (a slow target)
    parse: bool = True  # check that bodies decode as they arrive (benchmarks read them later)
    lock: threading.Lock = field(default_factory=threading.Lock)
    server: ThreadingHTTPServer | None = None
    conns: set[socket.socket] = field(default_factory=set)  # open client connections

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    def up(self) -> None:
        handler = type("Handler", (_Handler,), {"capture": self})
        server = ThreadingHTTPServer(("127.0.0.1", self.port), handler)
        server.daemon_threads = True
        server.socket = self.context.wrap_socket(server.socket, server_side=True)
        self.server = server
        threading.Thread(target=server.serve_forever, daemon=True).start()

    def down(self) -> None:
        """Stop listening and cut the open (kept-alive) connections."""
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None
        with self.lock:
            for conn in self.conns:
                with contextlib.suppress(OSError):
                    conn.shutdown(socket.SHUT_RDWR)
            self.conns.clear()

    def of(self, path_prefix: str, status: int | None = None) -> list[Captured]:
        with self.lock:
            return [r for r in self.requests if r.path.startswith(path_prefix)
                    and (status is None or r.status == status)]

    def datadog_events(self) -> list[dict[str, Any]]:
        """The envelopes Datadog accepted, in arrival order."""
        return [entry["event"] for r in self.of("/api/v2/logs", 202)
                for entry in r.json()]


class _Handler(BaseHTTPRequestHandler):
    capture: Capture
    protocol_version = "HTTP/1.1"  # keep-alive, as the real intakes

    def setup(self) -> None:
        super().setup()
        with self.capture.lock:
            self.capture.conns.add(self.connection)

    def finish(self) -> None:
        with self.capture.lock:
            self.capture.conns.discard(self.connection)
        with contextlib.suppress(OSError):
            super().finish()

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        parts = urlsplit(self.path)
        body = self.rfile.read(int(self.headers.get("content-length") or 0))
        seen = Captured("POST", parts.path, parse_qs(parts.query),
                        {k.lower(): v for k, v in self.headers.items()}, body, 0)
        if self.capture.delay:
            time.sleep(self.capture.delay)
        status, answer = self._answer(seen)
        seen.status = status
        with self.capture.lock:
            self.capture.requests.append(seen)
        self.send_response(status)
        if answer is not None:
            data = json.dumps(answer).encode()
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        else:
            self.send_header("Content-Length", "0")
            self.end_headers()

    def _answer(self, seen: Captured) -> tuple[int, Any]:
        cap = self.capture
        if cap.fail:
            return cap.fail, {"error": "failing on purpose"}
        if seen.path == "/api/v2/logs":
            if seen.headers.get("dd-api-key") != DD_KEY:
                return 403, {"errors": ["Forbidden"]}
            if cap.parse:
                seen.json()
            return 202, {}
        if seen.path == f"/{AZ_TENANT}/oauth2/v2.0/token":
            form = {k: v[0] for k, v in parse_qs(seen.body.decode()).items()}
            if form != {"grant_type": "client_credentials", "client_id": AZ_CLIENT,
                        "client_secret": AZ_SECRET, "scope": SCOPE}:
                return 401, {"error": "invalid_client"}
            token = secrets.token_urlsafe(16)
            with cap.lock:
                cap.tokens.add(token)
            return 200, {"token_type": "Bearer", "expires_in": 3599, "access_token": token}
        if seen.path.startswith("/dataCollectionRules/"):
            auth = seen.headers.get("authorization", "")
            if not auth.startswith("Bearer ") or auth[7:] not in cap.tokens:
                return 401, {"error": {"code": "InvalidToken"}}
            if seen.query.get("api-version") != ["2023-01-01"]:
                return 400, {"error": {"code": "MissingApiVersionParameter"}}
            seen.json()
            return 204, None
        return 404, {"error": "no such endpoint"}


def _certificate(directory: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "capture")])
    now = datetime.now(UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - timedelta(hours=1)).not_valid_after(now + timedelta(days=2))
            .add_extension(x509.SubjectAlternativeName([
                x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
                critical=False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = directory / "capture.pem", directory / "capture.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                           serialization.PrivateFormat.PKCS8,
                                           serialization.NoEncryption()))
    return cert_path, key_path


@contextmanager
def running(directory: Path) -> Iterator[Capture]:
    cert, key = _certificate(directory)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    cap = Capture(free_port(), cert, context)
    cap.up()
    try:
        yield cap
    finally:
        cap.down()
