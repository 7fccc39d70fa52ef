"""The session event log, as values: what a committed turn appends, and the rows it publishes.

Pure and I/O-free. A session's log is a sequence of events numbered from 1. An event may
publish history rows; a row is addressed by its *position*: the sequence of the event that
published it, then its ordinal within that event. A model completion publishes all of its
rows at its own event, so rows of one completion share a source sequence.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final, Literal

import attrs

from emelex.model import Message, from_json

#: Event kinds a committed turn appends, in log order.
TURN_INPUT: Final = "turn.input"
MODEL_COMPLETION: Final = "model.completion"
TOOL_RESULT: Final = "tool.result"
TURN_SETTLED: Final = "turn.settled"

#: How a turn ended, as recorded in its settling event.
Outcome = Literal["committed", "checkpointed", "rolled_back"]
OUTCOMES: Final = frozenset({"committed", "checkpointed", "rolled_back"})


@attrs.frozen(weakref_slot=False)  # fast builders (emelex._builders)
class Position:
    """Where a row sits: the publishing event's sequence, then the row's ordinal in it."""

    source_sequence: int
    item_index: int


@attrs.frozen
class NewEvent:
    """An event to append; ``rows`` are the history rows it publishes (may be empty)."""

    kind: str
    turn_id: str | None
    payload: dict[str, Any] = attrs.field(factory=dict)
    rows: tuple[Message, ...] = ()


@attrs.frozen(weakref_slot=False)  # fast builders (emelex._builders)
class RowFields:
    """What a stored row keeps beside the message itself (searchable and filterable)."""

    role: str
    body: str
    thinking: str | None
    tool_name: str | None
    tool_call_id: str | None
    internal: bool


@attrs.frozen
class StoredCall:
    """A tool call an assistant row proposed."""

    id: str
    name: str
    arguments: dict[str, Any]


@attrs.frozen(weakref_slot=False)  # fast builders (emelex._builders)
class StoredRow:
    """One history row read back from the log. The full message is decoded only when
    asked for (:meth:`message`): pages and searches need just the fields."""

    position: Position
    turn_id: str
    fields: RowFields
    tool_calls: tuple[StoredCall, ...]
    message_json: str = attrs.field(repr=False)

    def message(self) -> Message:
        """The stored message (raises ``SerializationError`` when it does not decode)."""
        return from_json(self.message_json, Message)


@attrs.frozen
class RowPage:
    """Rows after a cursor under a fixed fence; ``next_after`` is None when none remain."""

    through: int
    rows: tuple[StoredRow, ...]
    next_after: Position | None


@attrs.frozen
class StoredEvent:
    """One event read back from the log (its rows are read separately, by position)."""

    sequence: int
    kind: str
    turn_id: str | None
    at: float
    payload: dict[str, Any]


@attrs.frozen
class OperationRecord:
    """A caller-chosen operation reference, the digest of the request it named, and the
    receipt (JSON text) to hand back when the same operation is retried."""

    reference: str
    digest: str
    receipt: str


@attrs.frozen
class AppendResult:
    """The sequences an append used, or, when ``replayed``, none: the operation was
    already applied and ``receipt`` is the original one."""

    sequences: tuple[int, ...]
    receipt: str | None
    replayed: bool


def turn_events(
    turn_id: str, messages: Sequence[Message], *, outcome: Outcome = "committed"
) -> list[NewEvent]:
    """The events one settled turn appends: its input, each completion, each tool result,
    then a settling event that records the outcome (and publishes no row).

    Consecutive user/system messages form one input event; each assistant message is a
    completion; each tool message is a result.
    """
    if outcome not in OUTCOMES:
        raise ValueError(f"unknown turn outcome {outcome!r}")
    events: list[NewEvent] = []
    pending_input: list[Message] = []

    def flush_input() -> None:
        if pending_input:
            events.append(NewEvent(TURN_INPUT, turn_id, rows=tuple(pending_input)))
            pending_input.clear()

    for message in messages:
        if message.role in ("user", "system"):
            pending_input.append(message)
            continue
        flush_input()
        kind = MODEL_COMPLETION if message.role == "assistant" else TOOL_RESULT
        events.append(NewEvent(kind, turn_id, rows=(message,)))
    flush_input()
    events.append(NewEvent(TURN_SETTLED, turn_id, {"outcome": outcome, "rows": len(messages)}))
    return events


class ToolNames:
    """Remembers the tool name of each proposed call id, so a tool row can say which
    tool it answers (a tool message only carries the call id)."""

    _LIMIT: Final = 4096

    def __init__(self) -> None:
        self._names: dict[str, str] = {}

    def remember(self, call_id: str, name: str) -> None:
        if len(self._names) >= self._LIMIT:
            # Bounded: the oldest names go first; a round never has this many calls.
            self._names.pop(next(iter(self._names)))
        self._names[call_id] = name

    def row_fields(self, message: Message, *, internal: bool = False) -> RowFields:
        for call in message.tool_calls:
            self.remember(call.id, call.name)
        tool_name = None
        if message.tool_call_id is not None:
            tool_name = self._names.get(message.tool_call_id)
        return RowFields(
            role=message.role,
            body=message.text,
            thinking=message.reasoning,
            tool_name=tool_name,
            tool_call_id=message.tool_call_id,
            internal=internal,
        )
