"""An incremental Server-Sent Events parser with a bound on line and event size.

Bytes arrive in arbitrary pieces; :meth:`SSEParser.feed` returns the events completed
by each piece. Lines end with LF, CRLF or a lone CR; a CR at the end of a piece is held
until the next byte shows whether an LF follows. Each line (and each event's joined
``data``) is limited to ``max_line_bytes``: a longer one raises :class:`ChunkTooLarge`
as soon as the limit is passed, so the parser never holds more than the limit plus one
network read. Comment lines (``:`` ...), ``id`` and ``retry`` fields are ignored; an
event without data lines is not dispatched; an unterminated event at the end of the
body is dropped (as the SSE rules require).
"""

from __future__ import annotations

from typing import Final

import attrs

from emelex.model.openai._errors import ChunkTooLarge, MalformedChunk

_BOM: Final = b"\xef\xbb\xbf"


@attrs.frozen
class SSEEvent:
    """One dispatched event: its ``event`` name (``"message"`` by default) and its data
    lines joined with LF."""

    data: str
    event: str = "message"


class SSEParser:
    """Turns a byte stream into :class:`SSEEvent` values (see the module docs)."""

    __slots__ = ("_buffer", "_data", "_data_size", "_event", "_max", "_started")

    def __init__(self, max_line_bytes: int) -> None:
        self._max = max_line_bytes
        self._buffer = bytearray()
        self._data: list[str] = []
        self._data_size = 0
        self._event = ""
        self._started = False

    @property
    def buffered(self) -> int:
        """Bytes held for an unterminated line."""
        return len(self._buffer)

    def feed(self, data: bytes) -> list[SSEEvent]:
        """Add ``data``; return the events it completed (possibly none).

        Raises :class:`ChunkTooLarge` for a line or event over the limit and
        :class:`MalformedChunk` for a line that is not UTF-8.
        """
        buffer = self._buffer
        buffer += data
        if not self._started:
            if len(buffer) < len(_BOM) and _BOM.startswith(buffer):
                return []
            self._started = True
            if buffer.startswith(_BOM):
                del buffer[: len(_BOM)]
        limit = self._max
        # Complete lines end at the last terminator; a CR ending the buffer is held (it
        # may be the first half of a CRLF) and so is the unterminated rest.
        stop = len(buffer) - 1 if buffer.endswith(b"\r") else len(buffer)
        cut = max(buffer.rfind(b"\n", 0, stop), buffer.rfind(b"\r", 0, stop)) + 1
        if not cut:
            if len(buffer) > limit:
                raise ChunkTooLarge("max_line_bytes", limit, len(buffer))
            return []
        # One split for every complete line of the piece: bytes.splitlines ends lines at
        # LF, CRLF and a lone CR, exactly the SSE terminators.
        lines = bytes(buffer[:cut]).splitlines()
        del buffer[:cut]
        events: list[SSEEvent] = []
        pending = self._data
        for raw in lines:
            if len(raw) > limit:
                raise ChunkTooLarge("max_line_bytes", limit, len(raw))
            if raw.startswith(b"data: "):  # the common line, inlined
                self._data_size += len(raw) + 1
                if self._data_size > limit:
                    raise ChunkTooLarge("max_line_bytes", limit, self._data_size)
                try:
                    pending.append(raw[6:].decode("utf-8"))
                except UnicodeDecodeError as exc:
                    raise _not_utf8(raw) from exc
            elif not raw and pending:
                events.append(SSEEvent("\n".join(pending), self._event or "message"))
                pending.clear()
                self._data_size = 0
                self._event = ""
            else:
                self._line(raw, events)
        if len(buffer) > limit:
            raise ChunkTooLarge("max_line_bytes", limit, len(buffer))
        return events

    def finish(self) -> list[SSEEvent]:
        """The end of the body: a held CR still ends its line; an event that was not
        terminated by a blank line is dropped."""
        events: list[SSEEvent] = []
        if self._buffer.endswith(b"\r"):
            self._line(bytes(self._buffer[:-1]), events)
        self._buffer.clear()
        self._data.clear()
        self._data_size = 0
        self._event = ""
        return events

    def _line(self, raw: bytes, events: list[SSEEvent]) -> None:
        if not raw:
            if self._data:
                events.append(SSEEvent("\n".join(self._data), self._event or "message"))
            self._data.clear()
            self._data_size = 0
            self._event = ""
            return
        if raw[0] == 0x3A:  # ":" starts a comment (keep-alive pings)
            return
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _not_utf8(raw) from exc
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data_size += len(raw) + 1
            if self._data_size > self._max:
                raise ChunkTooLarge("max_line_bytes", self._max, self._data_size)
            self._data.append(value)
        elif name == "event":
            self._event = value


def _not_utf8(raw: bytes) -> MalformedChunk:
    return MalformedChunk(
        "a stream line is not valid UTF-8", excerpt=raw[:200].decode("utf-8", "replace")
    )
