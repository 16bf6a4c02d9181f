"""Secret members inside stored documents (a route module's ``client_secret``, a webhook
verification ``secret``): sealed with the platform secret key when written, shown as
``MASK`` in every response, opened only for the edge.

A member is named by a path of keys from the module's value; ``*`` stands for every key of a
mapping (``provider.*.client_secret``). Writing ``MASK`` back keeps the stored secret.
"""

from __future__ import annotations

import copy
import secrets
from typing import Any

from edgeway.errors import Invalid
from edgeway.pki.seal import Sealer, SealError

MASK = "********"
SEALED = "v1:"  # how a sealed value starts (pki.seal)
Path = tuple[str, ...]


def found(obj: Any, path: Path, at: Path = ()) -> list[Path]:
    """The concrete paths (no ``*``) of the non-empty strings ``path`` names in ``obj``."""
    if not path:
        return [at] if isinstance(obj, str) and obj else []
    if not isinstance(obj, dict):
        return []
    keys = list(obj) if path[0] == "*" else [path[0]]
    return [p for k in keys if k in obj for p in found(obj[k], path[1:], (*at, k))]


def _get(obj: Any, path: Path) -> Any:
    for step in path:
        obj = obj.get(step) if isinstance(obj, dict) else None
    return obj


def _set(obj: dict[str, Any], path: Path, value: str) -> None:
    for step in path[:-1]:
        obj = obj[step]
    obj[path[-1]] = value


def seal(value: dict[str, Any], old: Any, paths: tuple[Path, ...], sealer: Sealer,
         context: str, at: str) -> dict[str, Any]:
    """``value`` as written, its secrets sealed; ``MASK`` keeps the secret ``old`` (the stored
    value of the same member, sealed) holds at the same place."""
    out = copy.deepcopy(value)
    for path in paths:
        for place in found(out, path):
            given = _get(out, place)
            if given == MASK:
                kept = _get(old, place)
                if not (isinstance(kept, str) and kept):
                    raise Invalid(at + ".".join(place), f"'{MASK}' stands for the stored "
                                  "secret, and there is none here: give the secret itself",
                                  215)
                _set(out, place, kept)
            else:
                _set(out, place, sealer.seal(given.encode(), context))
    return out


def seal_plain(value: dict[str, Any], paths: tuple[Path, ...], sealer: Sealer,
               context: str) -> dict[str, Any] | None:
    """``value`` with the secrets stored in the clear (by an earlier version) sealed; None
    when every one already was."""
    out = copy.deepcopy(value)
    plain = [p for path in paths for p in found(out, path)
             if not str(_get(out, p)).startswith(SEALED)]
    for place in plain:
        _set(out, place, sealer.seal(str(_get(out, place)).encode(), context))
    return out if plain else None


def mask(value: dict[str, Any], paths: tuple[Path, ...]) -> dict[str, Any]:
    out = copy.deepcopy(value)
    for path in paths:
        for place in found(out, path):
            _set(out, place, MASK)
    return out


def opened(value: dict[str, Any], paths: tuple[Path, ...], sealer: Sealer,
           context: str) -> tuple[dict[str, Any], list[str]]:
    """``value`` with its secrets opened, and the members that could not be (another
    platform secret key, damaged data): those get a random value no sender knows, so what
    checks them refuses. A value stored in the clear (before sealing) is used as is."""
    out, failed = copy.deepcopy(value), []
    for path in paths:
        for place in found(out, path):
            text = str(_get(out, place))
            if not text.startswith(SEALED):
                continue
            try:
                _set(out, place, sealer.open(text, context).decode())
            except (SealError, UnicodeDecodeError):
                _set(out, place, secrets.token_urlsafe(32))
                failed.append(".".join(place))
    return out, failed
