"""dnspython queries to the built-in DNS, over UDP or TCP, polled until they hold."""

from __future__ import annotations

import time
from collections.abc import Callable

import dns.message
import dns.query
import dns.rcode
import dns.rdatatype


def query(port: int, name: str, rdtype: str, tcp: bool = False) -> dns.message.Message:
    q = dns.message.make_query(name, rdtype)
    ask = dns.query.tcp if tcp else dns.query.udp
    return ask(q, "127.0.0.1", timeout=3, port=port)


def values(msg: dns.message.Message, rdtype: str) -> list[str]:
    want = dns.rdatatype.from_text(rdtype)
    return sorted(rd.to_text() for rrset in msg.answer if rrset.rdtype == want for rd in rrset)


def until(port: int, name: str, rdtype: str, holds: Callable[[dns.message.Message], bool],
          tcp: bool = False, timeout: float = 15) -> dns.message.Message:
    deadline = time.monotonic() + timeout
    while True:
        msg = query(port, name, rdtype, tcp)
        if holds(msg) or time.monotonic() > deadline:
            return msg
        time.sleep(0.1)


def rcode(msg: dns.message.Message) -> str:
    return dns.rcode.to_text(msg.rcode())
