"""Encoded video fails closed: no request, history or tool result may carry it.

Emelex bundles no video decoder, so a video part can be neither shown to a model nor
safely committed (a stored video would fail every later request). New user input is
refused at the door (``UnsupportedContent``); these checks close the other ways in:
resumed history (refused when the session is built), tool output (replaced by a
model-readable error before it is recorded) and, as the last line, every request.
"""

from __future__ import annotations

from collections.abc import Sequence

from emelex.agent._errors import UnsupportedContent
from emelex.model import Message, VideoPart
from emelex.tools import ToolOutput

VIDEO_REFUSED = "video is refused: emelex has no bundled video decoder yet"


def video_index(messages: Sequence[Message]) -> int | None:
    """The index of the first message holding a video part, or ``None``."""
    for index, message in enumerate(messages):
        if any(isinstance(part, VideoPart) for part in message.content):
            return index
    return None


def refuse_video(messages: Sequence[Message], what: str) -> None:
    """Raise :class:`UnsupportedContent` when ``messages`` hold a video part."""
    index = video_index(messages)
    if index is not None:
        raise UnsupportedContent(f"{what}: message {index} holds a video part; {VIDEO_REFUSED}")


def without_video(name: str, output: ToolOutput) -> ToolOutput:
    """``output``, or an error result in its place when it holds a video part."""
    if any(isinstance(part, VideoPart) for part in output.content):
        return ToolOutput.error(f"tool {name!r} returned a video part; {VIDEO_REFUSED}")
    return output


__all__ = ["VIDEO_REFUSED", "refuse_video", "video_index", "without_video"]
