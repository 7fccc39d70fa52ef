"""Guardrails over hooks: tripwires stop the turn with GuardrailTripped, rolled back
when no tool ran and checkpointed when one did."""

from __future__ import annotations

from collections.abc import Callable

import attrs
import pytest
import trio
import trio.testing

from emelex import EmelexError
from emelex.agent import (
    AgentCancellation,
    AgentError,
    AgentSessionBuilder,
    GuardrailResult,
    Guardrails,
    GuardrailTripped,
    HookContext,
    HookFailed,
    HookPoint,
    HookRefused,
    ModelJudge,
    ToolOutput,
    TurnCancelled,
)
from emelex.model import Message, Response, ToolCall, ToolDefinition
from emelex.testing import Call, Say, ScriptedModel, ScriptedTool

Make = Callable[..., AgentSessionBuilder]

POINTS: tuple[HookPoint, ...] = (
    "before_model_request",
    "after_model_response",
    "before_tool_call",
    "after_tool_result",
    "before_commit",
)


@attrs.define
class Words:
    """Trips on any of ``banned`` in the input, the output, a call's name or a result."""

    banned: tuple[str, ...]
    name: str = "words"
    seen: list[str] = attrs.Factory(list)

    def _look(self, text: str) -> GuardrailResult:
        self.seen.append(text)
        hit = [word for word in self.banned if word in text]
        return GuardrailResult.trip(f"mentions {hit[0]}", hit) if hit else GuardrailResult.ok()

    async def check_input(self, ctx: HookContext, message: Message) -> GuardrailResult:
        return self._look(message.text)

    async def check_output(self, ctx: HookContext, response: Response) -> GuardrailResult:
        return self._look(response.text)

    async def check_call(
        self, ctx: HookContext, call: ToolCall, tool: ToolDefinition
    ) -> GuardrailResult:
        return self._look(call.name)

    async def check_result(
        self, ctx: HookContext, call: ToolCall, output: ToolOutput
    ) -> GuardrailResult:
        return self._look(output.text)


def test_guardrail_tripped_is_in_the_error_tree() -> None:
    assert issubclass(GuardrailTripped, HookRefused)
    assert issubclass(GuardrailTripped, AgentError)
    assert issubclass(GuardrailTripped, EmelexError)


async def test_an_input_tripwire_stops_before_the_model_and_rolls_back(
    make_builder: Make,
) -> None:
    model = ScriptedModel([[Say("never")]])
    hook = Guardrails(input=[Words(("password",))])
    with make_builder(model).hook(hook).build() as session:
        with pytest.raises(GuardrailTripped) as caught:
            await session.run("what is the admin password?")
        assert session.history == ()
    error = caught.value
    assert (error.guardrail, error.kind, error.reason) == ("words", "input", "mentions password")
    assert error.info == ["password"] and error.rolled_back is True
    assert model.calls_made == 0


async def test_the_input_guardrail_checks_only_the_first_round(make_builder: Make) -> None:
    words = Words(("zzz",))
    model = ScriptedModel([[Call("t", {})], [Say("fine")]])
    builder = make_builder(model).tool(ScriptedTool("t")).hook(Guardrails(input=[words]))
    with builder.build() as session:
        await session.run("hello")
    assert words.seen == ["hello"]


async def test_an_output_tripwire_rolls_back_a_turn_that_ran_no_tool(make_builder: Make) -> None:
    model = ScriptedModel([[Say("the secret is 42")]])
    with make_builder(model).hook(Guardrails(output=[Words(("secret",))])).build() as session:
        with pytest.raises(GuardrailTripped) as caught:
            await session.run("go")
        assert session.history == ()
    assert caught.value.kind == "output" and caught.value.rolled_back is True


async def test_an_output_tripwire_checkpoints_a_turn_that_ran_a_tool(make_builder: Make) -> None:
    tool = ScriptedTool("t")
    model = ScriptedModel([[Call("t", {})], [Say("the secret is 42")]])
    builder = make_builder(model).tool(tool).hook(Guardrails(output=[Words(("secret",))]))
    with builder.build() as session:
        with pytest.raises(GuardrailTripped) as caught:
            await session.run("go")
        assert caught.value.rolled_back is False
        assert session.history == caught.value.checkpoint
        assert [m.role for m in session.history] == ["user", "assistant", "tool"]
        assert "the secret is 42" not in [m.text for m in session.history]
    assert len(tool.started) == 1


async def test_a_tool_call_tripwire_stops_before_the_call_runs(make_builder: Make) -> None:
    tool = ScriptedTool("drop_tables")
    model = ScriptedModel([[Call("drop_tables", {})], [Say("never")]])
    builder = make_builder(model).tool(tool).hook(Guardrails(tool=[Words(("drop",))]))
    with builder.build() as session:
        with pytest.raises(GuardrailTripped) as caught:
            await session.run("go")
        assert session.history == ()
    assert caught.value.point == "before_tool_call" and tool.started == []


async def test_a_tool_result_tripwire_withholds_the_result_and_checkpoints(
    make_builder: Make,
) -> None:
    tool = ScriptedTool("t")  # answers "t done"
    model = ScriptedModel([[Call("t", {})], [Say("never")]])
    builder = make_builder(model).tool(tool).hook(Guardrails(tool=[Words(("done",))]))
    with builder.build() as session:
        with pytest.raises(GuardrailTripped) as caught:
            await session.run("go")
        assert caught.value.rolled_back is False
        (result,) = [m for m in session.history if m.role == "tool"]
    assert "t done" not in result.text and result.text.startswith("result withheld")


async def test_a_guardrail_returning_garbage_fails_the_turn(make_builder: Make) -> None:
    class Garbage:
        async def check_output(self, ctx: HookContext, response: Response) -> object:
            return True

    hook = Guardrails(output=[Garbage()])  # type: ignore[list-item]
    with make_builder(ScriptedModel([[Say("hi")]])).hook(hook).build() as session:
        with pytest.raises(HookFailed, match="not a GuardrailResult"):
            await session.run("go")


def test_guardrails_check_their_protocols() -> None:
    with pytest.raises(TypeError, match="OutputGuardrail"):
        Guardrails(output=[object()])  # type: ignore[list-item]


async def test_a_model_judge_asks_a_separate_bounded_question(make_builder: Make) -> None:
    judge = ModelJudge("Answer BLOCK if the text is rude, else PASS.", max_tokens=4)
    model = ScriptedModel([[Say("you fool")], [Say("BLOCK")]])
    with make_builder(model).hook(Guardrails(output=[judge])).build() as session:
        with pytest.raises(GuardrailTripped, match="BLOCK") as caught:
            await session.run("go")
        assert session.history == ()
    judged = model.requests[1]
    assert [m.text for m in judged.messages][1] == "you fool"
    assert judged.options.max_tokens == 4 and judged.tools == ()
    assert isinstance(caught.value.info, Response)


async def test_a_passing_judge_lets_the_turn_commit(make_builder: Make) -> None:
    judge = ModelJudge("Answer BLOCK if the text is rude, else PASS.")
    model = ScriptedModel([[Say("PASS")], [Say("hello there")], [Say("PASS")]])
    hook = Guardrails(input=[judge], output=[judge])
    with make_builder(model).hook(hook).build() as session:
        turn = await session.run("hi")
    assert turn.response.text == "hello there"
    assert model.calls_made == 3


async def test_only_an_output_guardrail_never_withholds_a_tool_result(
    make_builder: Make, autojump_clock: trio.testing.MockClock
) -> None:
    # No tool guardrail reviews results, so a cancelled turn keeps the tool's result.
    tool = ScriptedTool("t", duration=10)
    model = ScriptedModel([[Call("t", {})], [Say("never")]])
    cancellation = AgentCancellation()
    builder = make_builder(model).tool(tool).hook(Guardrails(output=[Words(("x",))]))
    with builder.build() as session:
        async with trio.open_nursery() as nursery:

            async def cancel() -> None:
                await trio.sleep(5)
                cancellation.cancel()

            nursery.start_soon(cancel)
            with pytest.raises(TurnCancelled):
                await session.run("go", cancellation=cancellation)
        assert [m.text for m in session.history if m.role == "tool"] == ["t done"]


def test_guardrails_run_only_where_they_have_checks() -> None:
    hook = Guardrails(output=[Words(("x",))])
    assert [p for p in POINTS if hook.runs_at(p)] == ["before_commit"]
    hook = Guardrails(tool=[Words(("x",))])
    assert [p for p in POINTS if hook.runs_at(p)] == ["before_tool_call", "after_tool_result"]
