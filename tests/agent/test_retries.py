"""Corrections the model can act on and the retry budgets that bound them: the turn
core's accounting, and whole session turns with real tools."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import trio

from emelex.agent import (
    DEFAULT_MAX_RETRIES,
    DEFAULT_TOOL_RETRIES,
    AgentSession,
    InvalidToolDeclaration,
    ResourceCeilings,
    RetryBudgetExhausted,
    ToolCompleted,
    TurnCore,
)
from emelex.agent._ceilings import measure_messages
from emelex.agent._tool_table import ToolTable
from emelex.model import Completed, GenerationOptions, Message, Response, ToolCall, ToolDefinition
from emelex.testing import ApproveAll, Call, Say, ScriptedModel, ScriptedTool
from emelex.tools import (
    InvalidToolFunction,
    RetryWithFeedback,
    ToolCancellationPolicy,
    ToolInvocation,
    ToolOutput,
    tool,
)

SCHEMA = {
    "type": "object",
    "properties": {"n": {"type": "integer"}},
    "required": ["n"],
    "additionalProperties": False,
}


# -- the turn core ----------------------------------------------------------------------------


def make_core(tools: list[Any], *, max_retries: int = DEFAULT_MAX_RETRIES) -> TurnCore:
    table = ToolTable(tools)
    counter = itertools.count()
    return TurnCore(
        turn_id="turn-1",
        user_message=Message("user", "hi"),
        history=(),
        history_size=measure_messages(()),
        tools=table,
        enabled=frozenset(table.names),
        history_tools=frozenset(),
        strip_reasoning=False,
        options=GenerationOptions(),
        ceilings=ResourceCeilings(),
        make_id=lambda: f"018f0000-0000-7000-8000-{next(counter):012d}",
        max_retries=max_retries,
    )


def round_of(core: TurnCore, *calls: ToolCall) -> list[Any]:
    core.begin_round()
    core.on_model_event(Completed(Response("", tool_calls=calls)))
    plan, _ = core.end_round()
    return plan


def settle(core: TurnCore, plan: list[Any], output: ToolOutput | None = None) -> None:
    """Record every call's result (its immediate one, else ``output``) and finish."""
    for item in plan:
        result = item.immediate if item.immediate is not None else output
        assert result is not None
        core.record_result(item.call.id, result, executed=item.immediate is None)
    core.finish_batch()


def test_unparsable_arguments_become_a_correction_committed_as_empty_arguments() -> None:
    core = make_core([ScriptedTool("count", schema=SCHEMA)])
    why = 'the arguments were not valid JSON (...); they began: "{\\"n\\": "'
    (item,) = round_of(core, ToolCall("p1", "count", {}, arguments_error=why))
    assert item.immediate == ToolOutput.feedback(why)
    settle(core, [item])
    assistant, result = core.messages[1:]
    # The model's next request and the history hold the same thing: {} and the reason.
    assert assistant.tool_calls == (ToolCall(item.call.id, "count", {}),)
    assert assistant.tool_calls[0].arguments_error is None
    assert result.text == why and core.retries == 1


def test_corrections_count_once_per_round_and_per_tool() -> None:
    core = make_core([ScriptedTool("count", schema=SCHEMA), ScriptedTool("other", schema=SCHEMA)])
    # Three bad calls of one tool, one unknown tool: one retry of the turn, one of count.
    plan = round_of(
        core,
        ToolCall("a", "count", {"n": "x"}),
        ToolCall("b", "count", {}),
        ToolCall("c", "count", {"n": 1, "extra": 2}),
        ToolCall("d", "nope", {}),
    )
    assert all(item.immediate is not None and item.immediate.retry for item in plan)
    settle(core, plan)
    assert core.retries == 1 and core._tool_retries == {"count": 1}
    # A plain error result (not a correction) spends nothing.
    (item,) = round_of(core, ToolCall("e", "other", {"n": 1}))
    settle(core, [item], ToolOutput.error("disk full"))
    assert core.retries == 1


def test_the_tool_budget_is_spent_first_then_the_turn_budget() -> None:
    core = make_core([ScriptedTool("count", schema=SCHEMA)], max_retries=10)
    for _ in range(DEFAULT_TOOL_RETRIES):
        settle(core, round_of(core, ToolCall("a", "count", {})))
    with pytest.raises(RetryBudgetExhausted) as caught:
        settle(core, round_of(core, ToolCall("a", "count", {})))
    assert caught.value.tool == "count" and caught.value.maximum == DEFAULT_TOOL_RETRIES
    assert "invalid arguments at (root)" in caught.value.feedback
    # The round that spent the budget is in the turn: a checkpoint would show it.
    assert len(core.messages) == 1 + 2 * (DEFAULT_TOOL_RETRIES + 1)

    turn = make_core([ScriptedTool("count", schema=SCHEMA)], max_retries=1)
    settle(turn, round_of(turn, ToolCall("a", "nope", {})))
    with pytest.raises(RetryBudgetExhausted) as caught:
        settle(turn, round_of(turn, ToolCall("a", "nope", {})))
    assert caught.value.tool is None and caught.value.maximum == 1
    assert "unknown tool 'nope'" in str(caught.value)


def test_budgets_must_be_non_negative_integers() -> None:
    with pytest.raises(ValueError, match="max_retries"):
        make_core([], max_retries=-1)
    with pytest.raises(ValueError, match="max_retries"):
        make_core([], max_retries=True)

    class Odd:
        definition = ToolDefinition("odd", "", SCHEMA)
        cancellation_policy = ToolCancellationPolicy.INTERRUPTIBLE
        max_retries = "3"

        def approval_reason(self, arguments: Mapping[str, Any]) -> str | None:
            return None

        async def invoke(self, invocation: ToolInvocation) -> ToolOutput:
            return ToolOutput("")

    with pytest.raises(InvalidToolDeclaration, match="max_retries"):
        ToolTable([Odd()])
    with pytest.raises(InvalidToolFunction, match="max_retries"):
        tool(max_retries=-2)(_noop)


async def _noop() -> str:
    return ""


# -- whole turns ------------------------------------------------------------------------------


def build(
    tmp_path: Path, model: ScriptedModel, *tools: Any, max_retries: int | None = None
) -> AgentSession:
    builder = (
        AgentSession.builder(model, tmp_path)
        .include_file_tools(False)
        .include_shell_tool(False)
        .tools(tools)
        .approval_policy(ApproveAll())
    )
    if max_retries is not None:
        builder = builder.max_retries(max_retries)
    return builder.build()


async def test_retry_with_feedback_reaches_the_model_and_the_turn_goes_on(
    tmp_path: Path,
) -> None:
    seen: list[int] = []

    @tool
    async def square(n: int) -> str:
        """Square a positive number."""
        seen.append(n)
        if n <= 0:
            raise RetryWithFeedback(f"n must be positive, got {n}; try a positive number")
        return str(n * n)

    model = ScriptedModel([[Call("square", {"n": -3})], [Call("square", {"n": 3})], [Say("9")]])
    events: list[Any] = []
    with build(tmp_path, model, square) as session, trio.fail_after(10):
        turn = await session.run("square -3", on_event=events.append)
        history = session.history
    assert seen == [-3, 3] and turn.response.text == "9"
    outputs = [e.output for e in events if isinstance(e, ToolCompleted)]
    assert outputs[0] == ToolOutput.feedback("n must be positive, got -3; try a positive number")
    assert outputs[1] == ToolOutput("9")
    # What the model saw in round 2 is exactly what the session committed.
    second = model.requests[1].messages
    assert second == history[: len(second)]
    assert second[-1].text == outputs[0].text and history == turn.messages


async def test_any_agent_tool_may_ask_for_a_retry(tmp_path: Path) -> None:
    class Picky(ScriptedTool):
        async def invoke(self, invocation: ToolInvocation) -> ToolOutput:
            raise RetryWithFeedback("say please")

    picky = Picky("picky", schema=SCHEMA)
    model = ScriptedModel([[Call("picky", {"n": 1})], [Say("ok")]])
    events: list[Any] = []
    with build(tmp_path, model, picky) as session, trio.fail_after(10):
        await session.run("go", on_event=events.append)
    (completed,) = [e for e in events if isinstance(e, ToolCompleted)]
    assert completed.output == ToolOutput.feedback("say please") and completed.executed


async def test_a_tool_that_always_asks_again_fails_the_turn_typed(tmp_path: Path) -> None:
    calls: list[int] = []

    @tool(max_retries=1)
    async def stubborn(n: int) -> str:
        calls.append(n)
        raise RetryWithFeedback("never right")

    model = ScriptedModel([[Call("stubborn", {"n": k})] for k in range(5)])
    with build(tmp_path, model, stubborn) as session, trio.fail_after(10):
        with pytest.raises(RetryBudgetExhausted) as caught:
            await session.run("go")
        history = session.history
    assert calls == [0, 1] and model.calls_made == 2
    assert caught.value.tool == "stubborn" and caught.value.maximum == 1
    # The tool ran, so the complete rounds are committed as a checkpoint.
    assert caught.value.rolled_back is False
    assert history == caught.value.checkpoint
    assert [m.role for m in history] == ["user", "assistant", "tool", "assistant", "tool"]
    assert history[-1].text == "never right"


async def test_the_session_budget_bounds_invalid_calls_across_tools(tmp_path: Path) -> None:
    model = ScriptedModel(
        [[Call("a", {"n": "x"})], [Call("b", {})], [Call("a", {"n": 1.5})], [Say("no")]]
    )
    a, b = ScriptedTool("a", schema=SCHEMA), ScriptedTool("b", schema=SCHEMA)
    with build(tmp_path, model, a, b, max_retries=2) as session, trio.fail_after(10):
        with pytest.raises(RetryBudgetExhausted) as caught:
            await session.run("go")
        assert session.max_retries == 2
        # Nothing ran: the turn is rolled back whole.
        assert caught.value.rolled_back and session.history == ()
        assert caught.value.tool is None and model.calls_made == 3
        # The budget is settable between turns.
        session.max_retries = 0
        with pytest.raises(ValueError, match="max_retries"):
            session.max_retries = -1
    assert a.started == b.started == []
