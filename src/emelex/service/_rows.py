"""Store rows as the wire's history rows.

Rows come from the Host's own store, whose every value was checked on the way in (and
whose types are checked again on the way out, see ``emelex.store``), so they are built
with :func:`emelex.contracts.trusted`: the construction checks cost more than the read.
"""

from __future__ import annotations

from collections.abc import Iterable

from emelex._builders import positional_builder
from emelex.contracts import HistoryRow, Position, ToolCallInfo, trusted
from emelex.model import ToolCall
from emelex.store import Position as StorePosition
from emelex.store import StoredCall, StoredRow

_position = positional_builder(Position)
_history_row = positional_builder(HistoryRow)


def wire_position(position: StorePosition) -> Position:
    return _position(position.source_sequence, position.item_index)


def store_position(position: Position) -> StorePosition:
    return StorePosition(position.source_sequence, position.item_index)


def wire_row(row: StoredRow) -> HistoryRow:
    fields = row.fields
    position = row.position
    calls = row.tool_calls
    return _history_row(
        _position(position.source_sequence, position.item_index),
        row.turn_id,
        fields.role,
        fields.body,
        fields.thinking,
        tuple(_call_info(call) for call in calls) if calls else (),
        fields.tool_call_id,
        fields.tool_name,
        fields.internal,
    )


def page_row(
    source_sequence: int,
    item_index: int,
    turn_id: str,
    role: str,
    body: str,
    thinking: str | None,
    calls: tuple[StoredCall, ...],
    tool_call_id: str | None,
    tool_name: str | None,
    internal: bool,
) -> HistoryRow:
    """A wire row from the checked values of ``SqliteStore.history_page_as``."""
    return _history_row(
        _position(source_sequence, item_index),
        turn_id,
        role,
        body,
        thinking,
        tuple(_call_info(call) for call in calls) if calls else (),
        tool_call_id,
        tool_name,
        internal,
    )


def _call_info(call: StoredCall | ToolCall) -> ToolCallInfo:
    return trusted(ToolCallInfo, id=call.id, name=call.name, arguments=call.arguments)


def history_row(
    *,
    position: Position,
    turn_id: str,
    role: str,
    body: str,
    thinking: str | None,
    calls: Iterable[StoredCall | ToolCall],
    tool_call_id: str | None,
    tool_name: str | None,
    internal: bool,
) -> HistoryRow:
    """A wire row from the Host's own checked values (no construction checks)."""
    return trusted(
        HistoryRow,
        position=position,
        turn_id=turn_id,
        role=role,
        body=body,
        thinking=thinking,
        tool_calls=tuple(
            trusted(ToolCallInfo, id=call.id, name=call.name, arguments=call.arguments)
            for call in calls
        ),
        tool_call_id=tool_call_id,
        tool_name=tool_name,
        internal=internal,
    )
