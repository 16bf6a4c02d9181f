"""A public HTTP connection answered from its transport's callbacks: the common request (a
safe, bodiless one whose route needs nothing awaited, to a tunnel with an idle pipe in the
pool whose answers come as callbacks: an agent's proxy stream, an SSH client's channel;
``tunnel.pipes.Delivering``) goes upstream from ``data_received`` and its answer back from
the pipe's ``deliver`` callbacks, with no task, future or stream reader per request. Every other
request, and one whose upstream failed before any byte of its answer went out, is handed
over whole (its head and end put back into the parser) to ``HttpEdge.serve``, which answers
it as it answers every request and gives the connection back.

What it keeps of ``serve``: one deadline per connection (a head within ``head_timeout`` of
its first byte, or of its turn when it came pipelined behind a request being answered; the
next request within ``idle_timeout``), pipelined requests answered in
order (what arrives meanwhile read up to ``READ_AHEAD`` bytes, then reading pauses), the
response relayed as ``relay`` writes it (its hooks, framing, compression and rewrites), the
client's write buffer bounding the stream (its window is returned only as the client takes
the bytes), a client that leaves while it waits (``WATCH_AFTER``) ending the upstream, a
response cut when its upstream fails after it started, and the request's traffic record.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import TYPE_CHECKING, Final, cast

import structlog

from edgeway.edge.answers import outcome
from edgeway.edge.client import WATCH_AFTER, Deadline, certified_client
from edgeway.edge.h1 import BadMessage, End, Event, Framer, Request, RequestParser, Response
from edgeway.edge.hooks import Exchange, accepted
from edgeway.edge.hosts import request_host
from edgeway.edge.pool import Upstream
from edgeway.edge.relay import body_out, end_out, flushed, interim, response_head
from edgeway.edge.router import Decision
from edgeway.edge.snapshot import Edge
from edgeway.tunnel.muxado.transport import held
from edgeway.tunnel.pipes import Delivering, UpstreamGone
from edgeway.tunnel.registry import Tunnel

if TYPE_CHECKING:
    from edgeway.edge.http import HttpEdge

SAFE: Final = (b"GET", b"HEAD", b"OPTIONS")  # the methods answered here: sent again if handed over
READ_AHEAD: Final = 1 << 16  # pipelined bytes read while a request is answered
FAST: Final = 0  # who answers: the callbacks,
SLOW: Final = 1  # ``serve``,
DONE: Final = 2  # nobody (it ended)

log = structlog.get_logger()


async def _no_body(_limit: int) -> bytes | None:
    return b""  # (the requests answered here have none; no request hook runs for them)


class Connection:
    """The protocol of one public connection's transport (in place of its stream reader's,
    which it passes everything to while ``serve`` answers)."""

    def __init__(self, edge: HttpEdge, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter, peer: tuple[str, int], tls_edge: Edge | None,
                 certified: tuple[str, ...] | None, sni: str, head_timeout: float,
                 idle_timeout: float) -> None:
        self.edge, self.reader, self.writer, self.peer = edge, reader, writer, peer
        self.tls_edge, self.certified, self.sni = tls_edge, certified, sni
        self.head_timeout, self.idle_timeout = head_timeout, idle_timeout
        transport = cast(asyncio.Transport, writer.transport)
        self.transport = transport
        self.slow = cast(asyncio.StreamReaderProtocol, transport.get_protocol())
        self.parser = RequestParser()
        self.local = accepted(writer.get_extra_info("sockname"), edge.region)
        self.client_cert = certified_client(writer)
        self.deadline = Deadline(transport)
        self.loop = asyncio.get_running_loop()
        self.head_began = 0.0  # when the head the parser is in began (the loop's time)
        # when the last request was answered (or the connection made): a head pipelined
        # behind it, or read while it was answered, is timed from here
        self.ready_at = self.loop.time()
        self.mode = FAST
        self.served = 0  # requests answered on this connection (by either side)
        self.eof = False  # the client's side ended
        self.read_paused = self.write_paused = False
        self.ahead = 0  # bytes read while a request was answered
        self.driving = False  # ``_next`` is on the stack (a request answered within it)
        self.waiter: asyncio.Future[None] | None = None
        # the request answered now (x: None when none)
        self.x: Exchange | None = None
        self.end = End()
        self.decision: Decision | None = None
        self.upstream: Upstream | None = None
        self.stream: Delivering | None = None  # the upstream's answer comes from it
        self.started = 0.0
        self.final: Response | None = None
        self.framer = Framer(False)
        self.keep = False
        self.wrote = False  # bytes of its answer went to the client
        self.out = bytearray()
        self.gone: asyncio.TimerHandle | None = None
        self.handed_request: Event | None = None  # ... and its route (``decided``)
        self.handed_decision: Decision | None = None
        transport.set_protocol(cast(asyncio.BaseProtocol, self))
        self._adopt()

    # -- between the callbacks and ``serve`` -----------------------------------------------

    async def handed(self) -> bool:
        """Until a request is handed over to ``serve`` (True) or the connection ended."""
        if self.mode == FAST:
            self._next()
        while self.mode == FAST:
            self.waiter = asyncio.get_running_loop().create_future()
            try:
                await self.waiter
            finally:
                self.waiter = None
        return self.mode == SLOW

    def take_back(self) -> None:
        """``serve`` answered what was handed over: the connection is answered here again."""
        self.served += 1
        self.ready_at = self.loop.time()
        if self.mode != DONE:
            self._adopt()

    def _adopt(self) -> None:
        """From here the callbacks answer: what the stream reader holds is parsed here."""
        self.mode = FAST
        early, self.eof = held(self.reader)
        if early:
            self.parser.feed(early)
        if not self.eof and not self.transport.is_reading():
            self.transport.resume_reading()  # (the stream reader had paused it)

    def decided(self, req: Request) -> Decision | None:
        """The router's decision for ``req`` when it was made here before it was handed over
        (the router is asked once a request: it spreads them over a name's tunnels)."""
        decision, self.handed_decision = self.handed_decision, None
        return decision if self.handed_request is req else None

    def _hand(self, *unread: Event, decision: Decision | None = None) -> None:
        """``serve`` answers from here: the request (its head, its end) back in the parser,
        and its route when it was decided here."""
        self.parser.unread(*unread)
        self.handed_request = unread[0] if unread and decision is not None else None
        self.handed_decision = decision
        if self.read_paused:
            self.read_paused = False
            self.transport.resume_reading()
        self.deadline.disarm()
        self._mode(SLOW)

    def _mode(self, mode: int) -> None:
        self.mode = mode
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    def close(self) -> None:
        """The connection is over (or the server stops): an answer in flight is given up."""
        if self.x is not None:
            self._drop(False)
        self._finish()

    # -- the transport's protocol ----------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        pass  # (made before: this protocol is set on a transport already connected)

    def data_received(self, data: bytes) -> None:
        if self.mode != FAST:
            self.slow.data_received(data)
            return
        parser = self.parser
        began = parser.mid_message
        parser.feed(data)
        if self.x is not None:  # answering: what comes meanwhile waits in the parser
            self.ahead += len(data)
            if self.ahead > READ_AHEAD and not self.read_paused:
                self.read_paused = True
                self.transport.pause_reading()
            return
        if not began and parser.mid_message:  # a head began: it has that long to end
            self.head_began = self.loop.time()
            self.deadline.arm(self.head_timeout)
        try:
            self._next()
        except Exception:
            self._broke()

    def eof_received(self) -> bool | None:
        keep = self.slow.eof_received()  # (its reader learns of it too, for ``serve``)
        if self.mode == FAST:
            self.eof = True
            if self.x is None:
                self._next()
            elif self.gone is None:  # a client that leaves while it waits: see ``_gone``
                self.gone = asyncio.get_running_loop().call_later(
                    max(0.0, self.started + WATCH_AFTER - time.monotonic()), self._gone)
        return keep

    def connection_lost(self, exc: Exception | None) -> None:
        self.slow.connection_lost(exc)
        if self.x is not None:
            self._drop(False)
        self.deadline.cancel()
        self._mode(DONE)

    def pause_writing(self) -> None:
        self.write_paused = True
        self.slow.pause_writing()

    def resume_writing(self) -> None:
        self.write_paused = False
        self.slow.resume_writing()
        if self.mode == FAST and self.stream is not None and self.x is not None:
            self.stream.deliver(self._data, self._ended)  # what waited in the stream

    def _broke(self) -> None:
        """A defect raised in a callback: logged, and this connection alone ends (not the
        tunnel session whose stream called it, nor the event loop's transport handling)."""
        log.exception("http_fast_path_failed", peer=self.peer[0])
        self.close()

    # -- requests --------------------------------------------------------------------------

    def _next(self) -> None:
        """Answer the requests the parser has, in order, until one must wait or be handed
        over; then wait for more (or end, once the client's side ended)."""
        if self.driving:
            return
        self.driving = True
        try:
            parser = self.parser
            while self.mode == FAST and self.x is None:
                try:
                    event = parser.next_event()
                except BadMessage:
                    self._hand()  # (``serve`` takes the same error and answers it)
                    return
                if event is None:  # all that was read is answered: read on
                    if self.read_paused:  # (the rest of a head cut where reading paused
                        self.read_paused = False  # too: it cannot end unread)
                        self.transport.resume_reading()
                    if self.eof:
                        self._finish()
                    elif parser.mid_message:  # (within the limit from its first byte, or
                        began = max(self.head_began, self.ready_at)  # from when its turn came)
                        self.deadline.arm(max(0.0, began + self.head_timeout -
                                              self.loop.time()))
                    else:
                        self.deadline.arm(self.idle_timeout if self.served else
                                          self.head_timeout)
                    return
                self.deadline.disarm()
                if isinstance(event, Request):
                    self._begin(event)
                else:
                    self._hand()  # (not at a request's start: ``serve`` ends it)
        finally:
            self.driving = False

    def _route(self, req: Request) -> Decision | None:
        """The route of a request that may be answered here, or None: ``serve`` decides."""
        if req.method not in SAFE or req.body or req.upgrade:
            return None
        edge = self.edge
        restrictions = edge.restrictions
        if restrictions is not None and not restrictions.none("endpoints"):
            return None
        if self.certified is not None and edge.unfit(self.sni, self.certified,
                                                     self.client_cert,
                                                     request_host(req.headers)):
            return None  # (answered as misdirected there)
        return edge.router.quick(req, self.peer[0], edge.scheme, edge.https_port,
                                 self.tls_edge)

    @staticmethod
    def _fits(decision: Decision) -> bool:
        """A route whose requests are answered here: to a tunnel, with nothing to run or
        await before its answer goes on."""
        plan = decision.plan
        return isinstance(decision.target, Tunnel) and not decision.internal and \
            not plan.requests and not plan.awaits

    def _begin(self, req: Request) -> None:
        end = self.parser.next_event()  # (a bodiless request's, parsed with its head)
        if not isinstance(end, End):
            if end is None:
                self._hand(req)
            else:
                self._hand(req, end)
            return
        decision = self._route(req)
        target = decision.target if decision is not None else None
        upstream = self.edge.pool.take(target.key) if decision is not None and \
            isinstance(target, Tunnel) and self._fits(decision) else None
        delivering = upstream.pipe.delivering() if upstream is not None else None
        if decision is None or upstream is None or delivering is None:
            if upstream is not None:
                self.edge.pool.put(upstream)
            self._hand(req, end, decision=decision)
            return
        edge, peer = self.edge, self.peer
        x = Exchange(req, peer[0], peer[1], edge.scheme, edge.services, _no_body,
                     self.transport.write, self.local)
        try:
            sent = upstream.pipe.write_nowait(edge.upstreams.request_head(x, decision))
        except UpstreamGone:
            upstream.pipe.abort()
            sent = False
        if not sent:
            if not upstream.pipe.ended:
                edge.pool.put(upstream)
            self._hand(req, end, decision=decision)
            return
        self.x, self.end, self.decision, self.upstream = x, end, decision, upstream
        self.started, self.final, self.framer = time.monotonic(), None, Framer(False)
        self.keep = self.wrote = False
        self.ahead = 0
        upstream.parser.expect(req.method == b"HEAD")
        self.stream = delivering
        delivering.deliver(self._data, self._ended)

    # -- its answer ------------------------------------------------------------------------

    def _data(self, data: bytes) -> None:
        try:
            stream, upstream = self.stream, self.upstream
            assert stream is not None and upstream is not None
            stream.taken(len(data))
            upstream.parser.feed(data)
            self._pump()
            if self.write_paused and self.stream is not None:
                self.stream.hold()  # the rest waits in the stream (and its window with it)
        except Exception:
            self._broke()

    def _ended(self) -> None:
        try:
            self._ending()
        except Exception:
            self._broke()

    def _ending(self) -> None:
        stream, upstream = self.stream, self.upstream
        assert stream is not None and upstream is not None
        upstream.ended = True
        x = self.x
        if not stream.broken:
            try:
                upstream.parser.eof()
            except BadMessage:
                pass
            else:
                self._pump()
        if self.x is x:  # it failed, or ended short of the answer's end
            self._fail()

    def _pump(self) -> None:
        """Relay what the upstream's parser has of the answer."""
        x, upstream, decision = self.x, self.upstream, self.decision
        assert x is not None and upstream is not None and decision is not None
        parser, out = upstream.parser, self.out
        try:
            while (event := parser.next_event()) is not None:
                if isinstance(event, bytes):
                    out += body_out(x, self.framer, event)
                elif isinstance(event, Response):
                    if event.status == 101:  # to a request that did not ask to upgrade
                        self._fail()
                        return
                    if event.status < 200:
                        out += interim(x, event)
                        continue
                    target = decision.target
                    if isinstance(target, Tunnel) and target.observer is not None:
                        target.observer(x.req.method, x.req.target, event.status)
                    self.final = event
                    outcome(x, decision.plan, event.status)
                    self.keep, self.framer, head = response_head(x, decision.plan, event)
                    out += head
                elif isinstance(event, End):
                    out += end_out(x, self.framer, event)
                    self._write()
                    self._done()
                    return
        except BadMessage:
            self._fail()
            return
        except ConnectionError:  # a body filter that cannot go on: the answer is cut
            self._drop(True)
            return
        out += flushed(x, self.framer)
        if out:
            self._write()

    def _write(self) -> None:
        # (a new buffer, not this one cleared: a transport that cannot send it all at once
        # may keep it, exported, rather than copy it)
        self.transport.write(self.out)
        self.out = bytearray()
        self.wrote = True

    def _done(self) -> None:
        """The answer went out whole: the upstream back to the pool, the record made, and
        the next request."""
        x, upstream, decision, final = self.x, self.upstream, self.decision, self.final
        assert x is not None and upstream is not None and decision is not None
        self._clear()
        if final is not None and final.keep_alive and not upstream.ended and \
                upstream.parser.idle:
            self.edge.pool.put(upstream)
        else:
            upstream.pipe.close()
        self.served += 1
        self.ready_at = self.loop.time()
        self.edge.record(x, x.req, decision, self.started)
        if not self.keep:
            self._finish()
        else:
            self._next()

    def _fail(self) -> None:
        """The upstream failed: before any byte of the answer went out, ``serve`` answers
        the request (again on a live tunnel, or a 502); after, the answer is cut."""
        if self.wrote or self.out:
            self._drop(True)
            return
        x = self.x
        assert x is not None
        self._drop(False, record=False)
        self._hand(x.req, self.end)

    def _drop(self, cut: bool, record: bool = True) -> None:
        """The upstream aborted and the request given up (``cut``: the connection too, after
        what was written; a truncated body must not look complete)."""
        upstream, x, decision = self.upstream, self.x, self.decision
        self._clear()
        if upstream is not None:
            upstream.pipe.abort()
        if record and x is not None and decision is not None:
            self.edge.record(x, x.req, decision, self.started)
        if cut:
            if self.out:
                self.transport.write(self.out)
                self.out = bytearray()
            self._finish()

    def _clear(self) -> None:
        if self.stream is not None:
            self.stream.hold()
        if self.gone is not None:
            self.gone.cancel()
            self.gone = None
        self.x = self.decision = self.upstream = self.stream = None

    def _gone(self) -> None:
        """The client's side ended while its answer was awaited this long: it left, and
        the upstream is ended, as ``client.ClientWatch`` does for ``serve``."""
        self.gone = None
        if self.x is not None and not self.wrote and not self.out:
            self._drop(True)

    def _finish(self) -> None:
        """No more requests on this connection: it is closed once written."""
        self.deadline.cancel()
        self._mode(DONE)
        with contextlib.suppress(ConnectionError, OSError, RuntimeError):
            self.transport.close()

