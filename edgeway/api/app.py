"""Build the ASGI app from the catalog: one set of CRUD routes per routed kind, the extras,
``/openapi.json``, and the request log / operation id / last-resort error wrapper."""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from edgeway import __version__, catalog, ids
from edgeway.api import crud, extras
from edgeway.api.auth import authenticate
from edgeway.api.http import check_version, error_response, json_response, operation_id
from edgeway.api.openapi import document
from edgeway.api.platform import Caller, Platform
from edgeway.errors import ApiError, NotFound

log = logging.getLogger("edgeway.api")
Handler = Callable[[Request, Platform, Caller], Awaitable[Response]]
_CRUD: tuple[tuple[str, str, str, Any], ...] = (
    ("create", "", "POST", crud.create), ("list", "", "GET", crud.list_),
    ("get", "/{id}", "GET", crud.get), ("update", "/{id}", "PATCH", crud.update),
    ("delete", "/{id}", "DELETE", crud.delete),
)


def endpoint(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    """Authenticate, check the version header, run the handler; ApiErrors become bodies."""
    async def run(request: Request) -> Response:
        platform: Platform = request.app.state.platform
        try:
            await platform.restrictions.check(request.client.host if request.client else None)
            caller = await authenticate(request, platform)
            check_version(request)
            return await handler(request, platform, caller)
        except ApiError as err:
            return error_response(err, operation_id(request))
    return run


def _wrap(handler: Handler, _name: str) -> Callable[[Request], Awaitable[Response]]:
    return endpoint(handler)


def routes() -> list[Route]:
    out: list[Route] = []
    for kind in catalog.ALL:
        if not kind.routed:
            continue
        for op, suffix, method, fn in _CRUD:
            if op in kind.ops:
                handler = functools.partial(fn, kind=kind)
                out.append(Route(f"/{kind.collection}{suffix}", endpoint(handler),
                                 methods=[method]))
    out += extras.routes(_wrap)
    out.append(Route("/openapi.json", openapi, methods=["GET"]))
    out.append(Route("/", root, methods=["GET"]))
    return out


async def openapi(request: Request) -> Response:
    platform: Platform = request.app.state.platform
    return json_response(200, document(platform.settings.public_url))


async def root(request: Request) -> Response:
    platform: Platform = request.app.state.platform
    base = platform.settings.public_url
    return json_response(200, {"name": "edgeway", "version": __version__,
                               "openapi": f"{base}/openapi.json"})


async def http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    op = operation_id(request)
    if exc.status_code == 405:
        err = ApiError(f"{request.method} is not supported on {request.url.path}.", None,
                       status=405)
        resp = error_response(err, op)
        resp.headers.update(exc.headers or {})
        return resp
    nf = NotFound("Not Found")
    nf.details = {"path": request.url.path}
    return error_response(nf, op)


class RequestLog:
    """Outermost layer: operation id, one JSON log line per request, and a 500 body (never a
    traceback) for anything that escaped the handlers."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._enc = msgspec.json.Encoder()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        op = f"op_{ids.ksuid()}"
        scope.setdefault("state", {})["operation_id"] = op
        start = time.perf_counter()
        status = [0]

        async def send_wrapper(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
                message["headers"] = [*message.get("headers", []),
                                      (b"edgeway-operation-id", op.encode())]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        except Exception:
            log.exception("unhandled error in %s %s", scope["method"], scope["path"])
            if status[0] == 0:
                err = ApiError("Internal server error; the operation id identifies it in the "
                               "server log.", None, status=500)
                await error_response(err, op)(scope, receive, send_wrapper)
        finally:
            self._log(scope, op, status[0], start)

    def _log(self, scope: Scope, op: str, status: int, start: float) -> None:
        client = scope.get("client") or ("", 0)
        line = {"event": "request", "method": scope["method"], "path": scope["path"],
                "status": status, "ms": round((time.perf_counter() - start) * 1000, 2),
                "client": client[0], "operation_id": op}
        logging.getLogger("edgeway.access").info(self._enc.encode(line).decode())


def build(platform: Platform) -> ASGIApp:
    app = Starlette(routes=routes(), exception_handlers={HTTPException: http_error})
    app.state.platform = platform
    return RequestLog(app)
