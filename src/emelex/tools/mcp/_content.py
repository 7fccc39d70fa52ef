"""Turning MCP tool results into bounded :class:`ToolOutput` content.

Text, images and audio keep their kind; everything else (embedded resources, resource
links, unknown blocks) becomes text. The whole result is bounded by a byte budget: text
is cut at a character boundary, media that does not fit is replaced by a short note, and
a marker at the end tells the model the result was cut.
"""

from __future__ import annotations

import base64
import binascii
from typing import Final, Literal

from emelex.model import AudioPart, ImagePart, InvalidMessage, Part, TextPart
from emelex.tools._protocol import ToolOutput

#: Room kept for notes and the final marker, so they fit even when the budget is spent.
_NOTE_RESERVE: Final = 256
EMPTY_RESULT: Final = "(the MCP tool returned no content)"


def cut_marker(limit: int) -> str:
    return f"\n[output cut: the MCP result exceeded {limit} bytes]"


class ContentBuilder:
    """Collects parts within ``limit`` bytes (UTF-8 text plus decoded media)."""

    __slots__ = ("_limit", "_parts", "_remaining", "cut")

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._remaining = max(0, limit - _NOTE_RESERVE)
        self._parts: list[Part] = []
        self.cut = False

    def text(self, text: str) -> None:
        data = text.encode("utf-8", "surrogatepass")
        if len(data) <= self._remaining:
            self._remaining -= len(data)
            self._append_text(text)
            return
        head = data[: self._remaining].decode("utf-8", "ignore")
        self._remaining = 0
        self.cut = True
        if head:
            self._append_text(head)

    def note(self, text: str) -> None:
        """A short bracketed note; it does not spend the budget (bounded by design)."""
        self._append_text(f"[{text[:200]}]")

    def media(self, kind: Literal["image", "audio"], encoded: str, mime_type: str) -> None:
        # Base64 holds 3 bytes per 4 characters: refuse before decoding what cannot fit.
        if len(encoded) // 4 * 3 > self._remaining + 2:
            self.cut = True
            self.note(f"{kind} ({mime_type[:80]}) omitted: it exceeds the result size limit")
            return
        try:
            data = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            self.note(f"{kind} omitted: its data is not valid base64")
            return
        if len(data) > self._remaining:
            self.cut = True
            self.note(f"{kind} ({mime_type[:80]}) omitted: it exceeds the result size limit")
            return
        try:
            part: Part = (
                ImagePart(data, mime_type) if kind == "image" else AudioPart(data, mime_type)
            )
        except InvalidMessage:
            self.note(f"{kind} omitted: unsupported mime type {mime_type[:80]!r}")
            return
        self._remaining -= len(data)
        self._parts.append(part)

    def _append_text(self, text: str) -> None:
        if self._parts and isinstance(self._parts[-1], TextPart):
            self._parts[-1] = TextPart(self._parts[-1].text + text)
        else:
            self._parts.append(TextPart(text))

    def build(self, is_error: bool) -> ToolOutput:
        if not self._parts:
            self._append_text(EMPTY_RESULT)
        if self.cut:
            self._append_text(cut_marker(self._limit))
        return ToolOutput(tuple(self._parts), is_error=is_error)
