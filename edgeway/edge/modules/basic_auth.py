"""Basic auth on agent binds: the credentials the agent sent (``credentials``: user and
password pairs), checked on every request (401 without a matching pair)."""

from __future__ import annotations

import base64
import binascii
import hmac
from dataclasses import dataclass
from typing import Any

from edgeway.edge.h1 import Headers, header
from edgeway.edge.hooks import Compiling, Hook
from edgeway.edge.pages import Fixed, page


def allows(authorization: str, pairs: tuple[tuple[str, str], ...]) -> bool:
    scheme, _, encoded = authorization.partition(" ")
    if scheme.lower() != "basic":
        return False
    try:
        user, _, password = base64.b64decode(encoded, validate=True).decode().partition(":")
    except (binascii.Error, ValueError, UnicodeDecodeError):
        return False
    ok = False
    for u, p in pairs:  # compare every pair: timing does not tell which user exists
        ok |= hmac.compare_digest(u.encode(), user.encode()) & \
            hmac.compare_digest(p.encode(), password.encode())
    return ok


@dataclass(frozen=True)
class BasicAuth(Hook):
    name = "basic_auth"
    pairs: tuple[tuple[str, str], ...]

    def check(self, ip: str, headers: Headers) -> Fixed | None:
        if allows(header(headers, b"authorization").decode("latin-1"), self.pairs):
            return None
        return page(401, "Authentication required", "This site needs a user name and "
                    "password.", 4001, (("WWW-Authenticate", 'Basic realm="edgeway"'),))


def compile(module: dict[str, Any], ctx: Compiling) -> BasicAuth | None:
    pairs = tuple((str(u), str(p)) for u, p in module.get("credentials") or [])
    return BasicAuth(pairs) if pairs else None
