"""One append on PostgreSQL: the shared append plan carried out in one transaction.

The session's row lock orders appends from every Host; a lease holder's write commits
only while its token is current; an operation's reference is claimed by insert before
anything is appended (``ON CONFLICT``), so two Hosts retrying one request cannot both
append it. Each table gets one batched statement.
"""

from __future__ import annotations

import time

from emelex.store._append_plan import AppendPlan, EncodedAppend, plan_append, replayed_operation
from emelex.store._decode import count_field
from emelex.store._errors import LeaseLost, SessionNotFound
from emelex.store._lease import Lease
from emelex.store._log import AppendResult, OperationRecord, ToolNames
from emelex.store.postgres._connection import Db
from emelex.store.postgres._schema import CHANNEL


def append_planned(
    db: Db,
    path: str,
    session_id: str,
    encoded: EncodedAppend,
    operation: OperationRecord | None,
    lease: Lease | None,
) -> AppendResult:
    # The session's row lock orders every append of this session, on every Host.
    row = db.execute(
        "SELECT last_sequence FROM sessions WHERE id=%s FOR NO KEY UPDATE", (session_id,)
    ).fetchone()
    if row is None:
        raise SessionNotFound(f"no stored session {session_id}")
    last = count_field(row[0], path, session_id, "sessions.last_sequence")
    if lease is not None:
        # A share lock: a Host taking the session over waits for this commit.
        held = db.execute(
            "SELECT 1 FROM leases WHERE session_id=%s AND holder=%s AND token=%s FOR SHARE",
            (session_id, lease.holder, lease.token),
        ).fetchone()
        if held is None:
            raise LeaseLost(session_id, lease.token)
    if operation is not None:
        replayed = _record_operation(db, path, session_id, operation, last)
        if replayed is not None:
            return replayed
    now = time.time()
    plan = plan_append(last, encoded, _tool_names(db, session_id, encoded))
    _insert_plan(db, session_id, plan, now)
    db.execute(
        "UPDATE sessions SET updated_at=%s, turns=turns+%s, last_sequence=%s,"
        " title=CASE WHEN title='' THEN %s ELSE title END WHERE id=%s",
        (now, encoded.settled, plan.newest, encoded.title, session_id),
    )
    if plan.events:
        # Delivered at commit, to every Host listening; only a wake-up, never data.
        db.execute("SELECT pg_notify(%s, %s)", (CHANNEL, f"{session_id}:{plan.newest}"))
    receipt = None if operation is None else operation.receipt
    return AppendResult(sequences=plan.sequences, receipt=receipt, replayed=False)


def _record_operation(
    db: Db, path: str, session_id: str, operation: OperationRecord, last: int
) -> AppendResult | None:
    """Store ``operation``'s receipt, or the answer to its retry when its reference is
    taken (insert first: two Hosts racing on one reference cannot both append)."""
    inserted = db.execute(
        "INSERT INTO operations (session_id, reference, digest, sequence, receipt)"
        " VALUES (%s, %s, %s, %s, %s) ON CONFLICT (session_id, reference) DO NOTHING"
        " RETURNING 1",
        (session_id, operation.reference, operation.digest, last, operation.receipt),
    ).fetchone()
    if inserted is not None:
        return None
    used = db.execute(
        "SELECT digest, receipt FROM operations WHERE session_id=%s AND reference=%s",
        (session_id, operation.reference),
    ).fetchone()
    assert used is not None  # the conflicting row is committed and never deleted
    return replayed_operation(operation, used[0], used[1], path=path, session_id=session_id)


def _tool_names(db: Db, session_id: str, encoded: EncodedAppend) -> ToolNames:
    """Tool names of the calls this append answers but an earlier append proposed."""
    names = ToolNames()
    answered = encoded.answered_elsewhere()
    if answered:
        found = db.execute(
            "SELECT call_id, tool_name FROM calls WHERE session_id=%s AND call_id = ANY(%s)",
            (session_id, answered),
        ).fetchall()
        for call_id, tool_name in found:
            names.remember(str(call_id), str(tool_name))
    return names


def _insert_plan(db: Db, session_id: str, plan: AppendPlan, now: float) -> None:
    """The plan's events, rows and call names, one batched statement per table."""
    events = [
        (session_id, sequence, event.kind, event.turn_id, now, payload)
        for sequence, event, payload in plan.events
    ]
    rows = [
        (
            session_id,
            r.sequence,
            r.index,
            r.turn_id,
            r.fields.role,
            r.fields.internal,
            r.fields.tool_name,
            r.fields.tool_call_id,
            r.fields.body,
            r.fields.thinking,
            r.calls,
            r.message,
        )
        for r in plan.rows
    ]
    calls = [(session_id, call_id, name) for r in plan.rows for call_id, name in r.call_names]
    with db.cursor() as cursor:
        if events:
            cursor.executemany(
                "INSERT INTO events (session_id, sequence, kind, turn_id, at, payload)"
                " VALUES (%s, %s, %s, %s, %s, %s)",
                events,
            )
        if rows:
            cursor.executemany(
                "INSERT INTO rows (session_id, source_sequence, item_index, turn_id, role,"
                " internal, tool_name, tool_call_id, body, thinking, tool_calls, message)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                rows,
            )
        if calls:
            cursor.executemany(
                "INSERT INTO calls (session_id, call_id, tool_name) VALUES (%s, %s, %s)"
                " ON CONFLICT DO NOTHING",
                calls,
            )
