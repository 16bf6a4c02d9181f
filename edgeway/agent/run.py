"""``edgeway agent start`` and the one-liners: the session, the local API and the console,
until SIGINT/SIGTERM.

``web_addr`` taken by another process: the API listens on the next free port (up to
``WEB_TRIES`` ports on), and the console and the log say so. Port 0: a free port the system
picks; the console and the log (``web_listening``) show it. A tunnel publishing the API
without any login or address restriction is refused (``apitunnel``) unless it says
``allow_unauthenticated: true``; then it gets a warning in the console and in the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import signal
import socket
from collections.abc import Iterator

import structlog
import uvicorn

from edgeway.agent import apitunnel
from edgeway.agent.api import LocalApi
from edgeway.agent.config import AgentConfig
from edgeway.agent.console import Console, exposed
from edgeway.agent.session import AgentSession
from edgeway.agent.state import TunnelIds
from edgeway.config import parse_addr

log = structlog.get_logger()
WEB_TRIES = 10


class _Server(uvicorn.Server):
    """The agent handles SIGINT/SIGTERM itself."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


def listen(web_addr: str) -> tuple[socket.socket, str]:
    """A socket on ``web_addr``, or on the next free port; and a note when it moved. Port 0
    (checked by the config): the port the system picks."""
    host, _, tail = web_addr.rpartition(":")
    host, port = (host.strip("[]"), 0) if tail == "0" else parse_addr(web_addr)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    for candidate in range(port, port + (WEB_TRIES if port else 1)):
        try:
            sock = socket.create_server((host, candidate), family=family)
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE or candidate + 1 >= port + WEB_TRIES:
                raise OSError(exc.errno, f"web_addr {web_addr}: {exc.strerror}") from None
            continue
        if candidate != port:
            log.warning("web_addr_in_use", web_addr=web_addr, listening=candidate)
            return sock, f"{web_addr} was in use"
        return sock, ""
    raise OSError(errno.EADDRINUSE, f"web_addr {web_addr}: in use")  # (not reached)


def _refuse_api_tunnels(config: AgentConfig, names: list[str], sock: socket.socket) -> None:
    """The config's checks of tunnels to the API (``apitunnel``) again, when the API listens
    on another port than ``web_addr`` says (it was in use)."""
    host, port = sock.getsockname()[:2]
    for name in names:
        if why := apitunnel.refusal(config.tunnels[name], host, port):
            sock.close()
            raise ValueError(f"{', '.join(config.files)}: tunnels.{name}: {why}")


async def run(config: AgentConfig, names: list[str], resolve: dict[str, str],
              console_on: bool) -> str:
    """Run until a signal or the server stops the agent; the refusal text if the server
    refused the authtoken, else ""."""
    screens: list[Console] = []
    warned: set[str] = set()

    def changed() -> None:
        for screen in screens:
            screen.update()
            for t in exposed(agent, screen.web_port):
                if t.config.name not in warned:
                    warned.add(t.config.name)
                    log.warning("agent_api_exposed", tunnel=t.config.name, url=t.url or None,
                                reason="allow_unauthenticated")

    ids = TunnelIds(config.server_addr, config.authtoken)
    agent = AgentSession(config, resolve, on_change=changed, ids=ids)
    server: uvicorn.Server | None = None
    agent.add(names)  # (listed before the first screen)
    web, note = "off", ""
    tasks: list[asyncio.Task[None]] = []
    if config.web_addr:
        sock, note = listen(config.web_addr)
        host, port = sock.getsockname()[:2]
        _refuse_api_tunnels(config, names, sock)
        web = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        log.info("web_listening", url=f"http://{web}")  # (the port chosen, for port 0)
        api = LocalApi(agent, config.web_allow_hosts, host, port)
        server = _Server(uvicorn.Config(api, log_config=None, access_log=False,
                                        lifespan="off", server_header=False,
                                        timeout_graceful_shutdown=2))
        tasks.append(asyncio.create_task(server.serve(sockets=[sock])))
    tasks.insert(0, asyncio.create_task(agent.run()))  # (after the API tunnels' check)
    console = Console(agent, web, note, enabled=console_on)
    screens.append(console)
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stopping.set)
    console.start()
    ticking = asyncio.create_task(console.tick())
    try:
        await asyncio.wait([tasks[0], asyncio.create_task(stopping.wait())],
                           return_when=asyncio.FIRST_COMPLETED)
        ticking.cancel()  # (it redraws until the console stops: not a task to wait for)
        await agent.stop()
        if server is not None:
            server.should_exit = True
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await asyncio.wait_for(task, 5)
    finally:
        console.stop()
    log.info("agent_stopped")
    return agent.error if agent.status == "refused" else ""
