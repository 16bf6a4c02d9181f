"""The agent's console, drawn with rich: the session (its status, the last failure's reason
and what to do about it), the server and its latency, the web inspector's address, warnings,
each tunnel's public URL and local address (or why the server refused it), connection counts,
rates and percentiles per tunnel, and the last HTTP requests (method, path, status, duration).

On a terminal it is one live screen (rich's ``Live`` on the alternate screen), redrawn at most
ten times a second on change and every second for the rates. Elsewhere (stdout a pipe or a
file) a screen is printed, in plain text, after each change. Nothing else writes to the
terminal while it is drawn: ``AgentSettings.plan`` keeps the log off it. Screens go out
through ``Screen``, never blocking the agent: a terminal that is not read (Ctrl+S) gets the
newest screen once it reads again.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import sys
from collections.abc import Iterator
from typing import TextIO, cast

from rich.console import Console as RichConsole
from rich.console import Group, RenderableType
from rich.live import Live
from rich.table import Table
from rich.text import Text

from edgeway import __version__
from edgeway.agent.proxy import LocalTunnel
from edgeway.agent.screen import Screen
from edgeway.agent.session import AgentSession

LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1", "0.0.0.0", "::")
REDRAW = 0.1  # seconds: changes within this are drawn together


def exposed(agent: AgentSession, web_port: int) -> Iterator[LocalTunnel]:
    """Tunnels that publish the agent API without any login or address restriction."""
    for t in agent.tunnels.values():
        addr = t.config.addr
        if web_port and addr.port == web_port and addr.host in LOCAL_HOSTS and \
                not t.config.guarded():
            yield t


def warnings(agent: AgentSession, web_port: int) -> list[str]:
    return [f"tunnel {t.config.name} publishes this agent's API (port {web_port}) with "
            "allow_unauthenticated and no login: anyone with its URL can start tunnels"
            for t in exposed(agent, web_port)]


def forwarding(t: LocalTunnel, status: str) -> Text:
    """One tunnel's line: its URL (a labeled tunnel: its labels, and whether it is online),
    or why the server refused it, or that it is not bound yet (and whether the session is up)."""
    target = t.config.addr.url()
    if t.error:
        return Text(f"{t.config.name} -> {target}  refused: {t.error}", style="red")
    state = "online" if t.bound and status == "online" else \
        "(binding)" if status == "online" else f"({status})"
    if t.config.labels:
        labels = ", ".join(f"{k}={v}" for k, v in t.config.labels.items())
        return Text(f"{t.config.name} [labels {labels}] -> {target}  {state}")
    if t.url:
        return Text(f"{t.url} -> {target}")
    return Text(f"{t.config.name} -> {target}  {state}")


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.1f}ms" if ns else "-"


class Console:
    def __init__(self, agent: AgentSession, web: str, web_note: str, enabled: bool,
                 out: TextIO | None = None) -> None:
        self.agent, self.web, self.web_note, self.enabled = agent, web, web_note, enabled
        self.out = out or sys.stdout
        self.tty = self.out.isatty()
        self.web_port = int(web.rpartition(":")[2]) if web != "off" else 0
        self._live: Live | None = None
        self._screen: Screen | None = None
        self._pending: asyncio.TimerHandle | None = None
        self._behind = False  # a draw was skipped while the screen was busy
        self._last = ""

    # -- what is drawn --------------------------------------------------------------------

    def _session_rows(self) -> Table:
        a = self.agent
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="bold", min_width=16)
        grid.add_column()
        status = Text(a.status, style="green" if a.status == "online" else "yellow")
        if a.error and a.status != "online":
            status.append(f"  {a.error}", style="red")
        grid.add_row("Session Status", status)
        if a.hint and a.status != "online":
            grid.add_row("Hint", Text(a.hint, style="cyan"))
        grid.add_row("Server", Text(a.config.server_addr))
        grid.add_row("Latency", Text(_ms(a.latency * 1e9) if a.latency else "-"))
        web = f"http://{self.web}/inspect/http" if self.web != "off" else "off"
        grid.add_row("Web Interface", Text(web + (f"  ({self.web_note})" if self.web_note
                                                  else "")))
        for warning in warnings(a, self.web_port):
            grid.add_row("Warning", Text(warning, style="yellow"))
        for t in a.tunnels.values():
            grid.add_row("Forwarding", forwarding(t, a.status))
        if not a.tunnels:
            grid.add_row("Forwarding", Text("no tunnels (start some through the API)"
                                            if a.status == "online" else
                                            f"none yet ({a.status})"))
        return grid

    def _traffic(self) -> Table:
        table = Table(box=None, padding=(0, 2), show_edge=False, title_justify="left")
        for name in ("Connections", "ttl", "opn", "rt1", "rt5", "p50", "p90", "http", "rq1"):
            table.add_column(name, justify="left" if name == "Connections" else "right")
        for t in self.agent.tunnels.values():
            m = t.metrics.json()
            conns, http = m["conns"], m.get("http")
            table.add_row(t.config.name, str(conns["count"]), str(conns["gauge"]),
                          f"{conns['rate1']:.2f}", f"{conns['rate5']:.2f}", _ms(conns["p50"]),
                          _ms(conns["p90"]), str(http["count"]) if http else "-",
                          f"{http['rate1']:.2f}" if http else "-")
        return table

    def _requests(self) -> RenderableType:
        lines: list[RenderableType] = [Text("HTTP Requests", style="bold"),
                                       Text("-------------")]
        for name, ex in reversed(self.agent.recent):
            res = ex.response
            status = f"{res.status_code} {res.reason}".strip() if res else "..."
            lines.append(Text(f"{ex.request.method:<7} {ex.request.uri[:60]:<60} "
                              f"{status:<24} {_ms(ex.duration):>9}  {name}"))
        return Group(*lines)

    def renderable(self) -> RenderableType:
        head = Text(f"Edgeway agent {__version__}", style="bold")
        head.append("   (Ctrl+C to quit)", style="dim")
        return Group(head, Text(""), self._session_rows(), Text(""), self._traffic(),
                     Text(""), self._requests())

    def text(self, width: int = 140) -> str:
        buf = io.StringIO()
        RichConsole(file=buf, width=width, color_system=None, force_terminal=False,
                    legacy_windows=False).print(self.renderable())
        lines = (line.rstrip() for line in buf.getvalue().splitlines())
        return "\n".join(line for line in lines if line)  # (screens are blank-line separated)

    # -- drawing ----------------------------------------------------------------------------

    def start(self) -> None:
        if not self.enabled:
            return
        screen = self._screen = Screen(self.out)
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if loop is not None:
            screen.caught_up = lambda: self._wake(loop)
        if self.tty:
            self._live = Live(self.renderable(), console=RichConsole(file=cast(TextIO, screen)),
                              auto_refresh=False, screen=True, transient=False,
                              redirect_stderr=False)
            self._live.start()
        self.draw()

    def stop(self) -> None:
        if self._pending is not None:
            self._pending.cancel()
        if self._live is not None:
            self._live.stop()
            self._live = None
        if self._screen is not None:
            self._screen.close(2.0)  # (a terminal that reads gets its normal screen back)
            self._screen = None

    def _wake(self, loop: asyncio.AbstractEventLoop) -> None:
        """The screen caught up (its thread calls this): draw what was skipped meanwhile."""
        with contextlib.suppress(RuntimeError):  # (the loop is closed: the agent has ended)
            loop.call_soon_threadsafe(self._caught_up)

    def _caught_up(self) -> None:
        if self._behind:
            self._behind = False
            self.update()

    def update(self) -> None:
        """Something changed: draw soon (changes close together are drawn once)."""
        if not self.enabled or self._pending is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self.draw()
            return
        self._pending = loop.call_later(REDRAW, self.draw)

    def draw(self) -> None:
        self._pending = None
        if self._screen is not None and self._screen.busy:
            self._behind = True  # (drawn once the terminal has taken the last screen)
            return
        if self._live is not None:
            self._live.update(self.renderable(), refresh=True)
            return
        text = self.text()
        if text != self._last:
            self._last = text
            out = self._screen or self.out
            out.write(text + "\n\n")
            out.flush()

    async def tick(self) -> None:
        """Redraw every second on a terminal (the rates move without events)."""
        while self._live is not None:
            await asyncio.sleep(1)
            self.draw()
