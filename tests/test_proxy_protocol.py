"""The PROXY protocol parser (``edgeway.proxy_protocol``) on scripted bytes: headers of both
versions whole, cut at every byte, followed by the client's own bytes, and every way of
getting one wrong; and, for any bytes at all, a decision that never changes once made."""

from __future__ import annotations

import ipaddress
import struct
from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgeway.proxy_protocol import (
    NEED_MORE,
    SIGNATURE,
    V1_MAX,
    V2_MAX,
    Header,
    Refused,
    Result,
    parse,
)

FOLLOWING = b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"  # the client's own bytes after the header
MAX6 = "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"


def v2(command: int = 1, family: int = 1, transport: int = 1, addresses: bytes = b"",
       tlvs: bytes = b"", version: int = 2, length: int | None = None) -> bytes:
    body = addresses + tlvs
    size = len(body) if length is None else length
    return SIGNATURE + bytes([version << 4 | command, family << 4 | transport]) + \
        struct.pack("!H", size) + body


def inet(src: str, dst: str, sport: int, dport: int) -> bytes:
    return ipaddress.ip_address(src).packed + ipaddress.ip_address(dst).packed + \
        struct.pack("!HH", sport, dport)


def tlv(kind: int, value: bytes) -> bytes:
    return bytes([kind]) + struct.pack("!H", len(value)) + value


VALID: list[tuple[bytes, Header]] = [  # (each header's length: the whole of its bytes)
    (b"PROXY TCP4 192.0.2.7 198.51.100.1 56324 443\r\n",
     Header(1, 0, ("192.0.2.7", 56324), ("198.51.100.1", 443))),
    (b"PROXY TCP6 2001:db8::7 2001:db8::1 0 65535\r\n",
     Header(1, 0, ("2001:db8::7", 0), ("2001:db8::1", 65535))),
    (b"PROXY TCP6 ::ffff:192.0.2.7 ::1 1 2\r\n",
     Header(1, 0, ("192.0.2.7", 1), ("::1", 2))),  # (an IPv4 client: said as one)
    (b"PROXY UNKNOWN\r\n", Header(1, 0, None)),
    (b"PROXY UNKNOWN 2001:db8::7 whatever follows is ignored\r\n", Header(1, 0, None)),
    (f"PROXY UNKNOWN {MAX6} {MAX6} 65535 65535\r\n".encode(),  # the longest: 107 bytes
     Header(1, 0, None)),
    (v2(addresses=inet("192.0.2.7", "198.51.100.1", 56324, 443)),
     Header(2, 0, ("192.0.2.7", 56324), ("198.51.100.1", 443))),
    (v2(family=2, addresses=inet("2001:db8::7", "2001:db8::1", 5, 80)),
     Header(2, 0, ("2001:db8::7", 5), ("2001:db8::1", 80))),
    (v2(family=2, addresses=inet("::ffff:192.0.2.7", "2001:db8::1", 5, 80)),
     Header(2, 0, ("192.0.2.7", 5), ("2001:db8::1", 80))),
    (v2(addresses=inet("192.0.2.7", "198.51.100.1", 1, 2),  # TLVs: skipped
        tlvs=tlv(0x05, b"unique-id") + tlv(0xEA, b"vpce-0123") + tlv(0x04, b"")),
     Header(2, 0, ("192.0.2.7", 1), ("198.51.100.1", 2))),
    (v2(command=0, family=0, transport=0), Header(2, 0, None)),  # LOCAL: a health check
    (v2(command=0, family=1, addresses=inet("10.0.0.1", "10.0.0.2", 1, 2)),
     Header(2, 0, None)),  # LOCAL's addresses are not the client's
    (v2(command=0, family=9, transport=9, tlvs=b"\x00" * 40), Header(2, 0, None)),
    (v2(family=0, transport=0, tlvs=b"\x01\x02"), Header(2, 0, None)),  # PROXY, AF_UNSPEC
    (v2(length=V2_MAX - 16, addresses=inet("192.0.2.7", "198.51.100.1", 1, 2),
        tlvs=b"\x00" * (V2_MAX - 28)), Header(2, 0, ("192.0.2.7", 1),
                                              ("198.51.100.1", 2))),
]


@pytest.mark.parametrize(("data", "header"), VALID)
def test_a_valid_header_cut_anywhere_needs_more_then_parses_without_the_bytes_after(
        data: bytes, header: Header) -> None:
    header = replace(header, length=len(data))  # (the whole of it is the header)
    for cut in range(len(data)):
        assert parse(data[:cut]) is NEED_MORE, cut
    assert parse(data) == header
    assert parse(data + FOLLOWING) == header  # what follows is the client's, not consumed
    assert parse(data + SIGNATURE + data) == header


REFUSED: list[tuple[bytes, str]] = [
    (b"GET / HTTP/1.1\r\n\r\n", "did not begin with a PROXY protocol header"),
    (b"\x16\x03\x01\x02\x00\x01", "did not begin with a PROXY protocol header"),  # TLS
    (b"proxy TCP4 1.2.3.4 5.6.7.8 1 2\r\n", "did not begin"),
    (b"PROXY  TCP4 1.2.3.4 5.6.7.8 1 2\r\n", "not TCP4, TCP6 or UNKNOWN"),
    (b"PROXY TCP5 1.2.3.4 5.6.7.8 1 2\r\n", "not TCP4, TCP6 or UNKNOWN"),
    (b"PROXY UNKNOWNS\r\n", "not TCP4, TCP6 or UNKNOWN"),
    (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2 3\r\n", "with single spaces"),
    (b"PROXY TCP4 1.2.3.4 5.6.7.8 1\r\n", "with single spaces"),
    (b"PROXY TCP4 1.2.3.4  5.6.7.8 1 2\r\n", "with single spaces"),
    (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2 \r\n", "with single spaces"),
    (b"PROXY TCP4 256.2.3.4 5.6.7.8 1 2\r\n", "not TCP4 addresses"),
    (b"PROXY TCP4 01.2.3.4 5.6.7.8 1 2\r\n", "not TCP4 addresses"),
    (b"PROXY TCP4 1.2.3 5.6.7.8 1 2\r\n", "not TCP4 addresses"),
    (b"PROXY TCP4 ::1 5.6.7.8 1 2\r\n", "not TCP4 addresses"),
    (b"PROXY TCP4 1.2.3.4 example.com 1 2\r\n", "not TCP4 addresses"),
    (b"PROXY TCP6 1.2.3.4 ::1 1 2\r\n", "not TCP6 addresses"),
    (b"PROXY TCP6 fe80::1%eth0 ::1 1 2\r\n", "not TCP6 addresses"),
    (b"PROXY TCP4 1.2.3.4 5.6.7.8 65536 2\r\n", "ports are not numbers"),
    (b"PROXY TCP4 1.2.3.4 5.6.7.8 080 2\r\n", "ports are not numbers"),
    (b"PROXY TCP4 1.2.3.4 5.6.7.8 -1 2\r\n", "ports are not numbers"),
    (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 +2\r\n", "ports are not numbers"),
    (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 \xd9\xa3\r\n", "printable ASCII"),  # (a digit, in Arabic)
    (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\n", "printable ASCII"),  # LF without CR
    (b"PROXY TCP4 1.2.3.4 5.6.7.8 1 2\rX\n", "printable ASCII"),  # CR without LF
    (b"PROXY TCP4 1.2.3.4\x00 5.6.7.8 1 2\r\n", "printable ASCII"),
    (b"PROXY UNKNOWN " + b"x" * (V1_MAX - 14), f"no CRLF within {V1_MAX} bytes"),
    (f"PROXY UNKNOWN {MAX6} {MAX6} 65535 655350\r\n".encode(), f"within {V1_MAX} bytes"),
    (SIGNATURE[:5] + b"X", "did not begin"),
    (SIGNATURE + b"\x11\x11\x00\x0c", "version is 1, not 2"),
    (SIGNATURE + b"\x32", "version is 3, not 2"),
    (SIGNATURE + b"\x22", "command is 2, not LOCAL (0) or PROXY (1)"),
    (v2(family=3, addresses=b"\x00" * 216), "address family is 3: only IPv4 (1) and IPv6"),
    (SIGNATURE + b"\x21\x41", "address family is 4"),
    (SIGNATURE + b"\x21\x12", "transport is 2: only STREAM (1)"),  # UDP
    (SIGNATURE + b"\x21\x10", "transport is 0"),
    (v2(addresses=inet("::1", "::1", 1, 2)[:11]), "too short for its addresses"),
    (v2(family=2, addresses=inet("192.0.2.7", "198.51.100.1", 1, 2)),
     "too short for its addresses"),
    (v2(length=V2_MAX - 15), f"is {V2_MAX + 1} bytes long, more than {V2_MAX}"),
    (v2(command=0, length=65535), "more than"),
]


@pytest.mark.parametrize(("data", "reason"), REFUSED)
def test_a_bad_header_is_refused_with_its_reason_as_soon_as_the_bytes_tell(
        data: bytes, reason: str) -> None:
    result = parse(data)
    assert isinstance(result, Refused) and reason in result.reason, result
    decided = next(cut for cut in range(len(data) + 1) if parse(data[:cut]) is not NEED_MORE)
    for cut in range(decided, len(data) + 1):
        assert parse(data[:cut]) == result  # decided early, and for good
    assert parse(data + FOLLOWING) == result


def test_the_v1_length_limit_counts_the_crlf() -> None:
    line = f"PROXY UNKNOWN {MAX6} {MAX6} 65535 65535\r\n".encode()
    assert len(line) == V1_MAX and isinstance(parse(line), Header)
    longer = line[:-2] + b"5\r\n"
    assert parse(longer[:V1_MAX]) == Refused(f"the version 1 header has no CRLF within "
                                            f"{V1_MAX} bytes")
    assert parse(longer) == parse(longer[:V1_MAX])
    assert parse(longer[:V1_MAX - 1]) is NEED_MORE  # (a CRLF may still come)


def stays(data: bytes) -> None:
    """Once ``parse`` decides on a prefix of ``data``, every longer prefix gets the same."""
    decided: Result | None = None
    for cut in range(len(data) + 1):
        result = parse(data[:cut])
        if decided is not None:
            assert result == decided, (data, cut)
        elif result is not NEED_MORE:
            decided = result
            if isinstance(result, Header):
                assert 0 < result.length <= cut


@given(st.binary(max_size=300))
def test_any_bytes_get_one_decision(data: bytes) -> None:
    stays(data)


@settings(max_examples=1000)
@given(st.sampled_from([d for d, _ in VALID] + [d for d, _ in REFUSED]),
       st.integers(0, 120), st.binary(min_size=1, max_size=3), st.binary(max_size=40))
def test_mutated_headers_get_one_decision(base: bytes, at: int, patch: bytes,
                                          tail: bytes) -> None:
    at = min(at, len(base))
    stays(base[:at] + patch + base[at + len(patch):] + tail)


def test_the_longest_v2_header_is_bounded_before_its_bytes_come() -> None:
    head = v2(command=0, length=V2_MAX - 16)[:16]
    assert parse(head) is NEED_MORE  # (the limit itself: waits for its bytes)
    head = v2(command=0, length=V2_MAX - 15)[:16]
    assert isinstance(parse(head), Refused)  # one more: refused on its 16th byte
