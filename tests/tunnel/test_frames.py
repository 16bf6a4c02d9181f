"""The muxado frame codec on scripted bytes and on generated frames split anywhere."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from edgeway.tunnel.muxado import frames
from edgeway.tunnel.muxado.frames import ErrorCode, Frame, FrameType, ProtocolError


def test_scripted_bytes() -> None:
    # DATA|SYN on stream 3 carrying the 4-byte stream type 0 (Auth).
    raw = bytes.fromhex("000004 12 00000003 00000000".replace(" ", ""))
    (f,) = frames.Decoder().feed(raw)
    assert (f.type, f.stream_id, f.syn, f.fin, f.body) == (FrameType.DATA, 3, True, False,
                                                           b"\0\0\0\0")
    assert frames.encode(f) == raw
    goaway = frames.encode(frames.goaway(7, ErrorCode.PROTOCOL, "bye"))
    assert goaway == bytes.fromhex("00000b30 00000000 00000007 00000001".replace(" ", "")) + b"bye"
    (g,) = frames.Decoder().feed(goaway)
    assert g.code() == ErrorCode.PROTOCOL and g.body[8:] == b"bye"
    assert frames.encode(frames.wndinc(2, 65536)) == bytes.fromhex("0000042000000002" "00010000")


@pytest.mark.parametrize(("raw", "code"), [
    ("0000004000000001", ErrorCode.PROTOCOL),            # type 4
    ("0000001000000000", ErrorCode.PROTOCOL),            # DATA on stream 0
    ("0000030000000001000000", ErrorCode.FRAME_SIZE),    # RST with 3 bytes
    ("000004200000000100000000", ErrorCode.PROTOCOL),    # WNDINC of 0
    ("000004200000000180000000", ErrorCode.PROTOCOL),    # WNDINC over 2^31-1
    ("0000083000000001" + "00" * 8, ErrorCode.PROTOCOL),  # GOAWAY on a stream
    ("0000043000000000" + "00" * 4, ErrorCode.PROTOCOL),  # short GOAWAY
    ("ffffff1000000001", ErrorCode.FRAME_SIZE),          # 16 MiB body
])
def test_malformed_frames(raw: str, code: ErrorCode) -> None:
    with pytest.raises(ProtocolError) as err:
        frames.Decoder().feed(bytes.fromhex(raw))
    assert err.value.code == code


frame_st = st.one_of(
    st.builds(frames.data, st.integers(1, frames.MAX_STREAM_ID), st.binary(max_size=300),
              syn=st.booleans(), fin=st.booleans()),
    st.builds(frames.rst, st.integers(1, frames.MAX_STREAM_ID), st.sampled_from(ErrorCode)),
    st.builds(frames.wndinc, st.integers(1, frames.MAX_STREAM_ID),
              st.integers(1, frames.MAX_INCREMENT)),
    st.builds(frames.goaway, st.integers(0, frames.MAX_STREAM_ID), st.sampled_from(ErrorCode),
              st.text(max_size=20)),
)


@given(st.lists(frame_st, max_size=20), st.data())
def test_roundtrip_through_any_split(fs: list[Frame], data: st.DataObject) -> None:
    wire = b"".join(frames.encode(f) for f in fs)
    cuts = sorted(data.draw(st.lists(st.integers(0, len(wire)), max_size=10)))
    decoder, out, start = frames.Decoder(), [], 0
    for cut in [*cuts, len(wire)]:
        out += decoder.feed(wire[start:cut])
        start = cut
    assert out == fs


@given(st.binary(max_size=200))
def test_garbage_only_raises_protocol_errors(raw: bytes) -> None:
    try:
        frames.Decoder().feed(raw)
    except ProtocolError as err:
        assert isinstance(err.code, ErrorCode)


def test_header_matches_encode() -> None:
    f = frames.data(7, b"payload", syn=True, fin=True)
    assert frames.header(f.type, f.flags, f.stream_id, len(f.body)) + f.body == frames.encode(f)
    with pytest.raises(ValueError):
        frames.header(FrameType.DATA, 0, 1, frames.MAX_LENGTH + 1)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, 300_000), min_size=1, max_size=6), st.data())
def test_frame_buffer_holds_frames_of_any_size(sizes: list[int], data: st.DataObject) -> None:
    """Bytes written into ``get_buffer`` as a transport would (any amount up to the room
    offered, hints of any size), frames taken off as they complete: each comes out whole, the
    tail moved to the front or into a bigger buffer as needed, views handed out stay valid."""
    wire = b"".join(frames.encode(frames.data(1, bytes([n % 251]) * n)) for n in sizes)
    rx, bodies, pos, views = frames.FrameBuffer(), [], 0, []
    # the writes' sizes and hints, in turn: a cycle drawn once (one with only tiny writes
    # gets a big one too, or 1.8 MB would go a byte at a time)
    hints = data.draw(st.lists(st.sampled_from([-1, 0, 256, 70_000, 400_000]), min_size=1,
                               max_size=6))
    steps = data.draw(st.lists(st.sampled_from([1, 7, 9, 5000, 65536, 500_000]), min_size=1,
                               max_size=6))
    if max(steps) < 65536:
        steps.append(65536)
    turn = 0
    while pos < len(wire):
        room = rx.get_buffer(hints[turn % len(hints)])
        views.append(room)  # a transport may still hold it: the buffer must not be resized
        assert len(room) >= frames.MIN_FREE
        n = min(len(room), len(wire) - pos, steps[turn % len(steps)])
        turn += 1
        room[:n] = wire[pos:pos + n]
        rx.end += n
        pos += n
        at, need = rx.start, 8
        while rx.end - at >= 8:
            word, _ = frames.HEADER.unpack_from(rx.view, at)
            if rx.end - at - 8 < word >> 8:
                need = 8 + (word >> 8)
                break
            bodies.append(rx.view[at + 8:at + 8 + (word >> 8)].tobytes())
            at += 8 + (word >> 8)
        rx.parsed(at, need)
    assert [len(body) for body in bodies] == sizes
    assert all(body == bytes([len(body) % 251]) * len(body) for body in bodies)
    assert rx.start == rx.end == 0


def test_a_grown_frame_buffer_shrinks_after_small_reads() -> None:
    rx = frames.FrameBuffer()
    room = rx.get_buffer(300_000)
    assert len(room) >= 300_000
    room[:8] = frames.encode(frames.rst(1, ErrorCode.NONE))[:8]
    rx.end += 8
    rx.parsed(0, 12)  # a frame waits for its body: the big buffer stays
    assert len(rx.get_buffer(-1)) >= frames.MIN_FREE and len(rx.buf) > frames.INITIAL_BUFFER
    rx.clear()
    for _ in range(frames.SHRINK_AFTER + 1):
        rx.get_buffer(100)
    assert len(rx.buf) == frames.INITIAL_BUFFER
