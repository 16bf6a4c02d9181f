"""The traffic policy's ``sse-find-replace`` action, in the phase ``on_event_stream_message``:
a response that is a server-sent event stream (``Content-Type: text/event-stream``) goes on
message by message as it streams, each one through the phase's rules (their expressions
evaluated for it, with the request's and response's variables) and the matching rules'
``replacements`` in order: ``field`` ``data`` (the default: the message's data lines joined
by newlines, as a client reads them, split into lines again after) or ``retry``; ``from`` an
RE2 regular expression, every match replaced; ``to`` with ``$1`` group references (empty:
deleted); ``from`` and ``to`` take ``${...}`` interpolations (literal text in ``from``). The
message's other lines (``event``, ``id``, comments) and its line endings stay as they are.

Never passed on unchanged where it cannot be rewritten: a stream that comes compressed
(its upstream is asked for an uncompressed one: the policy drops ``Accept-Encoding``), and a
message growing past ``MAX_MESSAGE`` bytes without its blank line, cut the response. What
matched is in ``actions.ngrok.sse_find_replace.replacements`` for the rules of later messages.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from edgeway.edge.modules import body_replace
from edgeway.edge.modules.body_replace import BodyReplace
from edgeway.edge.modules.policy_values import Env, Scope, Unsupported

MAX_MESSAGE = 1 << 20
FIELDS = (b"data", b"retry")
_EOL = rb"(?:\r\n|\r(?!\n)|\n)"
_BLANK = re.compile(_EOL + _EOL)  # the end of a message: its last line's end, then a blank
_LINE = re.compile(b"(" + _EOL + b")")
RESULT = "sse_find_replace"


@dataclass(frozen=True)
class SseReplace:
    """One action: its replacements by field."""
    by_field: tuple[tuple[bytes, BodyReplace], ...]

    def __call__(self, values: dict[bytes, bytes], env: Env) -> None:
        for name, replace in self.by_field:
            if name in values:
                values[name] = replace.apply(values[name], env, RESULT)


def compile(cfg: dict[str, Any], _at: Scope) -> SseReplace:
    """The action; ``Unsupported`` naming what it cannot honour."""
    given = cfg.get("replacements")
    if not isinstance(given, list) or not given or not all(isinstance(r, dict) for r in given):
        raise Unsupported("replacements: a list of {field, from, to} (at least one)")
    fields: dict[bytes, list[dict[str, Any]]] = {}
    for r in given:
        name = str(r.get("field") or "data")
        if name.encode() not in FIELDS:
            raise Unsupported(f"field {name!r}: data or retry (the fields a message's "
                              "replacement may change)")
        fields.setdefault(name.encode(), []).append(
            {"from": r.get("from"), "to": r.get("to") or ""})
    return SseReplace(tuple((name, body_replace.compile({"replacements": items}))
                            for name, items in fields.items()))


class Stream:
    """The body filter (``Exchange.rewrite``) of one event stream: whole messages out as
    they arrive, each through ``rules(env)`` (the matching rules' actions, in order)."""

    def __init__(self, rules: Callable[[Env], Iterator[Any]], env: Env, encoded: bool) -> None:
        self.rules, self.env, self.encoded = rules, env, encoded
        self.buf = bytearray()

    def data(self, data: bytes) -> bytes:
        if self.encoded:
            raise ConnectionResetError("the event stream came compressed: its traffic "
                                       "policy cannot rewrite it")
        buf = self.buf
        buf += data
        out = bytearray()
        while True:  # (a CR at the end may be the first half of a CRLF: it waits)
            m = _BLANK.search(buf, 0, len(buf) - 1 if buf.endswith(b"\r") else len(buf))
            if m is None:
                break
            out += self._message(bytes(buf[:m.start()]))
            out += m[0]
            del buf[:m.end()]
        if len(buf) > MAX_MESSAGE:
            raise ConnectionResetError(f"an event stream message is over {MAX_MESSAGE} "
                                       "bytes: its traffic policy cannot rewrite it")
        return bytes(out)

    def end(self) -> bytes:
        rest, self.buf = bytes(self.buf), bytearray()
        return self._message(rest) if rest.strip() else rest

    def _message(self, message: bytes) -> bytes:
        parts = _LINE.split(message)  # line, end, line, end, ..., line
        lines, ends = parts[0::2], parts[1::2]
        named = [_field(line) for line in lines]
        values: dict[bytes, bytes] = {}
        data = [v for name, v in named if name == b"data"]
        if data:
            values[b"data"] = b"\n".join(data)
        retry = [v for name, v in named if name == b"retry"]
        if retry:
            values[b"retry"] = retry[-1]
        if not values:
            return message
        before = dict(values)
        for action in self.rules(self.env):
            action(values, self.env)
        if values == before:
            return message
        eol = ends[0] if ends else b"\n"
        out: list[bytes] = []
        for (name, _v), line in zip(named, lines, strict=True):
            if name in values:
                value = values.pop(name)
                out += [name + b": " + v for v in (value.split(b"\n") if name == b"data"
                                                   else [value.replace(b"\n", b"")])]
            elif name not in before:
                out.append(line)
        return eol.join(out)


def _field(line: bytes) -> tuple[bytes, bytes]:
    """A line's field name and value (one space after the colon is not part of it; a line
    without a colon is a field with an empty value; a comment's name is empty)."""
    name, _, value = line.partition(b":")
    return name, value[1:] if value.startswith(b" ") else value
