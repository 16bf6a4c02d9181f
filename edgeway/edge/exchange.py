"""One HTTP request on its way through the edge's hooks (``edge.hooks``), and the server side
of the public connection it came on. Compiled with the HTTP path (``edgeway.native``): an
exchange is made for every request, and a compiled class's ``__init__`` is a C call where a
dataclass's generated one is interpreted.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from edgeway.edge.h1 import Request

if TYPE_CHECKING:
    from edgeway.edge.hooks import BodyFilter, Services
    from edgeway.edge.modules.compression import Gzip


class Local(NamedTuple):
    """The server's side of a public connection (``conn.server_*``, ``conn.ts.start``)."""
    ip: str = ""
    port: int = 0
    start: float = 0.0  # when it was accepted (epoch seconds)
    region: str = ""  # this server's region


UNKNOWN: Final = Local()  # (where a connection's server side is not known: tests, checks)


def accepted(sockname: Any, region: str) -> Local:
    """The server side of a public connection accepted now on ``sockname``."""
    ip, port = (sockname[0], sockname[1]) if isinstance(sockname, tuple) else ("", 0)
    return Local(str(ip), int(port), time.time(), region)


class Exchange:
    """One request on its way through the hooks, and what they keep for its response.

    ``read_body`` reads the body whole (its end taken) for a hook; ``interim`` writes a 1xx
    head (100 Continue) to the client; ``local``: the connection's server side; ``body``:
    the body once a hook read it, else None; ``env``: the traffic policy's CEL variables;
    ``forward``, ``hops``: forward-internal's internal endpoint's tunnel the request goes to
    instead (the request hooks of its own plan run next), and how many forwards it took so
    far; ``counted``: a traffic policy's actions that count its outcome (circuit breakers);
    ``gzip``: the response body is gzipped (set by the compression hook); ``rewrite``: the
    response body is rewritten whole before it goes on (a traffic policy's
    response-body-find-replace), gzipped after that if it is. What came of it, for its
    traffic event (``edge/traffic.py``): ``status``, the final status answered (0: none, the
    connection was cut), ``answered``, when its final response head was ready (monotonic),
    ``sent``, response body bytes for the client, ``received``, request body bytes
    forwarded."""

    def __init__(self, req: Request, ip: str, port: int, scheme: str, services: Services,
                 read_body: Callable[[int], Awaitable[bytes | None]],
                 interim: Callable[[bytes], None], local: Local = UNKNOWN,
                 body: bytes | None = None, env: dict[str, Any] | None = None,
                 forward: Any = None, hops: int = 0, counted: list[Any] | None = None,
                 gzip: Gzip | None = None, rewrite: BodyFilter | None = None, status: int = 0,
                 answered: float = 0.0, sent: int = 0, received: int = 0) -> None:
        self.req, self.ip, self.port, self.scheme = req, ip, port, scheme
        self.services, self.read_body, self.interim, self.local = services, read_body, \
            interim, local
        self.body, self.env, self.forward, self.hops = body, env, forward, hops
        self.counted: list[Any] = [] if counted is None else counted
        self.gzip, self.rewrite = gzip, rewrite
        self.status, self.answered, self.sent, self.received = status, answered, sent, received

    def __repr__(self) -> str:
        return (f"Exchange({self.req.method!r} {self.req.target!r} from {self.ip}:{self.port}"
                f", status={self.status})")
