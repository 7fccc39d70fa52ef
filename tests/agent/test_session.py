"""Turns end to end on a ScriptedModel: events, approvals, cancellation, history."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from emelex._ids import is_uuid7
from emelex.agent import (
    AgentCancellation,
    AgentEvent,
    AgentSessionBuilder,
    AnswerDelta,
    ApprovalFailed,
    ApprovalRequested,
    ApprovalResolved,
    Approve,
    CapabilityMissing,
    CeilingExceeded,
    Deny,
    EventConsumerError,
    ModelCompleted,
    ModelFailed,
    ProtocolViolation,
    ReasoningDelta,
    SessionClosed,
    ToolCancellationPolicy,
    ToolCompleted,
    ToolProgress,
    ToolStarted,
    TurnCancelled,
    TurnCompleted,
    TurnFailed,
    TurnInProgress,
    TurnStarted,
    UnsupportedContent,
)
from emelex.agent._turn_rules import INTERRUPTED, NOT_EXECUTED
from emelex.model import (
    AudioPart,
    Capabilities,
    GenerationOptions,
    ImagePart,
    Reasoning,
    TextPart,
    ToolDefinition,
    VideoPart,
)
from emelex.runtime import Supervisor, open_supervisor
from emelex.testing import (
    ApproveAll,
    Call,
    Fail,
    Finish,
    Say,
    ScriptedApprovals,
    ScriptedModel,
    ScriptedTool,
    Step,
    Think,
    Wait,
)
from emelex.tools import ToolInvocation, ToolOutput

Make = Callable[..., AgentSessionBuilder]


def kinds(events: list[AgentEvent]) -> list[str]:
    return [type(event).__name__ for event in events]


async def test_simple_turn_commits_user_and_answer(make_builder: Make) -> None:
    model = ScriptedModel([[Say("Hi "), Say("there")]])
    events: list[AgentEvent] = []
    with make_builder(model).build() as session:
        turn = await session.run("hello", on_event=events.append)
        assert turn.response.text == "Hi there"
        assert [m.role for m in turn.messages] == ["user", "assistant"]
        assert session.history == turn.messages
    assert kinds(events) == [
        "TurnStarted",
        "ModelStarted",
        "AnswerDelta",
        "AnswerDelta",
        "ModelCompleted",
        "TurnCompleted",
    ]
    assert isinstance(events[-1], TurnCompleted)
    assert events[-1].usage == turn.usage


async def test_tool_round_event_order_and_reidentification(make_builder: Make) -> None:
    tool = ScriptedTool("probe")
    model = ScriptedModel([[Think("plan"), Call("probe", {"x": 1})], [Say("done")]])
    events: list[AgentEvent] = []
    with make_builder(model).tool(tool).build() as session:
        turn = await session.run("go", on_event=events.append)
    assert kinds(events) == [
        "TurnStarted",
        "ModelStarted",
        "ReasoningDelta",
        "ModelCompleted",
        "ToolProposed",
        "ToolStarted",
        "ToolCompleted",
        "ModelStarted",
        "AnswerDelta",
        "ModelCompleted",
        "TurnCompleted",
    ]
    (call_id,) = tool.started
    assert is_uuid7(call_id)
    assistant, result = turn.messages[1], turn.messages[2]
    assert assistant.tool_calls[0].id == call_id
    assert result.tool_call_id == call_id
    text = repr(events) + repr(turn.messages)
    assert "call_0" not in text  # the provider id never appears after re-identification
    # The second request carried the committed batch back to the model.
    assert [m.role for m in model.requests[1].messages] == ["user", "assistant", "tool"]


async def test_prefix_suffix_emitted_and_violation_fails(make_builder: Make) -> None:
    model = ScriptedModel([[Say("Hel"), Finish(text="Hello", reasoning="why")]])
    events: list[AgentEvent] = []
    with make_builder(model).build() as session:
        turn = await session.run("x", on_event=events.append)
    deltas = [e.text for e in events if isinstance(e, AnswerDelta)]
    assert "".join(deltas) == turn.response.text == "Hello"
    reasoning = [e for e in events if isinstance(e, ReasoningDelta)]
    assert [r.text for r in reasoning] == ["why"]
    assert events.index(reasoning[0]) < next(
        i for i, e in enumerate(events) if isinstance(e, ModelCompleted)
    )

    bad = ScriptedModel([[Say("abc"), Finish(text="xyz")]])
    failures: list[AgentEvent] = []
    with make_builder(bad).build() as session:
        with pytest.raises(ProtocolViolation) as caught:
            await session.run("x", on_event=failures.append)
        assert caught.value.rolled_back is True
        assert session.history == ()
    assert isinstance(failures[-1], TurnFailed)
    assert failures[-1].rolled_back


async def test_model_failure_is_typed_and_rolls_back(make_builder: Make) -> None:
    model = ScriptedModel([[Say("par"), Fail(OSError("connection reset"))]])
    with make_builder(model).build() as session:
        with pytest.raises(ModelFailed, match="connection reset") as caught:
            await session.run("x")
        assert isinstance(caught.value.__cause__, OSError)
        assert caught.value.rolled_back
        assert session.history == ()


async def test_default_policy_denies_and_decisions_are_never_cached(make_builder: Make) -> None:
    tool = ScriptedTool("write", approval="write 3 bytes to /ws/a.txt")
    script: list[list[Step]] = [
        [Call("write", {"p": 1}), Call("write", {"p": 1})],
        [Say("ok")],
    ]
    with make_builder(ScriptedModel(script)).tool(tool).build() as session:
        turn = await session.run("x")
        results = [m.text for m in turn.messages if m.role == "tool"]
    assert tool.started == []
    assert all(text.startswith("denied:") for text in results)

    approvals = ScriptedApprovals([True, False])
    events: list[AgentEvent] = []
    tool = ScriptedTool("write", approval="write 3 bytes to /ws/a.txt")
    builder = make_builder(ScriptedModel(script)).tool(tool).approval_policy(approvals)
    with builder.build() as session:
        await session.run("x", on_event=events.append)
    assert len(approvals.asked) == 2  # identical calls were asked twice
    assert approvals.asked[0].reason == "write 3 bytes to /ws/a.txt"
    assert approvals.asked[0].call.id != approvals.asked[1].call.id
    assert len(tool.started) == 1
    resolved = [e.decision for e in events if isinstance(e, ApprovalResolved)]
    assert resolved == [Approve(), Deny("denied by script")]
    requested = [e for e in events if isinstance(e, ApprovalRequested)]
    assert [r.call_id for r in requested] == [a.call.id for a in approvals.asked]


async def test_failing_policy_is_an_approval_error(make_builder: Make) -> None:
    class Broken:
        async def decide(self, context: Any) -> Any:
            raise LookupError("policy bug")

    tool = ScriptedTool("w", approval="write")
    model = ScriptedModel([[Call("w", {})], [Say("x")]])
    with make_builder(model).tool(tool).approval_policy(Broken()).build() as session:
        with pytest.raises(ApprovalFailed, match="policy bug"):
            await session.run("x")
        assert session.history == ()


async def test_disabled_tool_gets_unavailable_result_without_approval(
    make_builder: Make,
) -> None:
    tool = ScriptedTool("a", approval="needs approval")
    approvals = ApproveAll()
    model = ScriptedModel([[Call("a", {})], [Say("ok")], [Say("again")]])
    with make_builder(model).tool(tool).approval_policy(approvals).build() as session:
        session.set_enabled_tools([])
        turn = await session.run("x")
        assert "unavailable" in turn.messages[2].text
        assert approvals.asked == []
        assert tool.started == []
        # Referenced by history, so still declared for replay while disabled.
        assert [t.name for t in model.requests[1].tools] == ["a"]
        await session.run("y")
        assert [t.name for t in model.requests[2].tools] == ["a"]


async def test_tool_errors_and_invalid_arguments_reach_the_model(make_builder: Make) -> None:
    failing = ScriptedTool("f", fails=True)
    strict = ScriptedTool(
        "s", schema={"type": "object", "required": ["n"], "properties": {"n": {"type": "integer"}}}
    )
    model = ScriptedModel([[Call("f", {}), Call("s", {"n": "x"})], [Say("ok")]])
    with make_builder(model).tool(failing).tool(strict).build() as session:
        turn = await session.run("x")
    results = [m.text for m in turn.messages if m.role == "tool"]
    assert "failed as scripted" in results[0]
    assert "invalid arguments at n" in results[1]
    assert strict.started == []


async def test_tool_progress_is_delivered(make_builder: Make) -> None:
    @attrs.define
    class Reporter(ScriptedTool):
        async def invoke(self, invocation: ToolInvocation) -> ToolOutput:
            await invocation.progress("half", completed=1, total=2)
            return ToolOutput("ok")

    events: list[AgentEvent] = []
    model = ScriptedModel([[Call("r", {})], [Say("done")]])
    with make_builder(model).tool(Reporter("r")).build() as session:
        await session.run("x", on_event=events.append)
    (progress,) = [e for e in events if isinstance(e, ToolProgress)]
    assert (progress.message, progress.completed, progress.total) == ("half", 1, 2)
    started = next(i for i, e in enumerate(events) if isinstance(e, ToolStarted))
    completed = next(i for i, e in enumerate(events) if isinstance(e, ToolCompleted))
    assert started < events.index(progress) < completed


async def test_run_message_parts_and_video_refused(make_builder: Make) -> None:
    model = ScriptedModel([[Say("seen")]])
    with make_builder(model).build() as session:
        await session.run(
            ["look", ImagePart(b"\x89PNG", "image/png"), AudioPart(b"RIFF", "audio/wav")]
        )
        content = model.requests[0].messages[0].content
        assert isinstance(content[0], TextPart)
        with pytest.raises(UnsupportedContent, match="video"):
            await session.run([VideoPart(b"\x00", "video/mp4")])
        assert len(session.history) == 2


async def test_per_turn_options_overlay_and_capability_check(make_builder: Make) -> None:
    model = ScriptedModel(
        [[Say("a")], [Say("b")]], capabilities=Capabilities(thinking_toggle=False)
    )
    session_options = GenerationOptions(temperature=0.5, reasoning=Reasoning.OFF)
    with make_builder(model).options(session_options).build() as session:
        await session.run("x", options=GenerationOptions(max_tokens=7))
        sent = model.requests[0].options
        assert (sent.temperature, sent.max_tokens, sent.reasoning) == (0.5, 7, Reasoning.OFF)
        with pytest.raises(CapabilityMissing):
            await session.run("x", options=GenerationOptions(reasoning=Reasoning.budget(64)))
        assert len(model.requests) == 1  # refused before anything was sent


async def test_budget_overrides_and_off_clears(make_builder: Make) -> None:
    model = ScriptedModel([[Say("a")], [Say("b")]], capabilities=Capabilities(thinking_toggle=True))
    options = GenerationOptions(reasoning=Reasoning.budget(100))
    with make_builder(model).options(options).build() as session:
        await session.run("x", options=GenerationOptions(reasoning=Reasoning.OFF))
        await session.run("y", options=GenerationOptions(reasoning=Reasoning.budget(5)))
    assert model.requests[0].options.reasoning == Reasoning.OFF
    assert model.requests[1].options.reasoning == Reasoning.budget(5)


async def test_reasoning_stripped_from_requests_and_history_but_not_events(
    make_builder: Make,
) -> None:
    model = ScriptedModel(
        [[Think("secret"), Say("a")], [Say("b")]],
        capabilities=Capabilities(reasoning_history=False),
    )
    events: list[AgentEvent] = []
    with make_builder(model).build() as session:
        turn = await session.run("x", on_event=events.append)
        await session.run("y")
        assert turn.response.reasoning == "secret"
        assert all(m.reasoning is None for m in session.history)
        assert all(m.reasoning is None for m in model.requests[1].messages)
    assert any(isinstance(e, ReasoningDelta) and e.text == "secret" for e in events)


async def test_request_ceiling_checked_before_the_model(make_builder: Make) -> None:
    model = ScriptedModel([[Say("never")]])
    with make_builder(model).max_message_bytes(4).build() as session:
        with pytest.raises(CeilingExceeded) as caught:
            await session.run("far too long")
        assert caught.value.rolled_back
        assert model.requests == ()


async def test_consumer_failure(make_builder: Make) -> None:
    def explode(event: AgentEvent) -> None:
        if isinstance(event, AnswerDelta):
            raise KeyError("consumer bug")

    model = ScriptedModel([[Say("a"), Wait(10), Say("b")], [Say("c")]])
    with make_builder(model).build() as session:
        with trio.fail_after(5):
            with pytest.raises(EventConsumerError) as caught:
                await session.run("x", on_event=explode)
        assert isinstance(caught.value.__cause__, KeyError)
        assert caught.value.rolled_back
        assert model.abandoned_rounds == (0,)
        assert session.history == ()
        # There is no "infallible" variant any more: every run wraps the consumer's error.
        with pytest.raises(EventConsumerError, match="KeyError") as again:
            await session.run("x", on_event=explode)
        assert isinstance(again.value.__cause__, KeyError)
        assert session.history == ()


async def test_agent_cancellation_during_model_rolls_back(
    make_builder: Make, autojump_clock: trio.testing.MockClock
) -> None:
    model = ScriptedModel([[Say("a"), Wait(100), Say("b")]])
    cancellation = AgentCancellation()
    with make_builder(model).build() as session:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_cancel_later, cancellation, 5)
            with pytest.raises(TurnCancelled) as caught:
                await session.run("x", cancellation=cancellation)
        assert trio.current_time() == 5
        assert caught.value.rolled_back
        assert session.history == ()


async def _cancel_later(cancellation: AgentCancellation, delay: float) -> None:
    await trio.sleep(delay)
    cancellation.cancel()


async def test_caller_scope_cancellation_propagates_cancelled(
    make_builder: Make, autojump_clock: trio.testing.MockClock
) -> None:
    model = ScriptedModel([[Wait(100), Say("late")]])
    events: list[AgentEvent] = []
    with make_builder(model).build() as session:
        with trio.move_on_after(3) as scope:
            await session.run("x", on_event=events.append)
        assert scope.cancelled_caught
        assert session.history == ()
        assert isinstance(events[-1], TurnFailed)
        assert events[-1].error == "Cancelled"


async def test_started_tool_finishes_once_and_batch_stops(
    make_builder: Make, autojump_clock: trio.testing.MockClock
) -> None:
    slow = ScriptedTool("slow", duration=10)
    later = ScriptedTool("later")
    model = ScriptedModel([[Call("slow", {}), Call("later", {})], [Say("never")]])
    cancellation = AgentCancellation()
    with make_builder(model).tool(slow).tool(later).build() as session:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_cancel_later, cancellation, 2)
            with pytest.raises(TurnCancelled) as caught:
                await session.run("x", cancellation=cancellation)
        assert trio.current_time() == 10  # waited for the one terminal result
        assert slow.finished == slow.started
        assert later.started == []
        assert caught.value.rolled_back is False
        results = [m.text for m in session.history if m.role == "tool"]
        assert results == ["slow done", NOT_EXECUTED]
        assert caught.value.checkpoint == session.history


async def test_cooperative_tool_stops_early(
    make_builder: Make, autojump_clock: trio.testing.MockClock
) -> None:
    coop = ScriptedTool("coop", duration=100, cooperative=True)
    model = ScriptedModel([[Call("coop", {})], [Say("never")]])
    with make_builder(model).tool(coop).build() as session:
        with trio.move_on_after(4):
            await session.run("x")
        assert trio.current_time() == 4
        assert [m.text for m in session.history if m.role == "tool"] == ["coop stopped early"]


async def test_interruptible_tool_is_dropped(
    make_builder: Make, autojump_clock: trio.testing.MockClock
) -> None:
    tool = ScriptedTool("i", duration=100, policy=ToolCancellationPolicy.INTERRUPTIBLE)
    model = ScriptedModel([[Call("i", {})], [Say("never")]])
    with make_builder(model).tool(tool).build() as session:
        with trio.move_on_after(4):
            await session.run("x")
        assert trio.current_time() == 4
        assert tool.interrupted == tool.started
        assert [m.text for m in session.history if m.role == "tool"] == [INTERRUPTED]


async def test_pending_approval_is_cancelled(
    make_builder: Make, autojump_clock: trio.testing.MockClock
) -> None:
    approvals = ScriptedApprovals([True], delay=1000)
    tool = ScriptedTool("w", approval="write")
    model = ScriptedModel([[Call("w", {})], [Say("x")]])
    cancellation = AgentCancellation()
    with make_builder(model).tool(tool).approval_policy(approvals).build() as session:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_cancel_later, cancellation, 1)
            with pytest.raises(TurnCancelled):
                await session.run("x", cancellation=cancellation)
        assert trio.current_time() == 1
        assert tool.started == []
        assert session.history == ()


async def test_turn_actors_are_visible_then_gone(make_builder: Make) -> None:
    seen: list[list[str]] = []
    states: list[list[str]] = []

    @attrs.define
    class Peek(ScriptedTool):
        async def invoke(self, invocation: ToolInvocation) -> ToolOutput:
            tree = Supervisor.current().snapshot()
            seen.append([info.kind for info in tree.walk()])
            states.append([info.state.value for info in tree.walk()])
            return ToolOutput("ok")

    model = ScriptedModel([[Call("peek", {})], [Say("done")]])
    async with open_supervisor("test") as supervisor:
        with make_builder(model).tool(Peek("peek")).build() as session:
            await session.run("x")
        assert len(supervisor.snapshot()) == 0
    assert seen == [["session", "turn", "tool"]]
    assert states == [["running", "running", "running"]]


async def test_one_turn_at_a_time_and_closed_session(make_builder: Make) -> None:
    model = ScriptedModel([[Wait(1), Say("a")]])
    session = make_builder(model).build()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(session.run, "first")
        await trio.testing.wait_all_tasks_blocked()
        with pytest.raises(TurnInProgress):
            await session.run("second")
        with pytest.raises(TurnInProgress):
            session.close()
    session.close()
    with pytest.raises(SessionClosed):
        await session.run("x")


async def test_turn_is_a_checkpoint(make_builder: Make) -> None:
    model = ScriptedModel([[Say("a")]])
    with make_builder(model).build() as session:
        with trio.testing.assert_checkpoints():
            await session.run("x")


async def test_cancellation_already_fired_cancels_at_once(make_builder: Make) -> None:
    model = ScriptedModel([[Say("a")]])
    cancellation = AgentCancellation()
    cancellation.cancel()
    events: list[AgentEvent] = []
    with make_builder(model).build() as session:
        with pytest.raises(TurnCancelled):
            await session.run("x", cancellation=cancellation, on_event=events.append)
    assert isinstance(events[0], TurnStarted)
    assert isinstance(events[-1], TurnFailed)


async def test_committed_size_matches_a_fresh_measurement(make_builder: Make) -> None:
    from emelex.agent._ceilings import measure_messages

    model = ScriptedModel([[Call("t", {"a": 1})], [Think("r"), Say("done")], [Say("again")]])
    with make_builder(model).tool(ScriptedTool("t")).build() as session:
        await session.run("one")
        await session.run("two")
        assert session._history_size == measure_messages(session.history)


class _SignalProbe:
    """A cooperative FINISH_ONCE_STARTED tool that records its invocation."""

    def __init__(self) -> None:
        self.invocation: ToolInvocation | None = None
        self.started = trio.Event()

    @property
    def definition(self) -> ToolDefinition:
        return ToolDefinition("probe", "Waits for cancellation.", {"type": "object"})

    @property
    def cancellation_policy(self) -> ToolCancellationPolicy:
        return ToolCancellationPolicy.FINISH_ONCE_STARTED

    def approval_reason(self, arguments: Any) -> str | None:
        return None

    async def invoke(self, invocation: ToolInvocation) -> ToolOutput:
        self.invocation = invocation
        self.started.set()
        await invocation.cancellation.wait_cancelled()
        return ToolOutput("probe stopped")


async def test_agent_cancellation_reaches_a_started_tool_synchronously(make_builder: Make) -> None:
    # The signal goes straight to the running tool: no scheduler pass between cancel()
    # and the tool's own cancellation, and the turn still ends as a checkpoint.
    probe = _SignalProbe()
    model = ScriptedModel([[Call("probe", {})], [Say("never")]])
    cancellation = AgentCancellation()
    with make_builder(model).tool(probe).build() as session:
        with trio.fail_after(5):
            async with trio.open_nursery() as nursery:

                async def cancel_when_started() -> None:
                    await probe.started.wait()
                    await trio.testing.wait_all_tasks_blocked()
                    assert probe.invocation is not None
                    assert not probe.invocation.cancellation.cancelled
                    cancellation.cancel()
                    assert probe.invocation.cancellation.cancelled

                nursery.start_soon(cancel_when_started)
                with pytest.raises(TurnCancelled) as caught:
                    await session.run("x", cancellation=cancellation)
        assert caught.value.rolled_back is False
        assert [m.text for m in session.history if m.role == "tool"] == ["probe stopped"]
        from emelex.agent._ceilings import measure_messages

        assert session._history_size == measure_messages(session.history)
        # The session stays usable after the routed cancellation.
        await session.run("again")
        assert session.history[-1].text == "never"
