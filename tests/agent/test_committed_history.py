"""History the harness committed versus history from outside, and the declarations a
request carries for every tool name its messages call (retired placeholders)."""

from __future__ import annotations

from collections.abc import Callable

import attrs
import pytest

from emelex.agent import (
    AgentSessionBuilder,
    CeilingExceeded,
    Hook,
    HookContext,
    InvalidHistory,
    ReplaceRequest,
    ResourceCeilings,
    ToolCompleted,
    ToolStarted,
    TurnCore,
    validate_history,
)
from emelex.agent._ceilings import RequestSize
from emelex.agent._retired import RETIRED_DESCRIPTION, retired_definition
from emelex.agent._tool_table import ToolTable
from emelex.model import (
    Completed,
    GenerationOptions,
    GenerationRequest,
    Message,
    Response,
    ToolCall,
    Usage,
)
from emelex.testing import Call, Say, ScriptedModel, ScriptedTool
from emelex.tools import ToolOutput

Make = Callable[..., AgentSessionBuilder]


def answered(*calls: tuple[str, str], text: str = "done") -> list[Message]:
    """One committed turn calling ``calls`` (id, name), each answered, then an answer."""
    return [
        Message("user", "go"),
        Message("assistant", "", tool_calls=tuple(ToolCall(i, n, {}) for i, n in calls)),
        *(Message("tool", f"unknown tool {n!r}", tool_call_id=i) for i, n in calls),
        Message("assistant", text),
    ]


def declared(request: GenerationRequest) -> dict[str, str]:
    return {tool.name: tool.description for tool in request.tools}


def called(request: GenerationRequest) -> set[str]:
    return {call.name for message in request.messages for call in message.tool_calls}


def test_outside_history_still_rejects_a_call_of_an_undeclared_tool(make_builder: Make) -> None:
    builder = make_builder(ScriptedModel([])).tool(ScriptedTool("t"))
    with pytest.raises(InvalidHistory, match="undeclared tool 'gone'"):
        builder.history(answered(("c1", "gone"))).build()


def test_committed_history_keeps_calls_of_tools_the_session_lacks(make_builder: Make) -> None:
    history = answered(("c1", "gone"), ("c2", "t"))
    plain = make_builder(ScriptedModel([])).tool(ScriptedTool("t"))
    builder = make_builder(ScriptedModel([])).tool(ScriptedTool("t"))
    with builder.history(history, committed=True).build() as session:
        assert session.history == tuple(history)
        # The placeholder widens nothing: same ceiling, same enabled set, same snapshot.
        assert session.available_tools == ("t",)
        assert session.enabled_tools == ("t",)
        assert session.authority_snapshot == plain.authority_snapshot()
        request = session.next_request("next")
    assert declared(request) == {"t": "scripted tool t", "gone": RETIRED_DESCRIPTION}
    assert request.tools[-1] == retired_definition("gone")


@pytest.mark.parametrize(
    ("history", "match"),
    [
        ([*answered(("c1", "gone")), *answered(("c1", "gone"))], "duplicate"),
        (answered(("c1", "gone"))[:2], "never answered"),
        ([Message("user", "x"), Message("tool", "r", tool_call_id="zz")], "answers no open"),
        ([Message("user", "x"), Message("system", "late")], "only come first"),
        (
            [*answered(("c1", "gone"))[:2], Message("user", "next")],
            "never answered",
        ),
    ],
)
def test_committed_history_is_still_checked_for_structure(
    make_builder: Make, history: list[Message], match: str
) -> None:
    builder = make_builder(ScriptedModel([])).history(history, committed=True)
    with pytest.raises(InvalidHistory, match=match):
        builder.build()


def test_committed_must_be_a_bool(make_builder: Make) -> None:
    with pytest.raises(TypeError, match="bool"):
        make_builder(ScriptedModel([])).history([], committed="yes")  # type: ignore[arg-type]


def test_a_disabled_tool_history_calls_keeps_its_own_declaration(make_builder: Make) -> None:
    builder = make_builder(ScriptedModel([])).tool(ScriptedTool("t")).tool(ScriptedTool("u"))
    with builder.history(answered(("c1", "t")), committed=True).build() as session:
        session.set_enabled_tools([])
        request = session.next_request("next")
    # "u" is neither enabled nor called: not declared. "t" keeps its real declaration.
    assert declared(request) == {"t": "scripted tool t"}


async def test_a_retired_name_is_never_executable(make_builder: Make) -> None:
    tool = ScriptedTool("t")
    model = ScriptedModel([[Call("gone", {})], [Say("ok")]])
    events: list[object] = []
    builder = make_builder(model).tool(tool).history(answered(("c1", "gone")), committed=True)
    with builder.build() as session:
        turn = await session.run("call it again", on_event=events.append)
    (result,) = [e for e in events if isinstance(e, ToolCompleted)]
    assert result.executed is False and result.output.is_error
    assert result.output.text.startswith("unknown tool 'gone' (available: t)")
    assert not [e for e in events if isinstance(e, ToolStarted)]
    assert tool.started == []
    assert turn.response.text == "ok"
    for request in model.requests:
        assert called(request) <= set(declared(request))
        assert declared(request)["gone"] == RETIRED_DESCRIPTION


async def test_an_unknown_name_is_declared_in_the_rounds_that_show_its_call(
    make_builder: Make,
) -> None:
    model = ScriptedModel([[Call("no_such_tool", {"x": 1})], [Say("sorry")], [Say("again")]])
    with make_builder(model).tool(ScriptedTool("t")).build() as session:
        await session.run("go")
        await session.run("more")
        assert session.available_tools == ("t",)
    first, second, third = model.requests
    assert declared(first) == {"t": "scripted tool t"}
    assert declared(second)["no_such_tool"] == RETIRED_DESCRIPTION
    assert called(third) == {"no_such_tool"} and "no_such_tool" in declared(third)


async def test_a_name_outside_the_tool_name_rule_gets_no_placeholder(make_builder: Make) -> None:
    model = ScriptedModel([[Call("no such tool", {})], [Say("sorry")]])
    with make_builder(model).tool(ScriptedTool("t")).build() as session:
        turn = await session.run("go")
    assert turn.response.text == "sorry"
    assert declared(model.requests[1]) == {"t": "scripted tool t"}


def test_placeholders_count_against_the_schema_ceiling(make_builder: Make) -> None:
    names = [f"gone_{n}" for n in range(20)]
    history = answered(*((f"c{n}", name) for n, name in enumerate(names)))
    builder = make_builder(ScriptedModel([])).max_schema_bytes(1000)
    with builder.history(history, committed=True).build() as session:
        with pytest.raises(CeilingExceeded, match="max_schema_bytes"):
            session.next_request("next")


def test_only_names_the_fitted_request_calls_get_placeholders(make_builder: Make) -> None:
    history = [*answered(("c1", "gone")), Message("user", "later"), Message("assistant", "ok")]
    builder = make_builder(ScriptedModel([])).max_messages(4)
    with builder.history(history, committed=True).build() as session:
        request = session.next_request("next")
    # The turn that called "gone" no longer fits in the request: nothing to declare.
    assert [m.text for m in request.messages] == ["later", "ok", "next"]
    assert request.tools == ()


async def test_a_hook_may_hand_back_a_request_with_placeholders(make_builder: Make) -> None:
    class Note(Hook):
        async def before_model_request(
            self, ctx: HookContext, request: GenerationRequest
        ) -> ReplaceRequest:
            extra = (*request.messages, Message("user", "Answer briefly."))
            return ReplaceRequest(attrs.evolve(request, messages=extra))

    model = ScriptedModel([[Say("ok")]])
    builder = make_builder(model).hook(Note()).history(answered(("c1", "gone")), committed=True)
    with builder.build() as session:
        turn = await session.run("go")
    assert turn.response.text == "ok"
    assert declared(model.requests[0]) == {"gone": RETIRED_DESCRIPTION}


def test_the_validator_checks_declarations_only_when_given_them() -> None:
    history = answered(("c1", "gone"))
    validate_history(history, None)  # committed: the call was answered, so it is replay
    with pytest.raises(InvalidHistory, match="undeclared tool 'gone'"):
        validate_history(history, ["t"])
    with pytest.raises(InvalidHistory, match="never answered"):
        validate_history(history[:2], None)


def test_the_pure_core_declares_an_unknown_name_from_the_round_after_its_call() -> None:
    table = ToolTable([ScriptedTool("t")])
    core = TurnCore(
        turn_id="turn-1",
        user_message=Message("user", "hi"),
        history=(),
        history_size=RequestSize(),
        tools=table,
        enabled=frozenset(table.names),
        history_tools=frozenset(),
        strip_reasoning=False,
        options=GenerationOptions(),
        ceilings=ResourceCeilings(),
    )
    core.start()
    first, _ = core.begin_round()
    assert [tool.name for tool in first.tools] == ["t"]
    calls = (ToolCall("p1", "nope", {}), ToolCall("p2", "t", {}))
    core.on_model_event(Completed(Response("", None, calls, Usage(), "tool_calls")))
    plan, _ = core.end_round()
    unknown, known = plan
    assert unknown.tool is None and unknown.immediate is not None
    assert unknown.immediate.text.startswith("unknown tool 'nope'")
    assert known.immediate is None  # the real tool is planned as usual
    core.record_result(unknown.call.id, unknown.immediate, executed=False)
    core.record_result(known.call.id, ToolOutput("ok"), executed=True)
    core.finish_batch()
    second, _ = core.begin_round()
    assert second.tools == (table["t"].definition, retired_definition("nope"))
