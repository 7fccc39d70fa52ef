"""The PostgreSQL store's read statements, in psycopg's form and, for the Trio-thread
reader, as named prepared statements with ``$n`` placeholders."""

from __future__ import annotations

from typing import Final

SELECT_ROWS: Final = (
    "SELECT source_sequence, item_index, turn_id, role, internal, tool_name, tool_call_id,"
    " body, thinking, tool_calls, message FROM rows"
)


def page_query(include_internal: bool) -> str:
    """The one statement of a history page: the session's fence, then (joined laterally,
    NULLs when there are none) the rows of the keyset page under it. Parameters:
    ``(through or NULL, after_sequence, after_index, limit, session_id)``; no row at all
    means no such session. ``benchmarks/store.py`` runs this same SQL as its baseline."""
    return (
        "SELECT s.last_sequence, r.* FROM sessions s LEFT JOIN LATERAL ("
        + SELECT_ROWS
        + " WHERE rows.session_id=s.id"
        " AND source_sequence<=COALESCE(%s::bigint, s.last_sequence)"
        " AND (source_sequence, item_index) > (%s, %s)"
        + ("" if include_internal else " AND NOT internal")
        + " ORDER BY source_sequence, item_index LIMIT %s) r ON true WHERE s.id=%s"
    )


#: The page statements for the reader: (prepared name, SQL with $n placeholders) by
#: ``include_internal``.
NATIVE_PAGE: Final = {
    internal: (
        f"emelex_page_{int(internal)}".encode(),
        (page_query(internal) % ("$1", "$2", "$3", "$4", "$5")).encode(),
    )
    for internal in (False, True)
}
EVENTS_AFTER: Final = (
    "SELECT sequence, kind, turn_id, at, payload FROM events"
    " WHERE session_id=%s AND sequence>%s ORDER BY sequence LIMIT %s"
)
NATIVE_EVENTS_AFTER: Final = (
    b"emelex_events_after",
    (EVENTS_AFTER % ("$1", "$2", "$3")).encode(),
)
