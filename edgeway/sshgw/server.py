"""The SSH gateway's listener (``--ssh-addr``): asyncssh with public-key authentication only
(no passwords, no keyboard-interactive, no agent or X11 forwarding, no ``-L``), keep-alives
that end a client that stopped answering, the host key (and host certificate) of
``keys``; and what follows the platform's changes: sessions whose credential, certificate
authority or owner is gone, or whose address an IP restriction of type ``agent`` now
refuses, are ended; a changed ACL stops the tunnels it no longer allows. The API's
``tunnel_sessions`` stop operation ends a session here (``command``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Coroutine
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import asyncssh
import structlog

from edgeway import __version__, caps
from edgeway.config import listen_socket
from edgeway.platform import Platform
from edgeway.restrictions import KINDS as RESTRICTION_KINDS
from edgeway.sshgw import ciphers, keys
from edgeway.sshgw.forwards import Services
from edgeway.sshgw.keys import Keys
from edgeway.sshgw.session import GatewayConnection
from edgeway.store.db import DatabaseUnavailable
from edgeway.store.repo import Changes
from edgeway.tunnel.admission import Admission, AuthFailed
from edgeway.tunnel.binder import Binder
from edgeway.tunnel.rpc import StreamType

log = structlog.get_logger()
LOGIN_TIMEOUT = 30.0  # to authenticate, from the connection
KEEPALIVE_MISSES = 3  # unanswered keep-alives that end a connection
WATCHED = ("ssh_credentials", "ssh_certificate_authorities", "bot_users", *RESTRICTION_KINDS)
RECHECK_EVERY = 10.0  # changes made through another node's API reach us this late
# Ciphers and MACs, by what a packet costs here (on ``cryptography``, per 200-byte packet,
# sealed and opened: AES-GCM ~2 µs and AES-CTR with HMAC-SHA2 ~2.5 µs with their keys set up
# once per key exchange (``ciphers``; 3.5-5 µs as asyncssh does them), UMAC-64 ~10 µs,
# chacha20-poly1305 ~25 µs, as asyncssh builds its cipher and MAC objects for every packet).
# The client's order decides among what both offer (RFC 4253 §7.1), so the costly ones are
# not offered: OpenSSH clients (chacha20-poly1305 first, then AES-CTR, then AES-GCM) get
# aes128-ctr with hmac-sha2-256-etm; ``ssh -c aes128-gcm@openssh.com`` gets AES-GCM. Every
# OpenSSH since 6.2 and PuTTY since 0.76 speak them. SHA-1 and MD5 MACs are not offered.
ENCRYPTION = ("aes128-gcm@openssh.com", "aes256-gcm@openssh.com", "aes128-ctr", "aes192-ctr",
              "aes256-ctr")
MACS = ("hmac-sha2-256-etm@openssh.com", "hmac-sha2-512-etm@openssh.com", "hmac-sha2-256",
        "hmac-sha2-512")
ciphers.install()  # (their packets: with the keys set up once per key exchange)


class SshGateway:
    def __init__(self, platform: Platform, binder: Binder, node: str, data_dir: Path,
                 names: tuple[str, ...], host_ca: str = "", keepalive: float = 15.0,
                 changes: Callable[[], Changes | None] = lambda: None) -> None:
        self.platform, self.data_dir = platform, data_dir
        self.names = tuple(n for n in dict.fromkeys(names) if n not in ("", "0.0.0.0", "::"))
        self.host_ca, self.keepalive = host_ca, keepalive
        self.keys = Keys(platform)
        self.services = Services(platform, binder, self.keys, Admission(platform), node, {},
                                 set(), changes, caps.process().door("SSH gateway"))
        self._acceptor: asyncssh.SSHAcceptor | None = None
        self._background: set[asyncio.Task[None]] = set()

    @property
    def connections(self) -> dict[str, GatewayConnection]:
        return self.services.connections

    async def start(self, host: str, port: int, reuse_port: bool = False) -> None:
        # asyncssh says "info" on every connection, channel and forward: our own lines say
        # what matters, once per session and tunnel
        asyncssh.set_log_level(logging.WARNING)
        key = keys.host_key(self.data_dir)
        cert: asyncssh.SSHCertificate | None = None
        expires = None
        if self.host_ca:
            cert, expires = await self.keys.host_certificate(self.host_ca, key, self.names)
        self._acceptor = await asyncssh.listen(
            sock=listen_socket("SSH gateway", host, port, reuse_port),
            server_factory=lambda: GatewayConnection(self.services),
            server_host_keys=[(key, cert)], server_version=f"Edgeway_{__version__}",
            public_key_auth=True, password_auth=False, kbdint_auth=False,
            encryption_algs=ENCRYPTION, mac_algs=MACS,
            host_based_auth=False, gss_auth=False, gss_kex=False, agent_forwarding=False,
            x11_forwarding=False, allow_pty=True, line_editor=False, encoding=None,
            login_timeout=LOGIN_TIMEOUT, keepalive_interval=self.keepalive,
            keepalive_count_max=KEEPALIVE_MISSES, config=None)
        self._spawn(self._recheck_every(RECHECK_EVERY))
        if expires is not None:
            self._spawn(self._renew(key, expires))
        log.info("ssh_gateway_start", addr=f"{host}:{port}",
                 host_key=key.get_fingerprint("sha256"), host_ca=self.host_ca or None)

    async def _renew(self, key: asyncssh.SSHKey, expires: datetime) -> None:
        """A fresh host certificate a month before the current one expires (for the
        connections that come after)."""
        while True:
            wait = expires - timedelta(days=keys.RENEW_DAYS) - datetime.now(UTC)
            await asyncio.sleep(max(wait.total_seconds(), 60.0))
            try:
                cert, expires = await self.keys.host_certificate(self.host_ca, key, self.names)
            except (ValueError, DatabaseUnavailable) as exc:
                log.warning("ssh_host_certificate_renewal_failed", error=str(exc))
                continue
            if self._acceptor is not None:
                self._acceptor.update(server_host_keys=[(key, cert)])

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(coro)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    def changed(self, collection: str) -> None:
        if collection in WATCHED and self.connections:
            self._spawn(self._warned(self.recheck()))

    @staticmethod
    async def _warned(coro: Coroutine[Any, Any, None]) -> None:
        try:
            await coro
        except DatabaseUnavailable as exc:
            log.warning("ssh_recheck_failed", error=str(exc))

    async def recheck(self) -> None:
        """End the sessions that may no longer be held; apply changed ACLs."""
        admission, binder = self.services.admission, self.services.binder
        for conn in list(self.connections.values()):
            if conn.identity is None:
                continue
            try:
                await admission.address(conn.peer)
                acl = list(await self.keys.still_valid(conn.identity))
            except AuthFailed as exc:
                log.info("ssh_session_revoked", session=conn.id, reason=str(exc))
                conn.end(str(exc))
                continue
            if acl != conn.acl:
                await binder.reauthorize(conn, acl)

    async def _recheck_every(self, seconds: float) -> None:
        while True:
            await asyncio.sleep(seconds)
            if self.connections:
                await self._warned(self.recheck())

    async def command(self, session_id: str, kind: int, body: dict[str, Any],
                      timeout: float = 10.0) -> str | None:
        """The API's Stop (the session ends) or Restart/Update (refused: an SSH client
        restarts by running ssh again); None when this gateway holds no such session."""
        conn = self.connections.get(session_id)
        if conn is None:
            return None
        if kind != StreamType.STOP:
            return "an SSH gateway session cannot restart or update: the user runs ssh again"
        conn.end("the session was stopped through the API")
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await conn.ended.wait()
        return ""

    async def stop(self) -> None:
        for task in list(self._background):
            task.cancel()
        if self._acceptor is not None:
            self._acceptor.close()
        for conn in list(self.connections.values()):
            conn.end("the server is shutting down")
        if self._acceptor is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._acceptor.wait_closed(), 5)
        if self.services.background:
            await asyncio.gather(*self.services.background, return_exceptions=True)
