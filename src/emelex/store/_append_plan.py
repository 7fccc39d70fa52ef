"""The append plan both stores execute: what one append writes, decided without I/O.

An append turns new events into a numbered run of event rows, the history rows they
publish (with each tool result's tool name) and the call names later results will need,
and it settles a retried operation by its digest. Those decisions are the same on SQLite
and PostgreSQL; only the SQL that carries them out differs, so they live here once and
each store keeps just its statements (placeholders, locks, batching, search indexing).
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import attrs

from emelex.model import Message, to_json
from emelex.store._decode import session_title, text_field
from emelex.store._errors import OperationConflict
from emelex.store._log import (
    TURN_SETTLED,
    AppendResult,
    NewEvent,
    OperationRecord,
    RowFields,
    ToolNames,
)


@attrs.frozen
class EncodedAppend:
    """New events with their payloads as JSON text, encoded before the transaction opens
    (so the writer holds its lock only for the statements)."""

    events: tuple[tuple[NewEvent, str], ...]
    settled: int  # how many of the events settle a turn
    title: str  # the session's title if it has none yet ('' when the events name none)

    @classmethod
    def of(cls, events: Sequence[NewEvent]) -> EncodedAppend:
        return cls(
            events=tuple((event, json.dumps(event.payload)) for event in events),
            settled=sum(1 for event in events if event.kind == TURN_SETTLED),
            title=session_title([row for event in events for row in event.rows]),
        )

    @classmethod
    def untitled(cls, events: Sequence[NewEvent]) -> EncodedAppend:
        """Events that settle no turn and title nothing: a new session's first events, a
        patch's announcement."""
        return attrs.evolve(cls.of(events), settled=0, title="")

    def answered_elsewhere(self) -> list[str]:
        """Call ids this append's tool results answer that an earlier append proposed:
        the store looks their tool names up (sorted, so lookups are deterministic)."""
        proposed = {
            call.id for event, _ in self.events for m in event.rows for call in m.tool_calls
        }
        return sorted(
            {
                m.tool_call_id
                for event, _ in self.events
                for m in event.rows
                if m.tool_call_id is not None and m.tool_call_id not in proposed
            }
        )


@attrs.frozen
class PlannedRow:
    """One history row an event publishes, with everything its table row holds."""

    sequence: int
    index: int
    turn_id: str
    fields: RowFields
    calls: str | None  # the proposed calls as ``[[id, name, arguments], ...]`` JSON
    message: str  # the whole message as JSON
    call_names: tuple[tuple[str, str], ...]  # (call id, tool name) of the calls it proposes


@attrs.frozen
class AppendPlan:
    """Numbered events and rows of one append after ``last``."""

    last: int
    events: tuple[tuple[int, NewEvent, str], ...]  # (sequence, event, payload JSON)
    rows: tuple[PlannedRow, ...]

    @property
    def sequences(self) -> tuple[int, ...]:
        return tuple(sequence for sequence, _, _ in self.events)

    @property
    def newest(self) -> int:
        return self.last + len(self.events)


def calls_json(message: Message) -> str | None:
    """The proposed calls as ``[[id, name, arguments], ...]`` (None without calls), so
    pages and searches need not decode the whole message."""
    if not message.tool_calls:
        return None
    return json.dumps([[c.id, c.name, c.arguments] for c in message.tool_calls])


def planned_row(
    sequence: int,
    index: int,
    turn_id: str,
    message: Message,
    names: ToolNames,
    *,
    internal: bool = False,
) -> PlannedRow:
    """The table row of one message (remembering the names of the calls it proposes)."""
    return PlannedRow(
        sequence=sequence,
        index=index,
        turn_id=turn_id,
        fields=names.row_fields(message, internal=internal),
        calls=calls_json(message),
        message=to_json(message),
        call_names=tuple((call.id, call.name) for call in message.tool_calls),
    )


def plan_append(last: int, encoded: EncodedAppend, names: ToolNames) -> AppendPlan:
    """Number ``encoded``'s events after ``last`` and lay out the rows they publish."""
    events = []
    rows = []
    for offset, (event, payload) in enumerate(encoded.events, start=1):
        sequence = last + offset
        events.append((sequence, event, payload))
        for index, message in enumerate(event.rows):
            rows.append(planned_row(sequence, index, event.turn_id or "", message, names))
    return AppendPlan(last=last, events=tuple(events), rows=tuple(rows))


def replayed_operation(
    operation: OperationRecord,
    used_digest: object,
    used_receipt: object,
    *,
    path: str,
    session_id: str,
) -> AppendResult:
    """The answer to an operation whose reference is already stored: its original receipt
    when the digests agree (nothing is appended), else :class:`OperationConflict`."""
    if used_digest != operation.digest:
        raise OperationConflict(session_id, operation.reference)
    original = text_field(used_receipt, path, session_id, "operations.receipt")
    return AppendResult(sequences=(), receipt=original, replayed=True)
