"""History: rows addressed by position, raw event addresses, fenced pages and cursors."""

from __future__ import annotations

import json
from typing import Any, Literal

from emelex.contracts._errors import ContractError
from emelex.contracts._ids import SessionId, TurnId
from emelex.contracts._limits import (
    MAX_FIELD_CHARS,
    MAX_NAME_CHARS,
    MAX_PAGE_SIZE,
    MAX_SAFE_INTEGER,
)
from emelex.contracts._wire import count, items, ordered_wire, text, wire, wire_union

Role = Literal["system", "user", "assistant", "tool"]
#: The fields of a row a client can open: its body, its thinking, or one tool call's
#: arguments (with ``call``, the call's index in the row's ``toolCalls``).
RowField = Literal["body", "thinking", "toolArguments"]


def arguments_text(arguments: dict[str, Any]) -> str:
    """The canonical text of a tool call's arguments: the text search matches and its
    hits' offsets count in, and the one a source read of ``toolArguments`` returns.

    Compact JSON (no space after ``,`` or ``:``), keys in the order the call gave them,
    other than ASCII characters written as themselves. A client need not reproduce it:
    the source read returns it (a JavaScript ``JSON.stringify`` moves integer-like keys
    first, and other encoders escape differently)."""
    return json.dumps(arguments, ensure_ascii=False, separators=(",", ":"))


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
    """One field of one row (to open a search hit, or a hidden tool row by name).
    ``call`` names the tool call whose arguments ``toolArguments`` opens (its index in
    the row's ``toolCalls``); the other fields take no ``call``."""

    kind: Literal["row"] = "row"
    position: Position
    field: RowField
    call: int | None = count(maximum=MAX_PAGE_SIZE - 1, default=None)

    def __attrs_post_init__(self) -> None:
        check_call(self.field, self.call, "RowAddress")


def check_call(field: str, call: int | None, where: str) -> None:
    """``call`` is given exactly when ``field`` is a tool call's arguments."""
    if field == "toolArguments" and call is None:
        raise ContractError(f"{where}: toolArguments names its call (call is null)")
    if field != "toolArguments" and call is not None:
        raise ContractError(f"{where}: only toolArguments takes a call, not {field}")


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
    """What a :class:`HistoryReadRequest` found under the fence (rows is empty when none).

    For a row target, ``text`` is the exact text of the field it names (``thinking``
    null reads as empty; ``toolArguments`` as :func:`arguments_text`): a search hit's
    offsets count code points in it. Null for an event target, or when the row or the
    call does not exist under the fence."""

    through: int = count(maximum=MAX_SAFE_INTEGER)
    target: HistoryTarget
    rows: tuple[HistoryRow, ...] = items(max_items=MAX_PAGE_SIZE)
    text: str | None = text(max_len=MAX_FIELD_CHARS, default=None)
