"""``/api/requests/http`` of the local API: list, show, replay and clear the HTTP exchanges
captured by ``edgeway.agent.inspect``, and ``/inspect/http/events``, the inspector's live feed
(server-sent events: one ``request`` event with an exchange's summary when it starts and when
its response is complete).

A replay sends the captured request again to the tunnel's local service (204 once sent; the
exchange it makes is captured anew). It may change the request: ``method``, ``uri``,
``headers`` (the whole set, name to a value or a list of values) and ``body`` (text) or
``body_base64``; a request changed in any way is sent with its body whole and a
``Content-Length`` (a chunked body is de-chunked). Refused (400): a truncated body that is not
replaced (sending it would hang the service), and edits that are not valid HTTP (each error
names the member).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import json
import re
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qs

from edgeway.agent.captures import Exchange, Message, Store
from edgeway.agent.dial import LOCAL_TLS
from edgeway.agent.inspect import Tap
from edgeway.agent.session import AgentSession

REQUESTS = "/api/requests/http"
EVENTS = "/inspect/http/events"
REPLAY_TIMEOUT = 60.0
KEEPALIVE = 15.0  # seconds between comments on an idle event stream
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_URI = re.compile(r"(/|https?://)[\x21-\x7e]*|\*")
Send = Callable[[dict[str, Any]], Awaitable[None]]
Receive = Callable[[], Awaitable[dict[str, Any]]]


class ApiError(Exception):
    def __init__(self, status: int, code: int, msg: str, err: str) -> None:
        super().__init__(msg)
        self.status, self.code, self.msg, self.err = status, code, msg, err


def bad(member: str, rule: str) -> ApiError:
    return ApiError(400, 100, "invalid replay request", f"{member}: {rule}")


def dechunk(data: bytes) -> bytes:
    """A chunked body's content (trailers dropped)."""
    out, pos = bytearray(), 0
    while True:
        end = data.index(b"\r\n", pos)
        size = int(data[pos:end].split(b";", 1)[0].strip() or b"0", 16)
        if size == 0:
            return bytes(out)
        out += data[end + 2:end + 2 + size]
        pos = end + 2 + size + 2


def _body(msg: Message) -> bytes:
    raw = bytes(msg.raw)
    body = raw[raw.index(b"\r\n\r\n") + 4:]
    chunked = ",".join(msg.headers.get("Transfer-Encoding", ())).lower().endswith("chunked")
    return dechunk(body) if chunked else body


def _headers(value: object) -> list[tuple[str, str]]:
    if not isinstance(value, dict):
        raise bad("headers", "must be an object of header names to values (or lists)")
    out = []
    for name, values in value.items():
        if not _TOKEN.fullmatch(name):
            raise bad(f"headers.{name}", "is not a valid header name")
        for v in values if isinstance(values, list) else [values]:
            if not isinstance(v, str) or any(c in v for c in "\r\n\0"):
                raise bad(f"headers.{name}", "values must be strings without CR, LF or NUL")
            out.append((name, v))
    return out


def edited(ex: Exchange, doc: dict[str, Any]) -> bytes:
    """The bytes a replay sends: the capture as it was, or rebuilt with the edits."""
    req = ex.request
    if not {"method", "uri", "headers", "body", "body_base64"} & set(doc):
        if req.truncated:
            raise ApiError(400, 100, "cannot replay this request", "its body was larger than "
                           "the captured part (64 KiB); send a body with the replay")
        return bytes(req.raw)
    method, uri = doc.get("method", req.method), doc.get("uri", req.uri)
    if not isinstance(method, str) or not _TOKEN.fullmatch(method):
        raise bad("method", "must be an HTTP method (a token such as GET)")
    if not isinstance(uri, str) or not _URI.fullmatch(uri):
        raise bad("uri", "must be a path starting with / (no spaces), or an absolute URL")
    headers = _headers(doc["headers"]) if "headers" in doc else [
        (name, v) for name, values in req.headers.items() for v in values]
    body = _new_body(doc, req)
    lines = [f"{method} {uri} HTTP/1.1"] + [
        f"{n}: {v}" for n, v in headers
        if n.lower() not in ("content-length", "transfer-encoding")]
    if body or method not in ("GET", "HEAD", "DELETE", "OPTIONS"):
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def _new_body(doc: dict[str, Any], req: Message) -> bytes:
    if "body_base64" in doc:
        try:
            return base64.b64decode(str(doc["body_base64"]), validate=True)
        except (binascii.Error, ValueError):
            raise bad("body_base64", "is not base64") from None
    if "body" in doc:
        if not isinstance(doc["body"], str):
            raise bad("body", "must be a string (binary bodies go in body_base64)")
        return doc["body"].encode()
    if req.truncated:
        raise ApiError(400, 100, "cannot replay this request", "its body was larger than the "
                       "captured part (64 KiB); send a body with the replay")
    try:
        return _body(req)
    except ValueError:
        raise bad("body", "the captured chunked body is malformed; send a body") from None


class Requests:
    def __init__(self, agent: AgentSession) -> None:
        self.agent = agent
        self._replays: set[asyncio.Task[None]] = set()  # reading the answers to replays

    def store(self) -> Store:
        store = self.agent.inspector
        if store is None:
            raise ApiError(404, 100, "request inspection is disabled",
                           "inspect_db_size is -1 in the agent config")
        return store

    async def route(self, method: str, rest: str, body: bytes, query: str) -> tuple[int, Any]:
        store = self.store()
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
        raw = edited(ex, doc)
        addr = tunnel.config.addr
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(
                addr.host, addr.port, ssl=LOCAL_TLS if addr.scheme == "https" else None), 10)
        except (OSError, TimeoutError) as exc:
            raise ApiError(502, 100, "replay failed", f"cannot reach {addr.url()}: "
                           f"{exc or type(exc).__name__}") from None
        tap = Tap(store, name, ex.remote_addr)
        writer.write(raw)
        tap.request(raw)
        task = asyncio.create_task(_answer(reader, writer, tap))
        self._replays.add(task)
        task.add_done_callback(self._replays.discard)

    async def events(self, receive: Receive, send: Send) -> None:
        """The live feed: server-sent events until the client goes."""
        store = self.store()
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(maxsize=1000)

        def tell(ex: Exchange) -> None:
            with contextlib.suppress(asyncio.QueueFull):  # a stalled page misses some
                queue.put_nowait(ex.summary())

        store.listeners.add(tell)
        gone = asyncio.create_task(_disconnect(receive))
        try:
            await send({"type": "http.response.start", "status": 200, "headers": [
                (b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]})
            await send({"type": "http.response.body", "body": b": live\n\n",
                        "more_body": True})
            while not gone.done():
                get = asyncio.create_task(queue.get())
                await asyncio.wait({get, gone}, timeout=KEEPALIVE,
                                   return_when=asyncio.FIRST_COMPLETED)
                get.cancel()
                if gone.done():
                    break
                data = (f"event: request\ndata: {json.dumps(get.result())}\n\n".encode()
                        if get.done() and not get.cancelled() else b": keep-alive\n\n")
                await send({"type": "http.response.body", "body": data, "more_body": True})
        except OSError:
            pass
        finally:
            store.listeners.discard(tell)
            gone.cancel()


async def _disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


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
