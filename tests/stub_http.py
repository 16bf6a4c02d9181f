"""Stub HTTP services for the tests: a quiet request handler with the few helpers the stubs
use, served on loopback from a thread for the length of a ``with`` block."""

from __future__ import annotations

import ssl
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

Answer = tuple[int, dict[str, str], bytes]  # status, headers, body


class StubHandler(BaseHTTPRequestHandler):
    def log_message(self, *_args: Any) -> None:
        pass

    def send(self, status: int, headers: dict[str, str], body: bytes) -> None:
        """An answer with ``headers`` and ``body``, its Content-Length added."""
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def body(self) -> bytes:
        return self.rfile.read(int(self.headers.get("Content-Length") or 0))

    def query(self) -> tuple[str, dict[str, str]]:
        """The path, and the first value of each query parameter."""
        parts = urlsplit(self.path)
        return parts.path, {k: v[0] for k, v in parse_qs(parts.query).items()}

    def form(self) -> dict[str, str]:
        """The first value of each field of a form-encoded body."""
        return {k: v[0] for k, v in parse_qs(self.body().decode()).items()}


@contextmanager
def serving(handler: type[BaseHTTPRequestHandler], port: int = 0,
            tls: ssl.SSLContext | None = None, **attrs: Any) -> Iterator[ThreadingHTTPServer]:
    """``handler`` on 127.0.0.1:``port`` (0: any free one, see ``server_address``), over TLS
    with ``tls``; ``attrs`` are class attributes of the handler for this server only (the
    state it serves)."""
    if attrs:
        handler = type(handler.__name__, (handler,), attrs)
    server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    if tls is not None:
        server.socket = tls.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
