"""The pure AG-UI mapping (``_agui_events.RunMapper``): watch updates in, AG-UI events
out, without a Host. The served Host and the real client are tests/service/test_agui.py."""

from __future__ import annotations

import json
from typing import Any

import pytest

from emelex.contracts import (
    DraftCleared,
    DraftUpdated,
    HistoryRow,
    Interaction,
    InteractionId,
    InteractionsChanged,
    InvocationId,
    OperationRef,
    Position,
    QueueChanged,
    QueueEntry,
    QueueSnapshot,
    RowsPublished,
    SessionId,
    SettledInvocation,
    ToolCallInfo,
    TurnId,
    WatchEnded,
    WatchUpdate,
)
from emelex.service._errors import InvalidRequest
from emelex.service.transport._agui_events import (
    APPROVAL_TOOL,
    MAX_ASKED,
    MAX_CURSOR_CHARS,
    MAX_TRACKED,
    RunMapper,
)

SESSION = SessionId("s-1")
INVOCATION = InvocationId("inv-1")
TURN = TurnId("turn-1")
CALL = "call-1"
ASK = InteractionId("ask-1")
OPERATION = OperationRef("op")


def _mapper(**options: Any) -> RunMapper:
    return RunMapper(SESSION, "run-1", INVOCATION, text="Note milk.", **options)


def _queue(state: str | None, *, settled: str | None = None, revision: int = 1) -> QueueChanged:
    entries: tuple[QueueEntry, ...] = ()
    if state is not None:
        entry = QueueEntry(
            invocation_id=INVOCATION,
            operation=OPERATION,
            work="send",
            state=state,  # type: ignore[arg-type]
            admitted_sequence=2,
        )
        entries = (entry,)
    gone: tuple[SettledInvocation, ...] = ()
    if settled is not None:
        gone = (
            SettledInvocation(
                invocation_id=INVOCATION,
                operation=OPERATION,
                work="send",
                text="Note milk.",
                text_clipped=False,
                outcome=settled,  # type: ignore[arg-type]
                started=True,
                finished_sequence=9,
                stop_operation=None,
                finished_at_ms=None,
            ),
        )
    snapshot = QueueSnapshot(session_id=SESSION, revision=revision, entries=entries, settled=gone)
    return QueueChanged(queue=snapshot)


def _asked(ask: str = ASK, call: str = CALL) -> Interaction:
    return Interaction(
        id=InteractionId(ask),
        session_id=SESSION,
        invocation_id=INVOCATION,
        turn_id=TURN,
        tool_call=ToolCallInfo(id=call, name="note", arguments={"text": "milk"}),
        reason="note milk?",
        state="pending",
        requested_sequence=4,
        resolution=None,
    )


def _row(sequence: int, index: int, role: str, body: str = "", **fields: Any) -> HistoryRow:
    values: dict[str, Any] = {
        "thinking": None,
        "tool_calls": (),
        "tool_call_id": None,
        "tool_name": None,
        "internal": False,
        "turn_id": TURN,
    }
    values.update(fields)
    position = Position(source_sequence=sequence, item_index=index)
    return HistoryRow(position=position, role=role, body=body, **values)  # type: ignore[arg-type]


def _rows(*rows: HistoryRow) -> RowsPublished:
    return RowsPublished(through=rows[-1].position.source_sequence, rows=rows, next_after=None)


def _turn_rows() -> RowsPublished:
    called = (ToolCallInfo(id=CALL, name="note", arguments={"text": "milk"}),)
    return _rows(
        _row(10, 0, "user", "Note milk."),
        _row(11, 0, "assistant", "", tool_calls=called),
        _row(12, 0, "tool", "noted milk", tool_call_id=CALL, tool_name="note"),
        _row(13, 0, "assistant", "Done.", thinking="Noted."),
    )


def _draft(step: int, text: str = "", offset: int = 0, thinking: str = "", at: int = 0) -> Any:
    return DraftUpdated(
        invocation_id=INVOCATION,
        step=step,
        text_offset=offset,
        text=text,
        thinking_offset=at,
        thinking=thinking,
    )


def _kinds(events: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in events]


def _feed(mapper: RunMapper, *updates: WatchUpdate) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for update in updates:
        events += mapper.feed(update)
    return events


def test_a_streamed_answer_is_closed_by_its_rows_and_the_run_by_the_queue() -> None:
    mapper = _mapper()
    events = mapper.started() + _feed(
        mapper,
        _queue("queued"),
        InteractionsChanged(pending=()),
        _queue("running", revision=2),
        _draft(0, thinking="Not"),
        _draft(0, thinking="ed.", at=3, text="Do"),
        _draft(0, text="ne.", offset=2),
        _rows(
            _row(10, 0, "user", "Note milk."), _row(11, 0, "assistant", "Done.", thinking="Noted.")
        ),
        DraftCleared(invocation_id=INVOCATION, step=None, reason="completed"),
        _queue(None, revision=3),
    )
    assert _kinds(events) == [
        "RUN_STARTED",
        "STATE_SNAPSHOT",  # only the newest state goes out, before the first content
        "REASONING_START",
        "REASONING_MESSAGE_START",
        "REASONING_MESSAGE_CONTENT",
        "REASONING_MESSAGE_CONTENT",
        "REASONING_MESSAGE_END",  # the answer began: the reasoning is done
        "REASONING_END",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",  # the committed row closes it; nothing is sent twice
        "STATE_DELTA",
        "RUN_FINISHED",
    ]
    assert events[1]["snapshot"]["queue"][0]["state"] == "running"
    answer = [e["delta"] for e in events if e["type"] == "TEXT_MESSAGE_CONTENT"]
    assert answer == ["Do", "ne."]
    assert events[-2]["delta"] == [{"op": "replace", "path": "/queue", "value": []}]
    assert mapper.turn_id == TURN and mapper.finished
    assert mapper.feed(_queue("running")) == []  # nothing after the end


def test_an_approval_ends_the_run_with_a_frontend_tool_call_and_its_answer_resumes() -> None:
    mapper = _mapper()
    _feed(mapper, _queue("running"))
    events = _feed(mapper, InteractionsChanged(pending=(_asked(),)))
    assert _kinds(events) == [
        "STATE_SNAPSHOT",
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "RUN_FINISHED",
    ]
    assert events[1] == {"type": "TOOL_CALL_START", "toolCallId": CALL, "toolCallName": "note"}
    assert events[4]["toolCallName"] == APPROVAL_TOOL and events[4]["toolCallId"] == ASK
    arguments = json.loads(events[5]["delta"])
    assert arguments["tool"] == "note" and arguments["arguments"] == {"text": "milk"}
    assert events[-1]["outcome"] == {"type": "success", "pendingToolCallIds": [ASK]}

    # The answering run resumes from the cursor the approval carried.
    resumed = RunMapper.resume(arguments["resume"], thread_id=SESSION, run_id="run-2")
    assert (resumed.invocation_id, resumed.turn_id, resumed.calls) == (INVOCATION, TURN, [CALL])
    after = _feed(
        resumed,
        _queue("running"),
        InteractionsChanged(pending=()),
        _draft(1, text="Done."),
        _turn_rows(),
        _queue(None),
    )
    assert _kinds(after) == [
        "STATE_SNAPSHOT",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",  # messages never interleave with a tool call's events
        "TOOL_CALL_RESULT",
        # the reasoning never streamed: it comes from the row, whole
        "REASONING_START",
        "REASONING_MESSAGE_START",
        "REASONING_MESSAGE_CONTENT",
        "REASONING_MESSAGE_END",
        "REASONING_END",
        "STATE_DELTA",
        "RUN_FINISHED",
    ]
    result = next(e for e in after if e["type"] == "TOOL_CALL_RESULT")
    assert (result["toolCallId"], result["content"]) == (CALL, "noted milk")


def test_a_resumed_run_skips_what_the_cursor_says_was_sent() -> None:
    mapper = _mapper()
    _feed(mapper, _queue("running"), _draft(0, text="Done "))
    resumed = RunMapper.resume(mapper.cursor(), thread_id=SESSION, run_id="run-1")
    # A new watch replays the running draft from offset 0, then its later deltas.
    events = _feed(resumed, _queue("running"), _draft(0, text="Done "), _draft(0, "and dusted.", 5))
    assert _kinds(events) == ["STATE_SNAPSHOT", "TEXT_MESSAGE_CONTENT"]
    assert events[1]["delta"] == "and dusted."
    # A coalesced replay that overlaps sends only the new code points.
    assert _feed(resumed, _draft(0, "dusted. Really.", 9))[0]["delta"] == " Really."


def test_rows_without_drafts_become_whole_messages_and_other_turns_are_ignored() -> None:
    mapper = _mapper()
    other = _rows(
        _row(5, 0, "user", "Something else.", turn_id="turn-0"),
        _row(6, 0, "assistant", "Other answer.", turn_id="turn-0"),
    )
    events = _feed(mapper, _queue("queued"), other, _queue("running"), _turn_rows(), _queue(None))
    assert _kinds(events) == [
        "STATE_SNAPSHOT",
        "TOOL_CALL_START",
        "TOOL_CALL_ARGS",
        "TOOL_CALL_END",
        "TOOL_CALL_RESULT",
        "REASONING_START",
        "REASONING_MESSAGE_START",
        "REASONING_MESSAGE_CONTENT",
        "REASONING_MESSAGE_END",
        "REASONING_END",
        "TEXT_MESSAGE_START",
        "TEXT_MESSAGE_CONTENT",
        "TEXT_MESSAGE_END",
        "STATE_DELTA",
        "RUN_FINISHED",
    ]
    assert "Other answer." not in json.dumps(events)
    assert events[11]["messageId"] == f"{TURN}:13.0"
    # Rows already seen are not mapped again (the watch's catch-up overlaps).
    again = _mapper(turn_id=TURN, after=Position(source_sequence=13, item_index=0))
    assert _feed(again, _queue("running"), _turn_rows()) == []


@pytest.mark.parametrize(
    ("settled", "expected"),
    [
        ("stopped", {"type": "RUN_FINISHED", "outcome": {"type": "cancelled"}}),
        ("failed", {"type": "RUN_ERROR", "code": "failed"}),
        ("interrupted", {"type": "RUN_ERROR", "code": "interrupted"}),
    ],
)
def test_an_invocation_that_committed_nothing_ends_the_run_by_its_outcome(
    settled: str, expected: dict[str, Any]
) -> None:
    mapper = _mapper()
    events = _feed(mapper, _queue("running"), _draft(0, text="Work"), _queue(None, settled=settled))
    assert _kinds(events)[-2:] == ["TEXT_MESSAGE_END", expected["type"]]
    assert expected.items() <= events[-1].items()


def test_a_failed_step_closes_its_message_and_matches_no_row() -> None:
    mapper = _mapper()
    events = _feed(
        mapper,
        _queue("running"),
        _draft(0, text="Broken"),
        DraftCleared(invocation_id=INVOCATION, step=0, reason="failed"),
        _draft(1, text="Done."),
        _rows(_row(10, 0, "user", "Note milk."), _row(11, 0, "assistant", "Done.")),
    )
    ends = [e["messageId"] for e in events if e["type"] == "TEXT_MESSAGE_END"]
    assert ends == [f"{INVOCATION}:0", f"{INVOCATION}:1"]
    assert _kinds(events).count("TEXT_MESSAGE_START") == 2  # no third message from the row


def test_other_invocations_and_a_closed_watch() -> None:
    mapper = _mapper()
    stranger = DraftUpdated(
        invocation_id=InvocationId("inv-2"),
        step=0,
        text_offset=0,
        text="x",
        thinking_offset=0,
        thinking="",
    )
    assert _feed(mapper, _queue("running"), stranger) == []
    events = mapper.feed(WatchEnded(reason="lagged", resume_after=None))
    assert events == [] and not mapper.finished  # the driver watches again
    events = mapper.feed(WatchEnded(reason="closed", resume_after=None))
    assert events == [{"type": "RUN_ERROR", "message": "the watch ended: closed", "code": "closed"}]


@pytest.mark.parametrize("cursor", ["", "not base64 !", "e30", "x" * 9000])
def test_a_cursor_the_host_did_not_write_is_refused(cursor: str) -> None:
    with pytest.raises(InvalidRequest):
        RunMapper.resume(cursor, thread_id=SESSION, run_id="run-1")


def test_a_long_invocation_keeps_its_cursor_bounded() -> None:
    mapper = _mapper()
    _feed(mapper, _queue("running"))
    for step in range(1000):
        _feed(mapper, _draft(step, text="x" * 4096, thinking="y" * 4096))
    for ask in range(100):
        pending = _asked(f"ask-{ask:03}-{'z' * 100}", f"call-{ask:03}-{'z' * 100}")
        mapper.finished = False
        _feed(mapper, InteractionsChanged(pending=(pending,)))
    cursor = mapper.cursor()
    assert len(cursor) <= MAX_CURSOR_CHARS
    resumed = RunMapper.resume(cursor, thread_id=SESSION, run_id="run-2")
    assert [s.number for s in resumed.steps] == list(range(1000 - MAX_TRACKED, 1000))
    assert len(resumed.calls) == MAX_ASKED and resumed.approvals == [pending.id]


def test_the_cursor_round_trips() -> None:
    mapper = _mapper()
    _feed(mapper, _queue("running"), _draft(0, text="Hi", thinking="Hm"), _turn_rows())
    resumed = RunMapper.resume(mapper.cursor(), thread_id=SESSION, run_id="run-1")
    assert resumed.cursor() == mapper.cursor()
    assert (resumed.after, resumed.steps, resumed.seen) == (mapper.after, mapper.steps, "running")
