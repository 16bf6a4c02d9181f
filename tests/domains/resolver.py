"""A recursive resolver for tests, standing for the internet's DNS: it holds the user's own
zone (the CNAMEs a user creates at their DNS provider, changeable while it runs) and asks
the platform's built-in DNS for everything else, following CNAMEs into it as a recursive
resolver does. Pebble's ``-dnsserver`` and the server's ``--dns-check-resolver`` point here.
UDP and TCP, in a thread of the test process."""

from __future__ import annotations

import socket
import socketserver
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import dns.flags
import dns.message
import dns.name
import dns.query
import dns.rcode
import dns.rdatatype
import dns.rrset


class Resolver:
    """The internet seen from an IPv4-only network (as Pebble's, whose http-01 dials an
    AAAA address without falling back to A): AAAA answers are left out."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.cnames: dict[str, str] = {}  # the user's zone: name -> CNAME target
        self.no_txt: set[str] = set()  # names whose TXT records are not seen (yet)
        self.servfail: set[str] = set()  # names every question about fails (SERVFAIL)
        # zones the user has not delegated yet (no NS records at their provider): nothing in
        # them resolves
        self.undelegated: set[str] = set()

    def cname(self, name: str) -> str | None:
        """The user's CNAME for ``name``, or a wildcard's one label up."""
        parent = name.split(".", 1)[1] if "." in name else ""
        return self.cnames.get(name) or self.cnames.get(f"*.{parent}")

    def _ask(self, name: str, rdtype: dns.rdatatype.RdataType) -> dns.message.Message:
        query = dns.message.make_query(name, rdtype)
        return dns.query.udp(query, self.upstream[0], timeout=5, port=self.upstream[1])

    def resolve(self, query: dns.message.Message) -> dns.message.Message:
        response = dns.message.make_response(query)
        response.flags |= dns.flags.RA
        question = query.question[0]
        name = question.name.to_text(omit_final_dot=True).lower()
        if name in self.servfail:
            response.set_rcode(dns.rcode.SERVFAIL)
            return response
        if any(name == z or name.endswith("." + z) for z in self.undelegated):
            response.set_rcode(dns.rcode.NXDOMAIN)
            return response
        if name in self.no_txt and question.rdtype == dns.rdatatype.TXT:
            return response  # (no answer: as before a record has propagated)
        seen = 0
        while (target := self.cname(name)) is not None and seen < 8:
            response.answer.append(dns.rrset.from_text(name + ".", 60, "IN", "CNAME",
                                                       target + "."))
            if question.rdtype == dns.rdatatype.CNAME:
                return response
            name, seen = target, seen + 1
        try:
            found = self._ask(name, question.rdtype)
        except (OSError, dns.exception.Timeout):
            response.set_rcode(dns.rcode.SERVFAIL)
            return response
        if found.rcode() == dns.rcode.REFUSED:  # no such zone anywhere: NXDOMAIN
            response.set_rcode(dns.rcode.NXDOMAIN)
            return response
        response.answer += [r for r in found.answer if r.rdtype != dns.rdatatype.AAAA]
        response.set_rcode(found.rcode())
        return response


def _handler(resolver: Resolver, tcp: bool) -> type[socketserver.BaseRequestHandler]:
    class Handler(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            if tcp:
                sock: Any = self.request
                length = int.from_bytes(sock.recv(2), "big")
                wire = b""
                while len(wire) < length:
                    chunk = sock.recv(length - len(wire))
                    if not chunk:
                        return
                    wire += chunk
            else:
                wire, sock = self.request
            reply = resolver.resolve(dns.message.from_wire(wire)).to_wire()
            if tcp:
                sock.sendall(len(reply).to_bytes(2, "big") + reply)
            else:
                sock.sendto(reply, self.client_address)
    return Handler


class _Udp(socketserver.ThreadingMixIn, socketserver.UDPServer):
    daemon_threads = True


class _Tcp(socketserver.ThreadingMixIn, socketserver.TCPServer):
    daemon_threads = True
    allow_reuse_address = True


@contextmanager
def running(upstream: tuple[str, int], port: int) -> Iterator[Resolver]:
    resolver = Resolver(upstream)
    servers = [_Udp(("127.0.0.1", port), _handler(resolver, False)),
               _Tcp(("127.0.0.1", port), _handler(resolver, True))]
    for s in servers:
        threading.Thread(target=s.serve_forever, daemon=True).start()
    try:
        yield resolver
    finally:
        for s in servers:
            s.shutdown()
            s.server_close()


def udp_and_tcp_port() -> int:
    """A loopback port free for both UDP and TCP."""
    from tests.server import free_port

    while True:
        port = free_port()
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
