"""Typed structured output (app/_output.py) with a scripted model: schema requests,
conversion, the answer turn after tools, retries and the typed error."""

from __future__ import annotations

import dataclasses
import enum
import json
from pathlib import Path
from typing import Any, Literal, TypedDict

import attrs
import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from emelex import OutputValidationError, ToolChoice, TypedTurn
from emelex.app import Engine, InvalidOutputType, PackageError, export_agent, tool
from emelex.app._output import OutputSpec
from emelex.model import UNSET, GenerationOptions, Message
from emelex.testing import Call, Finish, Say, ScriptedModel
from emelex.tools._schema import schema_for

from .helpers import builder, scripted, text_of


@attrs.frozen
class Point:
    x: int
    y: int


@dataclasses.dataclass
class Label:
    name: str
    score: float = 0.0


class Movie(TypedDict):
    title: str
    year: int


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


@tool
async def lookup(key: str) -> str:
    """Look a key up."""
    return f"value of {key}"


async def start(model: ScriptedModel, engine: Engine, **agent: Any) -> Any:
    made = builder(model)
    if agent.get("tools"):
        made = made.tools(agent["tools"])
    if "output_type" in agent:
        made = made.output_type(agent["output_type"], retries=agent.get("retries", 1))
    return await engine.create(made.build()).start()


def roles(history: tuple[Message, ...]) -> list[str]:
    return [message.role for message in history]


async def test_without_tools_the_turn_asks_for_the_schema_and_converts() -> None:
    model = scripted([Say('{"x": 1, '), Say('"y": 2}')])
    async with Engine() as engine:
        session = await start(model, engine)
        with trio.fail_after(10):
            turn = await session.send_and_wait("Where?", output_type=Point)
    assert isinstance(turn, TypedTurn)
    assert turn.output == Point(1, 2)
    assert turn.rounds == 1 and len(turn.turns) == 1
    options = model.requests[0].options
    assert options.output_schema == {
        "type": "object",
        "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
        "required": ["x", "y"],
        "additionalProperties": False,
    }
    # No tools: no tool choice is sent (servers refuse one without tools).
    assert options.tool_choice is UNSET
    assert roles(session.history) == ["system", "user", "assistant"]


async def test_a_plain_turn_is_unchanged_without_an_output_type() -> None:
    model = scripted([Say("hello")])
    async with Engine() as engine:
        session = await start(model, engine)
        turn = await session.send_and_wait("Hi")
    assert not isinstance(turn, TypedTurn)
    assert model.requests[0].options.output_schema is None


@pytest.mark.parametrize(
    ("output_type", "answer", "expected"),
    [
        (Label, '{"name": "cat"}', Label("cat", 0.0)),
        (Movie, '{"title": "Up", "year": 2009}', {"title": "Up", "year": 2009}),
        (Literal["yes", "no"], '"no"', "no"),
        (Colour, '"blue"', Colour.BLUE),
        (list[Point], '[{"x": 1, "y": 2}, {"x": 3, "y": 4}]', [Point(1, 2), Point(3, 4)]),
        (Point, '```json\n{"x": 5, "y": 6}\n```', Point(5, 6)),
    ],
)
async def test_supported_output_types_convert(output_type: Any, answer: str, expected: Any) -> None:
    model = scripted([Say(answer)])
    async with Engine() as engine:
        session = await start(model, engine)
        turn = await session.send_and_wait("Answer.", output_type=output_type)
    assert turn.output == expected
    assert model.requests[0].options.output_schema is not None


async def test_an_invalid_answer_gets_one_retry_with_the_problem() -> None:
    model = scripted([Say('{"x": "left", "y": 2}')], [Say('{"x": 1, "y": 2}')])
    async with Engine() as engine:
        session = await start(model, engine)
        with trio.fail_after(10):
            turn = await session.send_and_wait("Where?", output_type=Point)
        history = session.history
    assert turn.output == Point(1, 2)
    assert len(turn.turns) == 2 and turn.rounds == 2
    assert turn.messages == history[1:]
    assert roles(history) == ["system", "user", "assistant", "user", "assistant"]
    retry = text_of(history[3])
    assert retry.startswith("Your answer is not valid: at x: 'left' is not of type 'integer'")
    assert '"required": ["x", "y"]' in retry
    assert model.requests[1].options.output_schema == model.requests[0].options.output_schema


async def test_invalid_twice_is_a_typed_error_and_the_turns_stay_committed() -> None:
    model = scripted([Say("It is at one, two.")], [Say('{"x": 1}')], [Say("fine")])
    async with Engine() as engine:
        session = await start(model, engine)
        with pytest.raises(OutputValidationError) as caught:
            await session.send_and_wait("Where?", output_type=Point)
        error = caught.value
        assert error.attempts == 2
        assert error.answer == '{"x": 1}'
        assert error.problem == "at (root): 'y' is a required property"
        assert "after 2 attempts" in str(error)
        # Both attempts completed: they are committed, not rolled back.
        assert error.rolled_back is False
        assert error.checkpoint == session.history[1:]
        assert roles(session.history) == ["system", "user", "assistant", "user", "assistant"]
        # The session goes on with a plain turn.
        after = await session.send_and_wait("Thanks.")
    assert after.response.text == "fine"


async def test_a_cut_off_answer_is_told_apart() -> None:
    model = scripted(
        [Say('{"x": 1, "y'), Finish(finish_reason="length")], [Say('{"x": 1, "y": 2}')]
    )
    async with Engine() as engine:
        session = await start(model, engine)
        turn = await session.send_and_wait("Where?", output_type=Point)
        retry = text_of(session.history[3])
    assert turn.output == Point(1, 2)
    assert retry.startswith("Your answer is not valid: the answer was cut off by the token limit")


async def test_retries_zero_fails_on_the_first_invalid_answer() -> None:
    model = scripted([Say("nope")])
    async with Engine() as engine:
        session = await start(model, engine)
        with pytest.raises(OutputValidationError, match="not JSON") as caught:
            await session.send_and_wait("Where?", output_type=Point, output_retries=0)
    assert caught.value.attempts == 1
    assert model.calls_made == 1


async def test_with_tools_a_valid_free_answer_needs_no_answer_turn() -> None:
    model = scripted([Call("lookup", {"key": "a"})], [Say('{"x": 3, "y": 4}')])
    async with Engine() as engine:
        session = await start(model, engine, tools=[lookup], output_type=Point)
        turn = await session.send_and_wait("Where?")
    assert turn.output == Point(3, 4)
    assert len(turn.turns) == 1 and turn.rounds == 2
    # The rounds that may call tools carry no answer schema.
    assert all(r.options.output_schema is None for r in model.requests)


async def test_with_tools_a_prose_answer_is_followed_by_an_answer_turn() -> None:
    model = scripted(
        [Call("lookup", {"key": "a"})],
        [Say("The point is three, four.")],
        [Say('{"x": 3, "y": 4}')],
    )
    async with Engine() as engine:
        session = await start(model, engine, tools=[lookup], output_type=Point)
        with trio.fail_after(10):
            turn = await session.send_and_wait("Where?", options=GenerationOptions(seed=7))
        history = session.history
    assert turn.output == Point(3, 4)
    assert [t.rounds for t in turn.turns] == [2, 1]
    assert roles(history) == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
        "assistant",
    ]
    assert text_of(history[5]).startswith("Now give your final answer as one JSON value")
    answer = model.requests[2].options
    assert answer.tool_choice == ToolChoice.NONE
    assert answer.output_schema is not None and answer.seed == 7
    assert model.requests[0].options.tool_choice is UNSET


async def test_the_turn_output_type_wins_over_the_agents() -> None:
    model = scripted([Say('"yes"')])
    async with Engine() as engine:
        session = await start(model, engine, output_type=Point)
        turn = await session.send_and_wait("Ok?", output_type=Literal["yes", "no"])
    assert turn.output == "yes"
    assert model.requests[0].options.output_schema == schema_for(Literal["yes", "no"])


async def test_unsupported_output_types_and_retry_budgets_are_refused() -> None:
    with pytest.raises(InvalidOutputType, match="unsupported"):
        builder(scripted([Say("x")])).output_type(bytes).build()
    with pytest.raises(InvalidOutputType, match="non-negative"):
        builder(scripted([Say("x")])).output_type(Point, retries=-1).build()
    model = scripted([Say("x")])
    async with Engine() as engine:
        session = await start(model, engine)
        with pytest.raises(InvalidOutputType):
            await session.send_and_wait("Hi", output_type=bytes)
        with pytest.raises(InvalidOutputType):
            await session.send_and_wait("Hi", output_type=Point, output_retries=True)
    assert model.calls_made == 0


def test_the_schema_is_the_tool_schema_builders() -> None:
    spec = OutputSpec.of(list[Point])
    assert spec.schema == schema_for(list[Point])
    assert json.loads(json.dumps(spec.schema)) == spec.schema


def test_an_agent_with_an_output_type_is_not_exported(tmp_path: Path) -> None:
    agent = builder(scripted([Say("x")])).output_type(Point).build()
    assert agent.output_type is Point and agent.output_retries == 1
    with pytest.raises(PackageError, match="output_type"):
        export_agent(agent, tmp_path / "pkg")
    assert not (tmp_path / "pkg").exists()


@given(
    st.lists(st.builds(Point, st.integers(), st.integers()), max_size=5),
    st.sampled_from(list(Colour)),
)
def test_any_valid_value_round_trips_through_the_answer_text(
    points: list[Point], colour: Colour
) -> None:
    points_spec = OutputSpec.of(list[Point])
    answer = json.dumps([{"x": p.x, "y": p.y} for p in points])
    assert points_spec.parse(answer) == (points, None)
    assert OutputSpec.of(Colour).parse(json.dumps(colour.value)) == (colour, None)
