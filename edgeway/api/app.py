"""Build the ASGI app from the catalog: one set of CRUD routes per routed kind, the extras,
``/openapi.json``; plus the operation id, one JSON log line per request, a 503 with
``Retry-After`` when the store could not reach the database (it retries lost connections
itself first), and a 500 body (never a traceback) for anything that escaped a handler.

Dispatch is our own (``router``): a segment lookup instead of Starlette's regex scan, and no
middleware stack; handlers still take and return Starlette requests and responses.
"""

from __future__ import annotations

import functools
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any

import msgspec
import structlog
from starlette.middleware.cors import CORSMiddleware
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from edgeway import __version__, catalog, ids
from edgeway.api import crud, dialect, events, extras, guards, inprocess, listing, modules
from edgeway.api.auth import authenticate
from edgeway.api.http import (
    JSONResponse,
    check_version,
    error_response,
    json_response,
    operation_id,
)
from edgeway.api.openapi import document
from edgeway.api.platform import AuthCache, Caller
from edgeway.api.router import PathRouter
from edgeway.errors import ApiError, Forbidden, NotFound, Unavailable
from edgeway.platform import Platform
from edgeway.store.db import DatabaseUnavailable, OutcomeUnknown

log = structlog.get_logger()
_enc = msgspec.json.Encoder()
UNKNOWN_PATH, UNKNOWN_METHOD = 254, 255  # Edgeway's own codes, next to 252/253
Handler = Callable[[Request, Platform, Caller], Awaitable[Response]]
Endpoint = Callable[[Request], Awaitable[Response]]
_CRUD: tuple[tuple[str, str, str, Any], ...] = (
    ("create", "", "POST", crud.create), ("list", "", "GET", listing.list_),
    ("get", "/{id}", "GET", crud.get), ("update", "/{id}", "PATCH", crud.update),
    ("delete", "/{id}", "DELETE", crud.delete),
)


def unavailable(exc: DatabaseUnavailable) -> ApiError:
    """A database the store could not reach within its retries: 503 with ``Retry-After``."""
    if isinstance(exc, OutcomeUnknown):
        return Unavailable.outcome_unknown(str(exc))
    return Unavailable.not_applied(str(exc))


def endpoint(handler: Handler) -> Endpoint:
    """IP restrictions, API key, version header, then the handler; ApiErrors (and a database
    the store could not reach) become bodies. A call made in-process (``inprocess``) comes
    with its caller, authenticated by a dashboard session, instead of a bearer token."""
    async def run(request: Request) -> Response:
        platform: Platform = request.app.state.platform
        try:
            client = request.client.host if request.client else None
            if (r := await platform.restrictions.refusing("api", client)) is not None:
                raise Forbidden(f"The address {client} is not allowed to call the API by IP "
                                f"restriction '{r.id}'.", 220)
            caller = request.scope.get(inprocess.CALLER) \
                or await authenticate(request, platform, request.app.state.auth_cache)
            guards.authorize(caller, request.method, request.scope["path"])
            check_version(request)
            return await handler(request, platform, caller)
        except ApiError as err:
            return error_response(err, operation_id(request))
        except DatabaseUnavailable as exc:
            return error_response(unavailable(exc), operation_id(request))
    return run


def routes() -> list[tuple[str, str, Endpoint]]:
    out: list[tuple[str, str, Endpoint]] = []
    for kind in catalog.ALL:
        if not kind.routed:
            continue
        for op, suffix, method, fn in _CRUD:
            if op in kind.ops:
                out.append((f"{kind.url}{suffix}", method,
                            endpoint(functools.partial(fn, kind=kind))))
    out += [(path, method, endpoint(fn)) for path, method, fn in modules.routes()]
    out += [(path, method, endpoint(fn)) for path, method, fn in extras.routes()]
    out += [(path, method, endpoint(fn)) for path, method, fn in events.routes()]
    out += [("/openapi.json", "GET", openapi), ("/", "GET", root)]
    return out


async def openapi(request: Request) -> Response:
    """The document in Edgeway's names, whichever the dialect (its description says how the
    vendor's differ)."""
    platform: Platform = request.app.state.platform
    return JSONResponse(_enc.encode(document(platform.settings.public_url)), 200)


async def root(request: Request) -> Response:
    platform: Platform = request.app.state.platform
    base = platform.settings.public_url
    return json_response(200, {"name": "edgeway", "version": __version__,
                               "openapi": f"{base}/openapi.json"})


class _State:
    def __init__(self, platform: Platform) -> None:
        self.platform = platform
        self.auth_cache = AuthCache()
        platform.watchers.append(self.auth_cache.changed)


class OperationIds:
    """``op_`` + a KSUID-shaped id, cheaply: this second's timestamp, a per-process random
    part and a counter (operation ids identify requests in logs; they need not be secret)."""

    def __init__(self) -> None:
        self._salt = secrets.randbits(96) << 32
        self._count = 0

    def __call__(self) -> str:
        self._count = (self._count + 1) & 0xFFFFFFFF
        ts = int(time.time()) - ids.EPOCH
        return "op_" + ids.encode((ts << 128) | self._salt | self._count)


class Api:
    """The ASGI application."""

    def __init__(self, platform: Platform) -> None:
        self.state = _State(platform)
        self.router = PathRouter()
        for path, method, fn in routes():
            self.router.add(path, [method], fn)
        self._op = OperationIds()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        op = self._op()
        spoken = dialect.of_headers(scope["headers"])
        token = dialect.use(spoken)
        scope["app"] = self
        scope["state"] = {"operation_id": op}
        start = time.perf_counter()
        status = 0
        logged = False

        async def send_op(message: Message) -> None:
            nonlocal status, logged
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [*message.get("headers", ()),
                                      (b"edgeway-operation-id", op.encode())]
                if not spoken.native:
                    message["headers"].append((spoken.operation_header, op.encode()))
            elif message["type"] == "http.response.body" and not message.get("more_body"):
                # Logged before the last of the answer goes out: a client holding the answer
                # finds its line in the log.
                logged = True
                self._log(scope, op, status, start)
            await send(message)

        try:
            await self._dispatch(scope, receive, send_op)
        except Exception:
            log.exception("unhandled_error", method=scope["method"], path=scope["path"],
                          operation_id=op)
            if status == 0:
                err = ApiError("Internal server error; the operation id identifies it in the "
                               "server log.", None, status=500)
                await error_response(err, op)(scope, receive, send_op)
        finally:
            dialect.reset(token)
            if not logged:
                self._log(scope, op, status, start)

    async def _dispatch(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope, receive)
        found = self.router.match(scope["path"])
        method = "GET" if scope["method"] == "HEAD" else scope["method"]
        if found is None:
            nf = NotFound(f"No operation is served at {scope['path']}.", UNKNOWN_PATH)
            nf.details = {"path": scope["path"]}
            response = error_response(nf, operation_id(request))
        elif method not in found[0]:
            err = ApiError(f"{scope['method']} is not supported on {scope['path']}.",
                           UNKNOWN_METHOD, status=405)
            response = error_response(err, operation_id(request))
            response.headers["Allow"] = ", ".join(sorted(found[0]))
        else:
            fn, names = found[0][method]
            scope["path_params"] = dict(zip(names, found[1], strict=True))
            response = await fn(request)
        await response(scope, receive, send)

    @staticmethod
    def _log(scope: Scope, op: str, status: int, start: float) -> None:
        client = scope.get("client") or ("", 0)
        log.info("request", method=scope["method"], path=scope["path"], status=status,
                 ms=round((time.perf_counter() - start) * 1000, 2), client=client[0],
                 operation_id=op)


CORS_HEADERS = ("Authorization", "Content-Type", "Edgeway-Version", "Service-Version",
                "Ngrok-Version")


def build(platform: Platform, cors_origins: tuple[str, ...] = ()) -> ASGIApp:
    """The API; with ``cors_origins``, behind Starlette's CORS middleware, which answers
    preflights and marks answers to those origins (others get no CORS headers, so browsers
    refuse them)."""
    app = Api(platform)
    if not cors_origins:
        return app
    return CORSMiddleware(app, allow_origins=list(cors_origins),
                          allow_methods=["GET", "POST", "PUT", "PATCH", "DELETE"],
                          allow_headers=list(CORS_HEADERS),
                          expose_headers=["Edgeway-Operation-Id", "Ngrok-Operation-Id",
                                          "Retry-After"], max_age=600)
