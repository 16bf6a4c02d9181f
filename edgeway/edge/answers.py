"""The HTTP edge's own answers: fixed pages, 502s, and a backend's fixed answer through the
route's response hooks (an upstream's answer is relayed by ``edge/relay.py``)."""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import replace
from typing import Literal

import structlog

from edgeway.edge import h1
from edgeway.edge.h1 import Request, header
from edgeway.edge.hooks import Exchange
from edgeway.edge.pages import Fixed, page
from edgeway.edge.pipeline import Plan

log = structlog.get_logger()
Headers = h1.Headers


class Retry(Exception):
    """The upstream went away before anything reached the client, and the request may be
    sent again (a safe request, or one not delivered at all)."""


Fate = Literal["reuse", "done", "failed"]
REUSE: Fate = "reuse"  # what became of the upstream after a relay (``edge/relay.py``)
DONE: Fate = "done"
FAILED: Fate = "failed"


_UNSPLIT = re.compile(r"[\r\n\0]")


def _closes(headers: Headers) -> bool:
    return b"close" in header(headers, b"connection").lower()


async def fixed(writer: asyncio.StreamWriter, req: Request | None, answer: Fixed,
                close: bool = False) -> bool:
    """Write a local answer; True if the connection may carry another request. A header
    value never splits the head, whatever went into it (a line break is a space; what
    latin-1 cannot say, a "?")."""
    headers = [(k.encode("latin-1"), _UNSPLIT.sub(" ", v).encode("latin-1", "replace"))
               for k, v in answer.headers]
    keep = not close and req is not None and req.keep_alive and not req.http10 \
        and req.method != b"CONNECT" and not _closes(headers)
    headers.append((b"Content-Length", b"%d" % len(answer.body)))
    if not keep and not _closes(headers):
        headers.append((b"Connection", b"close"))
    out = h1.head(b"HTTP/1.1 %d %b\r\n" % (answer.status, h1.reason(answer.status)), headers)
    if req is None or req.method != b"HEAD":
        out += answer.body
    writer.write(out)
    await writer.drain()
    return keep


async def bad_gateway(writer: asyncio.StreamWriter, req: Request, why: str) -> None:
    log.info("bad_gateway", error=why)
    await fixed(writer, req, page(
        502, "Bad gateway", "The tunnel's agent or upstream went away before "
        "answering this request.", 4502, (("Connection", "close"),)))


async def local_answer(x: Exchange, plan: Plan, answer: Fixed) -> Fixed:
    """A backend's fixed answer (http_response) through the response hooks, like an
    upstream's (a hook that waits may answer instead)."""
    headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in answer.headers]
    if plan.awaits:
        for hook in plan.responses:
            got = await hook.response_awaiting(x, answer.status, headers)
            if isinstance(got, Fixed):
                outcome(x, plan, got.status)
                return got
            headers = got
        outcome(x, plan, answer.status)
    else:
        outcome(x, plan, answer.status)
        for hook in plan.responses:
            headers = hook.response(x, answer.status, headers)
    x.sent = len(answer.body)
    body = x.gzip.data(answer.body) + x.gzip.end() if x.gzip is not None else answer.body
    return replace(answer, body=body, headers=tuple(
        (k.decode("latin-1"), v.decode("latin-1")) for k, v in headers))


def outcome(x: Exchange, plan: Plan, status: int) -> None:
    """The final answer to ``x`` is ``status``: the outcome hooks hear whether it failed."""
    x.status, x.answered = status, time.monotonic()
    for hook in plan.outcomes:
        hook.outcome(x, status >= 500)
