"""What a traffic policy's response phase leaves for the response body: a rewrite
(``response-body-find-replace``: gathered whole; ``sse-find-replace``: an event stream's
messages as they stream; both, one after the other) and compression (``compress-response``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from edgeway.edge import h1
from edgeway.edge.h1 import header
from edgeway.edge.hooks import Exchange
from edgeway.edge.modules import body_replace, compression, sse_replace
from edgeway.edge.modules.policy_values import COMPRESS, REWRITE, Env, Headers


def body_filters(x: Exchange, env: dict[str, Any], status: int, headers: Headers,
                 sse: Callable[[Env], Iterator[Any]] | None) -> Headers:
    """Set ``x``'s body rewrite and compression from ``env`` (the response's variables) and
    ``sse`` (the policy's event stream rules, when it has some): the headers that go on."""
    bodied = not h1.bodiless(status, x.req.method)
    if (rewrite := env.get(REWRITE)) is not None and x.rewrite is None and bodied:
        x.rewrite = body_replace.Rewriter(rewrite, env, _encoded(headers))
        headers = _unsized(headers)
    if sse is not None and bodied and header(headers, b"content-type").split(b";")[0] \
            .strip().lower() == b"text/event-stream":
        stream = sse_replace.Stream(sse, env, _encoded(headers))
        x.rewrite = stream if x.rewrite is None else Chain(x.rewrite, stream)
        headers = _unsized(headers)
    if env.get(COMPRESS) and x.gzip is None and bodied \
            and compression.wanted(x.req.headers, status, headers, False):
        x.gzip = compression.Gzip()  # (compress-response: as the compression module)
        headers = compression.rewrite(headers)
    return headers


def _encoded(headers: Headers) -> bool:
    """Whether a response body is compressed (a rewrite cannot read it)."""
    return header(headers, b"content-encoding").strip().lower() not in (b"", b"identity")


def _unsized(headers: Headers) -> Headers:
    """A rewritten response's headers: its length and tag change."""
    return [(k, v) for k, v in headers if k.lower() not in (b"content-length", b"etag")]


@dataclass(frozen=True)
class Chain:
    """Two body filters, one after the other (a whole-body rewrite, then an event stream's
    messages)."""
    first: Any
    second: Any

    def data(self, data: bytes) -> bytes:
        return bytes(self.second.data(self.first.data(data)))

    def end(self) -> bytes:
        return bytes(self.second.data(self.first.end())) + bytes(self.second.end())
