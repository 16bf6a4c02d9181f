"""What a login flow (``oauth``, ``oidc``, ``saml`` of this package) is to the gate that runs
it (``gate``): the edge's own paths, the start of a login, the re-check of a session at the
provider, the end of a session; and what the gate offers the flows (``Services``), so that
the flows never import the gate above them."""

from __future__ import annotations

from typing import Any, ClassVar, Protocol

import httpx

from edgeway.edge.hooks import Exchange
from edgeway.edge.login.base import Gate, Identity, signed_out
from edgeway.edge.login.sessions import AppSessions, Live
from edgeway.edge.pages import Fixed


class Services(Protocol):
    """The gate, as the flows use it."""
    key: bytes
    sessions: AppSessions

    def http(self) -> httpx.AsyncClient: ...

    async def establish(self, hook: Gate, x: Exchange, who: Identity,
                        provider: tuple[str, str], target: str, **more: Any) -> Fixed: ...

    @staticmethod
    def allowed(who: Identity, rules: list[tuple[str, bool]]) -> Fixed | None: ...


class Flow:
    """One kind of login (``oidc``, ``oauth``, ``saml`` of this package) as
    the gate runs it: the edge's own paths, the start of a login, the re-check of a session
    at the provider, the end of a session."""
    kind: ClassVar[str] = ""

    def __init__(self, gate: Services) -> None:
        self.gate = gate

    async def own(self, hook: Gate, x: Exchange, path: str) -> Fixed | None:
        """The answer to one of the module's own paths (callback, SAML endpoints), or None
        when ``path`` is not one."""
        return None

    async def begin(self, hook: Gate, x: Exchange) -> Fixed:
        raise NotImplementedError

    async def recheck(self, hook: Gate, x: Exchange, live: Live) -> Fixed | None:
        """Ask the provider about a session's user again: None (still allowed, recorded) or
        the answer instead (the session was ended: a refusal, or a new login)."""
        return None

    def due(self, hook: Gate, live: Live, now: float) -> bool:
        """Whether the session's user is to be checked at the provider again now."""
        return False

    async def logout(self, hook: Gate, x: Exchange, live: Live | None) -> Fixed:
        return signed_out(hook.common)
