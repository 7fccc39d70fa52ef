"""Per-turn limits: the round limit (max_rounds) and the default max_tokens of a call."""

from __future__ import annotations

from collections.abc import Callable

import pytest

import emelex
from emelex import LimitExceeded
from emelex.agent import (
    DEFAULT_MAX_ROUNDS,
    DEFAULT_MAX_TOKENS,
    AgentError,
    AgentEvent,
    AgentSessionBuilder,
    ModelStarted,
    ResourceCeilings,
    RoundLimitExceeded,
    TurnCore,
    TurnFailed,
    TurnPhase,
)
from emelex.agent._ceilings import RequestSize
from emelex.agent._tool_table import ToolTable
from emelex.model import Completed, GenerationOptions, Message, Response, ToolCall
from emelex.testing import Call, Say, ScriptedApprovals, ScriptedModel, ScriptedTool
from emelex.tools import ToolOutput

Make = Callable[..., AgentSessionBuilder]


def forever(tool: str, rounds: int = 100) -> ScriptedModel:
    """A model that calls ``tool`` in every round it is asked for (100 is "forever" here:
    far past any limit these tests set)."""
    return ScriptedModel([[Call(tool, {"n": index})] for index in range(rounds)])


def test_round_limit_error_is_typed_and_exported() -> None:
    error = RoundLimitExceeded(16)
    assert isinstance(error, AgentError) and isinstance(error, LimitExceeded)
    assert isinstance(error, emelex.EmelexError)
    assert (error.limit, error.maximum, error.actual) == ("max_rounds", 16, 17)
    assert "16 model rounds" in str(error)
    assert emelex.RoundLimitExceeded is RoundLimitExceeded
    assert DEFAULT_MAX_ROUNDS == 16


def test_turn_core_refuses_a_round_past_the_limit() -> None:
    table = ToolTable([ScriptedTool("probe")])
    core = TurnCore(
        turn_id="t",
        user_message=Message("user", "go"),
        history=(),
        history_size=RequestSize(),
        tools=table,
        enabled=frozenset(table.names),
        history_tools=frozenset(),
        strip_reasoning=False,
        options=GenerationOptions(),
        ceilings=ResourceCeilings(),
        max_rounds=2,
    )
    for round_number in (1, 2):
        core.begin_round()
        core.on_model_event(Completed(Response("", tool_calls=(ToolCall("p", "probe", {}),))))
        (item,), _ = core.end_round()
        core.tool_started(item.call.id)
        core.record_result(item.call.id, ToolOutput("ok"), True)
        core.finish_batch()
        assert core.round == round_number
    with pytest.raises(RoundLimitExceeded):
        core.begin_round()
    assert core.phase is TurnPhase.READY  # nothing half-built: abort sees whole batches
    resolution = core.abort()
    assert not resolution.rolled_back
    assert [m.role for m in resolution.messages] == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
    ]


@pytest.mark.parametrize("bad", [0, -1, True, 2.5])
def test_turn_core_and_builder_reject_bad_limits(make_builder: Make, bad: object) -> None:
    builder = make_builder(ScriptedModel([]))
    with pytest.raises(ValueError, match="max_rounds"):
        builder.max_rounds(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="default_max_tokens"):
        builder.default_max_tokens(bad)  # type: ignore[arg-type]


async def test_a_model_calling_tools_forever_stops_at_the_default_limit(
    make_builder: Make,
) -> None:
    tool = ScriptedTool("probe")
    model = forever("probe")
    events: list[AgentEvent] = []
    with make_builder(model).tool(tool).build() as session:
        with pytest.raises(RoundLimitExceeded) as caught:
            await session.run("loop", on_event=events.append)
        # Tools ran: the complete rounds are kept as a checkpoint, nothing half-done.
        assert caught.value.rolled_back is False
        assert caught.value.checkpoint == session.history
        history = session.history
    assert len(model.requests) == DEFAULT_MAX_ROUNDS
    assert len(tool.finished) == DEFAULT_MAX_ROUNDS
    assert [m.role for m in history] == ["user"] + ["assistant", "tool"] * DEFAULT_MAX_ROUNDS
    calls = [call.id for m in history for call in m.tool_calls]
    results = [m.tool_call_id for m in history if m.role == "tool"]
    assert calls == results  # structurally complete: every call has its one result
    assert sum(isinstance(e, ModelStarted) for e in events) == DEFAULT_MAX_ROUNDS
    assert isinstance(events[-1], TurnFailed)
    assert events[-1].rolled_back is False
    assert "max_rounds" in events[-1].error


async def test_the_round_limit_is_a_builder_setting_and_the_session_stays_usable(
    make_builder: Make,
) -> None:
    tool = ScriptedTool("probe")
    rounds = [[Call("probe", {"n": i})] for i in range(3)] + [[Say("answer")]]
    model = ScriptedModel(rounds)
    with make_builder(model).tool(tool).max_rounds(3).build() as session:
        assert session.max_rounds == 3
        with pytest.raises(RoundLimitExceeded, match="3 model rounds"):
            await session.run("loop")
        assert len(tool.finished) == 3
        turn = await session.run("now answer")  # the next turn starts afresh
        assert turn.response.text == "answer"
        assert turn.rounds == 1
        with pytest.raises(ValueError, match="max_rounds"):
            session.max_rounds = 0
        session.max_rounds = 1  # settable between turns
        assert session.next_request("x").options.max_tokens == DEFAULT_MAX_TOKENS


async def test_a_turn_that_answers_in_its_last_round_succeeds(make_builder: Make) -> None:
    model = ScriptedModel([[Call("probe", {})], [Say("done")]])
    with make_builder(model).tool(ScriptedTool("probe")).max_rounds(2).build() as session:
        turn = await session.run("go")
    assert turn.response.text == "done"
    assert turn.rounds == 2


async def test_round_limit_rolls_back_when_no_tool_may_have_run(make_builder: Make) -> None:
    # Every call is denied: nothing ran, so the failed turn commits nothing.
    tool = ScriptedTool("probe", approval="probe the host")
    approvals = ScriptedApprovals([False] * 10)
    model = forever("probe")
    builder = make_builder(model).tool(tool).approval_policy(approvals).max_rounds(2)
    with builder.build() as session:
        with pytest.raises(RoundLimitExceeded) as caught:
            await session.run("loop")
        assert caught.value.rolled_back is True
        assert caught.value.checkpoint == ()
        assert session.history == ()
    assert tool.started == []
    assert len(approvals.asked) == 2  # one call per round, each denied
    assert approvals.asked[0].workspace_root is not None  # policies see the root


async def test_default_max_tokens_fills_an_unset_limit(make_builder: Make) -> None:
    model = ScriptedModel([[Say("a")], [Say("b")], [Say("c")], [Say("d")]])
    with make_builder(model).build() as session:
        assert session.next_request("x").options.max_tokens == DEFAULT_MAX_TOKENS == 1024
        await session.run("one")
        await session.run("two", options=GenerationOptions(max_tokens=7))
    seen = [request.options.max_tokens for request in model.requests]
    assert seen == [1024, 7]


async def test_session_options_win_over_the_default_and_none_removes_it(
    make_builder: Make,
) -> None:
    model = ScriptedModel([[Say("a")], [Say("b")]])
    builder = make_builder(model).options(GenerationOptions(max_tokens=50, temperature=0.5))
    with builder.build() as session:
        await session.run("one")
    unlimited = ScriptedModel([[Say("a")]])
    with make_builder(unlimited).default_max_tokens(None).build() as session:
        await session.run("one")
    custom = ScriptedModel([[Say("a")]])
    with make_builder(custom).default_max_tokens(300).build() as session:
        await session.run("one")
    assert model.requests[0].options.max_tokens == 50
    assert model.requests[0].options.temperature == 0.5
    assert unlimited.requests[0].options.max_tokens is None
    assert custom.requests[0].options.max_tokens == 300


async def test_setting_max_rounds_between_turns_applies_to_the_next_turn(
    make_builder: Make,
) -> None:
    tool = ScriptedTool("probe")
    model = ScriptedModel([[Call("probe", {})], [Say("one")], [Call("probe", {})], [Say("x")]])
    with make_builder(model).tool(tool).build() as session:
        assert (await session.run("a")).rounds == 2
        session.max_rounds = 1
        with pytest.raises(RoundLimitExceeded, match="1 model round ") as caught:
            await session.run("b")
        assert caught.value.rolled_back is False  # the probe ran in round 1
    assert len(tool.finished) == 2
