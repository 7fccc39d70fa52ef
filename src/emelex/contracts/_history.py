"""History: rows addressed by position, raw event addresses, fenced pages and cursors."""

from __future__ import annotations

from typing import Any, Literal

from emelex.contracts._ids import SessionId, TurnId
from emelex.contracts._limits import (
    MAX_FIELD_CHARS,
    MAX_NAME_CHARS,
    MAX_PAGE_SIZE,
    MAX_SAFE_INTEGER,
)
from emelex.contracts._wire import count, items, ordered_wire, text, wire, wire_union

Role = Literal["system", "user", "assistant", "tool"]
#: The fields of a row a client can open; search hits may name more (see SearchHit).
RowField = Literal["body", "thinking"]


@ordered_wire
class Position:
    """A history row: the event that published it, then its ordinal within that event.

    Positions order rows; cursors (``nextAfter``) are positions and are exclusive.
    """

    source_sequence: int = count(maximum=MAX_SAFE_INTEGER)
    item_index: int = count(maximum=MAX_SAFE_INTEGER)


@wire
class EventAddress:
    """A raw host event, by its sequence in the session's event log."""

    kind: Literal["event"] = "event"
    sequence: int = count(maximum=MAX_SAFE_INTEGER)


@wire
class RowAddress:
    """One field of one row (to open a search hit, or a hidden tool row by name)."""

    kind: Literal["row"] = "row"
    position: Position
    field: RowField


HistoryTarget = EventAddress | RowAddress
wire_union("HistoryTarget", HistoryTarget)


@wire
class ToolCallInfo:
    """A tool call an assistant row proposed."""

    id: str = text(min_len=1, max_len=MAX_NAME_CHARS)
    name: str = text(min_len=1, max_len=MAX_NAME_CHARS)
    arguments: dict[str, Any]


@wire
class HistoryRow:
    """One row of a session's history, derived from the event that published it.

    ``internal`` rows (tool rows of harness-internal tools) are hidden from pages but can be
    opened explicitly by position.
    """

    position: Position
    turn_id: TurnId
    role: Role
    body: str = text(max_len=MAX_FIELD_CHARS)
    thinking: str | None = text(max_len=MAX_FIELD_CHARS)
    tool_calls: tuple[ToolCallInfo, ...] = items(max_items=MAX_PAGE_SIZE)
    tool_call_id: str | None = text(max_len=MAX_NAME_CHARS)
    tool_name: str | None = text(max_len=MAX_NAME_CHARS)
    internal: bool


@wire
class HistoryPageRequest:
    """Read rows after ``after`` (exclusive; null starts at the beginning) under ``through``.

    ``through`` null pins the page to the newest event; pass the returned fence back
    unchanged while following ``nextAfter``.
    """

    session_id: SessionId
    through: int | None = count(maximum=MAX_SAFE_INTEGER)
    after: Position | None
    limit: int = count(minimum=1, maximum=MAX_PAGE_SIZE)


@wire
class HistoryPage:
    """A bounded page; ``nextAfter`` null means no row remains under the fence."""

    session_id: SessionId
    through: int = count(maximum=MAX_SAFE_INTEGER)
    rows: tuple[HistoryRow, ...] = items(max_items=MAX_PAGE_SIZE)
    next_after: Position | None


@wire
class HistoryReadRequest:
    """Open one target (a row field, or the rows a raw event published) under a fence."""

    session_id: SessionId
    through: int | None = count(maximum=MAX_SAFE_INTEGER)
    target: HistoryTarget


@wire
class HistoryReadResult:
    """What a :class:`HistoryReadRequest` found under the fence (rows is empty when none)."""

    through: int = count(maximum=MAX_SAFE_INTEGER)
    target: HistoryTarget
    rows: tuple[HistoryRow, ...] = items(max_items=MAX_PAGE_SIZE)
