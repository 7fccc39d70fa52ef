"""Source reads: open one target of a session's history under a fixed fence.

A target is one field of one row (a search hit's row, to show the hit in place: the
result carries that field's exact text, so the hit's offsets apply to it; an internal
tool row is opened when it is named this way, and only that row) or a raw event
(the rows it published, hidden rows left out). Nothing past the fence is read, so a
client that pinned a fence sees the same answer however the session has grown since.
"""

from __future__ import annotations

from emelex.contracts import (
    MAX_PAGE_SIZE,
    EventAddress,
    HistoryReadResult,
    HistoryRow,
    HistoryTarget,
    RowAddress,
    arguments_text,
)
from emelex.service._rows import store_position, wire_row
from emelex.store import Position as StorePosition
from emelex.store import Store


async def read_target(
    store: Store, session_id: str, target: HistoryTarget, fence: int
) -> HistoryReadResult:
    """What ``target`` holds under ``fence`` (no rows when it lies past the fence or
    names nothing)."""
    if isinstance(target, RowAddress):
        row = await store.read_row(session_id, store_position(target.position), through=fence)
        if row is None:
            return HistoryReadResult(through=fence, target=target, rows=())
        found = wire_row(row)
        return HistoryReadResult(
            through=fence, target=target, rows=(found,), text=field_text(found, target)
        )
    assert isinstance(target, EventAddress)
    rows = await _event_rows(store, session_id, target.sequence, fence)
    return HistoryReadResult(through=fence, target=target, rows=rows)


def field_text(row: HistoryRow, target: RowAddress) -> str | None:
    """The exact text of the field ``target`` names in ``row`` (the text a search hit's
    offsets count in), or None when the row has no such call."""
    if target.field == "body":
        return row.body
    if target.field == "thinking":
        return row.thinking or ""
    assert target.call is not None  # RowAddress checks it
    if target.call >= len(row.tool_calls):
        return None
    return arguments_text(row.tool_calls[target.call].arguments)


async def _event_rows(
    store: Store, session_id: str, sequence: int, fence: int
) -> tuple[HistoryRow, ...]:
    if not 1 <= sequence <= fence:
        return ()
    # Rows after (sequence, -1) under the fence ``sequence``: exactly that event's rows.
    page = await store.history_page(
        session_id, through=sequence, after=StorePosition(sequence, -1), limit=MAX_PAGE_SIZE
    )
    return tuple(wire_row(row) for row in page.rows)
