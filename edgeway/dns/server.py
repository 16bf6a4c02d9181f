"""The built-in DNS server's listeners: UDP and TCP on ``--dns-addr`` (TCP: two-byte length
prefixed messages, several per connection, closed after 10 s idle). Answers come from the
zones in memory (``zones.answer``); the zones are reloaded from the store when this node
changes a domain, an ingress or a challenge, or an agent binds or ends an endpoint (all
announced on the platform's change bus), and every ``max_age`` seconds (changes made on
other nodes). While the database is out of reach the last zones keep serving."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time
from typing import cast

import structlog

from edgeway import caps
from edgeway.accept import Acceptor
from edgeway.config import listen_socket
from edgeway.dns import records
from edgeway.dns.zones import Zones, answer
from edgeway.settings import Settings
from edgeway.store.db import Database, DatabaseUnavailable

log = structlog.get_logger()
WATCHED = frozenset(("reserved_domains", "agent_ingresses", "endpoints", "acme_challenges",
                     "nodes"))
IDLE = 10.0


class _Udp(asyncio.DatagramProtocol):
    def __init__(self, server: DnsServer) -> None:
        self.server = server
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)  # (uvloop's is not one)

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        reply = answer(self.server.zones, data, tcp=False)
        if reply is not None and self.transport is not None:
            self.transport.sendto(reply, addr)


class DnsServer:
    def __init__(self, db: Database, settings: Settings, max_age: float = 5.0) -> None:
        self.db, self.settings, self.max_age = db, settings, max_age
        self.zones = Zones()
        self._changed = asyncio.Event()
        self._closers: list[asyncio.BaseTransport | Acceptor] = []
        self._follow: asyncio.Task[None] | None = None

    def changed(self, collection: str) -> None:
        if collection in WATCHED:
            self._changed.set()

    async def reload(self) -> None:
        old = self.zones
        try:  # new contents get a new serial
            self.zones = await records.load(self.db, self.settings,
                                            max(old.serial + 1, int(time.time())))
        except DatabaseUnavailable as exc:
            log.warning("dns_zones_stale", error=str(exc))
            return
        if self.zones.records == old.records:
            self.zones = old

    async def start(self, host: str, port: int, reuse_port: bool = False) -> None:
        await self.reload()
        loop = asyncio.get_running_loop()
        udp = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET,
                            socket.SOCK_DGRAM)
        try:
            if reuse_port:
                udp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            udp.bind((host, port))
        except OSError as exc:
            udp.close()
            raise OSError(exc.errno, f"cannot listen for the DNS server (UDP) on "
                          f"{host}:{port}: {exc.strerror or exc}") from None
        transport, _ = await loop.create_datagram_endpoint(lambda: _Udp(self), sock=udp)
        self._closers.append(transport)
        tcp = listen_socket("DNS server (TCP)", host, port, reuse_port)
        self._closers.append(Acceptor.streams(tcp, caps.process().door("DNS server (TCP)"),
                                              self._tcp_client).start())
        self._follow = asyncio.create_task(self._follow_changes())
        log.info("dns_listening", addr=f"{host}:{port}", zones=list(self.zones.apexes))

    async def stop(self) -> None:
        if self._follow is not None:
            self._follow.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._follow
        for closer in self._closers:
            closer.close()

    async def _follow_changes(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):  # (asyncio.timeout: wait_for may swallow
                async with asyncio.timeout(self.max_age):  # the cancel that stops us)
                    await self._changed.wait()
            self._changed.clear()
            try:
                await self.reload()
            except Exception:  # a failed reload must not end the follower
                log.exception("dns_reload_failed")

    async def _tcp_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                          _peer: tuple[str, int]) -> None:
        try:
            while True:  # (asyncio.timeout: the task wait_for makes would hold the error)
                async with asyncio.timeout(IDLE):
                    head = await reader.readexactly(2)
                    wire = await reader.readexactly(int.from_bytes(head, "big"))
                reply = answer(self.zones, wire, tcp=True)
                if reply is None:
                    break
                writer.write(len(reply).to_bytes(2, "big") + reply)
                await writer.drain()
        except (TimeoutError, asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
