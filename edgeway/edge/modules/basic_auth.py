"""Basic auth on agent binds: the credentials the agent sent, checked on every request."""

from __future__ import annotations

import base64
import binascii
import hmac


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
