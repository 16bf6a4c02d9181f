"""The agent's local API on ``web_addr`` (default 127.0.0.1:4040): list, start and stop
tunnels, and the agent's status, in the shapes of the ngrok agent API.

Only requests whose Host is local (localhost, 127.0.0.1, ::1), listed in ``web_allow_hosts``
(names, ``.suffix`` names, addresses or CIDRs), or the public host of a tunnel that points at
this API (the spec's way to reach it from outside) are served; others get 403. Errors use the
agent API's body: ``{"error_code", "status_code", "msg", "details": {"err"}}`` — 400 for a bad
body, 404 for an unknown name, 502 when the server refuses a bind, 503 before the session is
up.

``/api/requests/http`` lists, shows, replays and clears the HTTP exchanges captured by
``edgeway.agent.inspect``. With ``inspect_db_size: -1`` inspection is off and these paths
answer 404 "request inspection is disabled" (rather than an empty list, which would look like
no traffic). A replay is refused (400) when the captured request body was truncated, as
sending it would hang the service; it answers 204 once the request is sent, and the exchange
it makes shows up as a new capture.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qs

from edgeway import __version__
from edgeway.agent.captures import Store
from edgeway.agent.config import ConfigError, TunnelConfig, parse_tunnel
from edgeway.agent.inspect import Tap
from edgeway.agent.session import (
    LOCAL_TLS,
    AgentSession,
    BindFailed,
    LocalTunnel,
    NotConnected,
)

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]
LOCAL = ("localhost", "127.0.0.1", "::1")
REQUESTS = "/api/requests/http"
REPLAY_TIMEOUT = 60.0


class ApiError(Exception):
    def __init__(self, status: int, code: int, msg: str, err: str) -> None:
        super().__init__(msg)
        self.status, self.code, self.msg, self.err = status, code, msg, err


def _metrics(count: int) -> dict[str, Any]:
    zero = {"rate1": 0, "rate5": 0, "rate15": 0, "p50": 0, "p90": 0, "p95": 0, "p99": 0}
    return {"conns": {"count": count, "gauge": 0, **zero}, "http": {"count": count, **zero}}


def tunnel_json(t: LocalTunnel) -> dict[str, Any]:
    c = t.config
    return {"name": c.name, "ID": t.id, "uri": f"/api/tunnels/{c.name}",
            "public_url": t.url, "proto": t.proto or c.proto,
            "config": {"addr": c.addr.url(), "inspect": c.inspect if c.proto == "http"
                       else False},
            "metrics": _metrics(t.requests)}


class LocalApi:
    def __init__(self, agent: AgentSession, allow_hosts: tuple[str, ...], port: int) -> None:
        self.agent, self.allow_hosts, self.port = agent, allow_hosts, port
        self._replays: set[asyncio.Task[None]] = set()  # reading the answers to replays

    def host_allowed(self, host: str) -> bool:
        name = host.rsplit(":", 1)[0].strip("[]").lower() if not host.startswith("[") \
            else host[1:].split("]", 1)[0]
        if name in LOCAL:
            return True
        for t in self.agent.tunnels.values():  # a tunnel exposing this API
            if t.config.addr.port == self.port and t.url and \
                    t.url.split("//", 1)[-1].rsplit(":", 1)[0] == name:
                return True
        for rule in self.allow_hosts:
            rule = rule.lower()
            if name == rule or (rule.startswith(".") and name.endswith(rule)):
                return True
            try:
                if ipaddress.ip_address(name) in ipaddress.ip_network(rule, strict=False):
                    return True
            except ValueError:
                continue
        return False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        body = b""
        while True:
            msg = await receive()
            body += msg.get("body", b"")
            if len(body) > 1 << 20:
                status, out = 413, _error(ApiError(413, 100, "request body too large", ""))
                break
            if not msg.get("more_body"):
                try:
                    status, out = await self._route(
                        scope["method"], scope["path"], body, headers.get("host", ""),
                        scope.get("query_string", b"").decode("latin-1"))
                except ApiError as exc:
                    status, out = exc.status, _error(exc)
                break
        data = b"" if out is None else json.dumps(out).encode()
        await send({"type": "http.response.start", "status": status, "headers": [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(data)).encode())]})
        await send({"type": "http.response.body", "body": data})

    async def _route(self, method: str, path: str, body: bytes, host: str, query: str = ""
                     ) -> tuple[int, Any]:
        if not self.host_allowed(host):
            raise ApiError(403, 101, "this Host is not allowed", f"Host '{host}' is not in "
                           "web_allow_hosts")
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
            name = path.split("/", 3)[3]
            tunnel = self.agent.tunnels.get(name)
            if tunnel is None:
                raise ApiError(404, 102, "tunnel not found", f"no tunnel named '{name}'")
            if method == "GET":
                return 200, tunnel_json(tunnel)
            if method == "DELETE":
                await self.agent.stop_tunnel(name)
                return 204, None
        if path == REQUESTS or path.startswith(REQUESTS + "/"):
            return await self._requests(method, path[len(REQUESTS) + 1:], body, query)
        raise ApiError(404 if method == "GET" else 405, 100, "not found",
                       f"{method} {path} is not an operation of this API")

    async def _requests(self, method: str, rest: str, body: bytes, query: str
                        ) -> tuple[int, Any]:
        store = self.agent.inspector
        if store is None:
            raise ApiError(404, 100, "request inspection is disabled",
                           "inspect_db_size is -1 in the agent config")
        if rest and method == "GET":
            if (ex := store.get(rest)) is None:
                raise ApiError(404, 100, "request not found", f"no captured request '{rest}'")
            return 200, ex.json()
        if not rest and method == "GET":
            params = parse_qs(query)
            text = params.get("limit", ["50"])[-1]
            if not (text.isascii() and text.isdigit() and int(text) > 0):
                raise ApiError(400, 100, "invalid limit", f"limit must be a positive integer "
                                                          f"(got '{text}')")
            name = params.get("tunnel_name", [None])[-1]
            return 200, {"uri": REQUESTS, "requests": [
                ex.json() for ex in store.newest(int(text), name)]}
        if not rest and method == "DELETE":
            store.clear()
            return 204, None
        if not rest and method == "POST":
            await self.replay(store, body)
            return 204, None
        raise ApiError(405, 100, "not found", f"{method} is not an operation of this path")

    async def replay(self, store: Store, body: bytes) -> None:
        try:
            doc = json.loads(body or b"{}")
        except ValueError as exc:
            raise ApiError(400, 100, "invalid JSON body", str(exc)) from None
        if not isinstance(doc, dict) or not isinstance(doc.get("id"), str) or \
                not isinstance(doc.get("tunnel_name", ""), str):
            raise ApiError(400, 100, "invalid replay request", 'the body must be {"id": '
                           '"<request id>", "tunnel_name": "<optional tunnel name>"}')
        if (ex := store.get(doc["id"])) is None:
            raise ApiError(404, 100, "request not found", f"no captured request '{doc['id']}'")
        name = doc.get("tunnel_name") or ex.tunnel_name
        if (tunnel := self.agent.tunnels.get(name)) is None:
            raise ApiError(404, 102, "tunnel not found", f"no tunnel named '{name}'")
        if ex.request.truncated:
            raise ApiError(400, 100, "cannot replay this request", "its body was larger than "
                           "the captured part (64 KiB)")
        addr = tunnel.config.addr
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(
                addr.host, addr.port, ssl=LOCAL_TLS if addr.scheme == "https" else None), 10)
        except (OSError, TimeoutError) as exc:
            raise ApiError(502, 100, "replay failed", f"cannot reach {addr.url()}: "
                           f"{exc or type(exc).__name__}") from None
        tap, raw = Tap(store, name, ex.remote_addr), bytes(ex.request.raw)
        writer.write(raw)
        tap.request(raw)
        task = asyncio.create_task(_answer(reader, writer, tap))
        self._replays.add(task)
        task.add_done_callback(self._replays.discard)

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
        try:
            return await self.agent.start_tunnel(config)
        except NotConnected as exc:
            raise ApiError(503, 104, "session not ready", str(exc)) from None
        except BindFailed as exc:
            raise ApiError(502, 103, "failed to start tunnel", str(exc)) from None

    def status(self) -> dict[str, Any]:
        a = self.agent
        return {"status": "online" if a.status == "online" else a.status,
                "agent_version": __version__, "uri": "/api/status",
                "session": {"id": a.session_id, "error": a.error, "legs": [
                    {"region": "", "latency": int(a.latency * 1e9)}]}}


async def _answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, tap: Tap
                  ) -> None:
    """Read a replay's answer, for the tap, until it is complete (60 s at most)."""
    try:
        async with asyncio.timeout(REPLAY_TIMEOUT):
            while tap.pending and not tap.stopped:
                if not (data := await reader.read(65536)):
                    tap.response_eof()
                    break
                tap.response(data)
    except (OSError, TimeoutError):
        pass
    finally:
        tap.stop()
        with contextlib.suppress(ConnectionError, OSError, RuntimeError):
            writer.close()


def _error(exc: ApiError) -> dict[str, Any]:
    return {"error_code": exc.code, "status_code": exc.status, "msg": exc.msg,
            "details": {"err": exc.err}}
