"""Passwords of the people who sign in to the dashboard (``edgeway users set-password``):
scrypt from the standard library, a random salt each, never stored plain. A stored hash
reads ``scrypt$N$r$p$<salt>$<key>`` (base64), so its cost can rise later without breaking
the ones stored. Hashing takes tens of milliseconds and 32 MiB on purpose: callers on the
event loop run it in a thread."""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets

N, R, P = 1 << 15, 8, 1
MIN_LENGTH = 12
MAX_LENGTH = 1024
_MAXMEM = 64 << 20
# verified when there is no such user, so that a wrong name costs the same time as a wrong
# password
DECOY = "scrypt$32768$8$1$AAAAAAAAAAAAAAAAAAAAAA==$AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def check(password: str) -> None:
    """Refuse a password too short or too long to be one (ValueError saying why)."""
    if len(password) < MIN_LENGTH:
        raise ValueError(f"a password needs at least {MIN_LENGTH} characters")
    if len(password) > MAX_LENGTH:
        raise ValueError(f"a password may have at most {MAX_LENGTH} characters")


def hash_password(password: str) -> str:
    check(password)
    salt = secrets.token_bytes(16)
    key = hashlib.scrypt(password.encode(), salt=salt, n=N, r=R, p=P, maxmem=_MAXMEM)
    return f"scrypt${N}${R}${P}${_b64(salt)}${_b64(key)}"


def verify(password: str, stored: str) -> bool:
    try:
        scheme, n, r, p, salt, key = stored.split("$")
        if scheme != "scrypt" or len(password) > MAX_LENGTH:
            return False
        found = hashlib.scrypt(password.encode(), salt=base64.b64decode(salt), n=int(n),
                               r=int(r), p=int(p), maxmem=_MAXMEM)
    except ValueError:
        return False
    return hmac.compare_digest(found, base64.b64decode(key))


def fingerprint(stored: str) -> str:
    """What a session keeps of the password it was opened with: a new password (a new
    hash) ends the sessions opened with the old one."""
    return hashlib.sha256(stored.encode()).hexdigest()
