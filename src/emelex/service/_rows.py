"""Store rows as the wire's history rows."""

from __future__ import annotations

from emelex.contracts import HistoryRow, Position, ToolCallInfo
from emelex.contracts import TurnId as WireTurnId
from emelex.store import Position as StorePosition
from emelex.store import StoredRow


def wire_position(position: StorePosition) -> Position:
    return Position(source_sequence=position.source_sequence, item_index=position.item_index)


def store_position(position: Position) -> StorePosition:
    return StorePosition(position.source_sequence, position.item_index)


def wire_row(row: StoredRow) -> HistoryRow:
    fields = row.fields
    return HistoryRow(
        position=wire_position(row.position),
        turn_id=WireTurnId(row.turn_id),
        role=fields.role,  # type: ignore[arg-type]
        body=fields.body,
        thinking=fields.thinking,
        tool_calls=tuple(
            ToolCallInfo(id=call.id, name=call.name, arguments=dict(call.arguments))
            for call in row.message.tool_calls
        ),
        tool_call_id=fields.tool_call_id,
        tool_name=fields.tool_name,
        internal=fields.internal,
    )
