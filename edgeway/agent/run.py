"""``edgeway agent start``: the session, the local API and the console, until SIGINT/SIGTERM.

The console is one screen (redrawn on change when stdout is a terminal, else a line per
change): the session's status, each tunnel's public URL and local address, and how many
connections it has carried. ``--log`` prints structured log lines instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import sys
from collections.abc import Iterator

import structlog
import uvicorn

from edgeway import __version__
from edgeway.agent.api import LocalApi
from edgeway.agent.config import AgentConfig
from edgeway.agent.session import AgentSession
from edgeway.config import parse_addr


class _Server(uvicorn.Server):
    """The agent handles SIGINT/SIGTERM itself."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class Console:
    def __init__(self, agent: AgentSession, web: str, enabled: bool) -> None:
        self.agent, self.web, self.enabled = agent, web, enabled
        self.tty = sys.stdout.isatty()
        self._last = ""

    def render(self) -> str:
        a = self.agent
        lines = [f"Edgeway agent {__version__}",
                 f"Session   {a.status}" + (f" ({a.error})" if a.error and
                                              a.status != "online" else ""),
                 f"Server    {a.config.server_addr}",
                 f"Web API   {self.web}", "Tunnels" + ("" if a.tunnels else "   none")]
        for name, t in a.tunnels.items():
            lines.append(f"  {name:<14} {t.url or '(not bound)':<48} -> "
                         f"{t.config.addr.url():<28} {t.requests} conns")
        return "\n".join(lines)

    def update(self) -> None:
        if not self.enabled:
            return
        text = self.render()
        if text == self._last:
            return
        self._last = text
        if self.tty:
            sys.stdout.write("\x1b[H\x1b[2J" + text + "\n")
        else:
            sys.stdout.write(text + "\n\n")
        sys.stdout.flush()


async def run(config: AgentConfig, names: list[str], resolve: dict[str, str],
              log_mode: bool) -> str:
    """Run until a signal or the server stops the agent; the refusal text if the server
    refused the authtoken, else ""."""
    screens: list[Console] = []

    def changed() -> None:
        for screen in screens:
            screen.update()

    agent = AgentSession(config, resolve, on_change=changed)
    console = Console(agent, config.web_addr or "off",
                      enabled=not log_mode and config.options.console(sys.stdout.isatty()))
    screens.append(console)
    server: uvicorn.Server | None = None
    tasks = [asyncio.create_task(agent.run(names))]
    if config.web_addr:
        host, port = parse_addr(config.web_addr)
        api = LocalApi(agent, config.web_allow_hosts, port)
        sock = socket.create_server((host, port), family=socket.AF_INET6 if ":" in host
                                    else socket.AF_INET)
        server = _Server(uvicorn.Config(api, log_config=None, access_log=False,
                                        lifespan="off", server_header=False))
        tasks.append(asyncio.create_task(server.serve(sockets=[sock])))
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stopping.set)
    console.update()
    await asyncio.wait([tasks[0], asyncio.create_task(stopping.wait())],
                       return_when=asyncio.FIRST_COMPLETED)
    await agent.stop()
    if server is not None:
        server.should_exit = True
    for task in tasks:
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await asyncio.wait_for(task, 5)
    structlog.get_logger().info("agent_stopped")
    return agent.error if agent.status == "refused" else ""
