"""PROXY protocol headers, versions 1 and 2 (HAProxy's "The PROXY protocol" specification),
sans-I/O: ``parse`` looks at the bytes a connection from a trusted load balancer began with
and says ``NEED_MORE``, ``Header`` (the client's address and port, and how many bytes the
header took) or ``Refused`` (with a reason). The socket side is ``edgeway.proxied``.

Theory of operation. ``parse`` is a pure function of the bytes received so far, called again
with more of them until it decides; it decides as early as the bytes allow (a wrong first
byte is refused at once) and never reads past the header: ``Header.length`` says where the
client's own bytes (an HTTP request, a TLS ClientHello) begin. Every prefix of a valid header
needs more; a decision, once made, stays the same whatever bytes follow.

- Version 1 is one line of text: ``PROXY TCP4 <src> <dst> <sport> <dport>\\r\\n`` (or TCP6),
  at most 107 bytes with its CRLF, single spaces, addresses in their canonical text (no
  leading zeros, no IPv6 scope), ports 0-65535 without leading zeros.
  ``PROXY UNKNOWN ...\\r\\n`` (whatever follows UNKNOWN is ignored) carries no address: the
  connection's own counts.
- Version 2 is binary: the 12-byte signature, the version (2) and command (LOCAL or PROXY),
  the address family and transport, a 16-bit length, then the addresses and TLVs (skipped).
  LOCAL (a load balancer's health check) and PROXY over AF_UNSPEC carry no address: the
  connection's own counts. PROXY over AF_INET or AF_INET6 must be STREAM (TCP); AF_UNIX,
  DGRAM and other values are refused. The whole header is bounded by ``V2_MAX``.

An IPv4-mapped IPv6 source (``::ffff:192.0.2.7``, from a dual-stack load balancer) is given as
the IPv4 client it is, as policies and caps count it anyway.
"""

from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass
from typing import Final

SIGNATURE: Final = b"\r\n\r\n\x00\r\nQUIT\n"
V1_PREFIX: Final = b"PROXY "
V1_MAX: Final = 107  # the longest version 1 line, CRLF included (the specification's)
V2_MAX: Final = 4096  # the longest version 2 header accepted (16 bytes + addresses + TLVs)
MAX: Final = V2_MAX  # the most bytes a header may take, of either version
_V2_FIXED = 16
_LOCAL, _PROXY = 0, 1
_UNSPEC, _INET, _INET6 = 0, 1, 2
_STREAM = 1
_ADDRESSES = {_INET: (4, 12), _INET6: (16, 36)}  # family: (one address, the whole block)
_PRINTABLE = frozenset(range(0x20, 0x7F))
_UNPRINTABLE = "the version 1 header holds a byte other than printable ASCII before its CRLF"

Address = tuple[str, int]


class NeedMore:
    """Not decided yet: call ``parse`` again with more bytes."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NEED_MORE"


NEED_MORE: Final = NeedMore()


@dataclass(frozen=True)
class Header:
    version: int
    length: int  # bytes the header took; the client's own bytes follow
    source: Address | None  # None: no address given (LOCAL, UNKNOWN): the connection's own
    destination: Address | None = None


@dataclass(frozen=True)
class Refused:
    reason: str


Result = NeedMore | Header | Refused


def parse(data: bytes) -> Result:
    """What the bytes a connection began with say (see the module's docstring)."""
    if SIGNATURE.startswith(data[:len(SIGNATURE)]) and data[:1] == b"\r":
        return _v2(data) if len(data) >= len(SIGNATURE) else NEED_MORE
    if V1_PREFIX.startswith(data[:len(V1_PREFIX)]):
        return _v1(data) if len(data) >= len(V1_PREFIX) else NEED_MORE
    return Refused("the connection did not begin with a PROXY protocol header")


# -- version 1 --------------------------------------------------------------------------------

def _v1(data: bytes) -> Result:
    end = data.find(b"\r\n", 0, V1_MAX)
    if end < 0:
        head = data[:V1_MAX]
        if not _PRINTABLE.issuperset(head[:-1] if head.endswith(b"\r") else head):
            return Refused(_UNPRINTABLE)
        if len(data) >= V1_MAX:
            return Refused(f"the version 1 header has no CRLF within {V1_MAX} bytes")
        return NEED_MORE
    line = data[:end]
    if not _PRINTABLE.issuperset(line):
        return Refused(_UNPRINTABLE)
    fields = line.split(b" ")
    proto = fields[1]
    if proto == b"UNKNOWN":
        return Header(1, end + 2, None)
    if proto not in (b"TCP4", b"TCP6"):
        return Refused("the version 1 header's protocol is not TCP4, TCP6 or UNKNOWN")
    if len(fields) != 6:
        return Refused("the version 1 header is not PROXY <protocol> <source> <destination> "
                       "<source port> <destination port>, with single spaces")
    kind = ipaddress.IPv4Address if proto == b"TCP4" else ipaddress.IPv6Address
    source, destination = _v1_address(kind, fields[2]), _v1_address(kind, fields[3])
    sport, dport = _v1_port(fields[4]), _v1_port(fields[5])
    if source is None or destination is None:
        return Refused(f"the version 1 header's addresses are not {proto.decode()} addresses")
    if sport is None or dport is None:
        return Refused("the version 1 header's ports are not numbers from 0 to 65535")
    return Header(1, end + 2, (source, sport), (destination, dport))


def _v1_address(kind: type[ipaddress.IPv4Address | ipaddress.IPv6Address],
                text: bytes) -> str | None:
    if b"%" in text:  # (an IPv6 scope names an interface of the sender, not an address)
        return None
    try:
        return _text(kind(text.decode("ascii")))
    except ValueError:
        return None


def _text(addr: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str:
    """An address as the client's: an IPv4-mapped IPv6 one is the IPv4 client it maps."""
    mapped = addr.ipv4_mapped if isinstance(addr, ipaddress.IPv6Address) else None
    return str(mapped or addr)


def _v1_port(text: bytes) -> int | None:
    if not (text.isdigit() and len(text) <= 5) or (text.startswith(b"0") and text != b"0"):
        return None
    port = int(text)
    return port if port <= 65535 else None


# -- version 2 --------------------------------------------------------------------------------

def _v2(data: bytes) -> Result:
    if len(data) > 12:
        version, command = data[12] >> 4, data[12] & 0x0F
        if version != 2:
            return Refused(f"the header's version is {version}, not 2")
        if command not in (_LOCAL, _PROXY):
            return Refused(f"the version 2 header's command is {command}, not LOCAL (0) "
                           "or PROXY (1)")
    if len(data) > 13 and data[12] & 0x0F == _PROXY and (refused := _family(data[13])):
        return refused
    if len(data) < _V2_FIXED:
        return NEED_MORE
    length = _V2_FIXED + struct.unpack_from("!H", data, 14)[0]
    if length > V2_MAX:
        return Refused(f"the version 2 header is {length} bytes long, more than {V2_MAX}")
    family = data[13] >> 4
    if data[12] & 0x0F == _PROXY and family != _UNSPEC \
            and length < _V2_FIXED + _ADDRESSES[family][1]:
        return Refused("the version 2 header is too short for its addresses")
    if len(data) < length:
        return NEED_MORE
    if data[12] & 0x0F == _LOCAL or family == _UNSPEC:
        return Header(2, length, None)  # TLVs skipped
    return _v2_addresses(data, family, length)


def _family(byte: int) -> Refused | None:
    family, transport = byte >> 4, byte & 0x0F
    if family == _UNSPEC:
        return None
    if family not in _ADDRESSES:
        return Refused(f"the version 2 header's address family is {family}: only IPv4 (1) "
                       "and IPv6 (2) are served")
    if transport != _STREAM:
        return Refused(f"the version 2 header's transport is {transport}: only STREAM (1) "
                       "is served")
    return None


def _v2_addresses(data: bytes, family: int, length: int) -> Header:
    size, _block = _ADDRESSES[family]
    kind = ipaddress.IPv4Address if family == _INET else ipaddress.IPv6Address
    at = _V2_FIXED
    source = _text(kind(data[at:at + size]))
    destination = _text(kind(data[at + size:at + 2 * size]))
    sport, dport = struct.unpack_from("!HH", data, at + 2 * size)
    return Header(2, length, (source, sport), (destination, dport))
