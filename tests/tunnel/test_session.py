"""The muxado session state machine: two sessions wired back to back, no sockets."""

from __future__ import annotations

import random
from collections import defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgeway.tunnel.muxado import frames
from edgeway.tunnel.muxado.core import MAX_CHUNK, WINDOW
from edgeway.tunnel.muxado.events import (
    ConnectionLost,
    DataReceived,
    Event,
    GoAway,
    StreamEnded,
    StreamError,
    StreamOpened,
    StreamReset,
    WindowOpened,
)
from edgeway.tunnel.muxado.frames import ErrorCode
from edgeway.tunnel.muxado.session import Session


class Pair:
    """A client and a server session; ``pump`` moves bytes both ways in random chunks and
    records events; by default the receiving application consumes everything at once."""

    def __init__(self, window: int = WINDOW, seed: int = 0, in_place: bool = False) -> None:
        self.in_place = in_place  # bytes written into get_buffer, as a BufferedProtocol would
        self.client = Session(client=True, window=window)
        self.server = Session(client=False, window=window)
        self.rng = random.Random(seed)
        self.events: dict[bool, list[Event]] = {True: [], False: []}
        self.received: dict[bool, dict[int, bytearray]] = {True: defaultdict(bytearray),
                                                           False: defaultdict(bytearray)}
        self.auto_consume = {True: True, False: True}

    def pump(self) -> None:
        for _ in range(10_000):
            moved = False
            for src, dst, is_client_dst in ((self.client, self.server, False),
                                            (self.server, self.client, True)):
                wire = src.data_to_send()
                while wire:
                    moved = True
                    n = self.rng.randint(1, max(1, len(wire)))
                    for ev in self._deliver(dst, wire[:n]):
                        self._record(dst, is_client_dst, ev)
                    wire = wire[n:]
            if not moved:
                return
        raise AssertionError("pump did not settle")

    def _deliver(self, dst: Session, data: bytes) -> list[Event]:
        if not self.in_place:
            return dst.receive(data)
        events: list[Event] = []
        while data:
            room = dst.get_buffer(self.rng.choice([-1, len(data)]))
            n = min(len(room), len(data))
            room[:n] = data[:n]
            events += dst.buffer_updated(n)
            data = data[n:]
        return events

    def _record(self, dst: Session, side: bool, ev: Event) -> None:
        self.events[side].append(ev)
        if isinstance(ev, DataReceived):
            self.received[side][ev.stream_id] += ev.data
            if self.auto_consume[side]:
                dst.consumed(ev.stream_id, len(ev.data))


def test_open_send_and_half_close_both_ways() -> None:
    p = Pair()
    sid = p.client.open_stream()
    assert sid == 3
    p.client.send(sid, b"\0\0\0\0hello", fin=True)
    p.pump()
    assert p.events[False][:2] == [StreamOpened(3), DataReceived(3, b"\0\0\0\0hello")]
    assert p.events[False][-1] == StreamEnded(3)
    p.server.send(3, b"reply", fin=True)
    (reply,) = frames.Decoder().feed(p.server.data_to_send())
    assert not reply.syn  # only the opener sends SYN
    p.client.receive(frames.encode(reply))
    p.events[True] += [DataReceived(3, b"reply"), StreamEnded(3)]
    p.received[True][3] += b"reply"
    p.pump()
    assert bytes(p.received[True][3]) == b"reply" and p.events[True][-1] == StreamEnded(3)
    assert not p.client.is_open(3) and not p.server.is_open(3)
    assert p.server.open_stream() == 2 and p.server.open_stream() == 4


def test_a_fast_sender_is_held_at_the_window_and_a_slow_stream_blocks_no_other() -> None:
    p = Pair()
    p.auto_consume[False] = False
    slow, fast = p.client.open_stream(), p.client.open_stream()
    p.client.send(slow, b"s" * (1 << 20))
    p.pump()
    assert len(p.received[False][slow]) == WINDOW
    assert p.client.pending(slow) == (1 << 20) - WINDOW
    p.client.send(fast, b"f" * 1000, fin=True)
    p.pump()
    assert bytes(p.received[False][fast]) == b"f" * 1000
    p.server.consumed(slow, WINDOW)
    p.pump()
    assert len(p.received[False][slow]) == 2 * WINDOW


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 70_000), st.booleans()),
                min_size=1, max_size=30), st.integers(0, 2**32), st.booleans(), st.booleans())
def test_every_byte_arrives_once_in_order(ops: list[tuple[int, int, bool]], seed: int,
                                          server_opens: bool, in_place: bool) -> None:
    p = Pair(window=64 * 1024, seed=seed, in_place=in_place)
    opener = p.server if server_opens else p.client
    ids = [opener.open_stream() for _ in range(4)]
    sent: dict[int, bytearray] = defaultdict(bytearray)
    done: set[int] = set()
    rng = random.Random(seed)
    for idx, size, fin in ops:
        sid = ids[idx]
        if sid in done:
            continue
        payload = rng.randbytes(size)
        opener.send(sid, payload, fin=fin)
        sent[sid] += payload
        if fin:
            done.add(sid)
        if rng.random() < 0.5:
            p.pump()
    p.pump()
    side = server_opens  # the side that receives
    for sid, data in sent.items():
        assert bytes(p.received[side][sid]) == bytes(data)
    ended = {e.stream_id for e in p.events[side] if isinstance(e, StreamEnded)}
    assert ended == done


def test_overrunning_the_window_resets_the_stream() -> None:
    server = Session(client=False, window=16)
    wire = frames.encode(frames.data(3, b"x" * 10, syn=True))
    wire += frames.encode(frames.data(3, b"y" * 10))
    events = server.receive(wire)
    assert events[:2] == [StreamOpened(3), DataReceived(3, b"x" * 10)]
    assert events[2] == StreamReset(3, ErrorCode.FLOW_CONTROL, False)
    fin, rst = frames.Decoder().feed(server.data_to_send())  # a server's reset: FIN, RST
    assert fin.type == frames.FrameType.DATA and fin.flags == frames.FIN and not fin.body
    assert rst.type == frames.FrameType.RST and rst.code() == ErrorCode.FLOW_CONTROL


def test_a_reset_ends_the_peers_reading_first_and_says_whether_the_peer_may_hold_it() -> None:
    server = Session(client=False)
    sid = server.open_stream()
    assert server.reset(sid) is False  # never on the wire: nothing sent, nothing held
    assert server.data_to_send() == b""
    sid = server.open_stream()
    server.send(sid, b"hello")
    server.data_to_send()
    assert server.stream_count == 1
    assert server.reset(sid) is True  # the peer had not half-closed: it may hold it a while
    assert server.stream_count == 0
    kinds = [(f.type, f.flags) for f in frames.Decoder().feed(server.data_to_send())]
    assert kinds == [(frames.FrameType.DATA, frames.FIN), (frames.FrameType.RST, 0)]
    sid = server.open_stream()
    server.send(sid, b"x")
    server.receive(frames.encode(frames.data(sid, b"", fin=True)))  # the peer half-closed
    server.data_to_send()
    assert server.reset(sid) is False
    client = Session(client=True)  # a client's reset is a bare RST
    cid = client.open_stream()
    client.send(cid, b"x")
    client.data_to_send()
    client.reset(cid)
    assert [f.type for f in frames.Decoder().feed(client.data_to_send())] == [
        frames.FrameType.RST]


def test_stream_limit_refuses_extra_streams() -> None:
    server = Session(client=False, max_streams=2)
    wire = b"".join(frames.encode(frames.data(i, b"", syn=True)) for i in (3, 5, 7))
    events = server.receive(wire)
    assert [e for e in events if isinstance(e, StreamOpened)] == [StreamOpened(3),
                                                                  StreamOpened(5)]
    (rst,) = frames.Decoder().feed(server.data_to_send())
    assert (rst.stream_id, rst.code()) == (7, ErrorCode.STREAM_REFUSED)


@pytest.mark.parametrize("frame", [
    frames.data(4, b"", syn=True),    # a server id opened by the client
    frames.data(9, b"no syn"),        # data on a stream never opened
])
def test_protocol_violations_end_the_session(frame: frames.Frame) -> None:
    server = Session(client=False)
    (lost,) = server.receive(frames.encode(frame))
    assert isinstance(lost, ConnectionLost) and lost.code == ErrorCode.PROTOCOL
    (goaway,) = frames.Decoder().feed(server.data_to_send())
    assert goaway.type == frames.FrameType.GOAWAY and goaway.code() == ErrorCode.PROTOCOL
    assert server.receive(frames.encode(frames.data(3, b"", syn=True))) == []


def test_reset_and_goaway() -> None:
    p = Pair()
    sid = p.client.open_stream()
    p.client.send(sid, b"abc")
    p.pump()
    p.server.reset(sid, ErrorCode.STREAM_REFUSED)
    p.pump()
    assert p.events[True][-1] == StreamReset(sid, ErrorCode.STREAM_REFUSED, True)
    with pytest.raises(StreamError):
        p.client.send(sid, b"more")
    p.server.close(ErrorCode.NONE, "restarting")
    p.pump()
    assert p.events[True][-1] == GoAway(sid, ErrorCode.NONE, "restarting")
    with pytest.raises(StreamError):
        p.client.open_stream()


def test_streams_may_be_announced_out_of_order() -> None:
    p = Pair()
    first, second = p.client.open_stream(), p.client.open_stream()
    p.client.send(second, b"b")
    p.client.send(first, b"a")
    p.pump()
    opened = [e.stream_id for e in p.events[False] if isinstance(e, StreamOpened)]
    assert opened == [second, first]
    assert (bytes(p.received[False][first]), bytes(p.received[False][second])) == (b"a", b"b")


def data_frames(wire: bytes) -> list[frames.Frame]:
    return [f for f in frames.Decoder().feed(wire) if f.type == frames.FrameType.DATA]


def test_data_frames_of_a_stream_read_together_make_one_event() -> None:
    server = Session(client=False)
    wire = frames.encode(frames.data(3, b"a", syn=True)) + frames.encode(frames.data(5, b"x",
                                                                                   syn=True))
    wire += b"".join(frames.encode(frames.data(3, bytes([c]))) for c in b"bcd")
    wire += frames.encode(frames.data(5, b"y")) + frames.encode(frames.data(3, b"e"))
    wire += frames.encode(frames.data(3, b"f", fin=True))
    assert server.receive(wire) == [
        StreamOpened(3), DataReceived(3, b"a"), StreamOpened(5), DataReceived(5, b"x"),
        DataReceived(3, b"bcd"), DataReceived(5, b"y"), DataReceived(3, b"e"),
        DataReceived(3, b"f"), StreamEnded(3)]


def test_increments_read_together_release_data_once() -> None:
    """The SDK returns window 8 KiB at a time: increments that arrive together send one frame,
    not one per increment; and a sliver of window is not used while much more waits."""
    p = Pair()
    sid = p.client.open_stream()
    p.client.send(sid, b"x" * (2 * WINDOW))
    assert sum(len(f.body) for f in data_frames(p.client.data_to_send())) == WINDOW
    assert p.client.receive(frames.encode(frames.wndinc(sid, 8192))) == [WindowOpened(sid)]
    assert p.client.data_to_send() == b""  # 8 KiB of window, 256 KiB waiting: wait for more
    events = p.client.receive(b"".join(frames.encode(frames.wndinc(sid, 8192))
                                       for _ in range(7)))
    assert events == [WindowOpened(sid)]
    (frame,) = data_frames(p.client.data_to_send())
    assert len(frame.body) == 8 * 8192
    small = p.client.open_stream()
    p.client.send(small, b"y" * 100, fin=True)  # what fits the window goes out at once
    assert [len(f.body) for f in data_frames(p.client.data_to_send())] == [100]


def test_frames_are_at_most_max_chunk_and_sent_bytes_are_copied() -> None:
    p = Pair()
    sid = p.client.open_stream()
    payload = bytearray(b"z" * (MAX_CHUNK + 10))
    p.client.send(sid, payload)
    payload[:] = b"!" * len(payload)  # the caller reuses its buffer
    sizes = [len(f.body) for f in data_frames(p.client.data_to_send())]
    assert sizes == [MAX_CHUNK, 10]
    p.client.send(sid, memoryview(b"abc"), fin=True)
    (last,) = data_frames(p.client.data_to_send())
    assert last.body == b"abc" and last.fin


def test_a_malformed_frame_after_good_ones_keeps_their_events() -> None:
    server = Session(client=False)
    wire = frames.encode(frames.data(3, b"hi", syn=True)) + bytes.fromhex("0000004000000001")
    events = server.receive(wire)
    assert events[:2] == [StreamOpened(3), DataReceived(3, b"hi")]
    assert isinstance(events[2], ConnectionLost) and events[2].code == ErrorCode.PROTOCOL
    assert server.closed and server.receive(wire) == []


def test_window_increments_with_flags_or_overflowing() -> None:
    p = Pair()
    sid = p.client.open_stream()
    p.client.send(sid, b"x" * (WINDOW + 10))
    p.client.data_to_send()
    flagged = frames.Frame(frames.FrameType.WNDINC, sid, frames.U32.pack(10), frames.FIN)
    assert p.client.receive(frames.encode(flagged)) == [WindowOpened(sid)]
    assert [len(f.body) for f in data_frames(p.client.data_to_send())] == [10]
    too_much = frames.encode(frames.wndinc(sid, frames.MAX_INCREMENT))
    too_much += frames.encode(frames.wndinc(sid, 1))
    assert p.client.receive(too_much) == [StreamReset(sid, ErrorCode.FLOW_CONTROL, False)]
    assert p.client.receive(frames.encode(frames.wndinc(sid, 5))) == []  # gone: ignored
