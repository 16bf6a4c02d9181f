"""One connection's remote forwards and their tunnels: a ``Listener`` per ``tcpip-forward``
the client asked for (with the port number the client is told: the one it asked for, or a
number of this connection for port 0), each bound as a tunnel through the binder agents use
once the session's command is known (``Forwards.bind``: the command's bind request, the ACL,
names and ports, the records), and unbound when the client cancels it (``~C -KR``, ``ssh -O
cancel``) or the server stops it. ``Services`` is what every connection of the gateway
uses."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import asyncssh
import structlog

from edgeway.caps import Door
from edgeway.platform import Platform
from edgeway.sshgw import command
from edgeway.sshgw.channels import Forward, SshCarrier
from edgeway.sshgw.command import Command, CommandError
from edgeway.sshgw.keys import Keys
from edgeway.sshgw.terminal import Terminal
from edgeway.store.db import DatabaseUnavailable
from edgeway.store.repo import Changes
from edgeway.tunnel.admission import Admission
from edgeway.tunnel.binder import Binder
from edgeway.tunnel.binds import BindRefused
from edgeway.tunnel.connection import Holder
from edgeway.tunnel.registry import Tunnel

if TYPE_CHECKING:
    from edgeway.sshgw.session import GatewayConnection

log = structlog.get_logger()
MAX_FORWARDS = 64  # per connection


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
    changes: Callable[[], Changes | None] = lambda: None  # session events' writer
    door: Door | None = None  # the gateway's connection caps


class Listener(asyncssh.SSHListener):
    """A remote forward the client asked for; its tunnel once bound."""

    def __init__(self, owner: Forwards, host: str, requested: int, port: int) -> None:
        super().__init__()
        self.owner, self.forward, self.requested = owner, Forward(host, port), requested
        self.tunnel: Tunnel | None = None

    def get_port(self) -> int:
        return self.forward.port

    def close(self) -> None:
        self.owner.cancelled(self)

    async def wait_closed(self) -> None:
        return None


class Forwards:
    def __init__(self, holder: Holder, services: Services, carrier: SshCarrier,
                 terminal: Terminal, spawn: Callable[[Coroutine[Any, Any, None]], None],
                 peer: str) -> None:
        self.holder, self.services, self.carrier = holder, services, carrier
        self.terminal, self.spawn, self.peer = terminal, spawn, peer
        self.listeners: list[Listener] = []

    def ask(self, host: str, port: int) -> Listener | None:
        """A listener for a forward of ``host``:``port``; None when refused (too many, or that
        port twice)."""
        taken = {listener.forward.port for listener in self.listeners}
        if len(self.listeners) >= MAX_FORWARDS or port in taken:
            return None
        listener = Listener(self, host, port, port or next(
            p for p in range(1, 65536) if p not in taken))
        self.listeners.append(listener)
        return listener

    async def bind_all(self, cmd: Command) -> str | None:
        """Bind every forward asked for so far, in order; the first refusal, or None."""
        for listener in list(self.listeners):
            why = await self.bind(cmd, listener)
            if why is not None:
                return why
        return None

    async def bind(self, cmd: Command, listener: Listener) -> str | None:
        """Bind the tunnel of one forward; None, or why it cannot be."""
        services, carrier = self.services, self.carrier
        if carrier.closed.is_set() or listener not in self.listeners:
            return None
        try:
            command.check_bind_host(listener.forward.host)
            req = command.bind_request(cmd, listener.requested, services.binder.tcp.name,
                                       services.platform.settings.base_domain,
                                       f"ssh client {self.peer}")
        except (CommandError, BindRefused) as exc:
            return _refusal(listener, exc)
        carrier.routes[id(req)] = (req, listener.forward)  # (before traffic can come)
        try:
            tunnel = await services.binder.place(
                self.holder, req, None if cmd.quiet else self.terminal.request)
        except (BindRefused, DatabaseUnavailable) as exc:
            carrier.routes.pop(id(req), None)
            return _refusal(listener, exc)
        listener.tunnel = tunnel
        if carrier.closed.is_set() or listener not in self.listeners:  # (gone meanwhile)
            await services.binder.drop(self.holder, tunnel.id, clean=True)
            return None
        where = tunnel.url or "labeled tunnel " + ", ".join(
            f"{k}={v}" for k, v in sorted(tunnel.labels.items())) + " (reached through edges)"
        self.terminal.say(f"Forwarding {where}")
        log.info("ssh_tunnel_bound", session=self.holder.id, tunnel=tunnel.id, url=tunnel.url,
                 labels=tunnel.labels)
        return None

    def cancelled(self, listener: Listener) -> None:
        """The client cancelled a forward (or the connection closes): unbind its tunnel."""
        if listener in self.listeners:
            self.listeners.remove(listener)
        tunnel, listener.tunnel = listener.tunnel, None
        if tunnel is not None and tunnel.id in self.holder.tunnels:
            self.carrier.routes.pop(id(tunnel.req), None)
            self.terminal.say(f"Stopped forwarding {tunnel.url or 'the labeled tunnel'}")
            self.spawn(self.services.binder.drop(self.holder, tunnel.id, clean=True))

    def forget(self, tunnel: Tunnel) -> None:
        """The server ends ``tunnel`` (the binder drops it)."""
        for listener in self.listeners:
            if listener.tunnel is tunnel:
                listener.tunnel = None
        self.carrier.routes.pop(id(tunnel.req), None)


def _refusal(listener: Listener, exc: Exception) -> str:
    if isinstance(exc, DatabaseUnavailable):
        exc = Exception("the server cannot reach its database; retry")
    return f"cannot bind the remote forward {listener.forward.host or '*'}:" \
           f"{listener.requested}: {exc}"
