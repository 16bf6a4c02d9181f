"""Request and response plumbing shared by every handler: version header, content type, body
decoding into a kind's shape, JSON and error responses."""

from __future__ import annotations

import re
from typing import Any

import msgspec
from starlette.requests import Request
from starlette.responses import Response

from edgeway.api import dialect
from edgeway.errors import ApiError, Invalid

VERSION_HEADERS = ("edgeway-version", "service-version")
SUPPORTED_VERSIONS = ("2",)
_enc = msgspec.json.Encoder()
_MSG = re.compile(r"^(?P<msg>.*?)(?: - at `\$(?P<path>[^`]*)`)?$", re.S)
_UNKNOWN = re.compile(r"^Object contains unknown field `(?P<name>[^`]*)`$")
_MISSING = re.compile(r"^Object missing required field `(?P<name>[^`]*)`$")


def operation_id(request: Request) -> str:
    op: str = request.scope.get("state", {}).get("operation_id", "")
    return op


class JSONResponse(Response):
    """A JSON response with its two headers built directly (no header merging)."""

    media_type = "application/json"

    def __init__(self, content: bytes, status_code: int) -> None:
        self.status_code = status_code
        self.body = content
        self.background = None
        self.raw_headers = [(b"content-length", str(len(content)).encode()),
                            (b"content-type", b"application/json")]


def json_response(status: int, body: Any) -> Response:
    """``body`` in the request's dialect (``api.dialect``)."""
    return JSONResponse(_enc.encode(dialect.outbound(body)), status)


def no_content() -> Response:
    return Response(status_code=204)


class _Spelled(Invalid):
    """An error already in the request's dialect (a member it named as it spelled it)."""


def error_response(err: ApiError, op_id: str) -> Response:
    spelled = isinstance(err, _Spelled)
    body = dialect.error_body(err.body(op_id), "" if spelled else err.details.get("member", ""),
                              dialect.current(), words=not spelled)
    response = JSONResponse(_enc.encode(body), err.status)
    if err.retry_after is not None:
        response.raw_headers.append((b"retry-after", str(err.retry_after).encode()))
    return response


def check_version(request: Request) -> None:
    """The version header: the vendor dialect's (which chose it), or one of Edgeway's."""
    spoken = dialect.current()
    for name in (spoken.version_header,) if not spoken.native else VERSION_HEADERS:
        value = request.headers.get(name)
        if value is not None:
            if value.strip() not in SUPPORTED_VERSIONS:
                raise ApiError(f"Unsupported API version '{value}' in header '{name}'. "
                               "Supported versions: 2.", 217)
            return
    raise ApiError("Your request has not specified an API version. Send the header "
                   "'Edgeway-Version: 2' (or 'Service-Version: 2'). Supported versions: 2.",
                   218)


MAX_BODY = 1 << 20


async def _read_capped(request: Request) -> bytes:
    headers = request.headers
    declared = headers.get("content-length", "")
    if not declared and "transfer-encoding" not in headers:
        return b""  # HTTP/1.1: no length and no chunked coding means no body
    if declared.isascii() and declared.isdigit() and int(declared) > MAX_BODY:
        raise ApiError(f"The request body is larger than {MAX_BODY} bytes.", 212, status=413)
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY:
            raise ApiError(f"The request body is larger than {MAX_BODY} bytes.", 212,
                           status=413)
        chunks.append(chunk)
    return b"".join(chunks)


async def body_bytes(request: Request, allowed: bool) -> bytes:
    body = await _read_capped(request)
    if not body.strip():
        return b""
    if not allowed:
        raise ApiError(f"{request.method} takes no request body.", 211)
    ctype = request.headers.get("content-type")
    if ctype is None:
        raise ApiError("A request body needs 'Content-Type: application/json'.", 216)
    if ctype.split(";")[0].strip().lower() != "application/json":
        raise ApiError(f"Unsupported content type '{ctype}'; use application/json.", 210)
    return body


async def create_body(request: Request) -> bytes:
    """A create's body: a JSON object, required (empty or blank is not JSON: 400, as any other
    body that is not; ``{}`` asks for every default)."""
    body = await body_bytes(request, True)
    if not body:
        raise ApiError("The request body is not valid JSON: it is empty. A create takes a JSON "
                       "object ({} for every member's default).", 213)
    return body


def _member(path: str) -> str:
    return path.lstrip(".")


def decode_error(exc: msgspec.ValidationError | msgspec.DecodeError,
                 known: list[str], codes: dict[str, int]) -> ApiError:
    if not isinstance(exc, msgspec.ValidationError):
        return ApiError(f"The request body is not valid JSON: {exc}", 213)
    m = _MSG.match(str(exc))
    assert m is not None
    msg, path = m["msg"], _member(m["path"] or "")
    unknown = _UNKNOWN.match(msg)
    if unknown:
        member = ".".join(p for p in (path, unknown["name"]) if p)
        hint = f"; supported members: {', '.join(known)}" if not path else ""
        err = Invalid(member, f"unknown member{hint}", 214)
        err.msg = f"Unknown request member '{member}'{hint}."
        return err
    missing = _MISSING.match(msg)
    if missing:
        member = ".".join(p for p in (path, missing["name"]) if p)
        return Invalid(member, "is required", 1405 if not path else 215)
    if not path:
        return ApiError(f"The request body must be a JSON object ({msg}).", 213)
    top = path.split(".")[0].split("[")[0]
    return Invalid(path, msg[0].lower() + msg[1:], codes.get(top, 215))


def too_deep() -> ApiError:
    """A body nested deeper than the JSON decoder goes (about a thousand levels; no member of
    this API nests more than a few)."""
    return ApiError("The request body is not valid here: its arrays and objects are nested "
                    "too deeply (no request member nests more than a few levels).", 213)


def _from_dialect(body: bytes) -> bytes:
    """A body in the vendor's dialect, in Edgeway's names (unchanged when it cannot hold a
    name that differs, or is not JSON: decoding then says why)."""
    if dialect.current().native or not dialect.mentions(body):
        return body
    try:
        return _enc.encode(dialect.inbound(msgspec.json.decode(body)))
    except msgspec.DecodeError:
        return body
    except RecursionError:  # (msgspec's decoder and encoder recurse)
        raise too_deep() from None
    except dialect.Unknown as exc:
        err = _Spelled(str(exc), "unknown member", 214)
        err.msg = f"Unknown request member '{exc}'."
        raise err from None


def without_echoes(body: bytes, path: dict[str, str]) -> bytes:
    """``body`` without the members that repeat the path's (``id`` in an update, ``edge_id``
    in a route's create: the vendor's reference and its clients send them); one that differs
    from the path's is refused."""
    if not any(f'"{name}"'.encode() in body for name in path):
        return body
    try:
        obj = msgspec.json.decode(body)
    except (msgspec.DecodeError, RecursionError):
        return body  # (``decode`` says what is wrong with it)
    if not isinstance(obj, dict) or not any(name in obj for name in path):
        return body
    for name, value in path.items():
        if name in obj and obj.pop(name) != value:
            raise Invalid(name, f"must be the {name} of the request's path ('{value}'), or "
                          "left out", 215)
    return msgspec.json.encode(obj)


def decode(body: bytes, shape: type[msgspec.Struct], codes: dict[str, int]) -> dict[str, Any]:
    """Strictly decode ``body`` into ``shape``; the result keeps only members that were sent."""
    body = _from_dialect(body)
    try:
        value = msgspec.json.decode(body or b"{}", type=shape)
    except (msgspec.ValidationError, msgspec.DecodeError) as exc:
        raise decode_error(exc, list(shape.__struct_fields__), codes) from None
    except RecursionError:
        raise too_deep() from None
    out: dict[str, Any] = msgspec.to_builtins(value)
    return out
