"""One append on SQLite: the shared append plan carried out in the writer's transaction.

The caller holds ``BEGIN IMMEDIATE`` (one writer), so reading the session's last sequence
and then appending after it cannot race; a retried operation is answered from its stored
receipt before anything is written. Rows also feed the search blocks in the same
transaction, so a committed row is always searchable.
"""

from __future__ import annotations

import sqlite3
import time

from emelex.store._append_plan import EncodedAppend, plan_append, replayed_operation
from emelex.store._decode import count_field
from emelex.store._errors import SessionNotFound
from emelex.store._log import AppendResult, OperationRecord, ToolNames
from emelex.store._schema import INSERT_EVENT, insert_row, search_entry
from emelex.store._search import append_to_blocks


def append_planned(
    db: sqlite3.Connection,
    path: str,
    session_id: str,
    encoded: EncodedAppend,
    operation: OperationRecord | None,
) -> AppendResult:
    row = db.execute("SELECT last_sequence FROM sessions WHERE id=?", (session_id,)).fetchone()
    if row is None:
        raise SessionNotFound(f"no stored session {session_id}")
    last = count_field(row[0], path, session_id, "sessions.last_sequence")
    if operation is not None:
        used = db.execute(
            "SELECT digest, receipt FROM operations WHERE session_id=? AND reference=?",
            (session_id, operation.reference),
        ).fetchone()
        if used is not None:
            return replayed_operation(operation, used[0], used[1], path=path, session_id=session_id)
    now = time.time()
    plan = plan_append(last, encoded, _tool_names(db, session_id, encoded))
    db.executemany(
        INSERT_EVENT,
        [
            (session_id, sequence, event.kind, event.turn_id, now, payload)
            for sequence, event, payload in plan.events
        ],
    )
    searchable: list[tuple[int, int, tuple[list[int], str]]] = []
    for planned in plan.rows:
        insert_row(db, session_id, planned)
        entry = search_entry(planned)
        if entry is not None:
            searchable.append((planned.sequence, planned.index, entry))
    append_to_blocks(db, session_id, searchable)
    db.execute(
        "UPDATE sessions SET updated_at=?, turns=turns+?, last_sequence=?,"
        " title=CASE WHEN title='' THEN ? ELSE title END WHERE id=?",
        (now, encoded.settled, plan.newest, encoded.title, session_id),
    )
    receipt: str | None = None
    if operation is not None:
        db.execute(
            "INSERT INTO operations (session_id, reference, digest, sequence, receipt)"
            " VALUES (?, ?, ?, ?, ?)",
            (session_id, operation.reference, operation.digest, last, operation.receipt),
        )
        receipt = operation.receipt
    return AppendResult(sequences=plan.sequences, receipt=receipt, replayed=False)


def _tool_names(db: sqlite3.Connection, session_id: str, encoded: EncodedAppend) -> ToolNames:
    """Tool names of the calls this append answers but an earlier append proposed."""
    names = ToolNames()
    for call_id in encoded.answered_elsewhere():
        found = db.execute(
            "SELECT tool_name FROM calls WHERE session_id=? AND call_id=?",
            (session_id, call_id),
        ).fetchone()
        if found is not None and isinstance(found[0], str):
            names.remember(call_id, found[0])
    return names
