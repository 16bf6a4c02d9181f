"""The traffic policy's ``request-body-find-replace`` (``on_http_request``) and
``response-body-find-replace`` (``on_http_response``) actions: the body, read whole (up to
``MAX_BODY``), has each of ``replacements`` applied in order (``from``: an RE2 regular
expression on the body's bytes, matched in linear time: no pattern backtracks for ever on a
hostile body; ``to``: its replacement with ``$1``/``${1}`` group references; both take
``${...}`` interpolations, literal text in ``from``: a request cannot inject a pattern; an
empty or missing ``to`` deletes), and goes upstream with the new length. What matched is in
``actions.ngrok.request_body_find_replace.replacements`` (``replacement_index``,
``matched_content``; ``response_body_find_replace`` for responses).

Refused rather than skipped: a request body over ``MAX_BODY`` (413) and a compressed one
(``Content-Encoding``: 415), which a replacement cannot read; the bytes that are not UTF-8 are
kept as they are. A response is rewritten on its way out (``Rewriter``: gathered, then sent
whole, chunked, gzipped after if it is): its upstream is not asked for a compressed one (the
policy's requests go without ``Accept-Encoding``), and one that comes compressed anyway or
grows past ``MAX_BODY`` is cut (a rewritten body must not look whole when it is not).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

import re2

from edgeway.edge import h1
from edgeway.edge.h1 import header
from edgeway.edge.hooks import Exchange, Hook, Verdict
from edgeway.edge.modules.policy_values import (
    REWRITE,
    Env,
    Headers,
    ResponseAction,
    Scope,
    Unsupported,
    groups,
    interpolate,
    result,
)
from edgeway.edge.pages import page

MAX_BODY = 1 << 20
MAX_REPLACEMENTS = 32  # matches recorded in the result, at most
_GROUP = re.compile(r"\$\{?(\d+)\}?")  # (``to``'s group references, as ``groups`` reads them)


OPTIONS = re2.Options()
OPTIONS.log_errors = False  # (a pattern that does not compile is refused by name instead)


@dataclass(frozen=True)
class Replacement:
    pattern: Any  # an RE2 pattern on bytes, compiled once unless ``source`` interpolates
    source: str
    to: str


def _pattern(source: str) -> Any:
    try:
        return re2.compile(source.encode(), options=OPTIONS)
    except re2.error as exc:
        raise Unsupported(f"pattern {source!r}: {exc}") from None


@dataclass(frozen=True)
class BodyReplace(Hook):
    name = "request-body-find-replace"
    replacements: tuple[Replacement, ...]

    async def request(self, x: Exchange) -> Verdict:
        req = x.req
        if not req.body and x.body is None:
            return None
        if header(req.headers, b"content-encoding").strip().lower() not in (b"", b"identity"):
            return page(415, "Unsupported media type", "This endpoint's traffic policy "
                        "rewrites request bodies, which it cannot do to a compressed one: "
                        "send it without Content-Encoding.", 4023)
        if x.body is None:
            length = header(req.headers, b"content-length")
            body = None if length.isdigit() and int(length) > MAX_BODY \
                else await x.read_body(MAX_BODY)
            if body is None:
                return page(413, "Payload too large", "This endpoint's traffic policy "
                            f"rewrites request bodies, up to {MAX_BODY} bytes.", 4013,
                            (("Connection", "close"),))
            x.body = body
        env = x.env if x.env is not None else {}
        try:
            x.body = self.apply(x.body, env, "request_body_find_replace")
        except (re2.error, IndexError) as exc:  # (a group an interpolated pattern lacks)
            return page(502, "Bad gateway", "This endpoint's traffic policy could not "
                        f"rewrite the request body: {exc}.", 4024)
        x.req = h1.with_length(x.req, len(x.body))
        return None

    def apply(self, body: bytes, env: Env, action: str) -> bytes:
        """``body`` with the replacements made; what matched in the ``action``'s result."""
        found: list[dict[str, Any]] = []
        for i, r in enumerate(self.replacements):
            pattern = r.pattern or re2.compile(
                interpolate(r.source, env, re2.escape).encode(), options=OPTIONS)
            to = groups(interpolate(r.to, env)).encode()

            def swap(m: Any, i: int = i, to: bytes = to) -> bytes:
                if len(found) < MAX_REPLACEMENTS:
                    found.append({"replacement_index": i,
                                  "matched_content": m[0].decode("utf-8", "replace")})
                out: bytes = m.expand(to)
                return out
            body = pattern.sub(swap, body)
        result(env, action, {"replacements": found})
        return body


class Rewriter:
    """A response body rewritten whole (``Exchange.rewrite``) with the replacements a
    response action left in the request's environment (``REWRITE``: plain pairs, as CEL
    reads every value there)."""

    def __init__(self, pairs: list[list[str]], env: Env, encoded: bool) -> None:
        self.replace, self.env, self.encoded = _compiled(tuple(map(tuple, pairs))), env, encoded
        self.body = bytearray()

    def data(self, data: bytes) -> bytes:
        if self.encoded:
            raise ConnectionResetError("the response came compressed: its traffic policy "
                                       "cannot rewrite it")
        self.body += data
        if len(self.body) > MAX_BODY:
            raise ConnectionResetError(f"the response body is over {MAX_BODY} bytes: its "
                                       "traffic policy cannot rewrite it")
        return b""

    def end(self) -> bytes:
        try:
            return self.replace.apply(bytes(self.body), self.env,
                                      "response_body_find_replace")
        except (re2.error, IndexError) as exc:
            raise ConnectionResetError(f"the response body's rewrite failed: {exc}") from None


def response_action(cfg: dict[str, Any], _at: Scope) -> ResponseAction:
    """response-body-find-replace: marks the response for its ``Rewriter`` (the policy sets
    it up, ``traffic_policy.Policy.response``)."""
    pairs = [[r.source, r.to] for r in compile(cfg).replacements]

    def run(env: Env, out: Headers) -> Headers:
        env[REWRITE] = pairs
        return out
    return run


@functools.lru_cache(maxsize=256)
def _compiled(pairs: tuple[tuple[str, ...], ...]) -> BodyReplace:
    return compile({"replacements": [{"from": f, "to": t} for f, t in pairs]})


def compile(cfg: dict[str, Any]) -> BodyReplace:
    """The action; ``Unsupported`` naming what it cannot honour."""
    given = cfg.get("replacements")
    if not isinstance(given, list) or not given or not all(
            isinstance(r, dict) and isinstance(r.get("from"), str) and r["from"]
            and isinstance(r.get("to", ""), str) for r in given):
        raise Unsupported("replacements: a list of {from, to} (from a regular expression; at "
                          "least one)")
    out = []
    for r in given:
        source, to = r["from"], r.get("to") or ""
        pattern = None if "${" in source else _pattern(source)
        wanted = max((int(g) for g in _GROUP.findall(to)), default=0)
        if pattern is not None and wanted > pattern.groups:
            raise Unsupported(f"replacement to {to!r} refers to group {wanted}, and from "
                              f"{source!r} has {pattern.groups}")
        out.append(Replacement(pattern, source, to))
    return BodyReplace(tuple(out))
