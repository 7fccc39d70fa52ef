"""ToolChoice and output_schema: validation, overlay, the wire form and the OpenAI body."""

from __future__ import annotations

import pytest

from emelex.model import (
    UNSET,
    GenerationOptions,
    GenerationRequest,
    InvalidOptions,
    InvalidRequest,
    Message,
    ToolChoice,
    ToolDefinition,
    from_json,
    to_json,
)
from emelex.model.openai._mapping import request_body, tool_choice_value

TOOL = ToolDefinition(
    "lookup", "Look a key up.", {"type": "object", "properties": {"key": {"type": "string"}}}
)
OTHER = ToolDefinition("other", "Another tool.", {"type": "object", "properties": {}})


def test_constants_and_named_choice() -> None:
    assert ToolChoice("auto") == ToolChoice.AUTO
    assert not ToolChoice.AUTO.forces_call and not ToolChoice.NONE.forces_call
    assert ToolChoice.REQUIRED.forces_call
    named = ToolChoice.tool("lookup")
    assert named.forces_call and named.name == "lookup" and named.mode == "tool"
    assert repr(named) == "ToolChoice.tool('lookup')"
    assert repr(ToolChoice.NONE) == "ToolChoice.NONE"


@pytest.mark.parametrize(
    ("mode", "name"), [("tool", None), ("tool", ""), ("auto", "x"), ("sometimes", None)]
)
def test_inconsistent_choices_are_refused(mode: str, name: str | None) -> None:
    with pytest.raises(InvalidOptions):
        ToolChoice(mode, name)  # type: ignore[arg-type]


def test_strings_convert_and_others_are_refused() -> None:
    assert GenerationOptions(tool_choice="required").tool_choice is not UNSET
    assert GenerationOptions(tool_choice="none").tool_choice == ToolChoice.NONE
    with pytest.raises(InvalidOptions, match=r"ToolChoice\.tool"):
        GenerationOptions(tool_choice="lookup")


def test_output_schema_is_copied_bounded_and_json_only() -> None:
    schema = {"type": "object"}
    options = GenerationOptions(output_schema=schema)
    schema["type"] = "string"
    assert options.output_schema == {"type": "object"}
    hash(options)  # still hashable: the schema takes part in equality only
    assert options == GenerationOptions(output_schema={"type": "object"})
    with pytest.raises(InvalidOptions, match="not JSON"):
        GenerationOptions(output_schema={"x": {1, 2}})
    with pytest.raises(InvalidOptions, match="larger than"):
        GenerationOptions(output_schema={"enum": ["x" * 70_000]})
    with pytest.raises(InvalidOptions):
        GenerationOptions(output_schema=["not", "an", "object"])  # type: ignore[arg-type]


def test_overlay_replaces_only_what_is_specified() -> None:
    base = GenerationOptions(tool_choice=ToolChoice.REQUIRED, output_schema={"type": "string"})
    assert base.overlay(GenerationOptions()).tool_choice == ToolChoice.REQUIRED
    assert base.overlay(GenerationOptions()).output_schema == {"type": "string"}
    override = GenerationOptions(tool_choice=ToolChoice.tool("x"), output_schema={"type": "null"})
    merged = base.overlay(override)
    assert merged.tool_choice == ToolChoice.tool("x")
    assert merged.output_schema == {"type": "null"}


def test_wire_round_trip() -> None:
    options = GenerationOptions(tool_choice=ToolChoice.tool("lookup"), output_schema={"type": "x"})
    assert from_json(to_json(options), GenerationOptions) == options
    plain = GenerationOptions()
    assert "tool_choice" not in to_json(plain) and "output_schema" not in to_json(plain)
    assert from_json(to_json(plain), GenerationOptions) == plain


def test_a_forced_choice_needs_the_tool_offered() -> None:
    messages = [Message.user("hi")]
    with pytest.raises(InvalidRequest, match="at least one offered tool"):
        GenerationRequest(messages, options=GenerationOptions(tool_choice="required"))
    with pytest.raises(InvalidRequest, match="not offered"):
        GenerationRequest(
            messages,
            tools=[TOOL],
            options=GenerationOptions(tool_choice=ToolChoice.tool("missing")),
        )
    # NONE and AUTO need no tools.
    GenerationRequest(messages, options=GenerationOptions(tool_choice="none"))


def test_openai_body_carries_choice_and_response_format() -> None:
    assert tool_choice_value(ToolChoice.REQUIRED) == "required"
    assert tool_choice_value(ToolChoice.tool("lookup")) == {
        "type": "function",
        "function": {"name": "lookup"},
    }
    request = GenerationRequest(
        [Message.user("hi")],
        tools=[TOOL, OTHER],
        options=GenerationOptions(
            tool_choice=ToolChoice.tool("lookup"), output_schema={"type": "object"}
        ),
    )
    body = request_body(request, "m")
    assert body["tool_choice"] == {"type": "function", "function": {"name": "lookup"}}
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "answer", "schema": {"type": "object"}},
    }
    plain = request_body(GenerationRequest([Message.user("hi")]), "m")
    assert "tool_choice" not in plain and "response_format" not in plain


def test_a_named_choice_may_carry_an_arguments_schema() -> None:
    schema = {"type": "object", "properties": {"key": {"enum": ["a"]}}}
    choice = ToolChoice.tool("lookup", arguments=schema)
    schema["properties"] = {}
    assert choice.arguments == {"type": "object", "properties": {"key": {"enum": ["a"]}}}
    assert repr(choice) == "ToolChoice.tool('lookup', arguments=...)"
    hash(choice)
    assert choice != ToolChoice.tool("lookup")
    with pytest.raises(InvalidOptions, match="no tool name or arguments"):
        ToolChoice("auto", arguments={"type": "object"})
    options = GenerationOptions(tool_choice=choice)
    assert from_json(to_json(options), GenerationOptions) == options
    # The wire body of an OpenAI-compatible server names the tool only.
    assert tool_choice_value(choice) == {"type": "function", "function": {"name": "lookup"}}
