"""What an edge module is on traffic: a ``Hook``, compiled once from the module's configuration
(``compile(config, Compiling) -> Hook | None`` in each ``edge/modules/<name>.py``), with the
phases it takes part in. ``edge/pipeline.py`` states their order; the HTTP edge, the router
and the TCP/TLS listeners run the phases by looping over a plan's hooks.

Phases (each optional; the defaults let everything through unchanged):

- ``connect(ip, port)``: a TCP or TLS connection to an edge or tunnel; False closes it.
- ``check(ip, headers)``: an HTTP request, before a backend is chosen; a ``Fixed`` answer
  refuses it (IP and user agent rules, basic auth, an open circuit, an unenforced module).
- ``request(exchange)``: after routing, in order; may change ``exchange.req``, read the body
  whole (``exchange.body``), answer (``Fixed``), close the connection (``CLOSE``) or take it
  over (``Takeover``, e.g. a WebSocket carried to a TCP backend).
- ``upstream(exchange, headers)``: the request head as it goes to the upstream (after the
  edge's ``X-Forwarded-*`` headers); returns the headers.
- ``response(exchange, status, headers)``: the response head, in reverse order (the module
  that saw the request first sees the response last, as middleware stacks do); returns the
  headers; it may also set ``exchange.gzip`` and ``exchange.rewrite``.
- ``outcome(exchange, failed)``: once per forwarded request, when its final response head
  arrives (``failed``: a server error) or it failed without one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

# (declared with the compiled HTTP path, and known here as every hook's)
from edgeway.edge.exchange import UNKNOWN as UNKNOWN
from edgeway.edge.exchange import Exchange as Exchange
from edgeway.edge.exchange import Local as Local
from edgeway.edge.exchange import accepted as accepted
from edgeway.edge.h1 import Request
from edgeway.edge.pages import Fixed, page
from edgeway.ippolicy import Network

if TYPE_CHECKING:
    from edgeway.edge.modules.circuit_breaker import Breakers
    from edgeway.edge.modules.sns import SnsVerifier
    from edgeway.edge.modules.traffic_policy import RateLimits
    from edgeway.tunnel.pipes import Pipe

Headers = list[tuple[bytes, bytes]]


class Close:
    """A request hook's verdict: close the public connection without an answer."""


CLOSE = Close()


@dataclass(frozen=True)
class Takeover:
    """A request hook's verdict: the connection becomes ``run``'s, with a pipe to the
    route's target (reader, writer, request, bytes read past its head, pipe)."""
    run: Callable[[asyncio.StreamReader, asyncio.StreamWriter, Request, bytes, Pipe],
                  Awaitable[None]]


Verdict = Fixed | Close | Takeover | None


@dataclass(frozen=True)
class Diverted:
    """A TCP or TLS connection's verdict: a traffic policy's forward-internal sends it to the
    internal TCP endpoint ``addr`` (``db.internal:5432``), whose live tunnel is ``target``
    (None: nobody serves it, the connection is closed)."""
    addr: str
    target: Any


# an internal TCP endpoint's address -> a live tunnel of it, or None (the router's registry)
Inner = Callable[[str], Any]


# a connection hook's verdict: refused (False), go on (True), or sent elsewhere
Connect = bool | Diverted


def nobody(_addr: str) -> None:
    """``Inner`` where no internal endpoint is reachable."""
    return None


class Login(Protocol):
    """The gate that runs end-user logins (``edge.login.gate``), as a login hook calls it:
    its answer (a redirect to log in, a refusal) or the request to forward."""

    async def check(self, hook: Any, x: Exchange) -> Fixed | Request: ...


@dataclass
class Services:
    """What request hooks reach beyond the request: the login gate, the SNS certificate
    cache and the rate-limit windows (one of each per HTTP edge), and the live tunnel of an
    internal endpoint (host, scheme; None when none is bound) for forward-internal and
    http-request."""
    login: Login | None
    sns: SnsVerifier
    limits: RateLimits
    internal: Callable[[str, str], Any] = lambda _host, _scheme: None
    # whether a tunnel has modules or a traffic policy of its own (http-request does not
    # call such an internal endpoint: it would skip them)
    guarded: Callable[[Any], bool] = lambda _tunnel: False


class BodyFilter(Protocol):
    """A response body changed on its way: ``data`` takes each piece and gives what to send
    now, ``end`` the rest; ``ConnectionResetError`` when it cannot go on (the response is
    cut: a changed body must not look complete when it is not)."""

    def data(self, data: bytes) -> bytes: ...

    def end(self) -> bytes: ...


class Hook:
    """A compiled module; subclasses override the phases they take part in."""
    name: ClassVar[str] = ""

    @property
    def within(self) -> tuple[Hook, ...]:
        """Hooks it runs itself (a traffic policy's actions), for ``Plan.find``."""
        return ()

    def connect(self, ip: str, port: int, inner: Inner = nobody,
                local: Local = UNKNOWN) -> Connect:
        return True

    def check(self, ip: str, headers: Headers) -> Fixed | None:
        return None

    async def request(self, x: Exchange) -> Verdict:
        return None

    def upstream(self, x: Exchange, headers: Headers) -> Headers:
        return headers

    def response(self, x: Exchange, status: int, headers: Headers) -> Headers:
        return headers

    @property
    def awaits(self) -> bool:
        """Its response phase waits on something (``response_awaiting``, not ``response``)."""
        return False

    async def response_awaiting(self, x: Exchange, status: int,
                                headers: Headers) -> Headers | Fixed:
        """The response phase of a hook that ``awaits``: the headers, or an answer of the
        edge's own instead of the response (the upstream's is dropped)."""
        return self.response(x, status, headers)

    def outcome(self, x: Exchange, failed: bool) -> None:
        return None


@dataclass(frozen=True)
class Refuse(Hook):
    """A request hook answering ``answer`` (another plan's ``check`` refusal, run where only
    request hooks are left to run: an internal endpoint's, after forward-internal)."""
    name = "refuse"
    answer: Fixed

    async def request(self, x: Exchange) -> Verdict:
        return self.answer


@dataclass(frozen=True)
class Unenforced(Hook):
    """A module this edge does not enforce (or a configuration of one it cannot honour):
    HTTP requests get a 503 naming it and connections are closed, never served
    unprotected."""
    name = "unenforced"
    what: str

    def connect(self, ip: str, port: int, inner: Inner = nobody,
                local: Local = UNKNOWN) -> Connect:
        return False

    def check(self, ip: str, headers: Headers) -> Fixed | None:
        return page(503, "Not available", f"This route requires the {self.what} module, "
                    "which this edge does not enforce yet; traffic is refused rather than let "
                    "through unprotected.", 4008)


# every IP policy's (action, network) rules, by the policy's id
Rules = dict[str, list[tuple[str, Network]]]


@dataclass
class Compiling:
    """What a module's ``compile`` may need besides its configuration: the IP policies'
    rules, the key of what it belongs to (a route, edge or tunnel id: rate-limit windows and
    breaker counts are its own), where breaker counts are kept (None: new ones), the vault
    secrets traffic policies may read (``modules/secrets.py``) and, for a route, the host
    its SAML service provider lives on; ``terminates``: a TLS endpoint's (its traffic policy
    may terminate TLS at the edge: ``terminate-tls``)."""
    rules: Rules = field(default_factory=dict)
    key: str = ""
    breakers: Breakers | None = None
    secrets: Mapping[tuple[str, str], str] = field(default_factory=dict)
    host: str = ""
    terminates: bool = False
    endpoint: str = ""  # an HTTP(S) endpoint's scheme (its policy's on_tcp_connect is one's)
    variables: Mapping[str, Any] = field(default_factory=dict)  # its endpoint.* (policy_env)


def overrides(hook: Hook, phase: str) -> bool:
    """Whether ``hook`` takes part in ``phase`` (plans keep a tuple of hooks per phase, so
    the request path loops only over those)."""
    return getattr(type(hook), phase) is not getattr(Hook, phase)
