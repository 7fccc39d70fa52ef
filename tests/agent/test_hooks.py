"""Lifecycle hooks: each point's powers, re-validation of rewrites, records, and the
turn's cancellation and rollback/checkpoint rules around them."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from emelex.agent import (
    AgentCancellation,
    AgentEvent,
    AgentSessionBuilder,
    ApprovalContext,
    ApprovalDecision,
    Approve,
    FailTurn,
    Hook,
    HookApplied,
    HookContext,
    HookFailed,
    HookRefused,
    RefuseCall,
    ReplaceArguments,
    ReplaceRequest,
    ReplaceResult,
    ToolCancellationPolicy,
    ToolInvocation,
    ToolOutput,
    TurnCancelled,
)
from emelex.agent._hook_runner import HOOK_MAX_TOKENS, WITHHELD_CANCELLED
from emelex.model import (
    GenerationRequest,
    Message,
    Response,
    ToolCall,
    ToolDefinition,
)
from emelex.testing import Call, Say, ScriptedModel, ScriptedTool

Make = Callable[..., AgentSessionBuilder]

PATH_SCHEMA = {
    "type": "object",
    "properties": {"path": {"type": "string", "maxLength": 20}},
    "required": ["path"],
    "additionalProperties": False,
}


@attrs.define
class PathTool:
    """Records the arguments it ran with; asks approval for every call."""

    ran: list[dict[str, Any]] = attrs.Factory(list)
    policy: ToolCancellationPolicy = ToolCancellationPolicy.FINISH_ONCE_STARTED
    duration: float = 0.0

    @property
    def definition(self) -> ToolDefinition:
        return ToolDefinition("read", "read a path", PATH_SCHEMA)

    @property
    def cancellation_policy(self) -> ToolCancellationPolicy:
        return self.policy

    def approval_reason(self, arguments: Mapping[str, Any]) -> str | None:
        return f"read {arguments['path']}"

    async def invoke(self, invocation: ToolInvocation) -> ToolOutput:
        self.ran.append(dict(invocation.arguments))
        await trio.sleep(self.duration)
        return ToolOutput(f"contents of {invocation.arguments['path']}: token=sk-123")


@attrs.define
class Recording:
    asked: list[ApprovalContext] = attrs.Factory(list)

    async def decide(self, context: ApprovalContext) -> ApprovalDecision:
        self.asked.append(context)
        return Approve()


class Redirect(Hook):
    def __init__(self, arguments: dict[str, Any]) -> None:
        self.arguments = arguments

    async def before_tool_call(
        self, ctx: HookContext, call: ToolCall, tool: ToolDefinition
    ) -> ReplaceArguments:
        return ReplaceArguments(self.arguments)


def tool_texts(messages: Sequence[Message]) -> list[str]:
    return [m.text for m in messages if m.role == "tool"]


async def test_a_rewrite_is_revalidated_approved_as_rewritten_and_recorded(
    make_builder: Make,
) -> None:
    tool, approvals, events = PathTool(), Recording(), list[AgentEvent]()
    model = ScriptedModel([[Call("read", {"path": "../secret"})], [Say("done")]])
    builder = make_builder(model).tool(tool).approval_policy(approvals)
    with builder.hook(Redirect({"path": "notes.txt"})).build() as session:
        turn = await session.run("go", on_event=events.append)
    # The policy decided on the arguments that ran, and only those ran.
    assert [c.call.arguments for c in approvals.asked] == [{"path": "notes.txt"}]
    assert approvals.asked[0].reason == "read notes.txt"
    assert tool.ran == [{"path": "notes.txt"}]
    # History shows the call that ran; the record keeps what the model proposed.
    assistant = turn.messages[1]
    assert assistant.tool_calls[0].arguments == {"path": "notes.txt"}
    (record,) = turn.hooks
    assert (record.point, record.hook, record.call_id) == (
        "before_tool_call",
        "Redirect",
        assistant.tool_calls[0].id,
    )
    assert (record.before, record.after) == ({"path": "../secret"}, {"path": "notes.txt"})
    assert [e.record for e in events if isinstance(e, HookApplied)] == [record]
    # The next round's request shows the model its call as it ran.
    assert model.requests[1].messages[-2].tool_calls[0].arguments == {"path": "notes.txt"}


@pytest.mark.parametrize(
    "arguments",
    [{"path": 7}, {"path": "x" * 21}, {"other": "x"}],
    ids=["wrong type", "over maxLength", "unknown property"],
)
async def test_a_rewrite_outside_the_schema_fails_the_turn_before_approval(
    make_builder: Make, arguments: dict[str, Any]
) -> None:
    tool, approvals = PathTool(), Recording()
    model = ScriptedModel([[Call("read", {"path": "a"})], [Say("never")]])
    builder = make_builder(model).tool(tool).approval_policy(approvals)
    with builder.hook(Redirect(arguments)).build() as session:
        with pytest.raises(HookFailed, match="fail its schema") as caught:
            await session.run("go")
        assert session.history == ()
    assert caught.value.rolled_back is True
    assert approvals.asked == [] and tool.ran == []


async def test_a_refused_call_gets_an_error_result_and_the_turn_goes_on(
    make_builder: Make,
) -> None:
    class NoReads(Hook):
        async def before_tool_call(
            self, ctx: HookContext, call: ToolCall, tool: ToolDefinition
        ) -> RefuseCall:
            return RefuseCall("reads are off today")

    tool, approvals = PathTool(), Recording()
    model = ScriptedModel([[Call("read", {"path": "a"})], [Say("ok")]])
    builder = make_builder(model).tool(tool).approval_policy(approvals).hook(NoReads())
    with builder.build() as session:
        turn = await session.run("go")
    assert tool.ran == [] and approvals.asked == []
    assert tool_texts(turn.messages) == ["refused by hook 'NoReads': reads are off today"]
    assert turn.response.text == "ok"


class Redact(Hook):
    async def after_tool_result(
        self, ctx: HookContext, call: ToolCall, output: ToolOutput
    ) -> ReplaceResult | None:
        if "sk-" not in output.text:
            return None
        return ReplaceResult(ToolOutput(output.text.replace("sk-123", "[redacted]")))


async def test_a_replaced_result_is_what_history_and_the_model_get(make_builder: Make) -> None:
    model = ScriptedModel([[Call("read", {"path": "a"})], [Say("ok")]])
    builder = make_builder(model).tool(PathTool()).approval_policy(Recording()).hook(Redact())
    with builder.build() as session:
        turn = await session.run("go")
    assert tool_texts(turn.messages) == ["contents of a: token=[redacted]"]
    assert "sk-123" not in repr(model.requests[1].messages)
    assert [r.point for r in turn.hooks] == ["after_tool_result"]
    # The record proves a replacement without keeping the secret it removed.
    assert turn.hooks[0].before.startswith("sha256:") and "sk-123" not in repr(turn.hooks)
    assert turn.hooks[0].after == ToolOutput("contents of a: token=[redacted]")


async def test_a_cancelled_turn_withholds_a_result_its_hooks_did_not_review(
    make_builder: Make, autojump_clock: trio.testing.MockClock
) -> None:
    tool = PathTool(duration=10)
    model = ScriptedModel([[Call("read", {"path": "a"})], [Say("never")]])
    cancellation = AgentCancellation()
    builder = make_builder(model).tool(tool).approval_policy(Recording()).hook(Redact())
    with builder.build() as session:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: _cancel_after(cancellation, 5))
            with pytest.raises(TurnCancelled) as caught:
                await session.run("go", cancellation=cancellation)
        # The tool finished (FINISH_ONCE_STARTED); its unreviewed text stayed out.
        assert tool.ran == [{"path": "a"}]
        assert tool_texts(session.history) == [WITHHELD_CANCELLED]
    assert caught.value.rolled_back is False


async def _cancel_after(cancellation: AgentCancellation, seconds: float) -> None:
    await trio.sleep(seconds)
    cancellation.cancel()


async def test_a_replaced_request_is_what_the_model_gets_and_is_recorded(
    make_builder: Make,
) -> None:
    class Prefix(Hook):
        async def before_model_request(
            self, ctx: HookContext, request: GenerationRequest
        ) -> ReplaceRequest:
            note = Message("user", "Answer briefly.")
            return ReplaceRequest(attrs.evolve(request, messages=(*request.messages, note)))

    model = ScriptedModel([[Say("ok")]])
    with make_builder(model).hook(Prefix()).build() as session:
        turn = await session.run("go")
    assert model.requests[0].messages[-1].text == "Answer briefly."
    (record,) = turn.hooks
    assert record.after is model.requests[0]
    # History keeps the conversation; the record keeps what the model saw.
    assert [m.text for m in turn.messages] == ["go", "ok"]


async def test_a_replaced_request_over_a_ceiling_fails_the_turn(make_builder: Make) -> None:
    class Flood(Hook):
        async def before_model_request(
            self, ctx: HookContext, request: GenerationRequest
        ) -> ReplaceRequest:
            flood = tuple(Message("user", "x") for _ in range(50))
            return ReplaceRequest(attrs.evolve(request, messages=flood))

    model = ScriptedModel([[Say("never")]])
    with make_builder(model).max_messages(10).hook(Flood()).build() as session:
        with pytest.raises(HookFailed, match="max_messages"):
            await session.run("go")
    assert model.calls_made == 0


class StopAtCommit(Hook):
    async def before_commit(
        self, ctx: HookContext, response: Response, messages: Sequence[Message]
    ) -> FailTurn | None:
        return FailTurn("answer not allowed") if "bad" in response.text else None


async def test_failing_at_commit_rolls_back_a_turn_without_tools(make_builder: Make) -> None:
    model = ScriptedModel([[Say("bad answer")]])
    with make_builder(model).hook(StopAtCommit()).build() as session:
        with pytest.raises(HookRefused) as caught:
            await session.run("go")
        assert session.history == ()
    assert (caught.value.hook, caught.value.point) == ("StopAtCommit", "before_commit")
    assert caught.value.rolled_back is True


async def test_failing_at_commit_checkpoints_a_turn_that_ran_a_tool(make_builder: Make) -> None:
    model = ScriptedModel([[Call("t", {})], [Say("bad answer")]])
    builder = make_builder(model).tool(ScriptedTool("t")).hook(StopAtCommit())
    with builder.build() as session:
        with pytest.raises(HookRefused) as caught:
            await session.run("go")
        assert caught.value.rolled_back is False
        assert session.history == caught.value.checkpoint
        # The refused answer is not part of the checkpoint.
        assert "bad answer" not in [m.text for m in session.history]
        assert tool_texts(session.history) == ["t done"]


async def test_a_hook_that_raises_fails_the_turn_with_its_cause(make_builder: Make) -> None:
    class Broken(Hook):
        async def after_model_response(self, ctx: HookContext, response: Response) -> None:
            raise KeyError("oops")

    model = ScriptedModel([[Say("hi")]])
    with make_builder(model).hook(Broken()).build() as session:
        with pytest.raises(HookFailed, match="KeyError") as caught:
            await session.run("go")
    assert isinstance(caught.value.__cause__, KeyError)


async def test_a_value_the_point_does_not_allow_fails_the_turn(make_builder: Make) -> None:
    class Confused(Hook):
        async def after_model_response(self, ctx: HookContext, response: Response) -> Any:
            return ReplaceResult(ToolOutput("no"))

    with make_builder(ScriptedModel([[Say("hi")]])).hook(Confused()).build() as session:
        with pytest.raises(HookFailed, match="after_model_response"):
            await session.run("go")


async def test_cancelling_the_turn_cancels_a_waiting_hook(
    make_builder: Make, autojump_clock: trio.testing.MockClock
) -> None:
    class Slow(Hook):
        cancelled = False

        async def before_model_request(self, ctx: HookContext, request: GenerationRequest) -> None:
            try:
                await trio.sleep_forever()
            except trio.Cancelled:
                Slow.cancelled = True
                raise

    model = ScriptedModel([[Say("never")]])
    cancellation = AgentCancellation()
    with make_builder(model).hook(Slow()).build() as session:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: _cancel_after(cancellation, 3))
            with pytest.raises(TurnCancelled) as caught:
                await session.run("go", cancellation=cancellation)
            assert trio.current_time() == pytest.approx(3)
    assert Slow.cancelled and caught.value.rolled_back is True
    assert model.calls_made == 0


async def test_a_hook_asks_the_model_a_separate_bounded_question(make_builder: Make) -> None:
    seen: list[Response] = []

    class Judge(Hook):
        async def before_commit(
            self, ctx: HookContext, response: Response, messages: Sequence[Message]
        ) -> None:
            request = GenerationRequest((Message("user", f"Is {response.text!r} polite?"),))
            seen.append(await ctx.generate(request))

    model = ScriptedModel([[Say("hello")], [Say("yes")]])
    with make_builder(model).hook(Judge()).build() as session:
        turn = await session.run("go")
        assert session.history == turn.messages
    assert [r.text for r in seen] == ["yes"]
    # Its request stays out of the conversation and is bounded.
    assert [m.text for m in turn.messages] == ["go", "hello"]
    assert model.requests[1].options.max_tokens == HOOK_MAX_TOKENS


def test_only_hooks_are_accepted(make_builder: Make) -> None:
    with pytest.raises(TypeError, match="not a Hook"):
        make_builder(ScriptedModel([])).hook(object())  # type: ignore[arg-type]
