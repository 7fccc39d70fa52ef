"""The one home of tool-definition rules: the name rule, the schema check and the
compiled validator, and every place that checks a declaration agreeing with them."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from emelex.agent import InvalidToolDeclaration
from emelex.agent._tool_table import ToolTable
from emelex.app import InvalidToolSchema
from emelex.app._agent import check_tool
from emelex.testing import ScriptedTool
from emelex.tools import (
    TOOL_NAME,
    ArgumentConversionError,
    ArgumentValidator,
    FunctionTool,
    InvalidToolFunction,
    McpServer,
    tool_name_problem,
    tool_schema_problem,
)
from emelex.tools._definition import MAX_VALIDATION_MESSAGE
from emelex.tools.mcp._tool import RemoteTool, accept_tools

OBJECT = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


async def _handler(arguments: dict[str, Any]) -> str:
    return "ok"


def verdicts(name: str, schema: Any) -> dict[str, bool]:
    """Whether each of the four declaration checks accepts ``(name, schema)`` (a
    FunctionTool checks its schema when it first validates arguments on its own)."""
    out: dict[str, bool] = {}
    try:
        made = FunctionTool(name, "", schema, _handler)
        made.convert({"n": 1})
        out["function"] = True
    except (InvalidToolFunction, ArgumentConversionError):
        out["function"] = False
    try:
        ToolTable([ScriptedTool(name, schema=schema)])
        out["table"] = True
    except InvalidToolDeclaration:
        out["table"] = False
    try:
        check_tool(ScriptedTool(name, schema=schema), "tool")
        out["app"] = True
    except InvalidToolSchema:
        out["app"] = False
    server = McpServer.http("s", "https://h/mcp", prefix_tools=False)
    accepted, _ = accept_tools(server, [RemoteTool(name, None, schema)])
    out["mcp"] = bool(accepted)
    return out


@pytest.mark.parametrize(
    ("name", "schema", "accepted"),
    [
        ("ok_name.v2-x", OBJECT, True),
        ("_private", {}, True),
        ("x" * 64, OBJECT, True),
        ("x" * 65, OBJECT, False),
        ("-dash", OBJECT, False),
        (".dot", OBJECT, False),
        ("has space", OBJECT, False),
        ("ünïcode", OBJECT, False),
        ("fine", {"type": "array"}, False),
        ("fine", {"type": "object", "properties": {"n": {"type": "nope"}}}, False),
        ("fine", {"type": "object", "required": "n"}, False),
    ],
)
def test_every_declaration_check_applies_the_same_rules(
    name: str, schema: Any, accepted: bool
) -> None:
    assert verdicts(name, schema) == dict.fromkeys(("function", "table", "app", "mcp"), accepted)


@given(st.text(max_size=70))
def test_the_name_rule_is_the_regex(name: str) -> None:
    problem = tool_name_problem(name)
    assert (problem is None) == bool(TOOL_NAME.fullmatch(name))
    if problem is not None:
        assert "1-64 letters, digits, _ . -" in problem


def test_schema_problems_say_what_is_wrong() -> None:
    assert tool_schema_problem(OBJECT) is None
    assert tool_schema_problem({}) is None  # no type: an object by default
    assert tool_schema_problem(["type"]) == "parameters must be a JSON Schema object"
    assert tool_schema_problem({"type": "string"}) == "parameters must be an object schema"
    problem = tool_schema_problem({"type": "object", "properties": {"n": {"minimum": "1"}}})
    assert problem is not None and problem.startswith("invalid JSON Schema: ")
    assert tool_name_problem(7) == "tool name 7 must be 1-64 letters, digits, _ . -"


def test_the_validator_names_where_and_is_bounded() -> None:
    validator = ArgumentValidator(OBJECT)
    assert validator.problem({"n": 3}) is None
    assert validator.problem({"n": "x"}) == "invalid arguments at n: 'x' is not of type 'integer'"
    assert validator.problem({}) == "invalid arguments at (root): 'n' is a required property"
    huge = validator.problem({"n": "y" * 10_000})
    assert huge is not None and len(huge) <= MAX_VALIDATION_MESSAGE
    # $schema picks the draft: under draft 4, exclusiveMaximum is a boolean.
    draft4 = ArgumentValidator(
        {
            "$schema": "http://json-schema.org/draft-04/schema#",
            "type": "object",
            "properties": {"n": {"maximum": 5, "exclusiveMaximum": True}},
        }
    )
    assert draft4.problem({"n": 5}) is not None and draft4.problem({"n": 4}) is None
