"""What the OAuth and OIDC logins (``oauth``, ``oidc``) share: both are the
authorization code flow, started by a redirect to the provider with a signed ``state`` that
the state cookie binds to this browser, and answered at the route's callback path."""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from typing import Any, ClassVar
from urllib.parse import urlencode

from edgeway.edge.hooks import Exchange
from edgeway.edge.login import base as login
from edgeway.edge.login.base import LOGIN_TTL, Answer, Common, Gate
from edgeway.edge.login.flow import Flow
from edgeway.edge.pages import Fixed

# the authorize request's parameters of a login, given its browser id and nonce
Params = Callable[[str, str], dict[str, str]]


def to_provider(key: bytes, c: Common, x: Exchange, endpoint: str, params: Params,
                **state: Any) -> Fixed:
    """The redirect that starts a login at the provider's authorize ``endpoint``: with
    ``params(browser, nonce)`` and a ``state`` signed with ``key`` that names the login (its
    route, this browser, a nonce, more ``state``, when it expires, where it started), and
    the state cookie that binds it to this browser."""
    browser, nonce = secrets.token_urlsafe(16), secrets.token_urlsafe(16)
    signed = login.sign(key, {"k": c.key, "b": browser, "n": nonce, **state,
                              "x": int(time.time()) + LOGIN_TTL,
                              "r": x.req.target.decode("latin-1")})
    sep = "&" if "?" in endpoint else "?"
    return login.redirect(endpoint + sep + urlencode({**params(browser, nonce),
                                                      "state": signed}),
                          login.set_cookie(c.state_cookie, browser, LOGIN_TTL))


class CodeFlow(Flow):
    """A login whose provider answers at ``callback``: a login this browser started on this
    route, not expired and no error, goes to ``answered``."""
    callback: ClassVar[str] = ""

    async def own(self, hook: Gate, x: Exchange, path: str) -> Fixed | None:
        if path != self.callback:
            return None
        answer = login.callback(self.gate.key, hook.common, x.req.target, x.req.headers)
        return answer if isinstance(answer, Fixed) else await self.answered(hook, x, answer)

    async def answered(self, hook: Gate, x: Exchange, answer: Answer) -> Fixed:
        raise NotImplementedError
