"""TLS ClientHello parsing, so the public TLS listener can route by SNI before it decides
whether to terminate TLS itself or pass the raw bytes through to an agent holding the
certificate. Sans-I/O: ``parse_client_hello`` looks at the bytes peeked so far and answers
"need more" (None), the hello, or ``NotTLS``; the caller keeps the bytes and replays them
whichever way the connection goes.

Structures are those of RFC 8446 (records §5.1, ClientHello §4.1.2), RFC 6066 §3 (server_name)
and RFC 7301 §3.1 (ALPN); only those two extensions are decoded. Every length is checked against
its container, so hostile bytes end as ``NotTLS``, never as an IndexError.
"""

from __future__ import annotations

from dataclasses import dataclass

HANDSHAKE, CLIENT_HELLO = 22, 1  # record content type, handshake message type
EXT_SERVER_NAME, EXT_ALPN, HOST_NAME = 0, 16, 0
MAX_RECORD = 16384 + 2048
MAX_HELLO = 64 * 1024


class NotTLS(Exception):
    """The bytes are not a TLS handshake starting with a well-formed ClientHello."""


@dataclass(frozen=True)
class ClientHello:
    server_name: str | None  # host_name, lower-cased, without a trailing dot
    alpn: tuple[str, ...]  # offered protocols in order; opaque bytes, decoded as latin-1


class _Reader:
    """A cursor over one length-delimited structure; running past its end is NotTLS."""

    def __init__(self, data: bytes, what: str) -> None:
        self._data, self._pos, self._what = data, 0, what

    def take(self, n: int) -> bytes:
        if self._pos + n > len(self._data):
            raise NotTLS(f"{self._what} runs past its end")
        self._pos += n
        return self._data[self._pos - n:self._pos]

    def uint(self, size: int) -> int:
        return int.from_bytes(self.take(size), "big")

    def vector(self, len_size: int) -> bytes:
        return self.take(self.uint(len_size))

    def at_end(self) -> bool:
        return self._pos == len(self._data)

    def end(self) -> None:
        if not self.at_end():
            raise NotTLS(f"{self._what} has trailing bytes")


def _handshake_message(data: bytes) -> bytes | None:
    """The body of the first handshake message, reassembled from as many records as it spans."""
    payload, pos = bytearray(), 0
    while True:
        header = data[pos:pos + 5]
        if header[:1] and header[0] != HANDSHAKE:
            raise NotTLS(f"record type {header[0]}, not a TLS handshake")
        if header[1:2] and header[1] != 3:
            raise NotTLS(f"record version major {header[1]}, not TLS")
        if len(header) < 5:
            return None
        length = int.from_bytes(header[3:5], "big")
        if not 0 < length <= MAX_RECORD:
            raise NotTLS(f"handshake record of {length} bytes")
        payload += data[pos + 5:pos + 5 + length]
        if payload and payload[0] != CLIENT_HELLO:
            raise NotTLS(f"handshake type {payload[0]}, not a ClientHello")
        if len(payload) >= 4:
            size = int.from_bytes(payload[1:4], "big")
            if size > MAX_HELLO:
                raise NotTLS(f"ClientHello of {size} bytes")
            if len(payload) >= 4 + size:
                return bytes(payload[4:4 + size])
        pos += 5 + length
        if pos > len(data):
            return None


def _list(body: bytes, what: str) -> _Reader:
    """An extension body that is exactly one non-empty list with a 2-byte length."""
    ext = _Reader(body, what)
    items = _Reader(ext.vector(2), what)
    ext.end()
    if items.at_end():
        raise NotTLS(f"empty {what}")
    return items


def _server_name(body: bytes) -> str | None:
    names = _list(body, "server_name list")
    host: str | None = None
    while not names.at_end():
        name_type, raw = names.uint(1), names.vector(2)
        if name_type != HOST_NAME:
            continue
        if host is not None:
            raise NotTLS("two host_name entries in server_name")
        if not raw.isascii():
            raise NotTLS("non-ASCII server name")
        host = raw.decode("ascii").lower().removesuffix(".")
        if not host:
            raise NotTLS("empty server name")
    return host


def _alpn(body: bytes) -> tuple[str, ...]:
    names = _list(body, "ALPN list")
    protocols: list[str] = []
    while not names.at_end():
        raw = names.vector(1)
        if not raw:
            raise NotTLS("empty ALPN protocol name")
        protocols.append(raw.decode("latin-1"))
    return tuple(protocols)


def parse_client_hello(data: bytes) -> ClientHello | None:
    """The ClientHello at the start of `data`, or None if more bytes are needed. Raises NotTLS."""
    message = _handshake_message(data)
    if message is None:
        return None
    hello = _Reader(message, "ClientHello")
    hello.take(2 + 32)  # legacy_version, random
    for len_size in (1, 2, 1):  # legacy_session_id, cipher_suites, legacy_compression_methods
        hello.vector(len_size)
    # A TLS 1.2 hello may omit the extensions block altogether.
    extensions = _Reader(b"" if hello.at_end() else hello.vector(2), "extensions")
    hello.end()
    found: dict[int, bytes] = {}
    while not extensions.at_end():
        ext_type, body = extensions.uint(2), extensions.vector(2)
        if ext_type in found:  # two SNIs could be routed by one and served by the other
            raise NotTLS(f"duplicate extension {ext_type}")
        found[ext_type] = body
    sni, alpn = found.get(EXT_SERVER_NAME), found.get(EXT_ALPN)
    return ClientHello(None if sni is None else _server_name(sni),
                       () if alpn is None else _alpn(alpn))
