"""The ClientHello parser on real hellos from the stdlib's OpenSSL, re-split into records, cut
short, hand-built with broken extensions, and mutated at random."""

from __future__ import annotations

import ssl
import struct
from itertools import pairwise

import pytest
from hypothesis import given
from hypothesis import strategies as st

from edgeway.edge.sni import ClientHello, NotTLS, parse_client_hello


def real_hello(server_hostname: str | None = "app.example.com", *, alpn: list[str] | None = None,
               version: ssl.TLSVersion | None = None) -> bytes:
    """The first flight of a real client: ``version`` pins both ends of the range if given."""
    ctx = ssl.create_default_context()
    if server_hostname is None:
        ctx.check_hostname = False
    if version is not None:
        ctx.minimum_version = ctx.maximum_version = version
    if alpn:
        ctx.set_alpn_protocols(alpn)
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    conn = ctx.wrap_bio(incoming, outgoing, server_hostname=server_hostname)
    with pytest.raises(ssl.SSLWantReadError):
        conn.do_handshake()
    return outgoing.read()


def record(payload: bytes, content_type: int = 22) -> bytes:
    return struct.pack(">BHH", content_type, 0x0301, len(payload)) + payload


def resplit(wire: bytes, parts: int = 3) -> bytes:
    """The same handshake bytes carried in ``parts`` records instead of the original one."""
    assert wire[0] == 22 and int.from_bytes(wire[3:5], "big") == len(wire) - 5
    payload = wire[5:]
    cuts = [len(payload) * i // parts for i in range(parts + 1)]
    return b"".join(record(payload[a:b]) for a, b in pairwise(cuts))


def vec(len_size: int, body: bytes) -> bytes:
    return len(body).to_bytes(len_size, "big") + body


def ext(ext_type: int, body: bytes) -> bytes:
    return struct.pack(">H", ext_type) + vec(2, body)


def sni(*names: tuple[int, bytes]) -> bytes:
    return ext(0, vec(2, b"".join(bytes([t]) + vec(2, n) for t, n in names)))


def alpn(*names: bytes) -> bytes:
    return ext(16, vec(2, b"".join(vec(1, n) for n in names)))


def handshake(extensions: bytes | None, handshake_type: int = 1) -> bytes:
    """A minimal hand-built ClientHello message; ``None`` omits the extensions block."""
    body = b"\x03\x03" + bytes(32) + vec(1, b"") + vec(2, b"\x13\x01") + vec(1, b"\x00")
    if extensions is not None:
        body += vec(2, extensions)
    return bytes([handshake_type]) + vec(3, body)


def built_hello(extensions: bytes | None, handshake_type: int = 1) -> bytes:
    return record(handshake(extensions, handshake_type))


HELLO = real_hello()
TLS12 = real_hello(version=ssl.TLSVersion.TLSv1_2)
TLS13 = real_hello(version=ssl.TLSVersion.TLSv1_3)
H2 = real_hello(alpn=["h2", "http/1.1"])
REAL = [HELLO, TLS12, TLS13, H2, real_hello(None)]


@pytest.mark.parametrize("version", [None, ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3])
def test_real_hellos(version: ssl.TLSVersion | None) -> None:
    wire = real_hello(version=version)
    assert parse_client_hello(wire) == ClientHello("app.example.com", ())
    assert parse_client_hello(real_hello(None, version=version)) == ClientHello(None, ())
    with_alpn = real_hello("x.test", alpn=["h2", "http/1.1"], version=version)
    assert parse_client_hello(with_alpn) == ClientHello("x.test", ("h2", "http/1.1"))


def test_name_is_lower_cased_and_trailing_dot_dropped() -> None:
    wire = real_hello("APP.Example.COM.")
    assert b"APP.Example.COM." in wire  # OpenSSL sends it as given
    assert parse_client_hello(wire) == ClientHello("app.example.com", ())


@pytest.mark.parametrize("wire", REAL)
def test_every_prefix_needs_more(wire: bytes) -> None:
    assert all(parse_client_hello(wire[:n]) is None for n in range(len(wire)))
    expected = parse_client_hello(wire)
    assert isinstance(expected, ClientHello)
    assert parse_client_hello(wire + b"\x17\x03\x03\x00\x05hello") == expected
    assert parse_client_hello(wire + b"GET / HTTP/1.1\r\n") == expected


@pytest.mark.parametrize("wire", REAL)
def test_hello_split_across_records(wire: bytes) -> None:
    split = resplit(wire)
    assert split.count(b"\x16\x03\x01") >= 3 and len(split) == len(wire) + 10
    assert parse_client_hello(split) == parse_client_hello(wire)
    assert all(parse_client_hello(split[:n]) is None for n in range(len(split)))
    assert parse_client_hello(resplit(wire, 40)) == parse_client_hello(wire)


def test_hand_built_hellos() -> None:
    assert parse_client_hello(built_hello(None)) == ClientHello(None, ())
    assert parse_client_hello(built_hello(b"")) == ClientHello(None, ())
    both = sni((0, b"Api.Test")) + ext(0xFF01, b"\x00") + alpn(b"h2", b"\xff")
    assert parse_client_hello(built_hello(both)) == ClientHello("api.test", ("h2", "\xff"))
    # Only host_name (type 0) counts; other name types are skipped.
    assert parse_client_hello(built_hello(sni((1, b"other")))) == ClientHello(None, ())
    assert parse_client_hello(built_hello(sni((1, b"x"), (0, b"a.b")))) == ClientHello("a.b", ())
    # The record may carry more after the ClientHello message; that is not part of the hello.
    coalesced = record(handshake(sni((0, b"a.b"))) + b"\x02\x00\x00\x00")
    assert parse_client_hello(coalesced) == ClientHello("a.b", ())


@pytest.mark.parametrize(("wire", "why"), [
    (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", "record type 71"),
    (b"\x16\x02\x00", "version major 2"),
    (b"\x80\x2e\x01\x03\x01", "record type 128"),  # SSLv2-style hello
    (built_hello(b"", handshake_type=2), "handshake type 2"),
    (b"\x16\x03\x01" + struct.pack(">H", 16384 + 2049) + b"\x01", "18433 bytes"),
    (b"\x16\x03\x01\x00\x00", "0 bytes"),
    (b"\x16\x03\x01\x00\x04\x01\x01\x00\x01", "65537 bytes"),
    (record(b"\x01\x00") + record(b"\x00", content_type=23), "record type 23"),
    (record(b"\x01" + vec(3, bytes(10))), "runs past"),
    (built_hello(sni((0, b""))), "empty server name"),
    (built_hello(sni((0, b"."))), "empty server name"),
    (built_hello(sni((0, "bücher.de".encode()))), "non-ASCII"),
    (built_hello(sni()), "empty server_name list"),
    (built_hello(sni((0, b"a"), (0, b"b"))), "two host_name"),
    (built_hello(sni((0, b"a")) + sni((0, b"b"))), "duplicate extension 0"),
    (built_hello(ext(0, b"\x00\x06\x00\x00\x02ab")), "runs past"),
    (built_hello(ext(0, vec(2, b"\x00" + vec(2, b"a")) + b"!")), "trailing bytes"),
    (built_hello(alpn()), "empty ALPN list"),
    (built_hello(alpn(b"h2", b"")), "empty ALPN protocol"),
    (built_hello(ext(16, b"\x00\x03\x05h2")), "runs past"),
    (built_hello(ext(16, vec(2, vec(1, b"h2")) + b"!")), "trailing bytes"),
    (built_hello(b"\x00\x00\x00\x09"), "runs past"),
    (built_hello(b"\x00"), "runs past"),
    (record(b"\x01" + vec(3, bytes(34) + b"\x05")), "runs past"),
], ids=lambda v: v if isinstance(v, str) else "")
def test_not_tls(wire: bytes, why: str) -> None:
    with pytest.raises(NotTLS, match=why):
        parse_client_hello(wire)


def test_trailing_bytes_after_extensions() -> None:
    body = b"\x03\x03" + bytes(32) + vec(1, b"") + vec(2, b"\x13\x01") + vec(1, b"\x00")
    body += vec(2, b"") + b"junk"
    with pytest.raises(NotTLS, match="trailing bytes"):
        parse_client_hello(record(b"\x01" + vec(3, body)))


def outcome(data: bytes) -> ClientHello | str | None:
    """What the parser made of ``data``; anything other than these three escapes the test."""
    try:
        return parse_client_hello(data)
    except NotTLS as exc:
        assert str(exc)
        return "NotTLS"


@given(st.binary(max_size=600) | st.binary(max_size=600).map(lambda b: b"\x16\x03\x01" + b))
def test_arbitrary_bytes(data: bytes) -> None:
    result = outcome(data)
    assert result is None or result == "NotTLS" or isinstance(result, ClientHello)


@given(st.sampled_from(REAL + [resplit(w) for w in REAL]),
       st.lists(st.tuples(st.integers(0, 2000), st.integers(0, 255)), min_size=1, max_size=6),
       st.integers(0, 2000))
def test_mutated_hellos(wire: bytes, edits: list[tuple[int, int]], cut: int) -> None:
    mutated = bytearray(wire)
    for index, value in edits:
        mutated[index % len(mutated)] = value
    result = outcome(bytes(mutated[:max(cut, 5)]))
    assert result is None or result == "NotTLS" or isinstance(result, ClientHello)
    if isinstance(result, ClientHello) and result.server_name is not None:
        assert result.server_name == result.server_name.lower() and result.server_name.isascii()
