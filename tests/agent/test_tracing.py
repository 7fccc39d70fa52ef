"""Turn spans: the span tree is the turn's actor tree, with the GenAI semantic
conventions' attributes and emelex's outcome (committed, rolled back, checkpointed)."""

from __future__ import annotations

import json
from collections.abc import Callable

import attrs
import pytest
import trio
import trio.testing
from opentelemetry.trace import StatusCode

from emelex.agent import (
    AgentCancellation,
    AgentEvent,
    AgentSessionBuilder,
    ApprovalContext,
    ApprovalDecision,
    Approve,
    ModelFailed,
    ToolCancellationPolicy,
    TurnCancelled,
)
from emelex.agent._tracing import CAPTURE_CONTENT_ENV
from emelex.model import Usage
from emelex.runtime import ActorTree, Supervisor, open_supervisor
from emelex.testing import Call, Fail, Finish, Say, ScriptedModel, ScriptedTool, Wait
from emelex.tools import ToolInvocation, ToolOutput
from tests.spans import Recorder, attr, span_edges, tree_edges

Make = Callable[..., AgentSessionBuilder]


@attrs.define
class Watch:
    """Snapshots of the actor tree taken from inside every actor of a turn."""

    trees: list[ActorTree] = attrs.Factory(list)

    def look(self, _event: object = None) -> None:
        self.trees.append(Supervisor.current().snapshot())


@attrs.define
class WatchedApprovals:
    watch: Watch

    async def decide(self, context: ApprovalContext) -> ApprovalDecision:
        self.watch.look()
        await trio.lowlevel.checkpoint()
        return Approve()


@attrs.define
class WatchedTool(ScriptedTool):
    watch: Watch = attrs.field(factory=Watch, kw_only=True)

    async def invoke(self, invocation: ToolInvocation) -> ToolOutput:
        self.watch.look()
        return await super().invoke(invocation)


async def _cancel_later(cancellation: AgentCancellation, delay: float) -> None:
    await trio.sleep(delay)
    cancellation.cancel()


async def test_committed_turn_spans_mirror_the_actor_tree(make_builder: Make) -> None:
    recorder = Recorder.open()
    watch = Watch()
    tool = WatchedTool("write", approval="write a file", watch=watch)
    model = ScriptedModel(
        [
            [Call("write", {"path": "a.txt"})],
            [Say("done"), Finish(usage=Usage(input_tokens=30, output_tokens=4))],
        ]
    )
    builder = make_builder(model).tool(tool).approval_policy(WatchedApprovals(watch))
    events: list[AgentEvent] = []

    def consume(event: AgentEvent) -> None:
        events.append(event)
        watch.look()  # the model rounds emit from inside their actors

    async with open_supervisor("traced", tracer_provider=recorder.provider) as supervisor:
        with builder.build() as session:
            turn = await session.run("write it", on_event=consume)
    assert turn.response.text == "done"
    # The span tree is the actor tree: every actor the turn ever had, and its parent.
    edges = span_edges(recorder.spans)
    assert tree_edges(watch.trees) == edges
    assert len(recorder.spans) == supervisor.spawned_actors == 6
    assert sorted(kind for _, kind, _ in edges) == sorted(
        ["session", "turn", "model_job", "model_job", "approval", "tool"]
    )
    assert len({span.context.trace_id for span in recorder.spans if span.context}) == 1

    (session_span,) = recorder.of_kind("session")
    assert session_span.parent is None
    assert attr(session_span, "gen_ai.conversation.id") == session.session_id
    (turn_span,) = recorder.of_kind("turn")
    assert turn_span.name == "invoke_agent"
    assert attr(turn_span, "gen_ai.operation.name") == "invoke_agent"
    assert attr(turn_span, "gen_ai.provider.name") == "ScriptedModel"
    assert attr(turn_span, "emelex.turn.id") == turn.turn_id
    assert attr(turn_span, "emelex.turn.outcome") == "committed"
    assert attr(turn_span, "emelex.turn.cancelled") is False
    assert attr(turn_span, "emelex.turn.rounds") == 2
    assert attr(turn_span, "gen_ai.usage.input_tokens") == turn.usage.input_tokens
    assert attr(turn_span, "gen_ai.usage.output_tokens") == turn.usage.output_tokens

    first, second = recorder.of_kind("model_job")
    assert first.name == "chat"
    assert attr(first, "gen_ai.operation.name") == "chat"
    assert attr(first, "gen_ai.response.finish_reasons") == ("tool_calls",)
    assert attr(first, "emelex.model.tool_calls") == 1
    assert attr(second, "gen_ai.usage.input_tokens") == 30
    assert attr(second, "gen_ai.usage.output_tokens") == 4
    assert attr(second, "gen_ai.response.finish_reasons") == ("stop",)

    call = turn.messages[1].tool_calls[0]
    (approval,) = recorder.of_kind("approval")
    assert attr(approval, "emelex.approval.decision") == "approve"
    assert attr(approval, "gen_ai.tool.call.id") == call.id
    (tool_span,) = recorder.of_kind("tool")
    assert tool_span.name == "execute_tool write"
    assert attr(tool_span, "gen_ai.operation.name") == "execute_tool"
    assert attr(tool_span, "gen_ai.tool.name") == "write"
    assert attr(tool_span, "gen_ai.tool.call.id") == call.id
    assert attr(tool_span, "gen_ai.tool.type") == "function"
    assert attr(tool_span, "emelex.cancellation.policy") == "finish_once_started"
    assert attr(tool_span, "emelex.tool.is_error") is False
    # No message or tool text unless the user opts in.
    for span in recorder.spans:
        keys = set(span.attributes or {})
        assert not keys & {
            "gen_ai.input.messages",
            "gen_ai.output.messages",
            "gen_ai.tool.call.arguments",
            "gen_ai.tool.call.result",
        }


async def test_cancelled_turn_after_a_started_tool_is_checkpointed(
    make_builder: Make, autojump_clock: trio.testing.MockClock
) -> None:
    recorder = Recorder.open()
    watch = Watch()
    slow = WatchedTool("slow", duration=10, watch=watch)
    later = ScriptedTool("later")
    model = ScriptedModel([[Call("slow", {}), Call("later", {})], [Say("never")]])
    cancellation = AgentCancellation()
    async with open_supervisor("traced", tracer_provider=recorder.provider):
        with make_builder(model).tool(slow).tool(later).build() as session:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_cancel_later, cancellation, 2)
                with pytest.raises(TurnCancelled) as caught:
                    await session.run("x", cancellation=cancellation, on_event=watch.look)
    assert caught.value.rolled_back is False
    assert tree_edges(watch.trees) == span_edges(recorder.spans)
    (turn_span,) = recorder.of_kind("turn")
    assert attr(turn_span, "emelex.turn.outcome") == "checkpointed"
    assert attr(turn_span, "emelex.turn.cancelled") is True
    assert attr(turn_span, "emelex.actor.cancelled") is True
    assert len(recorder.of_kind("model_job")) == 1  # no second round
    (tool_span,) = recorder.of_kind("tool")  # "later" never became an actor
    assert attr(tool_span, "gen_ai.tool.name") == "slow"
    assert attr(tool_span, "emelex.actor.cancel_requested") is True  # told, then finished
    assert attr(tool_span, "emelex.actor.dropped") is None
    assert attr(tool_span, "emelex.actor.state") == "done"
    assert attr(tool_span, "emelex.tool.is_error") is False  # its one result was recorded


async def test_cancelled_model_round_rolls_back(
    make_builder: Make, autojump_clock: trio.testing.MockClock
) -> None:
    recorder = Recorder.open()
    watch = Watch()
    model = ScriptedModel([[Say("a"), Wait(100), Say("b")]])
    cancellation = AgentCancellation()
    async with open_supervisor("traced", tracer_provider=recorder.provider):
        with make_builder(model).build() as session:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_cancel_later, cancellation, 5)
                with pytest.raises(TurnCancelled) as caught:
                    await session.run("x", cancellation=cancellation, on_event=watch.look)
    assert caught.value.rolled_back
    assert tree_edges(watch.trees) == span_edges(recorder.spans)
    (turn_span,) = recorder.of_kind("turn")
    assert attr(turn_span, "emelex.turn.outcome") == "rolled_back"
    assert attr(turn_span, "emelex.turn.cancelled") is True
    (model_span,) = recorder.of_kind("model_job")
    assert attr(model_span, "emelex.actor.cancelled") is True
    assert attr(model_span, "gen_ai.usage.output_tokens") is None  # it never completed


async def test_interrupted_tool_is_dropped_and_the_turn_checkpointed(
    make_builder: Make, autojump_clock: trio.testing.MockClock
) -> None:
    recorder = Recorder.open()
    tool = ScriptedTool("i", duration=100, policy=ToolCancellationPolicy.INTERRUPTIBLE)
    model = ScriptedModel([[Call("i", {})], [Say("never")]])
    async with open_supervisor("traced", tracer_provider=recorder.provider):
        with make_builder(model).tool(tool).build() as session:
            with trio.move_on_after(4):
                await session.run("x")
    (tool_span,) = recorder.of_kind("tool")
    assert attr(tool_span, "emelex.cancellation.policy") == "drop"
    assert attr(tool_span, "emelex.actor.dropped") is True
    (turn_span,) = recorder.of_kind("turn")
    # The caller's own scope was cancelled: not an AgentCancellation.
    assert attr(turn_span, "emelex.turn.cancelled") is False
    assert attr(turn_span, "emelex.turn.outcome") == "checkpointed"


async def test_failed_model_round_is_an_error_span(make_builder: Make) -> None:
    recorder = Recorder.open()
    model = ScriptedModel([[Say("par"), Fail(OSError("connection reset"))]])
    async with open_supervisor("traced", tracer_provider=recorder.provider):
        with make_builder(model).build() as session:
            with pytest.raises(ModelFailed):
                await session.run("x")
    (model_span,) = recorder.of_kind("model_job")
    assert model_span.status.status_code is StatusCode.ERROR
    assert attr(model_span, "error.type") == "OSError"
    (turn_span,) = recorder.of_kind("turn")
    assert turn_span.status.status_code is StatusCode.ERROR
    assert attr(turn_span, "emelex.turn.outcome") == "rolled_back"


async def test_message_and_tool_text_only_when_opted_in(
    make_builder: Make, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(CAPTURE_CONTENT_ENV, "true")
    recorder = Recorder.open()
    tool = ScriptedTool("probe")
    model = ScriptedModel([[Call("probe", {"x": 1})], [Say("the answer")]])
    async with open_supervisor("traced", tracer_provider=recorder.provider):
        with make_builder(model).tool(tool).build() as session:
            await session.run("secret question")
    first, second = recorder.of_kind("model_job")
    sent = json.loads(str(attr(first, "gen_ai.input.messages")))
    assert sent[-1] == {"role": "user", "parts": [{"type": "text", "content": "secret question"}]}
    (answer,) = json.loads(str(attr(second, "gen_ai.output.messages")))
    assert answer["role"] == "assistant" and answer["finish_reason"] == "stop"
    assert {"type": "text", "content": "the answer"} in answer["parts"]
    called = json.loads(str(attr(first, "gen_ai.output.messages")))[0]["parts"]
    assert [part["name"] for part in called if part["type"] == "tool_call"] == ["probe"]
    (tool_span,) = recorder.of_kind("tool")
    assert json.loads(str(attr(tool_span, "gen_ai.tool.call.arguments"))) == {"x": 1}
    assert attr(tool_span, "gen_ai.tool.call.result") == "probe done"


async def test_estimated_usage_is_marked_on_the_spans(make_builder: Make) -> None:
    """A round whose usage the backend estimated says so; a reported one carries no mark,
    and the turn is marked when any round was estimated."""
    recorder = Recorder.open()
    model = ScriptedModel(
        [
            [Call("echo", {}), Finish(usage=Usage(10, 2))],
            [Say("done"), Finish(usage=Usage(12, 3, estimated=True))],
        ]
    )
    builder = make_builder(model).tool(ScriptedTool("echo"))
    async with open_supervisor("traced", tracer_provider=recorder.provider):
        with builder.build() as session:
            turn = await session.run("echo")
    assert turn.usage == Usage(22, 5, estimated=True)
    first, second = recorder.of_kind("model_job")
    assert attr(first, "emelex.usage.estimated") is None
    assert attr(second, "emelex.usage.estimated") is True
    assert attr(second, "gen_ai.usage.output_tokens") == 3
    (turn_span,) = recorder.of_kind("turn")
    assert attr(turn_span, "emelex.usage.estimated") is True
    assert attr(turn_span, "gen_ai.usage.input_tokens") == 22
