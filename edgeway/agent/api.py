"""The agent's local API on ``web_addr`` (default 127.0.0.1:4040): list, start and stop
tunnels, and the agent's status, in the shapes of the ngrok agent API; the captured requests
(``edgeway.agent.requestsapi``) and the web inspector's page (``edgeway.agent.webui``).

Every request passes ``edgeway.agent.webguard`` first (its Host, its Origin, a JSON body on
writes: 403 and 415), and a tunnel started here that points at this API passes
``edgeway.agent.apitunnel`` (a login, or ``allow_unauthenticated``). Errors use the agent API's
body: ``{"error_code", "status_code", "msg", "details": {"err"}}`` — 400 for a bad body, 404
for an unknown name, 502 when the server refuses a bind, 503 before the session is up.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from edgeway import __version__
from edgeway.agent import apitunnel, webui
from edgeway.agent.config import ConfigError, TunnelConfig, parse_tunnel
from edgeway.agent.proxy import LocalTunnel
from edgeway.agent.requestsapi import EVENTS, REQUESTS, ApiError, Requests
from edgeway.agent.session import LOST, AgentSession, BindFailed, NotConnected
from edgeway.agent.webguard import WebGuard

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
log = structlog.get_logger()

__all__ = ["ApiError", "LocalApi", "tunnel_json"]


def tunnel_json(t: LocalTunnel) -> dict[str, Any]:
    c = t.config
    return {"name": c.name, "ID": t.id, "uri": f"/api/tunnels/{c.name}",
            "public_url": t.url, "proto": t.proto or c.proto, "error": t.error,
            "config": {"addr": c.addr.url(), "inspect": c.inspect if c.proto == "http"
                       else False},
            "metrics": t.metrics.json()}


class LocalApi:
    def __init__(self, agent: AgentSession, allow_hosts: tuple[str, ...], host: str, port: int
                 ) -> None:
        self.agent, self.host, self.port = agent, host, port
        self.guard = WebGuard(host, port, allow_hosts)
        self.requests = Requests(agent)

    def tunnel_hosts(self) -> set[str]:
        """The public host names of the tunnels that point at this API."""
        return {t.url.split("//", 1)[-1].rsplit(":", 1)[0].lower()
                for t in self.agent.tunnels.values()
                if t.url and apitunnel.reaches(t.config.addr, self.host, self.port)}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in scope["headers"]]
        method, path = scope["method"], scope["path"]
        if (refused := self.guard.refusal(method, headers, self.tunnel_hosts())) is not None:
            log.warning("agent_api_refused", method=method, path=path, status=refused.status,
                        reason=refused.msg)
            await _json(send, refused.status, _error(refused))
        elif path == EVENTS and method == "GET":
            try:
                await self.requests.events(receive, send)
            except ApiError as exc:
                await _json(send, exc.status, _error(exc))
        elif (page := webui.page(path)) is not None and method in ("GET", "HEAD"):
            await webui.send_page(send, page, method == "HEAD")
        else:
            status, out = await self._answer(scope, receive)
            await _json(send, status, out)

    async def _answer(self, scope: Scope, receive: Receive) -> tuple[int, Any]:
        body = b""
        while True:
            msg = await receive()
            body += msg.get("body", b"")
            if len(body) > 1 << 20:
                return 413, _error(ApiError(413, 100, "request body too large", ""))
            if not msg.get("more_body"):
                break
        try:
            return await self._route(scope["method"], scope["path"], body,
                                     scope.get("query_string", b"").decode("latin-1"))
        except ApiError as exc:
            return exc.status, _error(exc)

    async def _route(self, method: str, path: str, body: bytes, query: str = ""
                     ) -> tuple[int, Any]:
        path = path.rstrip("/") or "/"
        if path == "/api":
            return 200, {"uri": "/api", "tunnels_uri": "/api/tunnels",
                         "status_uri": "/api/status"}
        if path == "/api/status" and method == "GET":
            return 200, self.status()
        if path == "/api/tunnels":
            if method == "GET":
                return 200, {"tunnels": [tunnel_json(t) for t in self.agent.tunnels.values()],
                             "uri": "/api/tunnels"}
            if method == "POST":
                return 201, tunnel_json(await self.start(body))
        if path.startswith("/api/tunnels/"):
            return await self._tunnel(method, path.split("/", 3)[3])
        if path == REQUESTS or path.startswith(REQUESTS + "/"):
            return await self.requests.route(method, path[len(REQUESTS) + 1:], body, query)
        raise ApiError(404 if method == "GET" else 405, 100, "not found",
                       f"{method} {path} is not an operation of this API")

    async def _tunnel(self, method: str, name: str) -> tuple[int, Any]:
        tunnel = self.agent.tunnels.get(name)
        if tunnel is None:
            raise ApiError(404, 102, "tunnel not found", f"no tunnel named '{name}'")
        if method == "GET":
            return 200, tunnel_json(tunnel)
        if method == "DELETE":
            await self.agent.stop_tunnel(name)
            return 204, None
        raise ApiError(405, 100, "not found", f"{method} is not an operation of this path")

    async def start(self, body: bytes) -> LocalTunnel:
        try:
            doc = json.loads(body or b"{}")
        except ValueError as exc:
            raise ApiError(400, 100, "invalid JSON body", str(exc)) from None
        if not isinstance(doc, dict):
            raise ApiError(400, 100, "the body must be a JSON object", type(doc).__name__)
        name = str(doc.pop("name", "") or "")
        try:
            config: TunnelConfig = parse_tunnel(name or "api", doc, "request body")
        except ConfigError as exc:
            raise ApiError(400, 100, "invalid tunnel configuration", str(exc)) from None
        if why := apitunnel.refusal(config, self.host, self.port):
            raise ApiError(400, 100, "invalid tunnel configuration", f"request body: {why}")
        try:
            return await self.agent.start_tunnel(config)
        except NotConnected as exc:
            raise ApiError(503, 104, "session not ready", str(exc)) from None
        except LOST as exc:  # the session dropped during the bind: it reconnects
            raise ApiError(503, 104, "session not ready", "the tunnel session was lost "
                           f"while binding ({str(exc) or type(exc).__name__}); retry once "
                           "it is back online") from None
        except BindFailed as exc:
            raise ApiError(502, 103, "failed to start tunnel", str(exc)) from None

    def status(self) -> dict[str, Any]:
        a = self.agent
        return {"status": a.status, "agent_version": __version__, "uri": "/api/status",
                "session": {"id": a.session_id, "error": a.error, "hint": a.hint, "legs": [
                    {"region": a.config.options.region,
                     "latency": int(a.latency * 1e9)}]}}


async def _json(send: Send, status: int, out: Any) -> None:
    data = b"" if out is None else json.dumps(out).encode()
    await send({"type": "http.response.start", "status": status, "headers": [
        (b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]})
    await send({"type": "http.response.body", "body": data})


def _error(exc: ApiError) -> dict[str, Any]:
    return {"error_code": exc.code, "status_code": exc.status, "msg": exc.msg,
            "details": {"err": exc.err}}
