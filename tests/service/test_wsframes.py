"""The client's frame reader (``_wsframes``): what wsproto reads, read alike; every
violation a typed error; every message bounded before its payload arrives."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from wsproto.frame_protocol import FrameProtocol, Opcode

from emelex import EmelexError
from emelex.service import RequestTooLarge, TransportError
from emelex.service.transport._wsframes import (
    CLOSE,
    NO_STATUS,
    PING,
    PONG,
    TEXT,
    FrameReader,
    Message,
)


def _server() -> FrameProtocol:
    return FrameProtocol(client=False, extensions=[])


def _frame(first: int, payload: bytes, *, length: bytes | None = None, mask: bool = False) -> bytes:
    """A raw frame: ``first`` is the FIN/RSV/opcode byte; ``length`` overrides the length
    encoding (to build non-minimal ones)."""
    if length is None:
        size = len(payload)
        if size < 126:
            length = bytes((size,))
        elif size < 1 << 16:
            length = bytes((126,)) + struct.pack("!H", size)
        else:
            length = bytes((127,)) + struct.pack("!Q", size)
    if mask:
        length = bytes((length[0] | 0x80,)) + length[1:] + b"\0\0\0\0"
    return bytes((first,)) + length + payload


def _all(reader: FrameReader) -> list[Message]:
    out = []
    while (message := reader.next_message()) is not None:
        out.append(message)
    return out


def _texts(data: bytes, *, chunk: int, max_message: int = 1 << 20) -> list[tuple[int, str]]:
    reader = FrameReader(max_message)
    out: list[tuple[int, str]] = []
    for at in range(0, len(data), chunk):
        reader.feed(data[at : at + chunk])
        out += [(m.kind, m.text if m.kind != PING else m.payload.decode()) for m in _all(reader)]
    return out


@pytest.mark.parametrize(
    ("size", "chunk"),
    [
        (size, chunk)
        for size in (0, 1, 125, 126, 127, 65535, 65536, 300_000)
        for chunk in (1, 7, 65536, 1 << 20)
        if chunk > 1 or size < 70_000  # byte by byte: the smaller sizes cover it
    ],
)
def test_whole_text_frames_of_every_length_encoding(size: int, chunk: int) -> None:
    text = "é" * (size // 2) + "a" * (size % 2)
    data = bytes(_server().send_data(text, fin=True)) * 2
    assert _texts(data, chunk=chunk) == [(TEXT, text), (TEXT, text)]


def test_fragments_with_control_frames_between_them() -> None:
    server = _server()
    # "é" split across two fragments: UTF-8 is decoded once the message is whole.
    encoded = "aé".encode()
    data = (
        _frame(0x01, encoded[:2])
        + bytes(server.ping(b"p1"))
        + _frame(0x00, encoded[2:])
        + bytes(server.pong(b"p2"))
        + _frame(0x80, b"b")
        + bytes(server.send_data("next", fin=True))
        + bytes(server.close(1000, "bye"))
    )
    for chunk in (1, 3, len(data)):
        reader = FrameReader(100)
        messages: list[Message] = []
        for at in range(0, len(data), chunk):
            reader.feed(data[at : at + chunk])
            messages += _all(reader)
        kinds = [(m.kind, m.text, m.payload) for m in messages]
        assert kinds == [
            (PING, "", b"p1"),
            (PONG, "", b"p2"),
            (TEXT, "aéb", b""),
            (TEXT, "next", b""),
            (CLOSE, "bye", b""),
        ]
        assert messages[-1].code == 1000


def test_a_close_without_a_code_is_no_status() -> None:
    reader = FrameReader(100)
    reader.feed(_frame(0x88, b""))
    (message,) = _all(reader)
    assert (message.kind, message.code, message.text) == (CLOSE, NO_STATUS, "")


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        (_frame(0xC1, b"x"), "reserved bits"),
        (_frame(0x91, b"x"), "reserved bits"),
        (_frame(0x81, b"x", mask=True), "masked frame"),
        (_frame(0x83, b"x"), "unknown opcode 0x3"),
        (_frame(0x8B, b"x"), "unknown opcode 0xb"),
        (_frame(0x09, b"x"), "fragmented control frame"),
        (_frame(0x89, b"x" * 126), "longer than 125"),
        (_frame(0x81, b"x" * 10, length=bytes((126, 0, 10))), "2-byte length"),
        (_frame(0x81, b"", length=bytes((127,)) + struct.pack("!Q", 300)), "8-byte length where"),
        (_frame(0x81, b"", length=bytes((127,)) + struct.pack("!Q", 1 << 63)), "high bit"),
        (_frame(0x80, b"x"), "continuation frame outside"),
        (_frame(0x01, b"x") + _frame(0x81, b"y"), "new message inside"),
        (_frame(0x82, b"\x00\x01"), "binary message"),
        (_frame(0x81, b"\xff"), "not UTF-8"),
        (_frame(0x81, b"\xed\xa0\x80"), "not UTF-8"),  # an encoded surrogate
        (_frame(0x01, b"\xc3") + _frame(0x80, b"("), "not UTF-8"),
        (_frame(0x88, b"\x03"), "1-byte payload"),
        (_frame(0x88, struct.pack("!H", 999)), "invalid code 999"),
        (_frame(0x88, struct.pack("!H", 1005)), "invalid code 1005"),
        (_frame(0x88, struct.pack("!H", 1004)), "invalid code 1004"),
        (_frame(0x88, struct.pack("!H", 5000)), "invalid code 5000"),
        (_frame(0x88, struct.pack("!H", 1000) + b"\xff"), "not UTF-8"),
    ],
)
def test_protocol_violations_are_transport_errors(data: bytes, needle: str) -> None:
    reader = FrameReader(1 << 20)
    reader.feed(data)
    with pytest.raises(TransportError) as caught:
        _all(reader)
    assert isinstance(caught.value, EmelexError)
    assert "broke the WebSocket protocol" in str(caught.value)
    assert needle in str(caught.value)


def test_a_message_over_the_bound_is_refused_from_its_header() -> None:
    reader = FrameReader(1000)
    # Only the header of a 2**62-byte frame: refused before any payload is buffered.
    reader.feed(bytes((0x81, 127)) + struct.pack("!Q", 1 << 62))
    with pytest.raises(RequestTooLarge, match="exceeds 1000 bytes"):
        reader.next_message()
    # Exactly at the bound is accepted.
    reader = FrameReader(1000)
    reader.feed(_frame(0x81, b"x" * 1000))
    assert [m.text for m in _all(reader)] == ["x" * 1000]


def test_fragments_count_together_against_the_bound() -> None:
    reader = FrameReader(1000)
    reader.feed(_frame(0x01, b"x" * 600))
    assert reader.next_message() is None
    reader.feed(_frame(0x80, b"x" * 401)[:4])  # the next header alone
    with pytest.raises(RequestTooLarge):
        reader.next_message()


def test_wanted_sizes_reads_to_the_frame_still_missing() -> None:
    reader = FrameReader(1 << 20)
    assert reader.wanted() == 1
    frame = _frame(0x81, b"x" * 100_000)
    reader.feed(frame[:1])
    assert reader.wanted() == 1  # no whole header yet
    reader.feed(frame[1:1000])
    assert reader.wanted() == len(frame) - 1000
    reader.feed(frame[1000:])
    assert [len(m.text) for m in _all(reader)] == [100_000]


_message = st.one_of(
    st.tuples(st.just("text"), st.text(max_size=300), st.integers(1, 4)),
    st.tuples(st.just("ping"), st.binary(max_size=125), st.just(1)),
    st.tuples(st.just("pong"), st.binary(max_size=125), st.just(1)),
)


@settings(max_examples=200, deadline=None)
@given(messages=st.lists(_message, max_size=12), chunk=st.integers(1, 700))
def test_reads_what_wsproto_reads(messages: list[tuple[str, str | bytes, int]], chunk: int) -> None:
    """Messages framed by wsproto's server (text in up to four fragments, with control
    frames), cut into arbitrary pieces: wsproto's client and this reader agree."""
    server = _server()
    data = b""
    for kind, value, pieces in messages:
        if kind == "text":
            assert isinstance(value, str)
            cuts = [len(value) * n // pieces for n in range(pieces + 1)]
            for n in range(pieces):
                data += server.send_data(value[cuts[n] : cuts[n + 1]], fin=n == pieces - 1)
        else:
            assert isinstance(value, bytes)
            data += server.ping(value) if kind == "ping" else server.pong(value)
    client = FrameProtocol(client=True, extensions=[])
    client.receive_bytes(data)
    theirs: list[tuple[int, str | bytes]] = []
    text = ""
    for frame in client.received_frames():
        if frame.opcode in (Opcode.TEXT, Opcode.CONTINUATION):
            text += str(frame.payload)
            if frame.message_finished:
                theirs.append((TEXT, text))
                text = ""
        else:
            assert isinstance(frame.payload, bytes | bytearray)
            theirs.append((PING if frame.opcode is Opcode.PING else PONG, bytes(frame.payload)))
    reader = FrameReader(1 << 20)
    ours: list[tuple[int, str | bytes]] = []
    for at in range(0, len(data), chunk):
        reader.feed(data[at : at + chunk])
        ours += [(m.kind, m.text if m.kind == TEXT else m.payload) for m in _all(reader)]
    assert ours == theirs
    assert reader.wanted() == 1  # nothing left over
