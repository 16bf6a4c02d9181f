"""The service behind the tunnels in edge tests: a real uvicorn server (HTTP/1.1 with h11,
WebSockets with the websockets library) on a loopback port, in a thread.

Paths: ``/headers`` answers the request line, headers and the body's length and SHA-256 as
JSON; ``/echo`` streams the request body back (chunked); ``/bytes/<n>`` sends n pseudo-random
bytes (with a SHA-256 header);
``/sse?gate=KEY`` writes three events, each once the test saw the one before (``gated``);
``/hang`` answers nothing; ``/ws`` echoes WebSocket
messages; anything else answers its path and the ``name`` the server was started with.
``echo()`` is a plain TCP echo service.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import secrets
import socket
import threading
import time
from collections.abc import Awaitable, Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import parse_qsl

import uvicorn

from tests.server import free_port

Scope = dict[str, Any]
GATE_WAIT = 15.0  # seconds ``/sse`` waits for the test to see an event before it goes on
_gates: dict[str, threading.Semaphore] = {}
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]


def pseudo_random(n: int) -> bytes:
    return random.Random(n).randbytes(n)


@contextmanager
def gated() -> Iterator[tuple[str, Callable[[], None]]]:
    """A gate for ``/sse?gate=KEY``: (the query, ``saw``). The service writes each event only
    once the test called ``saw()`` for the one before; an event that was held back on the
    way never lets it on, and after ``GATE_WAIT`` it writes ``data: late`` instead. An
    answer relayed as it is written is thus told from one buffered, with no clock."""
    key = secrets.token_hex(8)
    gate = _gates[key] = threading.Semaphore(0)
    try:
        yield f"gate={key}", gate.release
    finally:
        del _gates[key]


def events(lines: Iterable[str], saw: Callable[[], None]) -> list[str]:
    """The ``data:`` lines of a gated ``/sse`` answer, each let on as it arrives."""
    seen = []
    for line in lines:
        if line.startswith("data:"):
            seen.append(line)
            saw()
    return seen


async def _events(query: bytes, send: Send) -> None:
    gate = _gates[dict(parse_qsl(query.decode()))["gate"]]
    for i in range(3):
        if i and not await asyncio.to_thread(gate.acquire, True, GATE_WAIT):
            await send({"type": "http.response.body", "body": b"data: late\n\n",
                        "more_body": True})
            break
        await send({"type": "http.response.body", "body": f"data: {i}\n\n".encode(),
                    "more_body": True})
    await send({"type": "http.response.body", "body": b""})


def app(name: str, seen: list[str] | None = None
        ) -> Callable[[Scope, Receive, Send], Awaitable[None]]:
    """The service; ``seen``, if given, gets the path of every request that reaches it."""
    async def serve(scope: Scope, receive: Receive, send: Send) -> None:
        if seen is not None:
            seen.append(scope["path"])
        if scope["type"] == "websocket":
            await receive()  # connect
            await send({"type": "websocket.accept"})
            while True:
                msg = await receive()
                if msg["type"] != "websocket.receive":
                    return
                await send({"type": "websocket.send", "text": f"{name}:{msg.get('text')}"})
        if scope["type"] != "http":
            return
        path = scope["path"]

        async def start(status: int = 200, headers: list[tuple[bytes, bytes]] | None = None
                        ) -> None:
            await send({"type": "http.response.start", "status": status,
                        "headers": headers or []})

        if path == "/hang":
            await asyncio.sleep(3600)
        if path == "/echo":
            await start(200, [(b"content-type", b"application/octet-stream")])
            while True:
                msg = await receive()
                body = msg.get("body", b"")
                if body:
                    await send({"type": "http.response.body", "body": body, "more_body": True})
                if not msg.get("more_body"):
                    break
            await send({"type": "http.response.body", "body": b""})
            return
        body = b""
        while True:  # read (and drop) any request body
            msg = await receive()
            body += msg.get("body", b"")
            if not msg.get("more_body"):
                break
        if path == "/headers":
            data = json.dumps({"method": scope["method"], "path": path, "name": name,
                               "body": len(body), "sha256": hashlib.sha256(body).hexdigest(),
                               "headers": [[k.decode(), v.decode()]
                                           for k, v in scope["headers"]]}).encode()
            await start(200, [(b"content-type", b"application/json"),
                              (b"x-upstream", b"yes")])
            await send({"type": "http.response.body", "body": data})
        elif path.startswith("/bytes/"):
            data = pseudo_random(int(path.rsplit("/", 1)[1]))
            await start(200, [(b"content-length", str(len(data)).encode()),
                              (b"x-sha256", hashlib.sha256(data).hexdigest().encode())])
            for i in range(0, len(data), 1 << 20):
                await send({"type": "http.response.body", "body": data[i:i + (1 << 20)],
                            "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        elif path == "/sse":
            await start(200, [(b"content-type", b"text/event-stream"),
                              (b"cache-control", b"no-cache")])
            await _events(scope["query_string"], send)
        else:
            await start(200, [(b"content-type", b"text/plain")])
            await send({"type": "http.response.body", "body": f"{name} {path}".encode()})
    return serve


@contextmanager
def running(name: str = "upstream", seen: list[str] | None = None) -> Iterator[int]:
    """Serve ``app(name, seen)`` on a free loopback port for the duration."""
    port = free_port()
    config = uvicorn.Config(app(name, seen), host="127.0.0.1", port=port, log_config=None,
                            access_log=False, lifespan="off", http="h11", ws="websockets-sansio")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the upstream service did not start")
        threading.Event().wait(0.02)
    try:
        yield port
    finally:
        server.should_exit = True
        server.force_exit = True  # (connections a test left open, SSE or WebSocket, closed now)
        thread.join(10)
        assert not thread.is_alive(), "the upstream service did not stop"


def accept_in_threads(listener: socket.socket,
                      handle: Callable[[socket.socket], None]) -> None:
    """Hand each connection ``listener`` accepts to ``handle`` in a thread, until it closes."""
    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            threading.Thread(target=handle, args=(conn,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()


@contextmanager
def echo() -> Iterator[int]:
    """A TCP service on a free loopback port that sends every byte back."""
    listener = socket.create_server(("127.0.0.1", 0))

    def answer(conn: socket.socket) -> None:
        with conn:
            while data := conn.recv(1 << 20):
                conn.sendall(data)

    accept_in_threads(listener, answer)
    try:
        yield listener.getsockname()[1]
    finally:
        listener.close()
