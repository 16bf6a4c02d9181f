"""Calling an operation of the API in-process, as a given caller: the dashboard's one way to
read and change anything.

The call is an ASGI request built here and given to the API app itself, so it goes through
the same router, IP restrictions (``api``, with the browser's address), role checks, version
header, strict decoding, rules, transaction and rendering as a request over HTTP, and is
logged with its operation id as one. Only the bearer token is replaced: the scope carries
the ``Caller`` that the dashboard authenticated from its session (which authenticates the
API key again on every request). No HTTP client can set a scope key: this is no door from
outside.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import msgspec
from starlette.types import ASGIApp, Message

from edgeway.api.platform import Caller

CALLER = "edgeway.caller"
_enc = msgspec.json.Encoder()


@dataclass(frozen=True)
class Answer:
    status: int
    body: Any  # the decoded JSON (None for 204)
    operation_id: str = ""

    @property
    def ok(self) -> bool:
        return self.status < 400

    def error(self) -> tuple[str, str, str]:
        """(message, ``ERR_EDGEWAY_`` code, member) of an error answer."""
        body = self.body if isinstance(self.body, dict) else {}
        details = body.get("details") or {}
        return (str(body.get("msg") or f"HTTP {self.status}"), str(body.get("error_code") or ""),
                str(details.get("member") or ""))


async def call(app: ASGIApp, caller: Caller, client: str, method: str, path: str,
               query: list[tuple[str, str]] | None = None, body: Any = None) -> Answer:
    """``method path?query`` with ``body`` (JSON) as ``caller`` from ``client``'s address."""
    raw = b"" if body is None else _enc.encode(body)
    headers = [(b"edgeway-version", b"2"), (b"host", b"dashboard")]
    if body is not None:
        headers += [(b"content-type", b"application/json"),
                    (b"content-length", str(len(raw)).encode())]
    scope: dict[str, Any] = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method,
        "scheme": "http", "path": path, "raw_path": path.encode(), "root_path": "",
        "query_string": urlencode(query or []).encode(), "headers": headers,
        "client": (client, 0), "server": ("dashboard", 0), CALLER: caller}
    sent = False
    status, chunks, op = 500, [], ""

    async def receive() -> Message:
        nonlocal sent
        if sent:
            return {"type": "http.disconnect"}
        sent = True
        return {"type": "http.request", "body": raw, "more_body": False}

    async def send(message: Message) -> None:
        nonlocal status, op
        if message["type"] == "http.response.start":
            status = message["status"]
            op = dict(message.get("headers", ())).get(b"edgeway-operation-id", b"").decode()
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await app(scope, receive, send)
    data = b"".join(chunks)
    return Answer(status, msgspec.json.decode(data) if data else None, op)
