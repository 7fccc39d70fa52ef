"""The frames a WebSocket server sends, read without a general parser (RFC 6455 5.2).

The client's data path: every update the Host streams arrives here. wsproto's decoder
builds a header, an enum, a payload object, an incremental UTF-8 decoder and an event
per frame; with hundreds of watches in one process that was a large share of the
client's time. A server's frames are never masked and this transport negotiates no
extension, so a frame is a 2 to 10 byte header and the payload: this reader parses the
header in place, slices the payload out of one buffer and decodes a text message once,
whole. It keeps wsproto's checks (reserved bits, opcodes, control frame rules, minimal
lengths, close codes, UTF-8) and bounds each message before its payload arrives.
Sans-IO: the caller feeds bytes and acts on what comes out (see ``_websocket``).
"""

from __future__ import annotations

from typing import Final

from wsproto.frame_protocol import LOCAL_ONLY_CLOSE_REASONS, CloseReason

from emelex.service._errors import RequestTooLarge, TransportError

CONTINUATION: Final = 0x0
TEXT: Final = 0x1
BINARY: Final = 0x2
CLOSE: Final = 0x8
PING: Final = 0x9
PONG: Final = 0xA

#: The close code of a close frame without one (RFC 6455 7.1.5).
NO_STATUS: Final = 1005
_VALID_CODES: Final = frozenset(
    int(reason) for reason in CloseReason if reason not in LOCAL_ONLY_CLOSE_REASONS
)
#: Bytes of the buffer already read past before it is compacted.
_COMPACT_AT: Final = 256 * 1024


def _broken(why: str) -> TransportError:
    return TransportError(f"the Host broke the WebSocket protocol: {why}")


class Message:
    """One complete message or control frame: ``TEXT`` (``text``), ``PING``/``PONG``
    (``payload``) or ``CLOSE`` (``code``, ``text`` the reason)."""

    __slots__ = ("code", "kind", "payload", "text")

    def __init__(
        self, kind: int, *, text: str = "", payload: bytes = b"", code: int = NO_STATUS
    ) -> None:
        self.kind = kind
        self.text = text
        self.payload = payload
        self.code = code


class FrameReader:
    """Bytes from a WebSocket server in, whole messages out. A message over
    ``max_message`` bytes (its fragments together) is refused from the header that
    announces it, before its payload is buffered."""

    def __init__(self, max_message: int) -> None:
        self._max = max_message
        self._buffer = bytearray()
        self._at = 0  # where the next unread frame begins
        self._partial = bytearray()  # a fragmented text message's payload so far
        self._fragmented = False

    def feed(self, data: bytes) -> None:
        if self._at >= _COMPACT_AT or self._at == len(self._buffer):
            del self._buffer[: self._at]
            self._at = 0
        self._buffer += data

    def wanted(self) -> int:
        """A lower bound of the bytes still missing for the next whole frame (at least
        1 while none is complete): callers size their reads by it."""
        found = self._header()
        if found is None:
            return 1
        head, size = found[1], found[2]
        return max(1, head + size - (len(self._buffer) - self._at))

    def next_message(self) -> Message | None:
        """The next whole message or control frame, or None until more bytes come.
        Raises ``TransportError`` for a protocol violation, ``RequestTooLarge`` for a
        message over the bound."""
        while True:
            found = self._header()
            if found is None:
                return None
            first, head, size = found
            start = self._at + head
            end = start + size
            if end > len(self._buffer):
                return None
            self._at = end
            opcode = first & 0x0F
            if opcode >= CLOSE:
                return self._control(opcode, bytes(self._buffer[start:end]))
            if opcode == BINARY:
                raise _broken("a binary message (the Host sends JSON text)")
            if first & 0x80 and not self._fragmented:
                # The common case: a whole message in one frame.
                return Message(TEXT, text=_utf8(self._buffer[start:end]))
            self._partial += self._buffer[start:end]
            self._fragmented = not first & 0x80
            if not self._fragmented:
                data, self._partial = self._partial, bytearray()
                return Message(TEXT, text=_utf8(data))

    def _header(self) -> tuple[int, int, int] | None:
        """(first byte, header length, payload length) of the next frame, checked, or
        None while its header is incomplete."""
        buffer, at = self._buffer, self._at
        available = len(buffer) - at
        if available < 2:
            return None
        first, second = buffer[at], buffer[at + 1]
        if first & 0x70:
            raise _broken("reserved bits set (no extension was negotiated)")
        if second & 0x80:
            raise _broken("a masked frame from the server")
        opcode = first & 0x0F
        size = second & 0x7F
        if opcode >= CLOSE:
            if opcode > PONG:
                raise _broken(f"unknown opcode {opcode:#x}")
            if not first & 0x80:
                raise _broken("a fragmented control frame")
            if size > 125:
                raise _broken("a control frame longer than 125 bytes")
            return first, 2, size
        if opcode > BINARY:
            raise _broken(f"unknown opcode {opcode:#x}")
        if opcode == CONTINUATION and not self._fragmented:
            raise _broken("a continuation frame outside a fragmented message")
        if opcode != CONTINUATION and self._fragmented:
            raise _broken("a new message inside a fragmented one")
        head = 2
        if size == 126:
            if available < 4:
                return None
            size = buffer[at + 2] << 8 | buffer[at + 3]
            head = 4
            if size < 126:
                raise _broken("a 2-byte length where 1 byte would do")
        elif size == 127:
            if available < 10:
                return None
            size = int.from_bytes(buffer[at + 2 : at + 10], "big")
            head = 10
            if size >> 63:
                raise _broken("an 8-byte length with its high bit set")
            if size < 1 << 16:
                raise _broken("an 8-byte length where 2 bytes would do")
        if len(self._partial) + size > self._max:
            raise RequestTooLarge(f"a message from the Host exceeds {self._max} bytes")
        return first, head, size

    def _control(self, opcode: int, payload: bytes) -> Message:
        if opcode != CLOSE:
            return Message(opcode, payload=payload)
        if not payload:
            return Message(CLOSE, code=NO_STATUS)
        if len(payload) == 1:
            raise _broken("a close frame with a 1-byte payload")
        code = int.from_bytes(payload[:2], "big")
        if not (code in _VALID_CODES or 3000 <= code <= 4999):
            raise _broken(f"a close frame with the invalid code {code}")
        return Message(CLOSE, code=code, text=_utf8(payload[2:]))


def _utf8(data: bytes | bytearray) -> str:
    try:
        return str(data, "utf-8")
    except UnicodeDecodeError as exc:
        raise _broken(f"a text message that is not UTF-8 ({exc.reason})") from None
