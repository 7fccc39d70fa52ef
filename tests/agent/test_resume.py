"""Resuming a turn from its progress record: what was done stays done, a call that may
have started keeps its "interrupted" result, the rest of the batch runs once, and the
turn goes on with the next model round."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from emelex.agent import (
    AgentSessionBuilder,
    InvalidTurnProgress,
    ProgressJournal,
    ToolJournalFailed,
    TurnProgress,
)
from emelex.agent._progress import resume_point
from emelex.agent._turn_rules import INTERRUPTED, NOT_EXECUTED
from emelex.model import Message, ToolCall
from emelex.testing import Call, Say, ScriptedApprovals, ScriptedModel, ScriptedTool

Make = Callable[..., AgentSessionBuilder]


class Lost(Exception):
    """Stands for the process dying right after its progress became durable."""


def recorder(records: list[TurnProgress], lose_at: int | None) -> ProgressJournal:
    async def journal(progress: TurnProgress) -> None:
        records.append(progress)
        if lose_at is not None and len(records) == lose_at:
            raise Lost("the process is gone")

    return journal


def tools_texts(messages: tuple[Message, ...]) -> list[str]:
    return [m.text for m in messages if m.role == "tool"]


async def test_a_turn_lost_at_its_approval_resumes_there_and_asks_the_model_nothing_again(
    make_builder: Make,
) -> None:
    records: list[TurnProgress] = []
    first_a, first_b = ScriptedTool("a"), ScriptedTool("b", approval="writes")
    model = ScriptedModel([[Call("a", {}), Call("b", {})], [Say("never")]])
    builder = (
        make_builder(model)
        .tool(first_a)
        .tool(first_b)
        .approval_policy(ScriptedApprovals([True]))
        .progress_journal(recorder(records, lose_at=2))  # 1: before a, 2: before b's approval
    )
    with builder.build() as session, pytest.raises(ToolJournalFailed):
        await session.run("go")
    assert first_a.started and not first_b.started
    progress = TurnProgress.from_wire(records[-1].to_wire())  # what a host stored
    assert progress == records[-1]
    b_call = progress.messages[1].tool_calls[1].id
    assert progress.open_calls == {b_call}
    assert progress.may_have_run is True and progress.rounds == 1

    # Another process: same (empty) history, the rest of the script, a fresh approver.
    again_a, again_b = ScriptedTool("a"), ScriptedTool("b", approval="writes")
    approvals = ScriptedApprovals([True])
    later = ScriptedModel([[Say("all done")]])
    builder = make_builder(later).tool(again_a).tool(again_b).approval_policy(approvals)
    with builder.build() as session:
        turn = await session.resume(progress)
    assert turn.turn_id == progress.turn_id
    assert again_a.started == [] and again_b.started == [b_call]
    assert [context.call.id for context in approvals.asked] == [b_call]
    assert len(later.requests) == 1  # only the round after the batch
    assert [m.role for m in turn.messages] == ["user", "assistant", "tool", "tool", "assistant"]
    assert tools_texts(turn.messages) == ["a done", "b done"]
    assert turn.messages[-1].text == "all done"
    assert session.history == turn.messages


async def test_a_call_that_may_have_started_is_never_run_again(make_builder: Make) -> None:
    records: list[TurnProgress] = []
    tools = [ScriptedTool(name) for name in "abc"]
    model = ScriptedModel([[Call("a", {}), Call("b", {}), Call("c", {})]])
    builder = make_builder(model).progress_journal(recorder(records, lose_at=2))
    for tool in tools:
        builder = builder.tool(tool)
    with builder.build() as session, pytest.raises(ToolJournalFailed):
        await session.run("go")
    progress = records[-1]  # written before b may start
    assert tools_texts(progress.messages) == ["a done", INTERRUPTED, NOT_EXECUTED]
    c_call = progress.messages[1].tool_calls[2].id
    assert progress.open_calls == {c_call}

    again = [ScriptedTool(name) for name in "abc"]
    later = ScriptedModel([[Say("b's effects are unknown")]])
    builder = make_builder(later)
    for tool in again:
        builder = builder.tool(tool)
    with builder.build() as session:
        turn = await session.resume(progress)
    assert [tool.started for tool in again] == [[], [], [c_call]]
    assert tools_texts(turn.messages) == ["a done", INTERRUPTED, "c done"]
    # The model sees the whole batch, b's unknown outcome included.
    sent = later.requests[0].messages
    assert [m.text for m in sent if m.role == "tool"] == ["a done", INTERRUPTED, "c done"]


async def test_a_resumed_call_meets_todays_tools(make_builder: Make) -> None:
    """A call left open whose tool is gone by now gets the harness's answer, not a run."""
    records: list[TurnProgress] = []
    model = ScriptedModel([[Call("gone", {})]])
    builder = (
        make_builder(model)
        .tool(ScriptedTool("gone", approval="asks"))
        .progress_journal(recorder(records, lose_at=1))
    )
    with builder.build() as session, pytest.raises(ToolJournalFailed):
        await session.run("go")
    later = ScriptedModel([[Say("ok")]])
    with make_builder(later).tool(ScriptedTool("other")).build() as session:
        turn = await session.resume(records[-1])
    assert "unknown tool 'gone'" in tools_texts(turn.messages)[0]
    assert turn.messages[-1].text == "ok"


async def test_a_turn_lost_between_rounds_resumes_with_the_real_results(
    make_builder: Make,
) -> None:
    """After a batch the turn writes its real results down: a process lost while the
    next round streams resumes at that round, with "a done" (not "interrupted")."""
    records: list[TurnProgress] = []
    model = ScriptedModel([[Call("a", {})], [Call("b", {})], [Say("never")]])
    builder = (
        make_builder(model)
        .tool(ScriptedTool("a"))
        .tool(ScriptedTool("b"))
        .progress_journal(recorder(records, lose_at=2))  # 1: before a, 2: after the batch
    )
    with builder.build() as session, pytest.raises(ToolJournalFailed):
        await session.run("go")
    before_a, progress = records
    assert not before_a.between_rounds  # a host must store it before the tool starts
    assert progress.between_rounds  # a host may store it with its next write
    assert progress.rounds == 1 and progress.open_calls == frozenset()
    assert tools_texts(progress.messages) == ["a done"]
    assert TurnProgress.from_wire(progress.to_wire()) == progress
    later = ScriptedModel([[Call("b", {})], [Say("fine")]])
    again_a, again_b = ScriptedTool("a"), ScriptedTool("b")
    with make_builder(later).tool(again_a).tool(again_b).max_rounds(3).build() as resumed:
        turn = await resumed.resume(progress)
    assert again_a.started == [] and len(again_b.started) == 1
    assert tools_texts(turn.messages) == ["a done", "b done"]
    assert turn.rounds == 3 and len(later.requests) == 2


def _batch(*names: str) -> tuple[Message, ...]:
    calls = tuple(ToolCall(f"id{index}", name, {}) for index, name in enumerate(names))
    results = tuple(Message("tool", "x", tool_call_id=call.id) for call in calls)
    return (Message("user", "go"), Message("assistant", "", tool_calls=calls), *results)


@pytest.mark.parametrize(
    ("messages", "open_calls"),
    [
        ((), frozenset()),
        ((Message("assistant", "hi"),), frozenset()),
        (_batch("a"), frozenset({"id7"})),
        (_batch("a")[:2], frozenset({"id0"})),
        ((*_batch("a"), Message("tool", "twice", tool_call_id="id0")), frozenset({"id0"})),
        ((Message("user", "go"),), frozenset({"id0"})),
    ],
)
def test_progress_that_is_not_a_turn_is_refused(
    messages: tuple[Message, ...], open_calls: frozenset[str]
) -> None:
    with pytest.raises(InvalidTurnProgress):
        resume_point(TurnProgress("t", messages, open_calls, 1, False))


@pytest.mark.parametrize(
    "payload",
    [
        {},
        {"messages": "no"},
        {"messages": [{"role": "user"}]},
        {"messages": [], "openCalls": [1]},
        {"messages": [], "openCalls": ["x"] * 5000},
        {"messages": [], "rounds": True},
        {"messages": [], "rounds": -1},
        {"messages": [], "mayHaveRun": "yes"},
        {"messages": [], "turnId": 5},
        {"messages": [], "betweenRounds": 1},
    ],
)
def test_unreadable_stored_progress_is_a_typed_error(payload: dict[str, object]) -> None:
    with pytest.raises(InvalidTurnProgress):
        TurnProgress.from_wire(payload)


def test_a_record_from_before_progress_fields_reads_as_a_checkpoint() -> None:
    stored = TurnProgress("t", _batch("a"), frozenset(), 1, True).to_wire()
    old = {"messages": stored["messages"]}
    read = TurnProgress.from_wire(old)
    assert read.messages == _batch("a")
    assert (read.open_calls, read.rounds, read.may_have_run) == (frozenset(), 1, True)
    assert read.between_rounds is False


@settings(max_examples=60, deadline=None)
@given(
    gated=st.lists(st.booleans(), min_size=1, max_size=4),
    lose_at=st.integers(min_value=1, max_value=8),
)
def test_losing_the_process_at_any_record_runs_no_call_twice_and_none_is_lost(
    tmp_path_factory: pytest.TempPathFactory, gated: list[bool], lose_at: int
) -> None:
    """Whatever record the process dies after, first run + resumed run start each call
    at most once, every call ends with one result, and the turn completes."""
    from emelex.agent import AgentSession

    workspace = tmp_path_factory.mktemp("ws")
    names = [f"t{index}" for index in range(len(gated))]

    def builder(model: ScriptedModel, tools: list[ScriptedTool]) -> AgentSessionBuilder:
        made = (
            AgentSession.builder(model, workspace)
            .include_file_tools(False)
            .include_shell_tool(False)
            .approval_policy(ScriptedApprovals([True] * 8))
        )
        for tool in tools:
            made = made.tool(tool)
        return made

    def tools() -> list[ScriptedTool]:
        return [
            ScriptedTool(name, approval="gated" if gate else None)
            for name, gate in zip(names, gated, strict=True)
        ]

    async def main() -> None:
        records: list[TurnProgress] = []
        first = tools()
        model = ScriptedModel([[Call(name, {}) for name in names], [Say("first done")]])
        with builder(model, first).progress_journal(recorder(records, lose_at)).build() as s:
            try:
                await s.run("go")
            except ToolJournalFailed:
                pass
            else:
                assert len(records) < lose_at
                return
        second = tools()
        later = ScriptedModel([[Say("resumed done")]])
        with builder(later, second).build() as s:
            turn = await s.resume(records[-1])
        runs = [len(a.started) + len(b.started) for a, b in zip(first, second, strict=True)]
        assert all(count <= 1 for count in runs)
        texts = tools_texts(turn.messages)
        assert len(texts) == len(names)
        for count, text in zip(runs, texts, strict=True):
            assert (count == 1 and text.endswith("done")) or (count == 0 and text == INTERRUPTED)
        assert turn.messages[-1].text == "resumed done"

    trio.run(main)
