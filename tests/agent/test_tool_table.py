"""Registering tools: size bounds of schemas are clamped to the argument ceiling."""

from __future__ import annotations

from typing import Any

from emelex.agent._tool_table import ToolTable, clamp_schema
from emelex.testing import ScriptedTool


def test_clamp_lowers_only_size_bounds_above_the_limit() -> None:
    schema: dict[str, Any] = {
        "type": "object",
        "maxProperties": 50,
        "properties": {
            "text": {"type": "string", "maxLength": 5_000},
            "short": {"type": "string", "maxLength": 10},
            "items": {"type": "array", "maxItems": 9_999, "items": {"maxLength": 2_000}},
            "mode": {"enum": [{"maxLength": 99_999}], "default": {"maxLength": 99_999}},
            "maxLength": {"type": "integer"},  # a property named like a keyword
        },
        "anyOf": [{"properties": {"x": {"maxLength": 1_001}}}],
    }
    clamped = clamp_schema(schema, 1_000)
    props = clamped["properties"]
    assert props["text"]["maxLength"] == 1_000
    assert props["short"]["maxLength"] == 10
    assert props["items"]["maxItems"] == 1_000
    assert props["items"]["items"]["maxLength"] == 1_000
    assert props["mode"] == schema["properties"]["mode"]  # data, not a schema
    assert props["maxLength"] == {"type": "integer"}
    assert clamped["anyOf"][0]["properties"]["x"]["maxLength"] == 1_000
    assert clamped["maxProperties"] == 50
    assert schema["properties"]["text"]["maxLength"] == 5_000  # the input is not changed
    assert clamp_schema(clamped, 1_000) is clamped  # nothing left to change


def test_the_table_advertises_the_clamped_schema_and_validates_with_it() -> None:
    schema = {"type": "object", "properties": {"s": {"type": "string", "maxLength": 100}}}
    entry = ToolTable([ScriptedTool("t", schema=schema)], max_argument_bytes=10)["t"]
    assert entry.definition.parameters["properties"]["s"]["maxLength"] == 10
    assert entry.declared_parameters["properties"]["s"]["maxLength"] == 100
    assert entry.validation_error({"s": "x" * 11}) is not None
    unclamped = ToolTable([ScriptedTool("t", schema=schema)])["t"]
    assert unclamped.definition.parameters == schema
