"""The ``datetime`` tool: the current time in RFC 3339 at a fixed UTC offset."""

from __future__ import annotations

import datetime as _dt
import math
import re
import time
from collections.abc import Callable, Mapping
from typing import Any

from emelex.model import ToolDefinition
from emelex.tools._protocol import ToolCancellationPolicy, ToolInvocation, ToolOutput
from emelex.tools.builtin._common import object_schema

#: ``Z`` or ``±HH:MM`` (hours 00-23, minutes 00-59); ``-00:00`` (RFC 3339's "offset
#: unknown") is refused because the tool always knows the offset it applies.
OFFSET_PATTERN = (
    r"^(?:Z|\+(?:[01][0-9]|2[0-3]):[0-5][0-9]"
    r"|-(?:(?:0[1-9]|1[0-9]|2[0-3]):[0-5][0-9]|00:(?:0[1-9]|[1-5][0-9])))$"
)
_OFFSET = re.compile(OFFSET_PATTERN)

Clock = Callable[[], float]
"""Seconds since the Unix epoch (``time.time`` by default)."""


def parse_offset(text: str) -> _dt.timezone:
    """The fixed-offset zone for ``Z`` or ``±HH:MM``; ``ValueError`` otherwise."""
    if not _OFFSET.fullmatch(text):
        raise ValueError(f"invalid UTC offset {text!r}: use Z or ±HH:MM, e.g. +05:30")
    if text == "Z":
        return _dt.UTC
    sign = 1 if text[0] == "+" else -1
    delta = _dt.timedelta(hours=int(text[1:3]), minutes=int(text[4:6]))
    return _dt.timezone(sign * delta)


def rfc3339(seconds: float, zone: _dt.timezone, *, zulu: bool = False) -> str:
    """``seconds`` since the epoch as ``YYYY-MM-DDTHH:MM:SS±HH:MM`` (or ``...Z``)."""
    moment = _dt.datetime.fromtimestamp(math.floor(seconds), zone)
    text = moment.isoformat(timespec="seconds")
    return text[:-6] + "Z" if zulu else text


class DateTimeTool:
    """``datetime {utc_offset}``: runs without approval (it only reads the clock)."""

    name = "datetime"
    authority_identity: Mapping[str, str] = {}

    def __init__(self, clock: Clock = time.time) -> None:
        self._clock = clock
        self._definition = ToolDefinition(
            self.name,
            "Return the current date and time as an RFC 3339 timestamp at the given fixed "
            "UTC offset, e.g. 2026-11-05T14:03:07+05:30 for utc_offset '+05:30' or "
            "...T08:33:07Z for 'Z'.",
            object_schema(
                {
                    "utc_offset": {
                        "type": "string",
                        "pattern": OFFSET_PATTERN,
                        "description": "'Z' for UTC, or ±HH:MM such as '+05:30', '-08:00'.",
                    }
                },
                ["utc_offset"],
            ),
        )

    @property
    def definition(self) -> ToolDefinition:
        return self._definition

    @property
    def cancellation_policy(self) -> ToolCancellationPolicy:
        return ToolCancellationPolicy.INTERRUPTIBLE

    def approval_reason(self, arguments: Mapping[str, Any]) -> str | None:
        return None

    async def invoke(self, invocation: ToolInvocation) -> ToolOutput:
        offset = invocation.arguments["utc_offset"]
        try:
            zone = parse_offset(offset)
            now = float(self._clock())
            return ToolOutput(rfc3339(now, zone, zulu=offset == "Z"))
        except (ValueError, OverflowError, OSError) as exc:
            return ToolOutput.error(f"datetime: {exc}")
