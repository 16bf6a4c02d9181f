"""The management listener's app with the dashboard on it: ``/dashboard`` and below to the
dashboard, a browser's ``GET /`` (it accepts text/html) redirected there, everything else to
the API as before."""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from edgeway.config import DashboardConfig
from edgeway.dashboard.agentfile import AgentDial
from edgeway.platform import Platform

PREFIX = "/dashboard"


class Front:
    def __init__(self, api: ASGIApp, dashboard: ASGIApp) -> None:
        self.api, self.dashboard = api, dashboard

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            path: str = scope["path"]
            if path == PREFIX or path.startswith(PREFIX + "/"):
                return await self.dashboard(scope, receive, send)
            if path == "/" and scope["method"] in ("GET", "HEAD") and _wants_html(scope):
                await send({"type": "http.response.start", "status": 303, "headers": [
                    (b"location", f"{PREFIX}/".encode()), (b"content-length", b"0"),
                    (b"cache-control", b"no-store")]})
                return await send({"type": "http.response.body", "body": b""})
        await self.api(scope, receive, send)


def _wants_html(scope: Scope) -> bool:
    for name, value in scope["headers"]:
        if name == b"accept":
            return b"text/html" in value
    return False


def mount(api: ASGIApp, platform: Platform, config: DashboardConfig,
          agent: AgentDial) -> ASGIApp:
    """``api`` with the dashboard beside it (the dashboard calls ``api`` in-process);
    ``agent``: how agents reach this platform, for the agent config files it hands out."""
    from edgeway.dashboard.app import Dashboard

    return Front(api, Dashboard(platform, api, config, agent))
