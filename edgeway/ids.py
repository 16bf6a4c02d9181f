"""Identifiers and secrets: prefixed KSUIDs, shown-once tokens and their hashes.

An id is ``<prefix>_<27 base62 chars>``: a KSUID (4-byte big-endian seconds since the KSUID
epoch, then 16 random bytes). Ids made by one process are strictly increasing, even within one
second, so ordering by id is ordering by creation: within a second the payload of the previous
id is incremented by a random step instead of drawn afresh.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import threading
import time
from collections.abc import Callable

ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
EPOCH = 1_400_000_000
KSUID_LEN = 27
_MAX = 1 << 160
ID_RE = re.compile(r"^([a-z]+)_([0-9A-Za-z]{27})$")

_PAIRS = [a + b for a in ALPHABET for b in ALPHABET]
_CHUNK = 62**9


def _chunk9(n: int) -> str:
    """Nine base62 digits of a number below 62**9 (small-int arithmetic only)."""
    n, a = divmod(n, 3844)
    n, b = divmod(n, 3844)
    n, c = divmod(n, 3844)
    n, d = divmod(n, 3844)
    return ALPHABET[n] + _PAIRS[d] + _PAIRS[c] + _PAIRS[b] + _PAIRS[a]


def encode(n: int) -> str:
    """The 27-character base62 form of a 160-bit number."""
    high, low = divmod(n, _CHUNK)
    top, mid = divmod(high, _CHUNK)
    return _chunk9(top) + _chunk9(mid) + _chunk9(low)


class KsuidGenerator:
    """Strictly increasing KSUIDs: never below the previous one made by this generator."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last = 0

    def __call__(self, now: float | None = None) -> str:
        ts = int(now if now is not None else time.time()) - EPOCH
        candidate = (ts << 128) | secrets.randbits(128)
        with self._lock:
            if candidate <= self._last:
                candidate = self._last + 1 + secrets.randbits(32)
            if candidate >= _MAX:
                raise OverflowError("KSUID space exhausted")
            self._last = candidate
        return encode(candidate)


ksuid = KsuidGenerator()


def new_id(prefix: str) -> str:
    return f"{prefix}_{ksuid()}"


def decode(text: str) -> int:
    """The number of a 27-character base62 KSUID."""
    n = 0
    for ch in text:
        n = n * 62 + ALPHABET.index(ch)
    return n


def _tag(mac: Callable[[bytes], bytes], owner: str, head: int) -> int:
    return int.from_bytes(mac(f"{owner}/{head:x}".encode())[:8], "big")


def bound_id(prefix: str, mac: Callable[[bytes], bytes], owner: str) -> str:
    """An id only ``owner`` can present again (``bound_to``): a KSUID whose last 64 bits are
    a keyed digest of the owner and the rest (its seconds and 64 random bits), so that it
    needs no record and outlives restarts. Ordered by second, not within one."""
    head = ((int(time.time()) - EPOCH) << 64) | secrets.randbits(64)
    return f"{prefix}_{encode((head << 64) | _tag(mac, owner, head))}"


def bound_to(value: str, prefix: str, mac: Callable[[bytes], bytes], owner: str) -> bool:
    parts = split_id(value)
    if parts is None or parts[0] != prefix:
        return False
    n = decode(parts[1])
    if n >= _MAX:
        return False
    want = _tag(mac, owner, n >> 64).to_bytes(8, "big")
    return hmac.compare_digest(want, (n & ((1 << 64) - 1)).to_bytes(8, "big"))


def split_id(value: str) -> tuple[str, str] | None:
    """``(prefix, ksuid)`` of a well-formed id, else None."""
    m = ID_RE.match(value)
    return (m.group(1), m.group(2)) if m else None


def new_token(owner_id: str) -> str:
    """A shown-once secret shaped ``<ksuid of the owner id>_<random>``."""
    secret = "".join(secrets.choice(ALPHABET) for _ in range(32))  # ~190 bits
    return f"{owner_id.split('_', 1)[1]}_{secret}"


def token_hash(token: str) -> str:
    """Tokens carry 190 random bits, so a fast hash is enough; never store them in clear."""
    return hashlib.sha256(token.encode()).hexdigest()
