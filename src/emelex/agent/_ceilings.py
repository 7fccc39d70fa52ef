"""Aggregate resource ceilings and request measurement.

Every complete request is measured before any model sees it. Sizes are UTF-8 bytes:
text (message text and reasoning), media (encoded image/audio/video data), schema
(tool declarations as compact JSON), metadata (ids, names, roles, mime types) and
tool arguments (compact JSON of every tool call's arguments).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence

import attrs

from emelex.agent._errors import CeilingExceeded
from emelex.agent._fitting import fit_rounds
from emelex.model import Message, TextPart, ToolDefinition

KiB = 1024
MiB = 1024 * KiB


def _positive(_instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{attribute.name} must be a positive integer, got {value!r}")


@attrs.frozen
class ResourceCeilings:
    """Upper bounds on one complete generation request (defaults in parentheses).

    ``max_messages`` (4,096), ``max_message_bytes`` of text and reasoning (16 MiB),
    ``max_media_bytes`` (32 MiB), ``max_schema_bytes`` of tool declarations (1 MiB),
    ``max_metadata_bytes`` of ids, names and mime types (1 MiB), and
    ``max_tool_argument_bytes`` of tool-call arguments (4 MiB).
    """

    max_messages: int = attrs.field(default=4_096, validator=_positive)
    max_message_bytes: int = attrs.field(default=16 * MiB, validator=_positive)
    max_media_bytes: int = attrs.field(default=32 * MiB, validator=_positive)
    max_schema_bytes: int = attrs.field(default=1 * MiB, validator=_positive)
    max_metadata_bytes: int = attrs.field(default=1 * MiB, validator=_positive)
    max_tool_argument_bytes: int = attrs.field(default=4 * MiB, validator=_positive)


@attrs.frozen
class RequestSize:
    messages: int = 0
    message_bytes: int = 0
    media_bytes: int = 0
    metadata_bytes: int = 0
    tool_argument_bytes: int = 0

    def __add__(self, other: RequestSize) -> RequestSize:
        return RequestSize(
            self.messages + other.messages,
            self.message_bytes + other.message_bytes,
            self.media_bytes + other.media_bytes,
            self.metadata_bytes + other.metadata_bytes,
            self.tool_argument_bytes + other.tool_argument_bytes,
        )

    def __sub__(self, other: RequestSize) -> RequestSize:
        return RequestSize(
            self.messages - other.messages,
            self.message_bytes - other.message_bytes,
            self.media_bytes - other.media_bytes,
            self.metadata_bytes - other.metadata_bytes,
            self.tool_argument_bytes - other.tool_argument_bytes,
        )


def utf8_len(text: str) -> int:
    """Encoded size of ``text`` (lone surrogates counted, never raising)."""
    # ASCII fast path: len() equals the encoded size.
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


_utf8 = utf8_len


def measure_message(message: Message) -> RequestSize:
    text = 0
    media = 0
    metadata = len(message.role)
    for part in message.content:
        if isinstance(part, TextPart):
            text += _utf8(part.text)
        else:
            media += len(part.data)
            metadata += len(part.mime_type)
    if message.reasoning:
        text += _utf8(message.reasoning)
    arguments = 0
    for call in message.tool_calls:
        metadata += _utf8(call.id) + _utf8(call.name)
        arguments += argument_bytes(call.arguments)
    if message.tool_call_id is not None:
        metadata += _utf8(message.tool_call_id)
    return RequestSize(1, text, media, metadata, arguments)


def argument_bytes(arguments: object) -> int:
    """Size of arguments as compact JSON (ASCII-escaped, as they are measured in a
    request). Raises TypeError or ValueError for values json cannot encode: the turn
    core refuses those before measuring, and resumed history is checked at build."""
    return len(json.dumps(arguments, separators=(",", ":")))


def measure_messages(messages: Iterable[Message]) -> RequestSize:
    total = RequestSize()
    for message in messages:
        total = total + measure_message(message)
    return total


def schema_bytes(tool: ToolDefinition) -> int:
    encoded = json.dumps(
        {"name": tool.name, "description": tool.description, "parameters": tool.parameters},
        separators=(",", ":"),
        sort_keys=True,
    )
    return _utf8(encoded)


def first_excess(
    size: RequestSize, schemas: int, ceilings: ResourceCeilings
) -> tuple[str, int, int] | None:
    """``(ceiling, maximum, actual)`` of the first ceiling ``size`` exceeds, or None."""
    checks = (
        ("max_messages", ceilings.max_messages, size.messages),
        ("max_message_bytes", ceilings.max_message_bytes, size.message_bytes),
        ("max_media_bytes", ceilings.max_media_bytes, size.media_bytes),
        ("max_schema_bytes", ceilings.max_schema_bytes, schemas),
        ("max_metadata_bytes", ceilings.max_metadata_bytes, size.metadata_bytes),
        ("max_tool_argument_bytes", ceilings.max_tool_argument_bytes, size.tool_argument_bytes),
    )
    for name, maximum, actual in checks:
        if actual > maximum:
            return name, maximum, actual
    return None


def check_request(size: RequestSize, schemas: int, ceilings: ResourceCeilings) -> None:
    """Raise :class:`CeilingExceeded` naming the first ceiling ``size`` exceeds."""
    excess = first_excess(size, schemas, ceilings)
    if excess is not None:
        raise CeilingExceeded(*excess)


def fit_to_ceilings(
    messages: tuple[Message, ...],
    size: RequestSize,
    schemas: int,
    ceilings: ResourceCeilings,
    costs: Callable[[], Sequence[RequestSize]] | None = None,
) -> tuple[Message, ...]:
    """``messages`` (whose total is ``size``) fitted under ``ceilings``: the same tuple
    when they fit, else with earlier turns and then earlier rounds of the current turn
    left out of the request (committed history is never changed). Tool declarations
    are never left out. Raises :class:`CeilingExceeded` when the system prompt, the
    current user message and the latest round do not fit on their own. ``costs``
    gives each message's size when the caller already knows them."""
    excess = first_excess(RequestSize(), schemas, ceilings)
    if excess is not None:
        raise CeilingExceeded(*excess)
    if first_excess(size, 0, ceilings) is None:
        return messages
    each = costs() if costs is not None else [measure_message(m) for m in messages]
    fitted = fit_rounds(
        messages, each, size, lambda total: first_excess(total, 0, ceilings) is None
    )
    if not fitted.fits:
        check_request(fitted.total, schemas, ceilings)
    return fitted.messages
