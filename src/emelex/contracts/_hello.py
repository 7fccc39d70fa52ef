"""The first message of a connection: which wire version each side speaks."""

from __future__ import annotations

from emelex.contracts._limits import MAX_NAME_CHARS
from emelex.contracts._wire import count, text, wire


@wire
class Hello:
    """Sent by both sides; a Host refuses a version it does not speak
    (``unsupportedWireVersion``)."""

    wire_version: int = count(minimum=1, maximum=1_000_000)
    software: str = text(max_len=MAX_NAME_CHARS)
