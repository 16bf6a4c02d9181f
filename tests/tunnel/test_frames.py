"""The muxado frame codec on scripted bytes and on generated frames split anywhere."""

from __future__ import annotations

import pytest
from hypothesis import given
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
