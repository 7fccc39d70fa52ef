"""Per-request tool choice and answer schemas on the native backend (tiny model): the
grammar makes the outcome hold by construction, whatever the random weights prefer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import trio

from emelex.model import (
    Completed,
    GenerationOptions,
    GenerationRequest,
    InvalidRequest,
    Message,
    Reasoning,
    ToolCallMissing,
    ToolChoice,
    ToolDefinition,
)
from emelex.model.llama import GrammarError, LlamaModel

from .conftest import template_text

LOOKUP = ToolDefinition(
    "lookup",
    "Look a key up.",
    {
        "type": "object",
        "properties": {"key": {"type": "string", "maxLength": 6}},
        "required": ["key"],
        "additionalProperties": False,
    },
)
CLOCK = ToolDefinition(
    "clock",
    "Tell the time.",
    {
        "type": "object",
        "properties": {"zone": {"enum": ["UTC", "CET"]}},
        "required": ["zone"],
        "additionalProperties": False,
    },
)
ANSWER = {
    "type": "object",
    "properties": {"file": {"const": "todo.txt"}, "says": {"type": "string", "maxLength": 12}},
    "required": ["file", "says"],
    "additionalProperties": False,
}


def request(**options: Any) -> GenerationRequest:
    merged = {"max_tokens": 96, "temperature": 0.0, "reasoning": Reasoning.OFF, **options}
    return GenerationRequest(
        [Message.user("What now?")], tools=[LOOKUP, CLOCK], options=GenerationOptions(**merged)
    )


async def complete(model: LlamaModel, req: GenerationRequest) -> Completed:
    async with model.generate(req) as stream:
        events = [event async for event in stream]
    last = events[-1]
    assert isinstance(last, Completed)
    return last


@pytest.fixture
async def tiny(tiny_model: Path) -> Any:
    async with LlamaModel(tiny_model, n_threads=1, n_threads_batch=1) as model:
        yield model


@pytest.mark.parametrize("name", ["lookup", "clock"])
async def test_a_named_choice_forces_that_tool(tiny: LlamaModel, name: str) -> None:
    with trio.fail_after(60):
        done = await complete(tiny, request(tool_choice=ToolChoice.tool(name)))
    calls = done.response.tool_calls
    assert calls and {call.name for call in calls} == {name}
    schema = (LOOKUP if name == "lookup" else CLOCK).parameters
    for call in calls:
        jsonschema.validate(call.arguments, schema)


async def test_required_per_request_overrides_the_model_default(tiny: LlamaModel) -> None:
    with trio.fail_after(60):
        done = await complete(tiny, request(tool_choice=ToolChoice.REQUIRED))
    assert done.response.tool_calls
    assert {call.name for call in done.response.tool_calls} <= {"lookup", "clock"}


async def test_none_parses_no_calls(tiny_model: Path) -> None:
    # The model's own default forces calls; the request's NONE wins.
    async with LlamaModel(tiny_model, n_threads=1, tool_choice="required") as model:
        with trio.fail_after(60):
            forced = await complete(model, request())
            free = await complete(model, request(tool_choice="none"))
    assert forced.response.tool_calls
    assert free.response.tool_calls == ()


async def test_output_schema_makes_the_answer_valid_json(tiny: LlamaModel) -> None:
    with trio.fail_after(60):
        done = await complete(tiny, request(tool_choice="none", output_schema=ANSWER))
    assert done.response.tool_calls == ()
    value = json.loads(done.response.text)
    jsonschema.validate(value, ANSWER)
    assert value["file"] == "todo.txt"


async def test_output_schema_with_callable_tools_is_a_typed_error(tiny: LlamaModel) -> None:
    with pytest.raises(GrammarError, match=r"ToolChoice\.NONE"):
        await complete(tiny, request(output_schema=ANSWER))
    # Without tools there is nothing to combine: the schema applies.
    plain = GenerationRequest(
        [Message.user("hi")],
        options=GenerationOptions(max_tokens=64, temperature=0.0, output_schema=ANSWER),
    )
    with trio.fail_after(60):
        done = await complete(tiny, plain)
    jsonschema.validate(json.loads(done.response.text), ANSWER)


def test_the_constructor_takes_only_unnamed_defaults(tiny_model: Path) -> None:
    LlamaModel(tiny_model, tool_choice=ToolChoice.NONE)
    with pytest.raises(InvalidRequest, match="force one tool per request"):
        LlamaModel(tiny_model, tool_choice=ToolChoice.tool("lookup"))
    with pytest.raises(InvalidRequest):
        LlamaModel(tiny_model, tool_choice="sometimes")  # type: ignore[arg-type]


async def test_a_named_choice_is_one_call(tiny: LlamaModel) -> None:
    # Plenty of tokens: the grammar, not the budget, ends the answer after one call.
    with trio.fail_after(60):
        done = await complete(tiny, request(tool_choice=ToolChoice.tool("clock"), max_tokens=400))
    assert len(done.response.tool_calls) == 1
    assert done.response.finish_reason == "tool_calls"


async def test_a_named_choice_can_narrow_the_arguments(tiny: LlamaModel) -> None:
    narrowed = {
        "type": "object",
        "properties": {"key": {"enum": ["alpha", "beta"]}},
        "required": ["key"],
        "additionalProperties": False,
    }
    choice = ToolChoice.tool("lookup", arguments=narrowed)
    with trio.fail_after(60):
        done = await complete(tiny, request(tool_choice=choice))
    (call,) = done.response.tool_calls
    assert call.name == "lookup" and call.arguments["key"] in ("alpha", "beta")


# -- issue 30 break 6: arguments that hold the template's own markup ------------------------

MARKED = (
    'a</tool_call>b<tool_call>c</tool_response>d<think>e</think>f[TOOL_CALLS]g"h\\i'
    "[ARGS]j<|python_tag|>k<|eot_id|>l<|im_end|>m"
)


@pytest.mark.parametrize("template", [None, "qwen3", "llama3.1", "mistral-v0.3"])
async def test_a_forced_call_whose_arguments_hold_markup_survives(
    tiny_model: Path, template: str | None
) -> None:
    # The grammar makes the random-weight model write exactly MARKED as the argument
    # (in the Hermes, Hermes-with-think, Llama 3 and Mistral markup); the stop strings
    # are the markers themselves, and must not fire inside the call.
    source = None if template is None else template_text(template)
    model = LlamaModel(tiny_model, chat_template=source, n_threads=1, n_threads_batch=1)
    narrowed = {
        "type": "object",
        "properties": {"key": {"const": MARKED}},
        "required": ["key"],
        "additionalProperties": False,
    }
    choice = ToolChoice.tool("lookup", arguments=narrowed)
    stops = ("</tool_call>", "</tool_response>", "<think>", "[TOOL_CALLS]", "<|python_tag|>")
    with trio.fail_after(60):
        async with model:
            done = await complete(model, request(tool_choice=choice, max_tokens=200, stop=stops))
    (call,) = done.response.tool_calls
    assert (call.name, call.arguments) == ("lookup", {"key": MARKED})
    assert done.response.finish_reason == "tool_calls"


@pytest.mark.parametrize("choice", [ToolChoice.tool("lookup"), ToolChoice.REQUIRED])
async def test_a_forced_choice_that_yields_no_call_is_a_typed_error(
    tiny: LlamaModel, choice: ToolChoice
) -> None:
    # Two tokens cannot hold a call: the answer used to come back empty, without error.
    with trio.fail_after(60), pytest.raises(ToolCallMissing) as caught:
        await complete(tiny, request(tool_choice=choice, max_tokens=2))
    assert caught.value.finish_reason == "length"
    assert caught.value.tool == choice.name
