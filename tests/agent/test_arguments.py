"""Tool-call arguments must be JSON values of bounded depth (agent/_arguments.py)."""

from __future__ import annotations

import json
import math
from typing import Any

from hypothesis import given

from emelex.agent import MAX_ARGUMENT_DEPTH
from emelex.agent._arguments import json_problem
from emelex.testing.strategies import json_objects


@given(json_objects())
def test_every_json_object_is_accepted(arguments: dict[str, Any]) -> None:
    assert json_problem(arguments) is None
    json.dumps(arguments, allow_nan=False)


def test_problems_name_the_place_and_the_kind() -> None:
    assert json_problem({"a": {"b": [1, {2, 3}]}}) == (
        "the value at /a/b/1 is a set (JSON arrays are lists), not a JSON value"
    )
    assert "nan" in (json_problem({"x": [math.nan]}) or "")
    assert "int key 1" in (json_problem({"m": {1: 2}}) or "")
    assert "bytes" in (json_problem({"b": b"x"}) or "")


def test_depth_is_bounded_and_cycles_end() -> None:
    value: Any = 0
    for _ in range(MAX_ARGUMENT_DEPTH - 1):
        value = [value]
    assert json_problem({"v": value}) is None
    assert "deeper than" in (json_problem({"v": [value]}) or "")
    loop: list[Any] = []
    loop.append(loop)
    assert "deeper than" in (json_problem({"loop": loop}) or "")


def test_a_huge_structure_is_refused_without_walking_it_all() -> None:
    assert json_problem({"n": list(range(1_000))}, max_values=100) == (
        "the arguments hold more than 100 values"
    )
    assert json_problem({"n": list(range(98))}, max_values=100) is None
