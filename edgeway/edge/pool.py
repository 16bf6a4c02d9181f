"""Idle upstream connections kept between requests: after a response, the agent's proxy stream
(or the static backend's socket) that carried it waits here for the next request to the same
target, from whichever public connection it comes, as a proxy's upstream keep-alive pool.

Why not one upstream per public connection: an idle kept-alive public connection would hold a
stream of the agent's session, and the ngrok SDKs allow 512 streams a session (the session
ends beyond that). With the pool, 10,000 idle public connections hold no stream at all, and
an agent's streams are those in flight plus a bounded number of idle ones.

Entries are taken newest first (the likeliest to be alive), at most ``MAX_IDLE`` per target,
each for at most ``IDLE_TIMEOUT`` seconds; one whose upstream ended meanwhile (the SDK
half-closes the stream when the local service closes its idle connection) is closed when
found. ``reclaim`` closes the idle streams of an agent session that is short of streams, so
that requests waiting for one get it.
"""

from __future__ import annotations

import asyncio
from collections import deque
from dataclasses import dataclass, field
from typing import Final

from edgeway.edge.h1_response import ResponseParser
from edgeway.tunnel.pipes import Pipe, StreamPipe
from edgeway.tunnel.registry import Carrier

MAX_IDLE: Final = 128  # per target
IDLE_TIMEOUT: Final = 30.0


@dataclass(eq=False)
class Upstream:
    """One upstream connection and the parser of its responses."""

    key: str
    pipe: Pipe
    parser: ResponseParser = field(default_factory=ResponseParser)
    ended: bool = False  # the upstream closed its side

    def __init__(self, key: str, pipe: Pipe, parser: ResponseParser | None = None,
                 ended: bool = False) -> None:
        # (written out: compiled, the one dataclass generates runs interpreted)
        self.key, self.pipe, self.ended = key, pipe, ended
        self.parser = ResponseParser() if parser is None else parser

    @property
    def conn(self) -> Carrier | None:
        """The agent session carrying it (None: a static backend)."""
        return self.pipe.stream.conn if isinstance(self.pipe, StreamPipe) else None


class Pool:
    def __init__(self, max_idle: int = MAX_IDLE, idle_timeout: float = IDLE_TIMEOUT) -> None:
        self.max_idle, self.idle_timeout = max_idle, idle_timeout
        self._idle: dict[str, deque[tuple[float, Upstream]]] = {}
        self._sweep: asyncio.TimerHandle | None = None

    def __len__(self) -> int:
        return sum(len(q) for q in self._idle.values())

    def take(self, key: str) -> Upstream | None:
        """The newest idle upstream of ``key`` that is still usable, or None."""
        idle = self._idle.get(key)
        while idle:
            _, upstream = idle.pop()
            if not idle:
                del self._idle[key]
            if not upstream.pipe.ended and upstream.parser.idle:
                return upstream
            upstream.pipe.close()
            idle = self._idle.get(key)
        return None

    def put(self, upstream: Upstream) -> None:
        """Keep ``upstream`` for the next request to its target (or close it: its target has
        enough idle ones, it ended, or its agent session has requests waiting for a
        stream)."""
        pipe = upstream.pipe
        if pipe.ended:
            pipe.close()
            return
        conn = pipe.stream.conn if isinstance(pipe, StreamPipe) else None
        if conn is not None and (conn.crowded or conn.closed.is_set()):
            pipe.abort()  # (between requests: a reset loses nothing, frees it now)
            return
        loop = asyncio.get_running_loop()
        idle = self._idle.get(upstream.key)
        if idle is None:
            idle = self._idle[upstream.key] = deque()
        idle.append((loop.time() + self.idle_timeout, upstream))
        if len(idle) > self.max_idle:
            idle.popleft()[1].pipe.close()
        if self._sweep is None:
            self._sweep = loop.call_later(self.idle_timeout / 2, self._expire)

    def forget(self, key: str) -> None:
        """Reset the idle upstreams of a target that is gone (another node's tunnel: its
        node left, and waits for the connections it carries to end: a FIN would wait for
        the agent's local service to close its keep-alive connection)."""
        for _, upstream in self._idle.pop(key, ()):
            upstream.pipe.abort()

    def reclaim(self, conn: Carrier) -> None:
        """Close the idle upstreams carried by ``conn`` (it has no stream to spare)."""
        for key in list(self._idle):
            idle = self._idle[key]
            kept = deque(e for e in idle if e[1].conn is not conn)
            if len(kept) != len(idle):
                for _, upstream in idle:
                    if upstream.conn is conn:
                        upstream.pipe.close()
                if kept:
                    self._idle[key] = kept
                else:
                    del self._idle[key]

    def close(self) -> None:
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        for idle in self._idle.values():
            for _, upstream in idle:
                upstream.pipe.close()
        self._idle.clear()

    def _expire(self) -> None:
        self._sweep = None
        now = asyncio.get_running_loop().time()
        for key in list(self._idle):
            idle = self._idle[key]
            while idle and (idle[0][0] <= now or idle[0][1].pipe.ended):
                idle.popleft()[1].pipe.close()
            if not idle:
                del self._idle[key]
        if self._idle:
            self._sweep = asyncio.get_running_loop().call_later(self.idle_timeout / 2,
                                                                self._expire)
