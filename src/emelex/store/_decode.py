"""Checked decoding of stored values, shared by every store (SQLite, PostgreSQL).

A value read back from a store is checked before it is used: a field of the wrong type
or malformed JSON raises :class:`StoreCorrupt` naming the session and the field, never a
``TypeError`` deep inside the Host.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import attrs

from emelex._errors import SerializationError
from emelex._text import clip
from emelex.model import Message, from_json
from emelex.store._errors import StoreCorrupt
from emelex.store._log import Position, RowFields, StoredCall, StoredEvent, StoredRow

TITLE_CHARACTERS = 200
#: The most rows (or events) one read returns.
MAX_PAGE_ROWS = 1000


@attrs.frozen
class SessionSummary:
    id: str
    created_at: float
    updated_at: float
    turns: int
    messages: int
    title: str


@attrs.frozen
class StoredSession:
    """A stored session: its authority snapshot (JSON), its configuration (JSON object
    chosen by the application) and every committed message in order."""

    id: str
    created_at: float
    updated_at: float
    authority: str
    config: dict[str, Any]
    turns: int
    messages: tuple[Message, ...]


def text_field(value: object, path: str, session_id: str, field: str) -> str:
    if not isinstance(value, str):
        raise StoreCorrupt(
            f"expected text, found {clip(repr(value), 60)}",
            path=path,
            session_id=session_id,
            field=field,
        )
    return value


def number_field(value: object, path: str, session_id: str, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise StoreCorrupt(
            f"expected a number, found {clip(repr(value), 60)}",
            path=path,
            session_id=session_id,
            field=field,
        )
    return float(value)


def count_field(value: object, path: str, session_id: str, field: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise StoreCorrupt(
            f"expected a count, found {clip(repr(value), 60)}",
            path=path,
            session_id=session_id,
            field=field,
        )
    return value


def json_object_field(value: object, path: str, session_id: str, field: str) -> dict[str, Any]:
    text = text_field(value, path, session_id, field)
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise StoreCorrupt(
            f"not valid JSON ({exc})", path=path, session_id=session_id, field=field
        ) from exc
    if not isinstance(data, dict):
        raise StoreCorrupt(
            f"expected a JSON object, found {type(data).__name__}",
            path=path,
            session_id=session_id,
            field=field,
        )
    return data


def calls_field(value: object, path: str, session_id: str, field: str) -> tuple[StoredCall, ...]:
    if value is None:
        return ()
    try:
        data = json.loads(text_field(value, path, session_id, field))
        return tuple(StoredCall(id=str(c[0]), name=str(c[1]), arguments=dict(c[2])) for c in data)
    except (ValueError, TypeError, IndexError, KeyError, RecursionError) as exc:
        raise StoreCorrupt(
            f"not a list of calls ({exc})", path=path, session_id=session_id, field=field
        ) from exc


def raise_bad_row(path: str, session_id: str, r: Any) -> None:
    """Name the first column of a ``_SELECT_PAGE`` row whose type is wrong."""
    field = f"rows[{r[0]},{r[1]}]"
    count_field(r[0], path, session_id, field)
    count_field(r[1], path, session_id, field)
    for index, name in ((2, "turn_id"), (3, "role"), (4, "body")):
        text_field(r[index], path, session_id, f"{field}.{name}")
    for index, name in ((5, "thinking"), (6, "tool_calls"), (7, "tool_call_id"), (8, "tool_name")):
        if r[index] is not None:
            text_field(r[index], path, session_id, f"{field}.{name}")
    raise StoreCorrupt("a value of unexpected type", path=path, session_id=session_id, field=field)


def row_field(r: Any) -> str:
    return f"rows[{r[0]},{r[1]}].tool_calls"


def session_title(messages: Sequence[Message]) -> str:
    for message in messages:
        if message.role == "user":
            # Bounded here; the command line shortens it for display at a word boundary.
            return " ".join(message.text.split())[:TITLE_CHARACTERS]
    return ""


def decode_row(path: str, session_id: str, r: Any) -> StoredRow:
    """A row selected with ``_SELECT_ROWS``'s columns, checked (shared by every store)."""
    field = f"rows[{r[0]},{r[1]}]"
    optional = [
        None if value is None else text_field(value, path, session_id, field)
        for value in (r[5], r[6], r[8])
    ]
    return StoredRow(
        position=Position(
            count_field(r[0], path, session_id, field), count_field(r[1], path, session_id, field)
        ),
        turn_id=text_field(r[2], path, session_id, field + ".turn_id"),
        fields=RowFields(
            role=text_field(r[3], path, session_id, field + ".role"),
            internal=bool(r[4]),
            tool_name=optional[0],
            tool_call_id=optional[1],
            body=text_field(r[7], path, session_id, field + ".body"),
            thinking=optional[2],
        ),
        tool_calls=calls_field(r[9], path, session_id, field + ".tool_calls"),
        message_json=text_field(r[10], path, session_id, field + ".message"),
    )


def decode_session(path: str, session_id: str, row: Any, bodies: Sequence[Any]) -> StoredSession:
    """A stored session from its ``sessions`` row (id, created_at, updated_at, authority,
    config, turns) and its rows' ``(source_sequence, item_index, message)``, checked."""
    authority = text_field(row[3], path, session_id, "authority")
    json_object_field(authority, path, session_id, "authority")
    messages = []
    for sequence, index, body in bodies:
        field = f"rows[{sequence},{index}].message"
        try:
            messages.append(from_json(text_field(body, path, session_id, field), Message))
        except SerializationError as exc:
            raise StoreCorrupt(str(exc), path=path, session_id=session_id, field=field) from exc
    return StoredSession(
        id=session_id,
        created_at=number_field(row[1], path, session_id, "created_at"),
        updated_at=number_field(row[2], path, session_id, "updated_at"),
        authority=authority,
        config=json_object_field(row[4], path, session_id, "config"),
        turns=count_field(row[5], path, session_id, "turns"),
        messages=tuple(messages),
    )


def decode_event(path: str, session_id: str, r: Any) -> StoredEvent:
    """A stored event from its ``(sequence, kind, turn_id, at, payload)`` columns, each
    checked (SQLite columns take any type; PostgreSQL's pass the same checks)."""
    field = f"events[sequence={r[0]}]"
    turn_id = r[2]
    if turn_id is not None:
        turn_id = text_field(turn_id, path, session_id, field + ".turn_id")
    return StoredEvent(
        sequence=count_field(r[0], path, session_id, field),
        kind=text_field(r[1], path, session_id, field + ".kind"),
        turn_id=turn_id,
        at=number_field(r[3], path, session_id, field + ".at"),
        payload=json_object_field(r[4], path, session_id, field + ".payload"),
    )
