"""The pure turn core, without Trio: prefix contract, re-identification, batch rules."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from emelex._ids import is_uuid7
from emelex.agent import (
    AnswerDelta,
    CeilingExceeded,
    ModelCompleted,
    ModelProgress,
    ModelStarted,
    ProtocolViolation,
    ReasoningDelta,
    ResourceCeilings,
    ToolCompleted,
    ToolProposed,
    ToolStarted,
    TurnCompleted,
    TurnCore,
    TurnPhase,
    TurnStarted,
)
from emelex.agent._ceilings import RequestSize, first_excess, measure_messages
from emelex.agent._tool_table import ToolTable
from emelex.agent._turn_rules import INTERRUPTED, NOT_EXECUTED
from emelex.model import (
    Completed,
    Message,
    Progress,
    Response,
    TextDelta,
    ToolCall,
    Usage,
)
from emelex.model import ReasoningDelta as ModelReasoning
from emelex.testing import ScriptedTool
from emelex.tools import ToolOutput

SCHEMA = {
    "type": "object",
    "properties": {"path": {"type": "string"}},
    "required": ["path"],
    "additionalProperties": False,
}


def make_core(
    *,
    history: tuple[Message, ...] = (),
    enabled: frozenset[str] | None = None,
    strip: bool = False,
    ceilings: ResourceCeilings | None = None,
) -> TurnCore:
    table = ToolTable([ScriptedTool("read", schema=SCHEMA), ScriptedTool("write", schema=SCHEMA)])
    counter = itertools.count()
    return TurnCore(
        turn_id="turn-1",
        user_message=Message("user", "hi"),
        history=history,
        history_size=measure_messages(history),
        tools=table,
        enabled=frozenset(table.names) if enabled is None else enabled,
        history_tools=frozenset(call.name for message in history for call in message.tool_calls),
        strip_reasoning=strip,
        options=__import__("emelex").model.GenerationOptions(),
        ceilings=ceilings or ResourceCeilings(),
        make_id=lambda: f"018f0000-0000-7000-8000-{next(counter):012d}",
    )


def respond(core: TurnCore, *events: object, response: Response) -> list[object]:
    out: list[object] = []
    for event in events:
        out.extend(core.on_model_event(event))  # type: ignore[arg-type]
    out.extend(core.on_model_event(Completed(response)))
    return out


def test_round_request_contains_history_user_message_and_enabled_tools() -> None:
    history = (Message("system", "be brief"),)
    core = make_core(history=history, enabled=frozenset({"read"}))
    assert core.start() == [TurnStarted("turn-1")]
    request, events = core.begin_round()
    assert events == [ModelStarted("turn-1", 1)]
    assert [m.role for m in request.messages] == ["system", "user"]
    assert [tool.name for tool in request.tools] == ["read"]
    assert core.phase is TurnPhase.GENERATING


def test_disabled_tool_referenced_by_history_stays_declared() -> None:
    call = ToolCall("c1", "write", {"path": "a"})
    history = (
        Message("user", "x"),
        Message("assistant", "", tool_calls=(call,)),
        Message("tool", "ok", tool_call_id="c1"),
    )
    core = make_core(history=history, enabled=frozenset({"read"}))
    request, _ = core.begin_round()
    assert [tool.name for tool in request.tools] == ["read", "write"]


def test_deltas_pass_through_and_final_round_commits() -> None:
    core = make_core()
    core.begin_round()
    events = respond(
        core,
        ModelReasoning("think"),
        TextDelta("Hel"),
        Progress("prompt", 3, 10),
        TextDelta("lo"),
        response=Response("Hello", reasoning="think", usage=Usage(5, 2)),
    )
    assert events[:4] == [
        ReasoningDelta("turn-1", 1, "think"),
        AnswerDelta("turn-1", 1, "Hel"),
        ModelProgress("turn-1", 1, Progress("prompt", 3, 10)),
        AnswerDelta("turn-1", 1, "lo"),
    ]
    assert isinstance(events[4], ModelCompleted)
    plan, proposed = core.end_round()
    assert (plan, proposed) == ([], [])
    turn, done = core.commit()
    assert done == [TurnCompleted("turn-1", Usage(5, 2))]
    assert [m.role for m in turn.messages] == ["user", "assistant"]
    assert turn.messages[1].text == "Hello"
    assert turn.messages[1].reasoning == "think"
    assert turn.usage == Usage(5, 2)
    assert turn.rounds == 1


def test_missing_suffixes_are_emitted_reasoning_first_then_answer() -> None:
    core = make_core()
    core.begin_round()
    events = respond(
        core, TextDelta("Hel"), response=Response("Hello", reasoning="only at the end")
    )
    assert events[1:3] == [
        ReasoningDelta("turn-1", 1, "only at the end"),
        AnswerDelta("turn-1", 1, "lo"),
    ]
    assert isinstance(events[3], ModelCompleted)


@pytest.mark.parametrize(
    ("deltas", "response"),
    [
        ([TextDelta("Hi")], Response("Hello")),
        ([TextDelta("abc")], Response("ab")),
        ([ModelReasoning("x")], Response("", reasoning="y")),
        ([ModelReasoning("x")], Response("")),
    ],
)
def test_non_prefix_fails(deltas: list[object], response: Response) -> None:
    core = make_core()
    core.begin_round()
    with pytest.raises(ProtocolViolation, match="prefix"):
        respond(core, *deltas, response=response)


def test_events_after_completed_and_missing_completion_are_violations() -> None:
    core = make_core()
    core.begin_round()
    respond(core, response=Response("ok"))
    with pytest.raises(ProtocolViolation, match="after Completed"):
        core.on_model_event(TextDelta("late"))
    other = make_core()
    other.begin_round()
    other.on_model_event(TextDelta("partial"))
    with pytest.raises(ProtocolViolation, match="without a Completed"):
        other.end_round()


def test_calls_are_reidentified_and_planned() -> None:
    core = make_core(enabled=frozenset({"read"}))
    core.begin_round()
    provider_calls = (
        ToolCall("p-1", "read", {"path": "a"}),
        ToolCall("p-2", "read", {"nope": 1}),
        ToolCall("p-3", "write", {"path": "a"}),
        ToolCall("p-4", "delete", {}),
    )
    events = respond(core, response=Response("", tool_calls=provider_calls))
    completed = events[-1]
    assert isinstance(completed, ModelCompleted)
    new_ids = [call.id for call in completed.response.tool_calls]
    assert all(is_uuid7(i) for i in new_ids)
    assert not {"p-1", "p-2", "p-3", "p-4"} & set(new_ids)
    plan, proposed = core.end_round()
    assert [p.call.id for p in plan] == new_ids
    assert [p.provider_id for p in plan] == ["p-1", "p-2", "p-3", "p-4"]
    assert proposed == [ToolProposed("turn-1", 1, p.call) for p in plan]
    assert plan[0].immediate is None
    assert plan[1].immediate is not None
    assert "invalid arguments" in plan[1].immediate.text
    assert plan[2].immediate is not None
    assert "unavailable" in plan[2].immediate.text
    assert plan[3].immediate is not None
    assert "unknown tool 'delete'" in plan[3].immediate.text
    assert core.phase is TurnPhase.TOOLS


def run_batch(core: TurnCore, *calls: ToolCall) -> list[str]:
    core.begin_round()
    respond(core, response=Response("", tool_calls=calls))
    plan, _ = core.end_round()
    return [item.call.id for item in plan]


def test_batch_enters_turn_only_complete_and_in_call_order() -> None:
    core = make_core()
    first, second = run_batch(
        core, ToolCall("a", "read", {"path": "1"}), ToolCall("b", "read", {"path": "2"})
    )
    assert core.tool_started(first) == [ToolStarted("turn-1", first, "read")]
    assert core.record_result(first, ToolOutput("one"), True) == [
        ToolCompleted("turn-1", first, ToolOutput("one"), True)
    ]
    with pytest.raises(RuntimeError, match="without a result"):
        core.finish_batch()
    core.record_result(second, ToolOutput.error("no"), False)
    with pytest.raises(RuntimeError, match="already has a result"):
        core.record_result(second, ToolOutput("again"), True)
    core.finish_batch()
    roles = [(m.role, m.tool_call_id) for m in core.messages]
    assert roles == [("user", None), ("assistant", None), ("tool", first), ("tool", second)]
    assert core.phase is TurnPhase.READY


def test_abort_before_any_tool_ran_rolls_back() -> None:
    core = make_core()
    ids = run_batch(core, ToolCall("a", "read", {"path": "1"}))
    core.record_result(ids[0], ToolOutput.error("denied"), False)
    resolution = core.abort()
    assert resolution.rolled_back
    assert resolution.messages == ()


def test_abort_mid_batch_checkpoints_a_complete_batch() -> None:
    core = make_core()
    a, b, c = run_batch(
        core,
        ToolCall("a", "read", {"path": "1"}),
        ToolCall("b", "read", {"path": "2"}),
        ToolCall("c", "read", {"path": "3"}),
    )
    core.tool_started(a)
    core.record_result(a, ToolOutput("done"), True)
    core.tool_started(b)  # started, never finished (interrupted)
    resolution = core.abort()
    assert not resolution.rolled_back
    assistant = resolution.messages[1]
    assert [call.id for call in assistant.tool_calls] == [a, b, c]
    results = {m.tool_call_id: m.text for m in resolution.messages[2:]}
    assert results == {a: "done", b: INTERRUPTED, c: NOT_EXECUTED}
    assert core.phase is TurnPhase.ABORTED
    with pytest.raises(RuntimeError, match="already aborted"):
        core.abort()


def test_abort_in_a_later_round_keeps_earlier_batches_only() -> None:
    core = make_core()
    (a,) = run_batch(core, ToolCall("a", "read", {"path": "1"}))
    core.tool_started(a)
    core.record_result(a, ToolOutput("done"), True)
    core.finish_batch()
    core.begin_round()
    core.on_model_event(TextDelta("partial answer that never completes"))
    resolution = core.abort()
    assert not resolution.rolled_back
    assert [m.role for m in resolution.messages] == ["user", "assistant", "tool"]


def test_strip_reasoning_from_committed_messages_but_not_response() -> None:
    core = make_core(strip=True)
    core.begin_round()
    respond(core, ModelReasoning("secret"), response=Response("ok", reasoning="secret"))
    core.end_round()
    turn, _ = core.commit()
    assert turn.response.reasoning == "secret"
    assert all(m.reasoning is None for m in turn.messages)


def test_request_over_a_ceiling_is_refused_before_the_model() -> None:
    core = make_core(ceilings=ResourceCeilings(max_message_bytes=1))
    with pytest.raises(CeilingExceeded) as caught:
        core.begin_round()
    assert caught.value.limit == "max_message_bytes"
    assert core.phase is TurnPhase.READY
    small = make_core(ceilings=ResourceCeilings(max_schema_bytes=10))
    with pytest.raises(CeilingExceeded, match="max_schema_bytes"):
        small.begin_round()


def test_methods_out_of_order_raise() -> None:
    core = make_core()
    with pytest.raises(RuntimeError, match="expected generating"):
        core.on_model_event(TextDelta("x"))
    with pytest.raises(RuntimeError, match="expected final"):
        core.commit()
    with pytest.raises(RuntimeError, match="expected tools"):
        core.tool_started("nope")
    core.begin_round()
    respond(core, response=Response("", tool_calls=(ToolCall("a", "read", {"path": "x"}),)))
    core.end_round()
    with pytest.raises(RuntimeError, match="not part of the current batch"):
        core.tool_started("unknown-id")


def test_sizes_accumulate_over_the_turn() -> None:
    core = make_core()
    before = core.size
    (a,) = run_batch(core, ToolCall("a", "read", {"path": "1"}))
    core.record_result(a, ToolOutput("x" * 100), False)
    core.finish_batch()
    assert core.size.messages == before.messages + 2
    assert core.size.message_bytes >= before.message_bytes + 100
    assert core.size.tool_argument_bytes > 0
    assert isinstance(core.size, RequestSize)


@pytest.mark.parametrize("strip", [False, True])
def test_batch_and_checkpoint_sizes_equal_measuring_their_messages(strip: bool) -> None:
    # The round check's measurement of the assistant message is reused, never re-measured.
    calls = (ToolCall("a", "read", {"path": "é" * 7}), ToolCall("b", "write", {"path": "2"}))
    done = make_core(strip=strip)
    a, b = run_batch(done, *calls)
    done.record_result(a, ToolOutput("one"), True)
    done.record_result(b, ToolOutput("two"), True)
    done.finish_batch()
    assert done.size == measure_messages(done.messages)
    cancelled = make_core(strip=strip)
    cancelled.begin_round()
    respond(cancelled, response=Response("", tool_calls=calls, reasoning="why"))
    plan, _ = cancelled.end_round()
    cancelled.tool_started(plan[0].call.id)
    resolution = cancelled.abort()
    assert cancelled.size == measure_messages(resolution.messages)
    assert (resolution.messages[1].reasoning is None) is strip


def test_committed_turn_can_be_aborted_by_a_late_failure() -> None:
    plain = make_core()
    plain.begin_round()
    respond(plain, response=Response("ok"))
    plain.end_round()
    plain.commit()
    assert plain.abort().rolled_back

    core = make_core()
    (a,) = run_batch(core, ToolCall("a", "read", {"path": "1"}))
    core.tool_started(a)
    core.record_result(a, ToolOutput("done"), True)
    core.finish_batch()
    core.begin_round()
    respond(core, response=Response("final"))
    core.end_round()
    turn, _ = core.commit()
    resolution = core.abort()
    assert not resolution.rolled_back
    assert resolution.messages == turn.messages


def test_a_refused_round_is_a_stand_in_with_synthetic_results_and_no_effects() -> None:
    core = make_core(ceilings=ResourceCeilings(max_messages=4))
    core.begin_round()
    calls = tuple(ToolCall(f"p{n}", "read", {"path": f"{n}"}) for n in range(5))
    events = respond(core, response=Response("trying", tool_calls=calls))
    (completed,) = [e for e in events if isinstance(e, ModelCompleted)]
    # ModelCompleted reports the round as it will be committed: the calls that fit.
    assert [c.arguments for c in completed.response.tool_calls] == [{"path": "0"}, {"path": "1"}]
    plan, proposed = core.end_round()
    assert len(plan) == 2 and all(item.immediate is not None for item in plan)
    assert len(proposed) == 2
    assert [item.provider_id for item in plan] == ["p0", "p1"]
    text = plan[0].immediate.text if plan[0].immediate else ""
    assert text.startswith("refused: nothing in this round ran because the round proposed 5")
    assert "Only the first 2 of the round's 5 calls" in text
    for item in plan:
        core.record_result(item.call.id, item.immediate or ToolOutput(""), executed=False)
    core.finish_batch()
    assert not core.tools_may_have_run
    request, _ = core.begin_round()
    assert [m.role for m in request.messages] == ["user", "assistant", "tool", "tool"]
    assert core.abort().rolled_back  # nothing ran: a later failure still rolls back


def test_a_round_that_cannot_hold_even_one_call_fails_with_the_ceiling() -> None:
    core = make_core(ceilings=ResourceCeilings(max_messages=2))
    core.begin_round()
    call = ToolCall("p", "read", {"path": "a"})
    with pytest.raises(CeilingExceeded, match="max_messages"):
        respond(core, response=Response("", tool_calls=(call,)))


@given(
    st.lists(st.text(max_size=40), min_size=1, max_size=12),
    st.integers(3, 12),
    st.integers(16, 200),
    st.integers(1, 3),
)
def test_a_round_either_fits_whole_or_is_refused_with_a_stand_in_that_fits(
    paths: list[str], max_messages: int, max_arguments: int, rounds: int
) -> None:
    ceilings = ResourceCeilings(max_messages=max_messages, max_tool_argument_bytes=max_arguments)
    core = make_core(history=(Message("system", "s"),), ceilings=ceilings)
    for _ in range(rounds):
        core.begin_round()
        calls = tuple(ToolCall(f"p{n}", "read", {"path": p}) for n, p in enumerate(paths))
        try:
            respond(core, response=Response("", tool_calls=calls))
        except CeilingExceeded:
            return  # not even one call fits: the turn fails by the usual rules
        plan, _ = core.end_round()
        refused = [item for item in plan if item.immediate and item.immediate.is_error]
        if refused and refused[0].immediate and refused[0].immediate.text.startswith("refused"):
            assert len(refused) == len(plan) <= len(calls)
        else:
            assert len(plan) == len(calls)
        for item in plan:
            core.record_result(item.call.id, item.immediate or ToolOutput("ok"), executed=False)
        core.finish_batch()
        # What every request keeps (system prompt, user message, this round) fits.
        latest = core.messages[-(len(plan) + 1) :]
        kept = (Message("system", "s"), core.messages[0], *latest)
        assert first_excess(measure_messages(kept), 0, ceilings) is None
