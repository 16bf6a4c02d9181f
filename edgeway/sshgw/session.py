"""One SSH client on the gateway (``GatewayConnection``, asyncssh's ``SSHServer`` of that
connection), from authentication to its last tunnel.

Theory of operation. A stock OpenSSH client, after authenticating, asks for its remote
forwards (``tcpip-forward``) first, then opens its session channel and sends the command
(``http --domain=...``); under ``-N`` it opens no session. So a forward is accepted when it
is asked for (``Listener``, with a port number of this connection when it asked for port 0:
what OpenSSH reports as "allocated"), and the tunnels are bound once the command is known:
from the session's exec (or a shell: ``http``), or, with no session, ``NO_SESSION_WAIT``
after its last forward (OpenSSH sends its session request in the same flight as its forwards;
``no-more-sessions@openssh.com``, which would say it, is sent to OpenSSH servers only). A
session asked for after that is refused. Each forward becomes
one tunnel through the same binder agents use (``Binder.place``: ACL, names, ports, records);
its public connections come back as ``forwarded-tcpip`` channels (``channels.SshCarrier``).
A refused bind is written to the terminal and ends the session with exit status 1 (under
``-N``: the connection, with the reason as the disconnect message, which ssh prints). A
forward asked for later (``~C -R``) is bound at once; a cancelled one is unbound.

The session lasts as long as the connection: keep-alives (``--ssh-keepalive``) end it when
the client stops answering; its tunnels and its ``tunnel_sessions`` row go with it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

import asyncssh
import structlog

from edgeway import catalog, ids
from edgeway.platform import Platform
from edgeway.sshgw import command
from edgeway.sshgw.channels import Forward, SshCarrier
from edgeway.sshgw.command import Command, CommandError
from edgeway.sshgw.keys import Identity, Keys
from edgeway.sshgw.terminal import Terminal, TerminalSession
from edgeway.store.db import DatabaseUnavailable
from edgeway.store.repo import Repo
from edgeway.tunnel import records
from edgeway.tunnel.admission import Admission, AuthFailed
from edgeway.tunnel.binder import Binder
from edgeway.tunnel.binds import BindRefused
from edgeway.tunnel.registry import Tunnel

log = structlog.get_logger()
SESSIONS = catalog.BY_COLLECTION["tunnel_sessions"]
MAX_FORWARDS = 64  # per connection
NO_SESSION_WAIT = 1.0  # seconds after the last forward: no session is coming (-N)


@dataclass
class Services:
    """What every connection of the gateway uses."""
    platform: Platform
    binder: Binder
    keys: Keys
    admission: Admission
    node: str
    connections: dict[str, GatewayConnection]  # live sessions by id
    background: set[asyncio.Task[None]]  # connections' ends being recorded


class Listener(asyncssh.SSHListener):
    """A remote forward the client asked for; its tunnel once bound."""

    def __init__(self, owner: GatewayConnection, host: str, requested: int, port: int) -> None:
        super().__init__()
        self.owner, self.forward, self.requested = owner, Forward(host, port), requested
        self.tunnel: Tunnel | None = None

    def get_port(self) -> int:
        return self.forward.port

    def close(self) -> None:
        self.owner.cancelled(self)

    async def wait_closed(self) -> None:
        return None


class GatewayConnection(asyncssh.SSHServer):
    def __init__(self, services: Services) -> None:
        self.services = services
        self.id, self.credential, self.peer, self.user = "", "", "", ""
        self.acl: list[str] = []
        self.tunnels: dict[str, Tunnel] = {}
        self.identity: Identity | None = None
        self._candidate: Identity | None = None  # of the key asyncssh validated last
        self.ssh: asyncssh.SSHServerConnection | None = None
        self.carrier: SshCarrier | None = None
        self.listeners: list[Listener] = []
        self.command: Command | None = None  # known: the forwards are bound
        self.terminal = Terminal()
        self.session_opened = False
        self.ready = asyncio.Event()  # the tunnel_sessions row is written
        self.ended = asyncio.Event()  # the session is gone, with its tunnels and row
        self.tasks: set[asyncio.Task[None]] = set()
        self._wait: asyncio.TimerHandle | None = None

    @property
    def conn(self) -> SshCarrier:
        assert self.carrier is not None
        return self.carrier

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    # -- the connection and its authentication -----------------------------------------------

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self.ssh = conn
        self.peer = str((conn.get_extra_info("peername") or ("",))[0])
        self.carrier = SshCarrier(conn, self._raw_connection)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.carrier is not None:
            self.carrier.closed.set()
        self.ready.set()  # (a binding waiting for it finds the connection gone)
        task = asyncio.get_running_loop().create_task(self._ended(exc))
        self.services.background.add(task)
        task.add_done_callback(self.services.background.discard)

    async def begin_auth(self, username: str) -> bool:
        self.user = username
        try:
            await self.services.admission.address(self.peer)
        except AuthFailed as exc:
            raise asyncssh.PermissionDenied(str(exc)) from None
        return True

    def public_key_auth_supported(self) -> bool:
        return True

    async def validate_public_key(self, username: str, key: asyncssh.SSHKey) -> bool:
        self._candidate = await self._lookup(self.services.keys.credential(key))
        if self._candidate is None:
            log.info("ssh_key_refused", peer=self.peer, user=username,
                     fingerprint=key.get_fingerprint("sha256"))
        return self._candidate is not None

    async def validate_ca_key(self, username: str, key: asyncssh.SSHKey) -> bool:
        self._candidate = await self._lookup(self.services.keys.authority(key))
        return self._candidate is not None

    @staticmethod
    async def _lookup(found: Coroutine[Any, Any, Identity | None]) -> Identity | None:
        try:
            return await found
        except DatabaseUnavailable:
            raise asyncssh.ServiceNotAvailable("the server cannot reach its database; "
                                               "retry") from None

    async def auth_completed(self) -> None:
        identity = self.identity = self._candidate
        assert identity is not None and self.ssh is not None
        self.credential, self.acl = identity.credential, list(identity.acl)
        if identity.certificate and not self.ssh.check_certificate_permission(
                "port-forwarding"):
            self.terminal.say("this certificate does not permit port forwarding "
                              "(permit-port-forwarding): no tunnel can be bound", error=True)
        extra = {"version": self.ssh.get_extra_info("client_version") or "", "os": "",
                 "metadata": ""}
        sid = ids.new_id(SESSIONS.prefix)
        doc = records.session_doc(self.services.platform.settings, self.services.node,
                                  self.peer, identity.credential, extra, transport="ssh")
        try:
            async with self.services.platform.db.write() as tx:
                await Repo(tx).insert(SESSIONS, sid, doc)
        except DatabaseUnavailable:
            self.ssh.disconnect(asyncssh.DISC_SERVICE_NOT_AVAILABLE,
                                "the server cannot reach its database; retry")
            return
        self.id = sid
        self.services.connections[sid] = self
        self.services.binder.others[sid] = self
        self.ready.set()
        log.info("ssh_session_start", session=sid, credential=identity.credential,
                 peer=self.peer, user=self.user, key=identity.what)

    # -- forwards and the session channel --------------------------------------------------

    def server_requested(self, listen_host: str, listen_port: int
                         ) -> Listener | bool | Coroutine[Any, Any, Listener | bool]:
        taken = {listener.forward.port for listener in self.listeners}
        if len(self.listeners) >= MAX_FORWARDS or listen_port in taken:
            return False
        port = listen_port or next(p for p in range(1, 65536) if p not in taken)
        listener = Listener(self, listen_host, listen_port, port)
        self.listeners.append(listener)
        if self.command is not None:  # asked for after the others were bound
            return self._bind_late(listener)
        if not self.session_opened:
            if self._wait is not None:
                self._wait.cancel()
            self._wait = asyncio.get_running_loop().call_later(NO_SESSION_WAIT,
                                                               self._no_session)
        return listener

    def session_requested(self) -> TerminalSession | bool:
        if self.session_opened or self.command is not None:
            return False  # one session per connection
        self.session_opened = True
        return TerminalSession(self._started, self.quit)

    def _no_session(self) -> None:
        if not self.session_opened and self.command is None:
            self._decide(None)

    def _started(self, text: str | None, chan: asyncssh.SSHServerChannel[bytes],
                 pty: bool) -> None:
        self.terminal.attach(chan, pty)
        if self.command is None:
            self._decide(text)

    def _decide(self, text: str | None) -> None:
        """The command is known (None: none was given): bind the forwards."""
        if self._wait is not None:
            self._wait.cancel()
        assert self.ssh is not None
        forced = self.ssh.get_certificate_option("force-command")
        try:
            self.command = command.parse(forced if isinstance(forced, str) else text)
        except CommandError as exc:
            self.command = Command()
            self._spawn(self._fail(f"{exc}\n{command.USAGE}"))
            return
        self.terminal.quiet = self.command.quiet
        self._spawn(self._bind_all())

    async def _fail(self, message: str) -> None:
        """Say why, and end: the session (exit status 1), or under -N the connection."""
        log.info("ssh_session_refused", session=self.id, peer=self.peer,
                 reason=message.splitlines()[0])
        if self.terminal.chan is not None:
            self.terminal.say(message, error=True)
            self.terminal.exit(1)
        elif self.ssh is not None:
            self.ssh.disconnect(asyncssh.DISC_BY_APPLICATION, message.splitlines()[0])

    async def _bind_all(self) -> None:
        await self.ready.wait()
        assert self.command is not None
        if self.conn.closed.is_set():
            return
        if self.command.help:
            self.terminal.say(command.USAGE)
            self.terminal.exit(0)
            return
        if not self.listeners:
            await self._fail("no remote forward was asked for: run ssh with "
                             "-R 0:localhost:PORT\n" + command.USAGE)
            return
        for listener in list(self.listeners):
            why = await self._bind(listener)
            if why is not None:
                await self._fail(why)
                return
        self.terminal.say("Press Ctrl-C to stop." if self.terminal.newline == "\r\n" else
                          "The tunnels stay up until this ssh ends.")

    async def _bind_late(self, listener: Listener) -> Listener | bool:
        await self.ready.wait()
        why = await self._bind(listener)
        if why is not None:
            self.terminal.say(why, error=True)
            self.listeners.remove(listener)
            return False
        return listener

    async def _bind(self, listener: Listener) -> str | None:
        """Bind the tunnel of one forward; None, or why it cannot be."""
        cmd, services, carrier = self.command, self.services, self.conn
        assert cmd is not None
        settings = services.platform.settings
        if carrier.closed.is_set() or listener not in self.listeners:
            return None
        try:
            command.check_bind_host(listener.forward.host)
            req = command.bind_request(cmd, listener.requested, services.binder.tcp.host,
                                       settings.base_domain, f"ssh client {self.peer}")
        except (CommandError, BindRefused) as exc:
            return self._refusal(listener, exc)
        carrier.routes[id(req)] = (req, listener.forward)  # (before traffic can come)
        try:
            tunnel = await services.binder.place(self, req, self.terminal.request)
        except BindRefused as exc:
            carrier.routes.pop(id(req), None)
            return self._refusal(listener, exc)
        listener.tunnel = tunnel
        if carrier.closed.is_set() or listener not in self.listeners:  # (gone meanwhile)
            await services.binder.drop(self, tunnel.id, clean=True)
            return None
        where = tunnel.url or "labeled tunnel " + ", ".join(
            f"{k}={v}" for k, v in sorted(tunnel.labels.items())) + " (reached through edges)"
        self.terminal.say(f"Forwarding {where}")
        log.info("ssh_tunnel_bound", session=self.id, tunnel=tunnel.id, url=tunnel.url,
                 labels=tunnel.labels)
        return None

    @staticmethod
    def _refusal(listener: Listener, exc: Exception) -> str:
        where = listener.forward.host or "*"
        return f"cannot bind the remote forward {where}:{listener.requested}: {exc}"

    def cancelled(self, listener: Listener) -> None:
        """The client cancelled a forward (or the connection closes): unbind its tunnel."""
        if listener in self.listeners:
            self.listeners.remove(listener)
        tunnel, listener.tunnel = listener.tunnel, None
        if tunnel is not None and tunnel.id in self.tunnels:
            self.conn.routes.pop(id(tunnel.req), None)
            self.terminal.say(f"Stopped forwarding {tunnel.url or 'the labeled tunnel'}")
            self._spawn(self.services.binder.drop(self, tunnel.id, clean=True))

    def _raw_connection(self, tunnel: Tunnel, client: str) -> None:
        if not (self.command and self.command.quiet):
            self.terminal.connection(tunnel.url or tunnel.id, client)

    # -- ending --------------------------------------------------------------------------------

    async def stopping(self, tunnel_id: str, message: str, code: int) -> None:
        """The server ends one tunnel (its reserved domain was deleted, the ACL changed)."""
        tunnel = self.tunnels.get(tunnel_id)
        for listener in self.listeners:
            if tunnel is not None and listener.tunnel is tunnel:
                listener.tunnel = None
                self.conn.routes.pop(id(tunnel.req), None)
        self.terminal.say(f"The server stopped {tunnel.url if tunnel else tunnel_id}: "
                          f"{message}", error=True)

    def quit(self, reason: str) -> None:
        """The user ended the session channel: the connection ends with it."""
        if self.ssh is not None:
            log.info("ssh_session_quit", session=self.id, reason=reason)
            self.ssh.close()

    def end(self, reason: str) -> None:
        """End the connection from the server's side, telling the user why."""
        self.terminal.say(f"The server ended this session: {reason}", error=True)
        self.terminal.exit(1)
        if self.ssh is not None:
            self.ssh.disconnect(asyncssh.DISC_BY_APPLICATION, reason)

    async def _ended(self, exc: Exception | None) -> None:
        if self._wait is not None:
            self._wait.cancel()
        # bindings in flight see the connection gone and finish (never cancelled half-way:
        # a port or a row could be left behind)
        await asyncio.gather(*self.tasks, return_exceptions=True)
        binder = self.services.binder
        try:
            for tunnel_id in list(self.tunnels):
                await binder.drop(self, tunnel_id, clean=True)
            if not self.id:
                return
            with contextlib.suppress(Exception):
                async with self.services.platform.db.write() as tx:
                    await Repo(tx).delete(SESSIONS, self.id)
            self.services.connections.pop(self.id, None)
            binder.others.pop(self.id, None)
            log.info("ssh_session_stop", session=self.id,
                     reason=str(exc) if exc else "closed")
        finally:
            self.ended.set()
