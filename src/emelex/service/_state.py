"""Small helpers the operation modules share (a session's state lives in _reducer and
_session)."""

from __future__ import annotations

import uuid
from typing import Final

from emelex.contracts import (
    Interaction,
    OperationReceipt,
    Position,
    Resolution,
    from_wire,
    to_wire,
)

SESSION_NAMESPACE: Final = uuid.UUID("5f0c1c3e-8a43-4f55-9b53-2f7b8f0e6a10")


def fork_session_id(session_id: str, operation: str) -> str:
    """A fork's session id follows from its source and operation, so a retry finds it."""
    return "s-" + uuid.uuid5(SESSION_NAMESPACE, f"fork\0{session_id}\0{operation}").hex


def rows_after(cursor: Position | None, newest: Position | None) -> bool:
    """Whether rows exist after ``cursor`` (``newest`` is the newest row's position)."""
    if newest is None:
        return False
    if cursor is None:
        return True
    return (cursor.source_sequence, cursor.item_index) < (
        newest.source_sequence,
        newest.item_index,
    )


def resolved_interaction(interaction: Interaction, resolution: Resolution) -> Interaction:
    wire = to_wire(interaction)
    wire.update(state="resolved", resolution=to_wire(resolution))
    return from_wire(Interaction, wire)


def operation_receipt(
    operation: str, action: str, session_id: str, sequence: int
) -> OperationReceipt:
    return from_wire(
        OperationReceipt,
        {
            "operation": operation,
            "action": action,
            "sessionId": session_id,
            "sequence": sequence,
        },
    )
