"""AG-UI events from a Host's watch updates: a pure state machine (no Trio, no I/O).

One :class:`RunMapper` follows one invocation of one session for one AG-UI run: it is
fed the session's watch updates in order (:meth:`RunMapper.feed`) and answers the AG-UI
events (JSON objects, the protocol's camelCase) they mean. The driver (``_agui``) owns
the Host calls and the HTTP stream; everything the protocol decides lives here, so it is
tested without a Host (tests/service/test_agui_events.py).

What it maps (docs/service/ag-ui.md has the table): live drafts become text and
reasoning messages; committed rows close them and add tool calls and results; a pending
approval becomes the proposed call plus a call of the frontend tool ``emelex_approval``
that ends the run, for the user to answer; the queue and the pending interactions are
the AG-UI state (a snapshot, then JSON Patch deltas). Its state, less the AG-UI state
document, is the resume cursor (:meth:`RunMapper.cursor`): a run restored from it emits
nothing it already emitted.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from typing import Any, Final

import attrs

from emelex.contracts import (
    ContractError,
    DraftCleared,
    DraftUpdated,
    HistoryRow,
    Interaction,
    InteractionsChanged,
    Position,
    QueueChanged,
    QueueSnapshot,
    RowsPublished,
    WatchUpdate,
    to_wire,
)
from emelex.service._errors import InvalidRequest

#: The frontend tool an approval is asked through (docs/service/ag-ui.md).
APPROVAL_TOOL: Final = "emelex_approval"
#: The AG-UI protocol version these events follow.
PROTOCOL_VERSION: Final = "1.0"
#: A cursor longer than this is refused before it is decoded.
MAX_CURSOR_CHARS: Final = 16384
#: Steps a cursor remembers (the oldest are dropped first): one invocation's model
#: steps, each a few numbers.
MAX_TRACKED: Final = 128
#: Proposed calls and approvals a cursor remembers: only those of approvals asked and
#: not yet committed or resolved, so a few.
MAX_ASKED: Final = 32

Event = dict[str, Any]

_NOT_STARTED, _OPEN, _CLOSED = 0, 1, 2


@attrs.define
class _Step:
    """What the run did with one model step's draft: code points seen of its answer and
    reasoning, and whether each message is not started, open or closed."""

    number: int
    text: int = 0
    thinking: int = 0
    text_state: int = _NOT_STARTED
    thinking_state: int = _NOT_STARTED
    failed: bool = False
    #: Whether a committed row's answer (reasoning) was matched to this step: rows
    #: match the streamed steps in order, each step once.
    answered: bool = False
    thought: bool = False

    @property
    def flags(self) -> int:
        return int(self.failed) | int(self.answered) << 1 | int(self.thought) << 2


def _position_after(position: Position, cursor: Position | None) -> bool:
    if cursor is None:
        return True
    return (position.source_sequence, position.item_index) > (
        cursor.source_sequence,
        cursor.item_index,
    )


@attrs.define
class RunMapper:
    """The AG-UI events of one run that follows ``invocation_id`` of ``thread_id``.

    ``text`` is what the run sent (it identifies the turn's rows: the first user row
    with that text once the invocation runs), or None for a run that continues a known
    turn (``turn_id``, from its approval)."""

    thread_id: str
    run_id: str
    invocation_id: str
    text: str | None = None
    turn_id: str | None = None
    #: Rows at or before this position were seen (the watch's cursor).
    after: Position | None = None
    steps: list[_Step] = attrs.field(factory=list)
    calls: list[str] = attrs.field(factory=list)
    approvals: list[str] = attrs.field(factory=list)
    #: The invocation's outcome as its drafts' clearing named it.
    outcome: str | None = None
    #: The invocation's queue state as last seen: queued, running or gone.
    seen: str | None = None
    finished: bool = False
    # The AG-UI state last emitted and the newest one (not part of the cursor: a
    # resumed run starts with a snapshot).
    _state: dict[str, Any] | None = None
    _pending: dict[str, Any] = attrs.field(factory=lambda: {"queue": [], "interactions": []})

    # -- the run's frame -------------------------------------------------------------------
    def started(self) -> list[Event]:
        return [
            {
                "type": "RUN_STARTED",
                "threadId": self.thread_id,
                "runId": self.run_id,
                "protocolVersion": PROTOCOL_VERSION,
            }
        ]

    def failed(self, message: str, code: str) -> list[Event]:
        """The run ends in error (the Host refused or the watch ended)."""
        if self.finished:
            return []
        self.finished = True
        return [*self._close_all(), {"type": "RUN_ERROR", "message": message, "code": code}]

    def feed(self, update: WatchUpdate) -> list[Event]:
        """The events ``update`` means for this run (none once the run finished)."""
        if self.finished:
            return []
        if isinstance(update, QueueChanged):
            return self._queue(update.queue)
        if isinstance(update, InteractionsChanged):
            return self._interactions(update.pending)
        if isinstance(update, DraftUpdated):
            return self._with_state(self._draft(update))
        if isinstance(update, DraftCleared):
            return self._with_state(self._cleared(update))
        if isinstance(update, RowsPublished):
            return self._with_state(self._rows(update.rows))
        # A WatchEnded: the driver watches again from a lagged end's cursor.
        if update.reason == "lagged":
            return []
        return self.failed(f"the watch ended: {update.reason}", update.reason)

    # -- state: the queue and the pending interactions --------------------------------------
    def _with_state(self, events: list[Event]) -> list[Event]:
        """``events``, after the state changes they follow (state is sent only before
        other events, so intermediate queue states coalesce into one delta)."""
        if not events:
            return events
        return [*self._flush_state(), *events]

    def _flush_state(self) -> list[Event]:
        pending = self._pending
        if self._state is None:
            self._state = pending
            return [{"type": "STATE_SNAPSHOT", "snapshot": pending}]
        changed = [key for key in pending if pending[key] != self._state.get(key)]
        self._state = pending
        if not changed:
            return []
        delta = [{"op": "replace", "path": f"/{key}", "value": pending[key]} for key in changed]
        return [{"type": "STATE_DELTA", "delta": delta}]

    def observe(self, queue: QueueSnapshot) -> None:
        """Take ``queue`` as the state to send with the next events (a replay learns the
        queue first and is fed it after the rows it ended)."""
        self._pending = {**self._pending, "queue": [to_wire(e) for e in queue.entries]}

    def _queue(self, queue: QueueSnapshot) -> list[Event]:
        self.observe(queue)
        entry = next((e for e in queue.entries if e.invocation_id == self.invocation_id), None)
        if entry is not None:
            self.seen = entry.state
            return []
        self.seen = "gone"
        settled = next((s for s in queue.settled if s.invocation_id == self.invocation_id), None)
        outcome = settled.outcome if settled is not None else self.outcome
        return [*self._flush_state(), *self._close_all(), *self._finish(outcome)]

    def _finish(self, outcome: str | None) -> list[Event]:
        self.finished = True
        if outcome in ("failed", "interrupted"):
            message = f"the invocation {outcome}; the session's diagnostics say why"
            return [{"type": "RUN_ERROR", "message": message, "code": outcome}]
        done: Event = {"type": "RUN_FINISHED", "threadId": self.thread_id, "runId": self.run_id}
        if outcome == "stopped":
            done["outcome"] = {"type": "cancelled"}
        return [done]

    def _interactions(self, pending: Sequence[Interaction]) -> list[Event]:
        self._pending = {**self._pending, "interactions": [to_wire(i) for i in pending]}
        # A resolved interaction is never pending again: its id need not be kept.
        still = {i.id for i in pending}
        self.approvals = [a for a in self.approvals if a in still]
        mine = [i for i in pending if i.invocation_id == self.invocation_id]
        if not mine:
            return []
        events = [*self._flush_state(), *self._close_all()]
        asked: list[tuple[Interaction, bool]] = []
        for interaction in mine:
            self.turn_id = interaction.turn_id
            call = interaction.tool_call
            if call.id not in self.calls:
                _remember(self.calls, call.id)
                events += self._call(call.id, call.name, call.arguments)
            fresh = interaction.id not in self.approvals
            _remember(self.approvals, interaction.id)
            asked.append((interaction, fresh))
        self.finished = True
        # The resume cursor rides in the approval's arguments, which the client sends
        # back with its answer: the run that answers continues exactly from here.
        resume = self.cursor()
        for interaction, fresh in asked:
            if fresh:
                events += self._approval(interaction, resume)
        pending_ids = [interaction.id for interaction in mine]
        outcome = {"type": "success", "pendingToolCallIds": pending_ids}
        events.append(
            {
                "type": "RUN_FINISHED",
                "threadId": self.thread_id,
                "runId": self.run_id,
                "outcome": outcome,
            }
        )
        return events

    def _approval(self, interaction: Interaction, resume: str) -> list[Event]:
        call = interaction.tool_call
        arguments = {
            "interactionId": interaction.id,
            "toolCallId": call.id,
            "tool": call.name,
            "arguments": call.arguments,
            "reason": interaction.reason,
            "resume": resume,
        }
        return [
            {
                "type": "TOOL_CALL_START",
                "toolCallId": interaction.id,
                "toolCallName": APPROVAL_TOOL,
            },
            {"type": "TOOL_CALL_ARGS", "toolCallId": interaction.id, "delta": _json(arguments)},
            {"type": "TOOL_CALL_END", "toolCallId": interaction.id},
        ]

    # -- drafts: the answer and reasoning while they stream ---------------------------------
    def _step(self, number: int) -> tuple[_Step, bool]:
        for step in self.steps:
            if step.number == number:
                return step, False
        step = _Step(number)
        self.steps.append(step)
        del self.steps[:-MAX_TRACKED]
        return step, True

    def _draft(self, update: DraftUpdated) -> list[Event]:
        if update.invocation_id != self.invocation_id:
            return []
        known = max((s.number for s in self.steps), default=-1)
        step, new = self._step(update.step)
        events: list[Event] = []
        if new and update.step > known:
            events += self._close_all()  # a later step began: the earlier ones are done
        elif new:
            # An older step seen only now (a replay after a resume): track it silently.
            step.text_state = step.thinking_state = _CLOSED
        if update.thinking:
            events += self._reasoning_delta(step, update.thinking_offset, update.thinking)
        if update.text:
            events += self._answer_delta(step, update.text_offset, update.text)
        return events

    def _answer_delta(self, step: _Step, offset: int, text: str) -> list[Event]:
        fresh = text[max(0, step.text - offset) :]
        step.text = max(step.text, offset + len(text))
        if not fresh or step.text_state == _CLOSED:
            return []
        events = self._close_reasoning(step)
        message = f"{self.invocation_id}:{step.number}"
        if step.text_state == _NOT_STARTED:
            step.text_state = _OPEN
            events.append({"type": "TEXT_MESSAGE_START", "messageId": message, "role": "assistant"})
        events.append({"type": "TEXT_MESSAGE_CONTENT", "messageId": message, "delta": fresh})
        return events

    def _reasoning_delta(self, step: _Step, offset: int, text: str) -> list[Event]:
        fresh = text[max(0, step.thinking - offset) :]
        step.thinking = max(step.thinking, offset + len(text))
        if step.text_state != _NOT_STARTED and step.thinking_state == _NOT_STARTED:
            step.thinking_state = _CLOSED  # reasoning after the answer began is not interleaved
        if not fresh or step.thinking_state == _CLOSED:
            return []
        message = f"{self.invocation_id}:{step.number}:reasoning"
        events: list[Event] = []
        if step.thinking_state == _NOT_STARTED:
            step.thinking_state = _OPEN
            events += [
                {"type": "REASONING_START", "messageId": message},
                {"type": "REASONING_MESSAGE_START", "messageId": message, "role": "reasoning"},
            ]
        events.append({"type": "REASONING_MESSAGE_CONTENT", "messageId": message, "delta": fresh})
        return events

    def _close_reasoning(self, step: _Step) -> list[Event]:
        if step.thinking_state != _OPEN:
            return []
        step.thinking_state = _CLOSED
        message = f"{self.invocation_id}:{step.number}:reasoning"
        return [
            {"type": "REASONING_MESSAGE_END", "messageId": message},
            {"type": "REASONING_END", "messageId": message},
        ]

    def _close_text(self, step: _Step) -> list[Event]:
        if step.text_state != _OPEN:
            return []
        step.text_state = _CLOSED
        return [{"type": "TEXT_MESSAGE_END", "messageId": f"{self.invocation_id}:{step.number}"}]

    def _close_all(self) -> list[Event]:
        events: list[Event] = []
        for step in self.steps:
            events += self._close_reasoning(step)
            events += self._close_text(step)
        return events

    def _cleared(self, update: DraftCleared) -> list[Event]:
        if update.invocation_id != self.invocation_id:
            return []
        if update.step is None:
            self.outcome = update.reason
            return self._close_all()
        step, _ = self._step(update.step)
        step.failed = True  # its text will not commit: no row matches it
        return [*self._close_reasoning(step), *self._close_text(step)]

    # -- rows: what the turn committed -----------------------------------------------------
    def _rows(self, rows: Sequence[HistoryRow]) -> list[Event]:
        events: list[Event] = []
        for row in rows:
            if not _position_after(row.position, self.after):
                continue
            self.after = row.position
            if (
                self.turn_id is None
                and row.role == "user"
                and row.body == self.text
                and self.seen in ("running", "gone")
            ):
                self.turn_id = row.turn_id
            if row.turn_id != self.turn_id:
                continue
            if row.role == "assistant":
                events += self._assistant(row)
            elif row.role == "tool" and not row.internal and row.tool_call_id is not None:
                events += self._close_all()
                events.append(
                    {
                        "type": "TOOL_CALL_RESULT",
                        "messageId": f"{row.turn_id}:{_at(row.position)}",
                        "toolCallId": row.tool_call_id,
                        "content": row.body,
                        "role": "tool",
                    }
                )
        return events

    def _assistant(self, row: HistoryRow) -> list[Event]:
        events: list[Event] = []
        if row.thinking:
            step = next((s for s in self.steps if s.thinking and not (s.failed or s.thought)), None)
            if step is not None:
                step.thought = True
                message = f"{self.invocation_id}:{step.number}:reasoning"
                if step.thinking_state == _OPEN and len(row.thinking) > step.thinking:
                    rest = row.thinking[step.thinking :]
                    events.append(
                        {"type": "REASONING_MESSAGE_CONTENT", "messageId": message, "delta": rest}
                    )
                events += self._close_reasoning(step)
            else:
                events += self._close_all()
                events += _reasoning(f"{row.turn_id}:{_at(row.position)}:reasoning", row.thinking)
        if row.body:
            step = next((s for s in self.steps if s.text and not (s.failed or s.answered)), None)
            if step is not None:
                step.answered = True
                message = f"{self.invocation_id}:{step.number}"
                if step.text_state == _OPEN and len(row.body) > step.text:
                    rest = row.body[step.text :]
                    events.append(
                        {"type": "TEXT_MESSAGE_CONTENT", "messageId": message, "delta": rest}
                    )
                events += self._close_text(step)
            else:
                events += self._close_all()
                events += _answer(f"{row.turn_id}:{_at(row.position)}", row.body)
        for call in row.tool_calls:
            if call.id in self.calls:
                # Shown with its approval; a committed call is never seen again (the
                # row cursor moves past it), so the id need not be kept.
                self.calls.remove(call.id)
                continue
            events += self._close_all()
            events += self._call(call.id, call.name, call.arguments)
        return events

    def _call(self, call_id: str, name: str, arguments: dict[str, Any]) -> list[Event]:
        return [
            {"type": "TOOL_CALL_START", "toolCallId": call_id, "toolCallName": name},
            {"type": "TOOL_CALL_ARGS", "toolCallId": call_id, "delta": _json(arguments)},
            {"type": "TOOL_CALL_END", "toolCallId": call_id},
        ]

    # -- the cursor --------------------------------------------------------------------------
    def cursor(self) -> str:
        """The run's position, opaque to clients: restore it with :meth:`resume`."""
        value = {
            "v": 1,
            "inv": self.invocation_id,
            "turn": self.turn_id,
            "after": None
            if self.after is None
            else [self.after.source_sequence, self.after.item_index],
            "steps": [
                [s.number, s.text, s.thinking, s.text_state, s.thinking_state, s.flags]
                for s in self.steps
            ],
            "calls": self.calls,
            "approvals": self.approvals,
            "outcome": self.outcome,
            "seen": self.seen,
        }
        return base64.urlsafe_b64encode(_json(value).encode()).decode().rstrip("=")

    @classmethod
    def resume(cls, cursor: str, *, thread_id: str, run_id: str) -> RunMapper:
        """A mapper for a new run (``run_id``) that continues where ``cursor`` stood.
        Raises :class:`InvalidRequest` for a cursor this Host did not write."""
        value = _decode(cursor)
        try:
            after = value["after"]
            mapper = cls(
                thread_id=thread_id,
                run_id=run_id,
                invocation_id=_text(value["inv"]),
                turn_id=None if value["turn"] is None else _text(value["turn"]),
                after=None
                if after is None
                else Position(source_sequence=after[0], item_index=after[1]),
                steps=[_restored_step(item) for item in _items(value["steps"])],
                calls=[_text(c) for c in _items(value["calls"], MAX_ASKED)],
                approvals=[_text(a) for a in _items(value["approvals"], MAX_ASKED)],
                outcome=None if value["outcome"] is None else _text(value["outcome"]),
                seen=None if value["seen"] is None else _text(value["seen"]),
            )
        except (KeyError, IndexError, TypeError, ValueError, ContractError) as exc:
            raise InvalidRequest(f"not a cursor of this Host: {exc}") from None
        return mapper


def _remember(items: list[str], item: str) -> None:
    if item not in items:
        items.append(item)
        del items[:-MAX_ASKED]


def _at(position: Position) -> str:
    return f"{position.source_sequence}.{position.item_index}"


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _answer(message: str, text: str) -> list[Event]:
    return [
        {"type": "TEXT_MESSAGE_START", "messageId": message, "role": "assistant"},
        {"type": "TEXT_MESSAGE_CONTENT", "messageId": message, "delta": text},
        {"type": "TEXT_MESSAGE_END", "messageId": message},
    ]


def _reasoning(message: str, text: str) -> list[Event]:
    return [
        {"type": "REASONING_START", "messageId": message},
        {"type": "REASONING_MESSAGE_START", "messageId": message, "role": "reasoning"},
        {"type": "REASONING_MESSAGE_CONTENT", "messageId": message, "delta": text},
        {"type": "REASONING_MESSAGE_END", "messageId": message},
        {"type": "REASONING_END", "messageId": message},
    ]


def _decode(cursor: str) -> dict[str, Any]:
    if len(cursor) > MAX_CURSOR_CHARS:
        raise InvalidRequest(f"a cursor holds at most {MAX_CURSOR_CHARS} characters")
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        value = json.loads(raw)
    except (binascii.Error, ValueError) as exc:
        raise InvalidRequest(f"not a cursor of this Host: {exc}") from None
    if not isinstance(value, dict) or value.get("v") != 1:
        raise InvalidRequest("not a cursor of this Host")
    return value


def _text(value: Any) -> str:
    if not isinstance(value, str) or not value or len(value) > 256:
        raise ValueError("a cursor field is not a short string")
    return value


def _count(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ValueError("a cursor field is not a count")
    return value


def _items(value: Any, most: int = MAX_TRACKED) -> list[Any]:
    if not isinstance(value, list) or len(value) > most:
        raise ValueError("a cursor list is too long")
    return value


def _restored_step(item: Any) -> _Step:
    number, text, thinking, text_state, thinking_state, flags = item
    states = (_NOT_STARTED, _OPEN, _CLOSED)
    if text_state not in states or thinking_state not in states or flags not in range(8):
        raise ValueError("a cursor step is malformed")
    step = _Step(_count(number), _count(text), _count(thinking), text_state, thinking_state)
    step.failed, step.answered, step.thought = bool(flags & 1), bool(flags & 2), bool(flags & 4)
    return step
