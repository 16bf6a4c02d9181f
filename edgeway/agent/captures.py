"""Captured HTTP exchanges and the bounded in-memory store behind the agent's local API
(``/api/requests/http``).

Memory: at most ``MAX_EXCHANGES`` (1000) exchanges and ``inspect_db_size`` bytes (0: 50 MB) of
raw messages plus ``OVERHEAD`` each, the oldest evicted first; an exchange is weighed when its
request and when its response end. Bodies are kept up to ``BODY_CAP`` bytes per message.
"""

from __future__ import annotations

import base64
import functools
import re
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Final

from edgeway.agent.configcheck import DEFAULT_INSPECT_DB_SIZE

BODY_CAP: Final = 64 * 1024  # body bytes kept per message (chunk framing included)
MAX_EXCHANGES: Final = 1000
OVERHEAD: Final = 512  # what an exchange weighs beyond its raw bytes (id, parsed headers…)
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")


@functools.lru_cache(maxsize=1024)  # (names repeat: this runs for every header the tap sees)
def canonical(name: str) -> str:
    """Go's canonical header case (content-type: Content-Type); odd names as they are."""
    if not _TOKEN.fullmatch(name):
        return name
    return "-".join(part[:1].upper() + part[1:].lower() for part in name.split("-"))


class Message:
    """One message of an exchange. (A plain class, not a dataclass: compiled, a dataclass's
    generated ``__init__`` is interpreted Python, and the tap makes two of these a request.)"""

    def __init__(self, raw: bytearray, headers: dict[str, list[str]] | None = None,
                 proto: str = "HTTP/1.1", method: str = "", uri: str = "",
                 status_code: int = 0, reason: str = "", body: int = 0) -> None:
        self.raw = raw  # the head, then at most BODY_CAP bytes of the body as sent
        self.headers: dict[str, list[str]] = {} if headers is None else headers
        self.proto = proto
        self.method = method  # requests
        self.uri = uri
        self.status_code = status_code  # responses
        self.reason = reason
        self.body = body  # body bytes seen on the wire

    @property
    def truncated(self) -> bool:
        return self.body > BODY_CAP

    def capture(self) -> dict[str, Any]:
        return {"proto": self.proto, "headers": self.headers,
                "raw": base64.b64encode(self.raw).decode(), "truncated": self.truncated}


class _Ids:
    """Request ids (``req_`` and 20 random hex digits), drawn from the system's randomness
    256 at a time rather than with a system call each."""

    def __init__(self) -> None:
        self._pool, self._at = b"", 0

    def __call__(self) -> str:
        if self._at >= len(self._pool):
            self._pool, self._at = secrets.token_bytes(10 * 256), 0
        at, self._at = self._at, self._at + 10
        return "req_" + self._pool[at:at + 10].hex()


new_id = _Ids()


class Exchange:
    """A request and its response (None while pending). ``start``: the wall clock at the
    request's first byte; ``began``: the same instant, for ``duration`` (ns, to the
    response's end); ``size``: the weight the store counted."""

    def __init__(self, tunnel_name: str, remote_addr: str, request: Message,
                 start: float | None = None, began: int | None = None) -> None:
        self.tunnel_name, self.remote_addr, self.request = tunnel_name, remote_addr, request
        self.start = time.time() if start is None else start
        self.began = time.monotonic_ns() if began is None else began
        self._id = ""  # drawn when first asked for (the light mode never does)
        self.response: Message | None = None
        self.duration = 0
        self.size = 0

    @property
    def id(self) -> str:
        if not self._id:
            self._id = new_id()
        return self._id

    def weight(self) -> int:
        return OVERHEAD + len(self.request.raw) + (len(self.response.raw) if self.response
                                                   else 0)

    def started(self) -> str:
        return datetime.fromtimestamp(self.start, UTC).isoformat().replace("+00:00", "Z")

    def summary(self) -> dict[str, Any]:
        """The list view's line: no headers, no bodies."""
        res = self.response
        return {"id": self.id, "tunnel_name": self.tunnel_name, "start": self.started(),
                "duration": self.duration, "method": self.request.method,
                "uri": self.request.uri, "status_code": res.status_code if res else None}

    def json(self) -> dict[str, Any]:
        req, res = self.request, self.response
        start = self.started()
        return {"uri": f"/api/requests/http/{self.id}", "id": self.id,
                "tunnel_name": self.tunnel_name, "remote_addr": self.remote_addr,
                "start": start, "duration": self.duration,
                "request": {"method": req.method, "uri": req.uri, **req.capture()},
                "response": None if res is None else {
                    "status": f"{res.status_code} {res.reason}".rstrip(),
                    "status_code": res.status_code, **res.capture()}}


class Store:
    """The captured exchanges, oldest first, within ``max_bytes`` and ``max_count``."""

    def __init__(self, max_bytes: int, max_count: int = MAX_EXCHANGES) -> None:
        self.max_bytes = max_bytes if max_bytes > 0 else DEFAULT_INSPECT_DB_SIZE
        self.max_count = max_count
        self.items: OrderedDict[str, Exchange] = OrderedDict()
        self.size = 0
        self.listeners: set[Callable[[Exchange], None]] = set()  # the inspector's live view

    def _tell(self, ex: Exchange) -> None:
        for listener in list(self.listeners):
            listener(ex)

    def add(self, ex: Exchange) -> None:
        ex.size = ex.weight()
        self.items[ex.id] = ex
        self.size += ex.size
        self._evict()
        self._tell(ex)

    def resize(self, ex: Exchange, final: bool = False) -> None:
        """Weigh ``ex`` again (its request or its response ended; ``final``: the latter)."""
        if self.items.get(ex.id) is ex:  # not evicted meanwhile
            weight = ex.weight()
            self.size += weight - ex.size
            ex.size = weight
            self._evict()
            if final:
                self._tell(ex)

    def _evict(self) -> None:
        while self.items and (self.size > self.max_bytes or len(self.items) > self.max_count):
            self.size -= self.items.popitem(last=False)[1].size

    def get(self, exchange_id: str) -> Exchange | None:
        return self.items.get(exchange_id)

    def newest(self, limit: int, tunnel_name: str | None = None) -> list[Exchange]:
        out: list[Exchange] = []
        for ex in reversed(self.items.values()):
            if len(out) >= limit:
                break
            if tunnel_name is None or ex.tunnel_name == tunnel_name:
                out.append(ex)
        return out

    def clear(self) -> None:
        self.items.clear()
        self.size = 0
