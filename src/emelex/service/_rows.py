"""Store rows as the wire's history rows.

Rows come from the Host's own store, whose every value was checked on the way in (and
whose types are checked again on the way out, see ``emelex.store``), so they are built
with :func:`emelex.contracts.trusted`: the construction checks cost more than the read.
"""

from __future__ import annotations

from collections.abc import Iterable

from emelex.contracts import HistoryRow, Position, ToolCallInfo, trusted
from emelex.model import ToolCall
from emelex.store import Position as StorePosition
from emelex.store import StoredCall, StoredRow


def wire_position(position: StorePosition) -> Position:
    return trusted(
        Position, source_sequence=position.source_sequence, item_index=position.item_index
    )


def store_position(position: Position) -> StorePosition:
    return StorePosition(position.source_sequence, position.item_index)


def wire_row(row: StoredRow) -> HistoryRow:
    fields = row.fields
    return history_row(
        position=wire_position(row.position),
        turn_id=row.turn_id,
        role=fields.role,
        body=fields.body,
        thinking=fields.thinking,
        calls=row.tool_calls,
        tool_call_id=fields.tool_call_id,
        tool_name=fields.tool_name,
        internal=fields.internal,
    )


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
