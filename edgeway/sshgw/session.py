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
one tunnel through the same binder agents use (``forwards``); its public connections come
back as ``forwarded-tcpip`` channels (``channels.SshCarrier``).
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
from typing import Any

import asyncssh
import structlog

from edgeway import catalog, ids
from edgeway.caps import Ticket
from edgeway.sshgw import command, wire
from edgeway.sshgw.channels import SshCarrier
from edgeway.sshgw.command import Command, CommandError
from edgeway.sshgw.forwards import Forwards, Listener, Services
from edgeway.sshgw.keys import Identity
from edgeway.sshgw.terminal import Terminal, TerminalSession
from edgeway.store.db import DatabaseUnavailable
from edgeway.store.repo import Repo
from edgeway.tunnel import records
from edgeway.tunnel.admission import AuthFailed
from edgeway.tunnel.registry import Tunnel

log = structlog.get_logger()
QUIT_GRACE = 2.0  # seconds a client has to close its connection after its session ended
SESSIONS = catalog.BY_COLLECTION["tunnel_sessions"]
NO_SESSION_WAIT = 1.0  # seconds after the last forward: no session is coming (-N)
NO_DATABASE = "the server cannot reach its database; retry"


class GatewayConnection(asyncssh.SSHServer):
    def __init__(self, services: Services) -> None:
        self.services = services
        self.id, self.credential, self.peer, self.user = "", "", "", ""
        self.acl: list[str] = []
        self.tunnels: dict[str, Tunnel] = {}
        self.identity: Identity | None = None
        self._candidate: Identity | None = None  # of the key asyncssh validated last
        self.ssh: asyncssh.SSHServerConnection | None = None
        self.forwards: Forwards | None = None
        self.command: Command | None = None  # known: the forwards are bound
        self.terminal = Terminal()
        self.session_opened = False
        self.ready = asyncio.Event()  # the tunnel_sessions row is written
        self.ended = asyncio.Event()  # the session is gone, with its tunnels and row
        self.tasks: set[asyncio.Task[None]] = set()
        self._wait: asyncio.TimerHandle | None = None
        self._ticket: Ticket | None = None  # of the connection caps

    @property
    def conn(self) -> SshCarrier:
        assert self.forwards is not None
        return self.forwards.carrier

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    # -- the connection and its authentication -----------------------------------------------

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self.ssh = conn
        wire.coalesce(conn)
        wire.no_cbc_ignores(conn)
        wire.quiet(conn)
        self.peer = str((conn.get_extra_info("peername") or ("",))[0])
        self.forwards = Forwards(self, self.services, SshCarrier(conn, self._raw_connection),
                                 self.terminal, self._spawn, self.peer)
        if self.services.door is not None:  # over a cap: closed at once
            self._ticket = self.services.door.admit(conn.get_extra_info("peername"))
            if self._ticket is None:
                asyncio.get_running_loop().call_soon(conn.abort)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._ticket is not None:
            self._ticket.release()
        self.conn.closed.set()
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
            raise asyncssh.ServiceNotAvailable(NO_DATABASE) from None

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
                await Repo(tx, self.services.changes()).insert(SESSIONS, sid, doc)
        except DatabaseUnavailable:
            self.ssh.disconnect(asyncssh.DISC_SERVICE_NOT_AVAILABLE, NO_DATABASE)
            return
        if self.conn.closed.is_set():  # gone while the row was written: never registered
            with contextlib.suppress(Exception):
                async with self.services.platform.db.write() as tx:
                    await Repo(tx, self.services.changes()).delete(SESSIONS, sid)
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
        assert self.forwards is not None
        listener = self.forwards.ask(listen_host, listen_port)
        if listener is None:
            return False
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
        assert self.command is not None and self.forwards is not None
        if self.conn.closed.is_set():
            return
        if self.command.help:
            self.terminal.say(command.USAGE)
            self.terminal.exit(0)
        elif not self.forwards.listeners:
            await self._fail("no remote forward was asked for: run ssh with "
                             "-R 0:localhost:PORT\n" + command.USAGE)
        elif (why := await self.forwards.bind_all(self.command)) is not None:
            await self._fail(why)
        else:
            self.terminal.say("Press Ctrl-C to stop." if self.terminal.newline == "\r\n"
                              else "The tunnels stay up until this ssh ends.")

    async def _bind_late(self, listener: Listener) -> Listener | bool:
        await self.ready.wait()
        assert self.command is not None and self.forwards is not None
        why = await self.forwards.bind(self.command, listener)
        if why is not None:
            self.terminal.say(why, error=True)
            self.forwards.cancelled(listener)
            return False
        return listener

    def _raw_connection(self, tunnel: Tunnel, client: str) -> None:
        if not (self.command and self.command.quiet):
            self.terminal.connection(tunnel.url or tunnel.id, client)

    # -- ending --------------------------------------------------------------------------------

    async def stopping(self, tunnel_id: str, message: str, code: int) -> None:
        """The server ends one tunnel (its reserved domain was deleted, the ACL changed)."""
        tunnel = self.tunnels.get(tunnel_id)
        if tunnel is not None and self.forwards is not None:
            self.forwards.forget(tunnel)
        self.terminal.say(f"The server stopped {tunnel.url if tunnel else tunnel_id}: "
                          f"{message}", error=True)

    def quit(self, reason: str) -> None:
        """The user ended the session (Ctrl-C, Ctrl-D) or its channel: the connection ends
        with it. The session channel ends first, with status 0, so that ssh exits as after
        any command the user stopped (not "Received disconnect"); a client that does not
        then close is closed after QUIT_GRACE."""
        if self.ssh is None:
            return
        log.info("ssh_session_quit", session=self.id, reason=reason)
        if self.forwards is not None:
            self.forwards.carrier.stop()
        self.terminal.exit(0)
        asyncio.get_running_loop().call_later(QUIT_GRACE, self.ssh.close)

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
                    await Repo(tx, self.services.changes()).delete(SESSIONS, self.id)
            self.services.connections.pop(self.id, None)
            binder.others.pop(self.id, None)
            log.info("ssh_session_stop", session=self.id,
                     reason=str(exc) if exc else "closed")
        finally:
            self.ended.set()
