"""History pages on SQLite: the page statement and the checked decoding of its rows.

A page is the session's fence and the rows under it read in one snapshot (the caller
holds the read transaction). SQLite columns take any type and people edit stores by
hand, so every value is checked; the usual shape is checked in one expression and only a
row that fails it goes through the checks that name the bad field (pages decode up to a
thousand rows, and this keeps a page within a small factor of the bare query).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import Any, Final, TypeVar

from emelex._builders import positional_builder
from emelex.store._decode import calls_field, decode_row, raise_bad_row, row_field
from emelex.store._errors import SessionNotFound
from emelex.store._log import Position, RowFields, StoredRow

R = TypeVar("R")

#: The page columns, in the order of ``history_page_as``'s builder.
SELECT_PAGE: Final = (
    "SELECT source_sequence, item_index, turn_id, role, body, thinking, tool_calls,"
    " tool_call_id, tool_name, internal FROM rows"
)
#: The columns of a whole stored row (:func:`stored_row`).
SELECT_ROWS: Final = (
    "SELECT source_sequence, item_index, turn_id, role, internal, tool_name, tool_call_id,"
    " body, thinking, tool_calls, message FROM rows"
)
_TEXT_OR_NULL: Final = frozenset({str, type(None)})

_position = positional_builder(Position)
_row_fields = positional_builder(RowFields)
_stored_row = positional_builder(StoredRow)


def fence_and_rows(
    db: sqlite3.Connection,
    select: str,
    session_id: str,
    through: int | None,
    start: Position,
    include_internal: bool,
    limit: int,
) -> tuple[Any, list[Any]]:
    """The session's fence (``through``, or its newest sequence) and up to ``limit + 1``
    rows after ``start`` under it (one more than asked: it tells whether more remain)."""
    row = db.execute("SELECT last_sequence FROM sessions WHERE id=?", (session_id,)).fetchone()
    if row is None:
        raise SessionNotFound(f"no stored session {session_id}")
    fence = row[0] if through is None else through
    rows = db.execute(
        select + " WHERE session_id=? AND source_sequence<=?"
        " AND (source_sequence, item_index) > (?, ?)"
        + ("" if include_internal else " AND internal=0")
        + " ORDER BY source_sequence, item_index LIMIT ?",
        (session_id, fence, start.source_sequence, start.item_index, limit + 1),
    ).fetchall()
    return fence, rows


def built_rows(path: str, session_id: str, rows: list[Any], build: Callable[..., R]) -> list[R]:
    """``build(...)`` of each row of :data:`SELECT_PAGE`, its values checked first."""
    built = []
    for r in rows:
        sequence, index, turn_id, role, body, thinking, calls, call_id, tool_name, internal = r
        if not (
            int is type(sequence) is type(index)
            and str is type(turn_id) is type(role) is type(body)
            and type(thinking) in _TEXT_OR_NULL
            and type(calls) in _TEXT_OR_NULL
            and type(call_id) in _TEXT_OR_NULL
            and type(tool_name) in _TEXT_OR_NULL
            and sequence >= 0
            and index >= 0
        ):
            raise_bad_row(path, session_id, r)
        built.append(
            build(
                sequence,
                index,
                turn_id,
                role,
                body,
                thinking,
                () if calls is None else calls_field(calls, path, session_id, row_field(r)),
                call_id,
                tool_name,
                internal != 0,
            )
        )
    return built


def stored_row(path: str, session_id: str, r: Any) -> StoredRow:
    """A checked :class:`StoredRow` from the columns of :data:`SELECT_ROWS`."""
    # Pages decode up to a thousand rows: check the usual shape in one expression,
    # and only a row that fails it goes through the checks that name the bad field.
    (sequence, index, turn_id, role, internal, tool_name, call_id, body, thinking) = r[:9]
    if not (
        type(sequence) is int
        and type(index) is int
        and sequence >= 0
        and index >= 0
        and type(turn_id) is str
        and type(role) is str
        and type(body) is str
        and type(r[10]) is str
        and (tool_name is None or type(tool_name) is str)
        and (call_id is None or type(call_id) is str)
        and (thinking is None or type(thinking) is str)
    ):
        return decode_row(path, session_id, r)
    calls = r[9]
    return _stored_row(
        _position(sequence, index),
        turn_id,
        _row_fields(role, body, thinking, tool_name, call_id, internal != 0),
        () if calls is None else calls_field(calls, path, session_id, row_field(r)),
        r[10],
    )
