"""@tool and FunctionTool: schemas from type hints, docstrings, conversion, context,
approval rules and results, exercised through real session turns."""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal, NotRequired, TypedDict, TypeVar

import attrs
import pytest
import trio

from emelex.agent import (
    AgentEvent,
    AgentSession,
    ApprovalPolicy,
    ApprovalRequested,
    ToolCompleted,
    ToolProgress,
    TurnCancelled,
)
from emelex.model import Message, TextPart, ToolCall
from emelex.runtime import AgentCancellation
from emelex.testing import ApproveAll, Call, Say, ScriptedApprovals, ScriptedModel, Wait
from emelex.tools import (
    AgentTool,
    ArgumentValidator,
    ToolCancellationPolicy,
    ToolInvocation,
    ToolOutput,
)
from emelex.tools._function import (
    ArgumentConversionError,
    FunctionTool,
    InvalidToolFunction,
    ToolCallContext,
    ToolError,
    UnsupportedAnnotation,
    parse_docstring,
    tool,
)
from emelex.tools._schema import schema_for

# -- helpers -----------------------------------------------------------------------------


def text_of(message: Message) -> str:
    return "".join(part.text for part in message.content if isinstance(part, TextPart))


@attrs.define
class Run:
    session: AgentSession
    model: ScriptedModel
    events: list[AgentEvent]

    @property
    def outputs(self) -> list[ToolOutput]:
        return [e.output for e in self.events if isinstance(e, ToolCompleted)]

    @property
    def reasons(self) -> list[str]:
        return [e.reason for e in self.events if isinstance(e, ApprovalRequested)]


async def run_calls(
    tmp_path: Path,
    tools: Sequence[AgentTool],
    calls: Sequence[Call],
    approval: ApprovalPolicy | None = None,
) -> Run:
    model = ScriptedModel([list(calls), [Say("done")]])
    builder = (
        AgentSession.builder(model, tmp_path)
        .include_file_tools(False)
        .include_shell_tool(False)
        .tools(tools)
    )
    if approval is not None:
        builder = builder.approval_policy(approval)
    session = builder.build()
    events: list[AgentEvent] = []
    with session:
        await session.run("go", on_event=events.append)
    return Run(session, model, events)


def invocation(name: str, arguments: dict[str, Any], **extra: Any) -> ToolInvocation:
    return ToolInvocation(
        ToolCall("call-1", name, arguments), AgentCancellation(), "turn-1", "session-1", **extra
    )


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


@attrs.frozen
class Point:
    """A point on the plane."""

    x: int
    y: int = 0


@dataclasses.dataclass
class Box:
    width: float
    label: str = "box"


class Filters(TypedDict):
    tag: str
    limit: NotRequired[int]


# -- schemas -----------------------------------------------------------------------------


def test_scalar_parameters_become_a_closed_schema_with_required_names() -> None:
    @tool
    async def scalars(text: str, count: int, ratio: float, flag: bool = False) -> str:
        return text

    assert scalars.parameters == {
        "type": "object",
        "properties": {
            "text": {"type": "string"},
            "count": {"type": "integer"},
            "ratio": {"type": "number"},
            "flag": {"type": "boolean", "default": False},
        },
        "required": ["text", "count", "ratio"],
        "additionalProperties": False,
    }


@pytest.mark.parametrize(
    ("annotation", "expected"),
    [
        (Literal["a", "b"], {"type": "string", "enum": ["a", "b"]}),
        (Literal[1, "x"], {"enum": [1, "x"]}),
        (Color, {"type": "string", "enum": ["red", "blue"]}),
        (int | None, {"type": ["integer", "null"]}),
        (Point | None, {"anyOf": [schema_for(Point), {"type": "null"}]}),
        (int | str, {"anyOf": [{"type": "integer"}, {"type": "string"}]}),
        (list[int], {"type": "array", "items": {"type": "integer"}}),
        (Sequence[str], {"type": "array", "items": {"type": "string"}}),
        (set[str], {"type": "array", "uniqueItems": True, "items": {"type": "string"}}),
        (tuple[int, ...], {"type": "array", "items": {"type": "integer"}}),
        (
            tuple[int, str],
            {
                "type": "array",
                "prefixItems": [{"type": "integer"}, {"type": "string"}],
                "items": False,
                "minItems": 2,
                "maxItems": 2,
            },
        ),
        (dict[str, int], {"type": "object", "additionalProperties": {"type": "integer"}}),
        (Mapping[str, Any], {"type": "object", "additionalProperties": True}),
        (Any, {}),
        (Annotated[str, "the name"], {"type": "string", "description": "the name"}),
    ],
)
def test_type_hints_map_to_json_schema(annotation: Any, expected: dict[str, Any]) -> None:
    assert schema_for(annotation) == expected


def test_attrs_dataclass_and_typeddict_become_closed_objects() -> None:
    assert schema_for(Point) == {
        "type": "object",
        "properties": {"x": {"type": "integer"}, "y": {"type": "integer", "default": 0}},
        "required": ["x"],
        "additionalProperties": False,
        "description": "A point on the plane.",
    }
    assert schema_for(Box) == {
        "type": "object",
        "properties": {
            "width": {"type": "number"},
            "label": {"type": "string", "default": "box"},
        },
        "required": ["width"],
        "additionalProperties": False,
    }
    assert schema_for(Filters) == {
        "type": "object",
        "properties": {"tag": {"type": "string"}, "limit": {"type": "integer"}},
        "required": ["tag"],
        "additionalProperties": False,
    }


@pytest.mark.parametrize("annotation", [bytes, dict[int, str], complex, Literal[b"x"]])
def test_unsupported_hints_raise_a_typed_error(annotation: Any) -> None:
    with pytest.raises(UnsupportedAnnotation):
        schema_for(annotation)


def test_recursive_classes_are_refused() -> None:
    @attrs.frozen
    class Node:
        children: list[Node]

    with pytest.raises(UnsupportedAnnotation, match="recursive"):
        schema_for(Node, localns={"Node": Node})


# -- docstrings and metadata -------------------------------------------------------------


def test_google_docstring_gives_description_and_parameter_descriptions() -> None:
    @tool
    async def search(query: str, limit: int = 10) -> str:
        """Search the catalogue for items.

        Spans only the first paragraph.

        Args:
            query: What to look for,
                in plain words.
            limit (int): Most items to return.

        Returns:
            The matches.
        """
        return query

    assert search.name == "search"
    assert search.description == "Search the catalogue for items."
    props = search.parameters["properties"]
    assert props["query"]["description"] == "What to look for, in plain words."
    assert props["limit"] == {
        "type": "integer",
        "description": "Most items to return.",
        "default": 10,
    }


def test_numpy_docstring_parameters() -> None:
    summary, params = parse_docstring(
        """Scale a shape.

        Parameters
        ----------
        x, y : float
            The factors.
        name : str
            Shape name.

        Returns
        -------
        float
            Unused.
        """
    )
    assert summary == "Scale a shape."
    assert params == {"x": "The factors.", "y": "The factors.", "name": "Shape name."}


def test_annotated_description_wins_over_the_docstring() -> None:
    @tool
    async def greet(name: Annotated[str, "Who to greet."]) -> str:
        """Greet.

        Args:
            name: ignored
        """
        return name

    assert greet.parameters["properties"]["name"]["description"] == "Who to greet."


def test_name_description_and_rename_overrides() -> None:
    @tool(name="transfer_money", description="Move money.", rename={"from_": "from"})
    async def transfer(from_: str, to: str) -> str:
        """Ignored summary."""
        return f"{from_}->{to}"

    assert transfer.name == "transfer_money"
    assert transfer.description == "Move money."
    assert list(transfer.parameters["properties"]) == ["from", "to"]
    assert transfer.parameters["required"] == ["from", "to"]


async def test_renamed_parameter_receives_the_model_argument(tmp_path: Path) -> None:
    @tool(rename={"from_": "from"})
    async def transfer(from_: str, to: str) -> str:
        return f"{from_}->{to}"

    run = await run_calls(tmp_path, [transfer], [Call("transfer", {"from": "a", "to": "b"})])
    assert run.outputs[0] == ToolOutput("a->b")


# -- decoration errors -------------------------------------------------------------------

T = TypeVar("T")


def _plain(x: int) -> int:
    return x


async def _args(*values: int) -> int:
    return 0


async def _kwargs(**values: int) -> int:
    return 0


async def _positional(x: int, /) -> int:
    return x


async def _generic(x: T) -> T:
    return x


async def _unannotated(x) -> int:  # type: ignore[no-untyped-def]
    return 0


async def _bytes(x: bytes) -> int:
    return 0


async def _late_context(x: int, ctx: ToolCallContext) -> int:
    return x


async def _agen(x: int):  # type: ignore[no-untyped-def]
    yield x


@pytest.mark.parametrize(
    ("function", "message"),
    [
        (_plain, "async def"),
        (_args, r"\*values"),
        (_kwargs, r"\*\*values"),
        (_positional, "positional-only"),
        (_generic, "generic"),
        (_unannotated, "no type annotation"),
        (_bytes, "no JSON Schema"),
        (_late_context, "must come first"),
        (_agen, "async generators"),
    ],
)
def test_unsuitable_functions_fail_at_decoration(function: Any, message: str) -> None:
    with pytest.raises(InvalidToolFunction, match=message):
        tool(function)


def test_bad_names_and_renames_fail_at_decoration() -> None:
    async def fine(a: int, b: int) -> int:
        return a

    with pytest.raises(InvalidToolFunction, match="tool name"):
        tool(name="has space")(fine)
    with pytest.raises(InvalidToolFunction, match="unknown parameters: c"):
        tool(rename={"c": "d"})(fine)
    with pytest.raises(InvalidToolFunction, match="two parameters"):
        tool(rename={"a": "b"})(fine)
    with pytest.raises(InvalidToolFunction, match="needs_approval"):
        tool(needs_approval="yes")(fine)  # type: ignore[call-overload]
    assert issubclass(InvalidToolFunction, TypeError)


# -- context, conversion and results -----------------------------------------------------


async def test_context_is_injected_and_progress_reaches_session_events(tmp_path: Path) -> None:
    seen: list[tuple[str, str, str]] = []

    @tool
    async def export(ctx: ToolCallContext, pages: int) -> str:
        """Export the report."""
        seen.append((ctx.session_id, ctx.turn_id, ctx.call_id))
        await ctx.progress(f"rendering {pages} pages", completed=0, total=pages)
        return f"exported for session {ctx.session_id}"

    assert list(export.parameters["properties"]) == ["pages"]
    run = await run_calls(tmp_path, [export], [Call("export", {"pages": 3})])
    progress = [e for e in run.events if isinstance(e, ToolProgress)]
    completed = [e for e in run.events if isinstance(e, ToolCompleted)]
    assert [(p.message, p.completed, p.total) for p in progress] == [("rendering 3 pages", 0, 3)]
    session_id, turn_id, call_id = seen[0]
    assert session_id == run.session.session_id
    assert turn_id == completed[0].turn_id
    assert call_id == completed[0].call_id == progress[0].call_id
    assert run.outputs[0].text == f"exported for session {session_id}"


async def test_arguments_are_converted_to_the_annotated_types(tmp_path: Path) -> None:
    received: list[Any] = []

    @tool
    async def draw(
        color: Color,
        points: list[Point],
        box: Box,
        span: tuple[int, int],
        filters: Filters | None = None,
    ) -> str:
        received.extend([color, points, box, span, filters])
        return "drawn"

    arguments = {
        "color": "blue",
        "points": [{"x": 1}, {"x": 2, "y": 3}],
        "box": {"width": 2},
        "span": [1, 2],
        "filters": {"tag": "t"},
    }
    run = await run_calls(tmp_path, [draw], [Call("draw", arguments)])
    assert run.outputs[0] == ToolOutput("drawn")
    assert received == [
        Color.BLUE,
        [Point(1, 0), Point(2, 3)],
        Box(2.0),
        (1, 2),
        {"tag": "t"},
    ]


async def test_return_values_become_outputs(tmp_path: Path) -> None:
    @tool
    async def as_text() -> str:
        return "plain"

    @tool
    async def as_output() -> ToolOutput:
        return ToolOutput("custom", is_error=True)

    @tool
    async def as_json() -> dict[str, Any]:
        return {"sum": 5, "point": Point(1, 2), "color": Color.RED, "text": "é"}

    @tool
    async def as_none() -> None:
        return None

    @tool
    async def unencodable() -> object:
        return object()

    run = await run_calls(
        tmp_path,
        [as_text, as_output, as_json, as_none, unencodable],
        [Call("as_text"), Call("as_output"), Call("as_json"), Call("as_none"), Call("unencodable")],
    )
    text, output, encoded, none, bad = run.outputs
    assert text == ToolOutput("plain")
    assert output == ToolOutput("custom", is_error=True)
    assert json.loads(encoded.text) == {
        "sum": 5,
        "point": {"x": 1, "y": 2},
        "color": "red",
        "text": "é",
    }
    assert "é" in encoded.text
    assert none == ToolOutput("null")
    assert bad.is_error and "cannot be encoded as JSON" in bad.text


async def test_tool_error_and_other_exceptions(tmp_path: Path) -> None:
    @tool
    async def refuses() -> str:
        raise ToolError("the account is locked")

    @tool
    async def crashes() -> str:
        raise RuntimeError("boom")

    run = await run_calls(tmp_path, [refuses, crashes], [Call("refuses"), Call("crashes")])
    assert run.outputs[0] == ToolOutput.error("the account is locked")
    assert run.outputs[1].is_error
    assert "crashes" in run.outputs[1].text and "boom" in run.outputs[1].text
    assert run.session.history[-1].role == "assistant"  # the turn went on


async def test_invalid_arguments_never_reach_the_function() -> None:
    calls: list[Any] = []

    @attrs.frozen
    class Positive:
        value: int = attrs.field(validator=attrs.validators.gt(0))

    @tool
    async def record(item: Positive, count: int = 1) -> str:
        calls.append(item)
        return "ok"

    schema_violation = await record.invoke(invocation("record", {"item": {"value": "x"}}))
    assert schema_violation.is_error and "invalid arguments at item/value" in schema_violation.text
    extra = await record.invoke(invocation("record", {"item": {"value": 1}, "other": 1}))
    assert extra.is_error and "other" in extra.text
    conversion = await record.invoke(invocation("record", {"item": {"value": -1}}))
    assert conversion.is_error and "invalid arguments" in conversion.text
    with pytest.raises(ArgumentConversionError):
        record.convert({"item": {"value": -1}})
    assert calls == []
    assert await record.invoke(invocation("record", {"item": {"value": 2}})) == ToolOutput("ok")
    assert calls == [Positive(2)]


async def test_the_decorated_object_still_calls_the_function() -> None:
    @tool
    async def add(left: int, right: int) -> int:
        """Add two integers."""
        return left + right

    assert isinstance(add, FunctionTool)
    assert isinstance(add, AgentTool)
    assert await add(2, 3) == 5
    assert add.cancellation_policy is ToolCancellationPolicy.FINISH_ONCE_STARTED
    assert tool(interruptible=True)(add.function).cancellation_policy is (
        ToolCancellationPolicy.INTERRUPTIBLE
    )


# -- approval ------------------------------------------------------------------------------


async def test_needs_approval_true_asks_on_every_call(tmp_path: Path) -> None:
    ran: list[str] = []

    @tool(needs_approval=True)
    async def deploy(target: str) -> str:
        ran.append(target)
        return "deployed"

    approvals = ApproveAll()
    run = await run_calls(
        tmp_path,
        [deploy],
        [Call("deploy", {"target": "a"}), Call("deploy", {"target": "a"})],
        approvals,
    )
    assert len(approvals.asked) == 2
    assert ran == ["a", "a"]
    assert run.reasons[0] == """run the tool 'deploy' with arguments {"target": "a"}"""
    assert approvals.asked[0].call.arguments == {"target": "a"}
    assert approvals.asked[0].session_id == run.session.session_id


async def test_rule_receives_the_generated_arguments_class(tmp_path: Path) -> None:
    seen: list[Any] = []

    def dangerous(args: Any) -> bool:
        seen.append(args)
        return "DROP" in args.sql

    @tool(needs_approval=dangerous)
    async def run_sql(sql: str, limit: int = 10) -> str:
        """Run one SQL statement."""
        return f"ran {sql}"

    assert run_sql.arguments_type is not None
    assert run_sql.arguments_type.__name__ == "RunSqlArgs"
    assert run_sql.gated
    approvals = ScriptedApprovals([False])
    run = await run_calls(
        tmp_path,
        [run_sql],
        [Call("run_sql", {"sql": "SELECT 1"}), Call("run_sql", {"sql": "DROP TABLE t"})],
        approvals,
    )
    assert [type(a).__name__ for a in seen] == ["RunSqlArgs", "RunSqlArgs"]
    assert seen[0].limit == 10
    assert len(approvals.asked) == 1
    assert "DROP TABLE t" in run.reasons[0] and "run_sql" in run.reasons[0]
    first, second = run.outputs
    assert first == ToolOutput("ran SELECT 1")
    assert second.is_error and "denied" in second.text
    tool_texts = [text_of(m) for m in run.session.history if m.role == "tool"]
    assert tool_texts == ["ran SELECT 1", second.text]


async def test_dynamic_tool_rules_and_context(tmp_path: Path) -> None:
    received: list[Any] = []
    rules: list[Any] = []

    async def echo(ctx: ToolCallContext, args: dict[str, Any]) -> Any:
        received.append((ctx.call_id, args))
        await ctx.progress("echoing")
        return args["text"]

    schema = {
        "type": "object",
        "properties": {"text": {"type": "string"}},
        "required": ["text"],
    }
    base = FunctionTool("echo", "Return the supplied text.", schema, echo)

    def rule(args: Mapping[str, Any]) -> bool:
        rules.append(args)
        return bool(args["text"] == "secret")

    dynamic = base.with_context().needs_approval(rule)
    assert base is not dynamic and not base.gated and dynamic.gated
    assert dynamic.arguments_type is None
    approvals = ScriptedApprovals([False])
    run = await run_calls(
        tmp_path,
        [dynamic],
        [Call("echo", {"text": "hi"}), Call("echo", {"text": "secret"})],
        approvals,
    )
    assert run.outputs[0] == ToolOutput("hi")
    assert run.outputs[1].is_error
    assert [args for _, args in received] == [{"text": "hi"}]
    assert all(isinstance(rule, Mapping) for rule in rules)
    with pytest.raises(TypeError):
        rules[0]["text"] = "changed"
    always = base.always_needs_approval()
    assert always.approval_reason({"text": "x"}) is not None
    assert base.approval_reason({"text": "x"}) is None


async def test_dynamic_tool_without_context_and_with_sync_handler() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    doubled = FunctionTool("double", "Double n.", schema, lambda args: {"n": args["n"] * 2})
    assert await doubled.invoke(invocation("double", {"n": 4})) == ToolOutput('{"n": 8}')
    with pytest.raises(InvalidToolFunction):
        FunctionTool("bad", "x", {"type": "object", "default": float("nan")}, lambda a: a)
    with pytest.raises(InvalidToolFunction):
        FunctionTool("", "x", schema, lambda a: a)

    @tool
    async def typed(n: int) -> int:
        return n

    with pytest.raises(InvalidToolFunction, match="with_context"):
        typed.with_context()


# -- cancellation --------------------------------------------------------------------------


async def test_interruptible_tool_is_cancelled_and_finish_once_started_sees_the_signal(
    tmp_path: Path,
) -> None:
    events: list[str] = []

    @tool(interruptible=True)
    async def sleeper() -> str:
        events.append("sleeper started")
        await trio.sleep(60)
        events.append("sleeper finished")
        return "never"

    @tool
    async def cooperative(ctx: ToolCallContext) -> str:
        await ctx.cancellation.wait_cancelled()
        events.append("cooperative saw cancellation")
        return "stopped early"

    for chosen, expected in ((sleeper, "sleeper started"), (cooperative, None)):
        model = ScriptedModel([[Call(chosen.name)], [Wait(1), Say("x")]])
        session = (
            AgentSession.builder(model, tmp_path)
            .include_file_tools(False)
            .include_shell_tool(False)
            .tool(chosen)
            .build()
        )
        cancellation = AgentCancellation()
        with session:
            async with trio.open_nursery() as nursery:

                async def fire(cancellation: AgentCancellation = cancellation) -> None:
                    await trio.sleep(0.05)
                    cancellation.cancel()

                nursery.start_soon(fire)
                with pytest.raises(TurnCancelled):
                    await session.run("go", cancellation=cancellation)
        if expected:
            assert expected in events and "sleeper finished" not in events
    assert "cooperative saw cancellation" in events


async def test_bound_methods_become_tools_without_self() -> None:
    class Counter:
        def __init__(self) -> None:
            self.base = 10

        async def add(self, amount: int) -> int:
            """Add to the base."""
            return self.base + amount

    counter_tool = tool(Counter().add)
    assert list(counter_tool.parameters["properties"]) == ["amount"]
    assert counter_tool.description == "Add to the base."
    assert await counter_tool.invoke(invocation("add", {"amount": 1})) == ToolOutput("11")
    with pytest.raises(InvalidToolFunction, match="'self' has no type annotation"):
        tool(Counter.add)


def test_a_typeddict_tool_does_not_break_other_tools_conversions() -> None:
    # Regression: the TypedDict hook was a class hook in cattrs' singledispatch, whose
    # issubclass() checks then failed for every later class (bool became unsupported).
    @tool
    async def search(filters: Filters) -> str:
        return filters["tag"]

    @tool
    async def toggle(flag: bool, count: int) -> str:
        return str(flag)

    assert search.convert({"filters": {"tag": "x"}}).filters == {"tag": "x"}
    converted = toggle.convert({"flag": True, "count": 2})
    assert converted.flag is True and converted.count == 2


# -- validation happens once -----------------------------------------------------------------


@pytest.mark.parametrize("rule", [False, True, "callable"])
async def test_a_call_is_validated_once_and_converted_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rule: object
) -> None:
    checks: list[Mapping[str, Any]] = []
    conversions: list[Mapping[str, Any]] = []
    real_problem = ArgumentValidator.problem
    real_structure = FunctionTool._structure

    def counting_problem(self: ArgumentValidator, arguments: Mapping[str, Any]) -> str | None:
        checks.append(arguments)
        return real_problem(self, arguments)

    def counting_structure(self: FunctionTool, arguments: Mapping[str, Any]) -> Any:
        conversions.append(arguments)
        return real_structure(self, arguments)

    monkeypatch.setattr(ArgumentValidator, "problem", counting_problem)
    monkeypatch.setattr(FunctionTool, "_structure", counting_structure)
    seen: list[Point] = []

    @tool(needs_approval=(lambda args: args.where.x > 0) if rule == "callable" else bool(rule))
    async def place(where: Point) -> str:
        seen.append(where)
        return "placed"

    run = await run_calls(tmp_path, [place], [Call("place", {"where": {"x": 2}})], ApproveAll())
    assert seen == [Point(2)] and run.outputs == [ToolOutput("placed")]
    assert len(run.reasons) == (0 if rule is False else 1)
    # One schema check (the turn core's) and one conversion (shared by the approval rule
    # and the invocation), of the very arguments the model proposed.
    assert checks == conversions == [{"where": {"x": 2}}]
    # On its own, a tool still checks what it is given.
    checks.clear()
    assert (await place.invoke(invocation("place", {"where": {"x": "no"}}))).retry
    assert len(checks) == 1


async def test_a_conversion_failure_in_an_approval_rule_is_a_correction(tmp_path: Path) -> None:
    @attrs.frozen
    class Positive:
        value: int = attrs.field(validator=attrs.validators.gt(0))

    @tool(needs_approval=lambda args: True)
    async def record(item: Positive) -> str:
        return "ok"

    run = await run_calls(
        tmp_path, [record], [Call("record", {"item": {"value": -1}})], ApproveAll()
    )
    (output,) = run.outputs
    assert output.retry and output.is_error and "record: invalid arguments" in output.text
    assert run.reasons == []
