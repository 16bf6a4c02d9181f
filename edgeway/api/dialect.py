"""The API's two dialects: Edgeway's own names (``Edgeway-Version: 2``) and the names of the
API Edgeway's is a neutral rewrite of (``Ngrok-Version: 2``), so that the official clients of
that API drive this one unchanged.

The dialect is chosen per request by its version header and applies at the boundary only:
request bodies are renamed into Edgeway's names before they are decoded (``inbound``),
responses renamed back as they are rendered (``outbound``), and error bodies carry the
dialect's code prefix with member names in its words (``error_body``). Everything behind the
boundary (catalog, store, edge) knows one set of names. ``RENAMES`` is the one table of names
that differ: a member is renamed only under the parent member that holds it, so ``tags`` of
the monitoring target is renamed and no other ``tags``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from contextvars import ContextVar, Token
from dataclasses import dataclass, field
from typing import Any

# (parent member, Edgeway's name, the vendor's name): the OAuth providers and the event
# targets in the reference's order, then the members of targets whose names differ.
RENAMES: tuple[tuple[str, str, str], ...] = (
    ("provider", "code_host_a", "github"), ("provider", "social_a", "facebook"),
    ("provider", "enterprise_a", "microsoft"), ("provider", "search_a", "google"),
    ("provider", "professional_net", "linkedin"), ("provider", "code_host_b", "gitlab"),
    ("provider", "streaming_a", "twitch"), ("provider", "retail_a", "amazon"),
    ("target", "delivery_stream", "firehose"), ("target", "data_stream", "kinesis"),
    ("target", "log_group", "cloudwatch_logs"), ("target", "monitoring", "datadog"),
    ("target", "cloud_logs_ingestion", "azure_logs_ingestion"),
    ("creds", "access_key_id", "aws_access_key_id"),
    ("creds", "secret_access_key", "aws_secret_access_key"),
    ("monitoring", "tags", "ddtags"), ("monitoring", "site", "ddsite"),
)


@dataclass(frozen=True)
class Dialect:
    version_header: str  # lower case
    code_prefix: str
    operation_header: bytes
    # (parent, name) -> the name in this dialect, and back; parents in Edgeway's names
    out: Mapping[tuple[str, str], str] = field(default_factory=dict)
    back: Mapping[tuple[str, str], str] = field(default_factory=dict)

    @property
    def native(self) -> bool:
        return not self.out


NATIVE = Dialect("edgeway-version", "ERR_EDGEWAY_", b"edgeway-operation-id")
VENDOR = Dialect("ngrok-version", "ERR_NGROK_", b"ngrok-operation-id",
                 out={(p, n): v for p, n, v in RENAMES},
                 back={(p, v): n for p, n, v in RENAMES})
_current: ContextVar[Dialect] = ContextVar("dialect", default=NATIVE)
_NAMES = frozenset(f'"{n}"'.encode() for _p, a, b in RENAMES for n in (a, b))
# Edgeway's names in free text (messages listing a member's choices)
_WORD_NAMES = {n: v for p, n, v in RENAMES if p in ("provider", "target", "creds")}
_WORDS = re.compile(r"\b(" + "|".join(_WORD_NAMES) + r")\b")


class Unknown(Exception):
    """A request in the vendor's dialect used one of Edgeway's names: the member path."""


def of_headers(headers: list[tuple[bytes, bytes]]) -> Dialect:
    """The vendor dialect when the request carries its version header."""
    name = VENDOR.version_header.encode()
    return VENDOR if any(k.lower() == name for k, _v in headers) else NATIVE


def use(dialect: Dialect) -> Token[Dialect]:
    """Speak ``dialect`` in this request (its task's context) until ``reset``."""
    return _current.set(dialect)


def reset(token: Token[Dialect]) -> None:
    _current.reset(token)


def current() -> Dialect:
    return _current.get()


def mentions(body: bytes) -> bool:
    """Whether a body may hold a name that differs between the dialects (cheap test)."""
    return any(n in body for n in _NAMES)


def _walk(value: Any, table: Mapping[tuple[str, str], str], inbound: bool) -> Any:
    """``value`` with its members renamed by ``table``. Inbound, one of Edgeway's own names
    that the vendor's dialect spells otherwise is ``Unknown`` (the first in document order).

    A loop over a stack of what is left to copy, not a recursion: a body nested a thousand
    levels deep (1 KB of brackets) is walked like any other, never a ``RecursionError``."""
    root: list[Any] = [None]
    # (value, its parent member in Edgeway's names, its path, the copy it goes in, where;
    # and, for a member of an object, the (parent, name) to refuse as Edgeway's own)
    todo: list[tuple[Any, str, str, Any, Any, tuple[str, str] | None]] = [
        (value, "", "", root, 0, None)]
    while todo:
        item, parent, path, into, at, member = todo.pop()
        if member is not None and inbound and member in VENDOR.out:
            raise Unknown(path.lstrip("."))
        if isinstance(item, list):
            copy: list[Any] = [None] * len(item)
            into[at] = copy
            todo += [(item[i], parent, f"{path}[{i}]" if inbound else "", copy, i, None)
                     for i in range(len(item) - 1, -1, -1)]
        elif isinstance(item, dict):
            out: dict[str, Any] = {}
            into[at] = out
            members = []
            for key, v in item.items():
                name = table.get((parent, key), key)
                out[name] = None  # (members keep their order)
                members.append((v, name if inbound else key, f"{path}.{key}" if inbound
                                else "", out, name, (parent, key)))
            todo += reversed(members)
        else:
            into[at] = item
    return root[0]


def inbound(value: Any) -> Any:
    """A request body in the vendor's names, in Edgeway's; ``Unknown`` for one of Edgeway's
    own names where the vendor's is expected."""
    return _walk(value, VENDOR.back, True)


def outbound(value: Any, dialect: Dialect | None = None) -> Any:
    """A response body in ``dialect``'s names (the current one by default)."""
    dialect = dialect or current()
    return value if dialect.native else _walk(value, dialect.out, False)


def member_path(path: str, dialect: Dialect) -> str:
    """A member path (``target.monitoring.tags``) in the dialect's names."""
    if dialect.native or not path:
        return path
    parts = re.split(r"(\.|\[\d+\])", path)
    parent, out = "", []
    for part in parts:
        if part == "." or part.startswith("[") or not part:
            out.append(part)
            continue
        out.append(dialect.out.get((parent, part), part))
        parent = part
    return "".join(out)


def error_body(body: dict[str, Any], member: str, dialect: Dialect,
               words: bool = True) -> dict[str, Any]:
    """An error body (``errors.ApiError.body``) in the dialect's words (``words``: its
    message names members in Edgeway's; ``member``, the member it is about)."""
    if dialect.native:
        return body
    if member:
        shown = member_path(member, dialect)
        body["msg"] = str(body["msg"]).replace(f"'{member}'", f"'{shown}'")
        body["details"] = {**body["details"], "member": shown}
    if words:
        body["msg"] = _WORDS.sub(lambda m: _WORD_NAMES[m[1]], str(body["msg"]))
    code = body.get("error_code")
    if isinstance(code, str):
        body["error_code"] = dialect.code_prefix + code.rsplit("_", 1)[-1]
    return body
