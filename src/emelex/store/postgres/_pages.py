"""History pages on PostgreSQL: the rows of one page statement, decoded.

The schema fixes every column's type (bigint, text, boolean; NOT NULL where SQLite takes
anything), so rows are built without re-checking those; the calls' JSON is checked, and
the message when it is decoded. Each row is the page statement's (see ``_queries.py``):
the fence first, then the columns of ``SELECT_ROWS``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, TypeVar

from emelex._builders import flat_builder
from emelex.store._decode import calls_field
from emelex.store._log import Position, RowFields, StoredRow

R = TypeVar("R")

#: A page's StoredRow with its Position and RowFields, in one call.
_page_row: Final = flat_builder(StoredRow, position=Position, fields=RowFields)


def stored_rows(path: str, session_id: str, rows: list[Any]) -> tuple[StoredRow, ...]:
    """The page's rows as :class:`StoredRow` values."""
    decoded: list[StoredRow] = []
    append = decoded.append
    for row in rows:
        _, sequence, index, turn_id, role, internal, name, call_id, body, thinking = row[:10]
        calls = row[10]
        if calls is not None:
            calls = calls_field(calls, path, session_id, _calls_field(row))
        append(
            _page_row(
                sequence,
                index,
                turn_id,
                role,
                body,
                thinking,
                name,
                call_id,
                internal,
                calls or (),
                row[11],
            )
        )
    return tuple(decoded)


def built_rows(path: str, session_id: str, rows: list[Any], build: Callable[..., R]) -> list[R]:
    """``build(...)`` of each page row, in the order of ``history_page_as``'s builder."""
    built = []
    for row in rows:
        _, sequence, index, turn_id, role, internal, name, call_id, body, thinking = row[:10]
        calls = row[10]
        if calls is not None:
            calls = calls_field(calls, path, session_id, _calls_field(row))
        built.append(
            build(
                sequence, index, turn_id, role, body, thinking, calls or (), call_id, name, internal
            )
        )
    return built


def _calls_field(row: Any) -> str:
    """The field a page row's tool calls are named by in a :class:`StoreCorrupt`."""
    return f"rows[{row[1]},{row[2]}].tool_calls"
