"""The compression module: gzip responses for clients that accept it, streamed (each flush
of the relay is a sync flush, so server-sent events still arrive as they are written)."""

from __future__ import annotations

import zlib
from typing import Any

from edgeway.edge import h1
from edgeway.edge.h1 import Headers, header
from edgeway.edge.hooks import Compiling, Exchange, Hook

COMPRESSIBLE = ("text/", "application/json", "application/javascript", "application/xml",
                "application/x-javascript", "image/svg+xml", "application/ld+json")
MIN_SIZE = 256


def wanted(request_headers: list[tuple[bytes, bytes]], status: int,
           response_headers: list[tuple[bytes, bytes]], head: bool) -> bool:
    """gzip this response? The client accepts it; the upstream did not encode it; the body
    is text-like and not tiny."""
    accept = header(request_headers, b"accept-encoding").lower()
    if b"gzip" not in accept or head or status < 200 or status in (204, 304):
        return False
    if header(response_headers, b"content-encoding") or \
            b"no-transform" in header(response_headers, b"cache-control").lower():
        return False
    kind = header(response_headers, b"content-type").decode("latin-1").lower()
    length = header(response_headers, b"content-length")
    if length.isdigit() and int(length) < MIN_SIZE:
        return False
    return kind.startswith(COMPRESSIBLE)


def rewrite(headers: list[tuple[bytes, bytes]]) -> list[tuple[bytes, bytes]]:
    """The response headers of a gzipped body: no length (chunked), encoding and Vary set,
    a strong ETag made weak (the bytes differ, the content does not)."""
    out = [(k, (b"W/" + v if k.lower() == b"etag" and v.startswith(b'"') else v))
           for k, v in headers if k.lower() != b"content-length"]  # a strong ETag turns weak
    vary = header(headers, b"vary")
    out = [(k, v) for k, v in out if k.lower() != b"vary"]
    out.append((b"Vary", vary + b", Accept-Encoding" if vary else b"Accept-Encoding"))
    out.append((b"Content-Encoding", b"gzip"))
    return out


class Gzip:
    def __init__(self) -> None:
        self._z = zlib.compressobj(6, zlib.DEFLATED, 16 + zlib.MAX_WBITS)

    def data(self, chunk: bytes) -> bytes:
        return self._z.compress(chunk)

    def flush(self) -> bytes:
        return self._z.flush(zlib.Z_SYNC_FLUSH)

    def end(self) -> bytes:
        return self._z.flush(zlib.Z_FINISH)


class Compression(Hook):
    name = "compression"

    def response(self, x: Exchange, status: int, headers: Headers) -> Headers:
        if h1.bodiless(status, x.req.method) or not wanted(x.req.headers, status, headers,
                                                            False):
            return headers
        x.gzip = Gzip()
        return rewrite(headers)


def compile(module: dict[str, Any], ctx: Compiling) -> Compression:
    return Compression()
